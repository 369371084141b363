"""Exporters of a fabric to other tools' formats: Slurm topology files, NCCL environment, pictures.

May import: ``gpupool.domain``, ``gpupool.fabric``, the standard library; matplotlib only in ``draw``.
Must not import: ``gpupool.cluster``, ``gpupool.scheduler``, server, agent or CLI code.
"""
