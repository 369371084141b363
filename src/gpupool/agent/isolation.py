"""How this node keeps tenants apart: the agent's isolation options turned into one launch's env and hold.

``Isolation.plan`` takes a launch command and answers the environment the workload gets and the
``Confinement`` the runtime starts it in:

- as the Unix user its tenant maps to (``identity.UserMap``), with no-new-privileges and umask 077, its
  HOME and TMPDIR its own working directory (``<work_root>/<assignment>``, 0700, that user's);
- in a cgroup with the CPU and memory of its spec, ``pids_max`` processes, and a device rule allowing only
  its own GPUs' ``/dev/nvidiaN`` (N: the GPU's minor number), the NVIDIA control devices and the RDMA
  devices (``/dev/infiniband/*``: NCCL needs them), besides the standard pseudo devices;
- seeing its GPUs by UUID (``CUDA_VISIBLE_DEVICES``, with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), so no
  renumbering can show it another GPU;
- with its gang's MPI hostfile in its working directory (``GPUPOOL_HOSTFILE``), when the server sent one.

With ``users`` None (an agent that is not root, or ``--isolation off``) workloads run as the agent's user:
they still get their own working directory and GPU UUIDs, but nothing keeps them from the agent's files.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpupool.agent.cgroups import CgroupBackend, Device, Limits
from gpupool.agent.gpu import GpuInventory
from gpupool.agent.identity import UserMap
from gpupool.agent.runtime import Confinement
from gpupool.domain.errors import InputError
from gpupool.schemas import agent as wire

CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
RDMA_DIR = "infiniband"
DEFAULT_PIDS_MAX = 16384  # threads count too: a data loader with many workers stays well under it


# Where isolated jobs' working directories go unless --work-dir says: a system place every user can reach,
# whatever private directory the agent's state is in.
ISOLATED_WORK_ROOT = Path("/var/lib/gpupool/agent-work")


HOSTFILE = "hostfile"  # the gang's MPI hostfile, in the rank's working directory (GPUPOOL_HOSTFILE)


def launch_files(cmd: wire.LaunchCommand) -> dict[str, str]:
    """What a rank's working directory holds before it starts (``WorkloadRuntime.launch``'s ``files``)."""
    return {HOSTFILE: cmd.hostfile} if cmd.hostfile else {}


def default_work_root(state_dir: Path) -> Path:
    """Without isolation: beside the state directory, never in it (``<state>`` -> ``<state>-work``)."""
    return state_dir.with_name(state_dir.name + "-work")


def _char_device(path: Path) -> Device | None:
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return Device("c", os.major(st.st_rdev), os.minor(st.st_rdev), str(path))


@dataclass(frozen=True)
class Isolation:
    users: UserMap | None = None  # None: workloads run as the agent's own user
    work_root: Path | None = None  # None: default_work_root of the agent's state directory
    cgroups: CgroupBackend | None = None
    dev_dir: Path = Path("/dev")
    pids_max: int = DEFAULT_PIDS_MAX

    def devices(self, minors: Sequence[int]) -> tuple[Device, ...]:
        """The device nodes a job on GPUs with these minor numbers may open (those that exist here)."""
        paths = [self.dev_dir / f"nvidia{m}" for m in minors] + [self.dev_dir / n for n in CONTROL_DEVICES]
        rdma = self.dev_dir / RDMA_DIR
        if rdma.is_dir():
            paths += sorted(rdma.iterdir())
        return tuple(d for d in map(_char_device, paths) if d is not None)

    def plan(
        self, cmd: wire.LaunchCommand, env: Mapping[str, str], inventory: Sequence[GpuInventory], work_root: Path
    ) -> tuple[dict[str, str], Confinement]:
        """The env ``cmd`` runs with (``env`` plus identity and GPUs) and how it is held. InputError when
        this node cannot run it as asked (no user for its tenant, a GPU it does not have)."""
        by_index = {g.index: g for g in inventory}
        missing = [i for i in cmd.gpus if i not in by_index] if inventory else []
        if missing:
            raise InputError(f"GPU {missing[0]} is not on this node", source=cmd.assignment_id)
        gpus = [by_index[i] for i in cmd.gpus] if inventory else []
        out = dict(env)
        if gpus:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid or str(g.index) for g in gpus)
            out["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        if cmd.hostfile:
            out["GPUPOOL_HOSTFILE"] = str(work_root / cmd.assignment_id / HOSTFILE)
        run_as = self.users.resolve(cmd.tenant) if self.users is not None else None
        if run_as is not None:
            home = str(work_root / cmd.assignment_id)
            out.update(HOME=home, TMPDIR=home, USER=run_as.user, LOGNAME=run_as.user)
        limits = None
        if self.cgroups is not None:
            minors = [g.minor_number if g.minor_number is not None else g.index for g in gpus] or list(cmd.gpus)
            limits = Limits(cmd.cpu_millicores, cmd.memory_mib, self.pids_max, self.devices(minors))
        confine = Confinement(
            run_as=run_as,
            work_root=work_root,
            limits=limits,
            umask=0o077 if run_as is not None else None,
            no_new_privs=run_as is not None,
        )
        return out, confine


def describe(iso: Isolation, state_dir: Path) -> str:
    """One line for the agent's log: who jobs run as, where, and what their cgroups hold them to."""
    work = iso.work_root or default_work_root(state_dir)
    if iso.users is None:
        who = f"as the agent's user (uid {os.geteuid()}): isolation off"
    else:
        made = ", created when missing" if iso.users.create else ""
        who = f"as their tenants' users ({iso.users.prefix}<tenant> unless mapped{made})"
    if iso.cgroups is None:
        held = "no cgroups"
    else:
        held = f"cgroup {iso.cgroups.kind} holding {', '.join(sorted(iso.cgroups.enforced)) or 'nothing'}"
        if "devices" not in iso.cgroups.enforced:
            held += " (devices not confined)"
    return f"gpupool-agent: jobs run {who}, in {work}/<assignment>, {held}"
