"""NCCL environment for a job's GPUs on one host: which InfiniBand HCAs (rails) they should use.

``NCCL_IB_HCA`` lists HCAs as ``device:port``; a leading ``=`` makes NCCL match the names exactly, so
``mlx5_1`` does not also select ``mlx5_10``. Only what the fabric knows is written: the HCA that
``Fabric.rail_hca`` gives for each GPU, on port 1 (every HCA in the model has one port to the fabric).
Stand-in HCAs (``slurm0`` from a Slurm topology, which knows no HCAs) are never named.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.fabric.fabric import Fabric
from gpupool.fabric.parsers.slurm import SYNTHETIC_HCA_NAME

__all__ = ["nccl_ib_hca", "nccl_topology_env"]


def _rail_hca_names(fabric: Fabric, host: str, gpus: Sequence[int]) -> list[str]:
    """HCA device names for ``gpus`` of ``host``, duplicates removed, in GPU order; GPUs without an HCA add none."""
    if not fabric.has_host(host):
        raise ValueError(f"host {host!r} is not in fabric {fabric.name!r}")
    h = fabric.host_index(host)
    count = fabric.hosts[h].gpu_count
    if not gpus:
        raise ValueError("no GPUs given")
    names: dict[str, None] = {}
    if count == 0:
        raise ValueError(f"host {host} has no GPUs in fabric {fabric.name!r}")
    for gpu in gpus:
        if not 0 <= gpu < count:
            raise ValueError(f"host {host} has GPUs 0 to {count - 1}; got GPU {gpu}")
        hca = fabric.rail_hca(h, gpu)
        # A fabric read from Slurm's topology.conf has stand-in HCAs; NCCL must not be told to open them.
        if hca is not None and hca.name and hca.name != SYNTHETIC_HCA_NAME:
            names.setdefault(hca.name, None)
    return list(names)


def nccl_ib_hca(fabric: Fabric, host: str, gpus: Sequence[int]) -> str:
    """``NCCL_IB_HCA`` for ``gpus`` (positions in the host's GPU list) of ``host``: ``=mlx5_0:1,mlx5_3:1``.

    Raises ``ValueError`` for an unknown host, a GPU out of range, or when no given GPU has a named HCA.
    """
    names = _rail_hca_names(fabric, host, gpus)
    if not names:
        raise ValueError(f"host {host}: no InfiniBand HCA is known for GPUs {list(gpus)}")
    return "=" + ",".join(f"{n}:1" for n in names)


def nccl_topology_env(fabric: Fabric, host: str, gpus: Sequence[int]) -> dict[str, str]:
    """The NCCL variables the fabric can vouch for: ``NCCL_IB_HCA``, or nothing when no HCA is known."""
    names = _rail_hca_names(fabric, host, gpus)
    return {"NCCL_IB_HCA": "=" + ",".join(f"{n}:1" for n in names)} if names else {}
