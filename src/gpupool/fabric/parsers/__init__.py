"""Parsers of real fabric tools' output (ibnetdiscover and friends) into the immutable ``Fabric``.

May import: ``gpupool.domain``, ``gpupool.fabric`` (model, fabric, rates), the standard library.
Must not import: ``gpupool.cluster``, ``gpupool.scheduler``, server, agent or CLI code; no I/O but reading input files.
"""
