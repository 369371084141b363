"""Real tools' output -> fabric values: ibnetdiscover, node maps, ibstat, sysfs, nvidia-smi, Slurm topology.conf.

May import: ``gpupool.domain``, ``gpupool.fabric`` (model, fabric, rates, hostlist), the standard library.
Must not import: ``gpupool.cluster``, ``gpupool.scheduler``, server, agent or CLI code; no I/O but reading input.
"""
