"""What a node runs: the environment of one rank of a workload, and the rules a command must pass.

Pure: the server builds the environment when it dispatches a placement and the agent sets it on the child
process; the API checks a submitted command with ``check_command`` and the agent checks it again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.errors import InputError


@dataclass(frozen=True, slots=True)
class RankPlace:
    """Where one rank sits in its gang: torchrun's and Slurm's numbers, from the ranks' hosts in rank order."""

    rank: int
    world_size: int
    local_rank: int  # its index among the job's ranks on its host
    local_world_size: int  # the job's ranks on its host
    node_rank: int  # its host's index among the job's hosts, in first-use order
    nnodes: int
    hosts: tuple[str, ...]  # the job's hosts in first-use order


def rank_place(hosts_by_rank: Sequence[str], rank: int) -> RankPlace:
    if not 0 <= rank < len(hosts_by_rank):
        raise InputError(f"rank {rank} is not one of the {len(hosts_by_rank)} ranks", source="rank layout")
    host = hosts_by_rank[rank]
    hosts = tuple(dict.fromkeys(hosts_by_rank))
    here = [r for r, h in enumerate(hosts_by_rank) if h == host]
    return RankPlace(rank, len(hosts_by_rank), here.index(rank), len(here), hosts.index(host), len(hosts), hosts)


def hostfile(hosts_by_rank: Sequence[str], gpus_by_rank: Sequence[int]) -> str:
    """An MPI hostfile (Open MPI's ``host slots=N``, MPICH reads it too): one line per host in first-use order,
    its slots the job's GPUs there (one process per GPU), or its ranks there when they hold no whole GPU."""
    ranks: dict[str, int] = {}
    gpus: dict[str, int] = {}
    for h, g in zip(hosts_by_rank, gpus_by_rank, strict=True):
        ranks[h] = ranks.get(h, 0) + 1
        gpus[h] = gpus.get(h, 0) + g
    return "".join(f"{h} slots={max(ranks[h], gpus[h])}\n" for h in ranks)


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
    *,
    local_world_size: int = 1,
    node_rank: int = 0,
    nnodes: int = 1,
    attempt: int = 0,
) -> dict[str, str]:
    """The variables a gang rank needs (PyTorch's env:// rendezvous and torchrun's layout, NCCL's HCA and
    socket choice, which run of the job this is), no more.

    ``CUDA_VISIBLE_DEVICES`` holds the GPUs' indices in PCI bus order (hence ``CUDA_DEVICE_ORDER``); an agent
    that knows its GPUs' UUIDs puts those in their place, so a renumbering can never hand over another GPU.
    """
    if world_size < 1 or not 0 <= rank < world_size or local_rank < 0:
        raise InputError(f"rank {rank} / local rank {local_rank} do not fit world size {world_size}", source=job_id)
    if not (0 <= local_rank < local_world_size <= world_size and 0 <= node_rank < nnodes <= world_size):
        raise InputError(
            f"local rank {local_rank} of {local_world_size}, node {node_rank} of {nnodes} do not fit {world_size} ranks",
            source=job_id,
        )
    if not 0 < master_port < 65536:
        raise InputError(f"master port {master_port} is not a TCP port", source=job_id)
    hca = nccl_ib_hca if isinstance(nccl_ib_hca, str) else ",".join(nccl_ib_hca)
    env = {
        "GPUPOOL_JOB_ID": job_id,
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpu_indices),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NCCL_IB_HCA": hca,
        "NCCL_SOCKET_IFNAME": socket_ifname,
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "NODE_RANK": str(node_rank),
        "NNODES": str(nnodes),
    }
    if attempt > 0:
        env["GPUPOOL_ATTEMPT"] = str(attempt)
    return env


def array_env(array_id: str, array_index: int | None) -> dict[str, str]:
    """An array element's variables (nothing for a job that is not one)."""
    if not array_id:
        return {}
    return {"GPUPOOL_ARRAY_ID": array_id, "GPUPOOL_ARRAY_INDEX": str(array_index if array_index is not None else 0)}


def slurm_env(
    job_id: str,
    name: str,
    place: RankPlace,
    nodelist: str,
    gpus_on_node: int,
    pool: str,
    array_id: str = "",
    array_index: int | None = None,
) -> dict[str, str]:
    """The ``SLURM_*`` variables a batch script commonly reads, for a job ``gpupool sbatch`` submitted (beside
    gpupool's own). Each rank runs the script, as ``srun`` would run it: SLURM_PROCID is the rank.
    ``nodelist``: the job's hosts in Slurm's compressed form (``dgx[001-004]``)."""
    host = place.hosts[place.node_rank]
    env = {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_JOB_NAME": name or job_id,
        "SLURM_JOB_PARTITION": pool,
        "SLURM_NNODES": str(place.nnodes),
        "SLURM_JOB_NUM_NODES": str(place.nnodes),
        "SLURM_NODEID": str(place.node_rank),
        "SLURMD_NODENAME": host,
        "SLURM_PROCID": str(place.rank),
        "SLURM_LOCALID": str(place.local_rank),
        "SLURM_NTASKS": str(place.world_size),
        "SLURM_NPROCS": str(place.world_size),
        "SLURM_NTASKS_PER_NODE": str(place.local_world_size),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_GPUS_ON_NODE": str(gpus_on_node),
    }
    if array_id:
        env["SLURM_ARRAY_JOB_ID"] = array_id
        env["SLURM_ARRAY_TASK_ID"] = str(array_index if array_index is not None else 0)
    return env


# What a node will run, checked at the door (the API's job submit) and again by the agent before it starts
# anything: one set of rules, so a command the API accepted is never one the agent cannot pass to execve.
MAX_ARGS = 1024
MAX_ARG_BYTES = 128 * 1024  # Linux refuses a single argument or variable over 32 pages (MAX_ARG_STRLEN)
MAX_ENV = 256
MAX_ENV_KEY_BYTES = 256
MAX_COMMAND_BYTES = 1 << 20  # argv and environment together: half of the usual 2 MiB execve limit
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _utf8_len(text: str, where: str) -> int:
    """Bytes of ``text`` as execve gets them; a NUL would end the string there, a lone surrogate has no bytes."""
    if "\x00" in text:
        raise InputError("contains a NUL byte", source=where)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InputError(f"is not valid Unicode text (a lone surrogate at {e.start})", source=where) from None


def command_size(argv: Sequence[str], field: str = "command") -> int:
    """The bytes ``argv`` takes in execve; raises InputError naming ``field[i]`` for the first bad argument."""
    if not argv:
        raise InputError("must hold at least the program to run", source=field)
    if len(argv) > MAX_ARGS:
        raise InputError(f"{len(argv)} arguments; at most {MAX_ARGS}", source=field)
    if not argv[0]:
        raise InputError("the program name is empty", source=f"{field}[0]")
    total = 0
    for i, arg in enumerate(argv):
        n = _utf8_len(arg, f"{field}[{i}]")
        if n >= MAX_ARG_BYTES:
            raise InputError(f"{n} bytes; at most {MAX_ARG_BYTES - 1}", source=f"{field}[{i}]")
        total += n + 1
    return total


def env_size(env: Mapping[str, str], field: str = "env") -> int:
    """The bytes ``env`` takes in execve; raises InputError naming ``field.KEY`` for the first bad variable."""
    if len(env) > MAX_ENV:
        raise InputError(f"{len(env)} variables; at most {MAX_ENV}", source=field)
    total = 0
    for key, value in env.items():
        k = _utf8_len(key, field)
        if not _ENV_KEY.fullmatch(key) or k > MAX_ENV_KEY_BYTES:
            shown = key if k <= 64 else key[:64] + "..."
            raise InputError(
                f"{shown!r} is not a variable name (letters, digits and '_', not starting with a digit,"
                f" at most {MAX_ENV_KEY_BYTES} bytes)",
                source=field,
            )
        n = k + 1 + _utf8_len(value, f"{field}.{key}")
        if n >= MAX_ARG_BYTES:
            raise InputError(f"{n} bytes; at most {MAX_ARG_BYTES - 1}", source=f"{field}.{key}")
        total += n + 1
    return total


def check_command(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Raise InputError (naming the field) unless execve can take ``argv`` and ``env`` exactly as given."""
    total = command_size(argv) + env_size(env)
    if total > MAX_COMMAND_BYTES:
        raise InputError(f"command and env take {total} bytes; at most {MAX_COMMAND_BYTES}", source="command")
