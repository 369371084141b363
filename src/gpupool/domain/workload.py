"""The environment of one rank of a workload: what the server tells an agent to set, and nothing more.

Pure: the server builds it when it dispatches a placement; the agent sets it on the child process.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.domain.errors import InputError


def workload_env(
    job_id: str,
    rank: int,
    world_size: int,
    local_rank: int,
    gpu_indices: Sequence[int],
    nccl_ib_hca: str | Sequence[str],
    master_addr: str,
    master_port: int,
    socket_ifname: str,
) -> dict[str, str]:
    """The variables a gang rank needs (PyTorch's env:// rendezvous, NCCL's HCA and socket choice), no more."""
    if world_size < 1 or not 0 <= rank < world_size or local_rank < 0:
        raise InputError(f"rank {rank} / local rank {local_rank} do not fit world size {world_size}", source=job_id)
    if not 0 < master_port < 65536:
        raise InputError(f"master port {master_port} is not a TCP port", source=job_id)
    hca = nccl_ib_hca if isinstance(nccl_ib_hca, str) else ",".join(nccl_ib_hca)
    return {
        "GPUPOOL_JOB_ID": job_id,
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpu_indices),
        "NCCL_IB_HCA": hca,
        "NCCL_SOCKET_IFNAME": socket_ifname,
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(local_rank),
    }
