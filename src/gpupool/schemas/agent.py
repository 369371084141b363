"""The agent protocol, version 1: what a node agent and the server say to each other over HTTP.

The agent always calls the server (it may sit behind NAT); the server answers each heartbeat with the
commands for that node. Paths (all under ``/v1/agents``):

- ``POST /register`` with the join token as ``Authorization: Bearer``: the node's inventory; the reply
  carries a node token that authenticates every later call of this node.
- ``POST /{host}/heartbeat`` with the node token: telemetry since the last beat plus the state of every
  workload the agent runs; the reply carries commands (launch, stop, signal). A command is identified by
  its ``assignment_id``: the agent launches an assignment at most once, whatever the server repeats.
- ``POST /{host}/reports`` with the node token: workload state changes as they happen (started,
  exited, lost), so a finished job need not wait for the next beat.
- ``POST /{host}/commands`` with the node token (a long-poll, offered when the registration reply names a
  ``command_wait_s`` above 0): the workloads the agent runs and the commands it already holds; the server
  answers as soon as it has a command the agent does not hold, or after ``command_wait_s`` with the
  commands it has. So a placement reaches its agent when it is committed, not at the next beat; heartbeat
  replies carry the same commands, derived the same way, and stay the fallback.

Compatibility: agents and servers one protocol version apart work together, so a fleet upgrades node by
node. Each side is a tolerant reader: a field it does not know (sent by a newer peer) is kept aside in
``model_extra``, listed by ``unknown_fields`` for the receiver to log once, and otherwise ignored; a command
kind the agent does not know is dropped from the reply (``HeartbeatReply.dropped_kinds``) while the known
commands beside it run. Every request carries the sender's ``protocol``; a server answers a request in the
protocol it declares (it never sends a peer a command kind newer than that peer), and refuses a peer
further apart than ``PROTOCOL_WINDOW`` (``accepts``), as does the agent with the server's reply.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from gpupool.domain.errors import InputError
from gpupool.domain.labels import check_labels

PROTOCOL_VERSION = 1
PROTOCOL_WINDOW = 1  # peers this many versions apart, either way, still work together


def accepts(protocol: int) -> bool:
    """Whether a peer speaking ``protocol`` works with this one."""
    return abs(protocol - PROTOCOL_VERSION) <= PROTOCOL_WINDOW


class _Msg(BaseModel):
    # "allow", not "ignore": the unknown fields stay readable, so the receiver can log what it ignored.
    model_config = ConfigDict(extra="allow", frozen=True)


def unknown_fields(msg: BaseModel, prefix: str = "") -> tuple[str, ...]:
    """Dotted names of the fields in ``msg`` (and its nested messages) that this protocol does not define.

    Called on every message of a peer of another version: it reads the instances' dicts, not pydantic's
    field tables, which cost several times more."""
    names = [f"{prefix}{k}" for k in msg.__pydantic_extra__ or ()]
    for key, value in msg.__dict__.items():
        if isinstance(value, tuple):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    names.extend(unknown_fields(item, f"{prefix}{key}[{i}]."))
        elif isinstance(value, BaseModel):
            names.extend(unknown_fields(value, f"{prefix}{key}."))
    if isinstance(msg, _CarriesCommands):
        names.extend(f"{prefix}commands[kind={k}]" for k in msg.dropped_kinds)
    return tuple(dict.fromkeys(names))


class GpuInfo(_Msg):
    index: int = Field(ge=0)
    uuid: str = ""
    model: str
    memory_mib: int = Field(ge=0)
    pci_bus_id: str = ""
    mig_mode: bool = False
    nvlink_island: int = 0
    numa_node: int = -1


class HcaInfo(_Msg):
    name: str  # mlx5_0
    guid: str = ""  # node GUID, 16 hex digits
    port: int = Field(default=1, ge=1)
    state: str = ""  # ACTIVE, DOWN, ...
    rate_gbps: float = Field(default=0.0, ge=0)
    link_layer: str = "InfiniBand"


class RegisterRequest(_Msg):
    protocol: int = PROTOCOL_VERSION
    host: str = Field(min_length=1, max_length=253)
    agent_version: str = ""
    # Where the agent serves workload logs (http://127.0.0.1:PORT; "" = none). The server takes only its scheme
    # and port, at the address the registration came from: never a host a node names.
    agent_url: str = ""
    # The address peers reach this node at (MASTER_ADDR when it hosts rank 0); "" = the server uses the
    # address the registration came from, which is wrong behind NAT or when the agent talks over another NIC.
    address: str = Field(default="", max_length=253)
    cpu_millicores: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    gpus: tuple[GpuInfo, ...] = ()
    hcas: tuple[HcaInfo, ...] = ()
    running: tuple[str, ...] = ()  # assignment ids the agent still runs (after an agent restart)
    labels: dict[str, str] = Field(default_factory=dict, max_length=256)  # --label and the labels file
    # What runs its jobs that name an image (podman, apptainer, enroot); "" none, or an agent before containers.
    container_runtime: str = Field(default="", max_length=32, pattern=r"^[a-z0-9-]*$")

    @field_validator("labels")
    @classmethod
    def _label_pairs(cls, labels: dict[str, str]) -> dict[str, str]:
        try:
            return check_labels(labels, "labels")
        except InputError as e:
            raise ValueError(str(e)) from None


class RegisterReply(_Msg):
    protocol: int = PROTOCOL_VERSION
    node_token: str
    heartbeat_interval_s: float
    server_time_s: float
    command_wait_s: float = 0.0  # > 0: the server holds a commands long-poll this long; 0: commands ride beats only
    # The key the server signs its log requests with (schemas/logsig.py); "" from an older server, whose log
    # requests the agent then refuses.
    log_key: str = Field(default="", repr=False)


class GpuSample(_Msg):
    index: int = Field(ge=0)
    utilization_pct: float | None = None
    memory_used_mib: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_uncorrected: int | None = None
    health: Literal["ok", "degraded", "bad"] = "ok"
    reasons: tuple[str, ...] = ()


class PortSample(_Msg):
    hca: str
    port: int = 1
    state: Literal["up", "degraded", "down"] = "up"
    xmit_gbps: float | None = None
    rcv_gbps: float | None = None
    xmit_wait_per_s: float | None = None
    errors_per_s: float | None = None
    reasons: tuple[str, ...] = ()


class XidSample(_Msg):
    gpu: int = Field(ge=0)
    code: int = Field(ge=0)
    at_s: float
    message: str = ""


WorkloadState = Literal["starting", "running", "exited", "lost"]


class WorkloadStatus(_Msg):
    assignment_id: str
    job_id: str
    state: WorkloadState
    exit_code: int | None = None  # negative: killed by that signal
    at_s: float
    reason: str = ""  # why it ended when the exit code cannot say: it never started, its memory limit killed it


class HeartbeatRequest(_Msg):
    protocol: int = PROTOCOL_VERSION
    seq: int = Field(ge=0)
    at_s: float
    gpus: tuple[GpuSample, ...] = ()
    ports: tuple[PortSample, ...] = ()
    xids: tuple[XidSample, ...] = ()
    workloads: tuple[WorkloadStatus, ...] = ()
    # ``command_id`` of each stored command (a signal) this agent has carried out: the server deletes them and
    # sends them no more. None: an agent older than this field, to which a signal is sent once, not repeated.
    executed: tuple[str, ...] | None = None
    # The latest ``server_time_s`` of a reply (beat or commands) whose commands the agent had carried out when
    # it built this beat: proof that the beat is not older than a launch sent before that time. The server
    # judges a stopped rank gone by its absence only from such a beat. None: an agent older than this field.
    seen_server_s: float | None = None
    # The command keys the agent holds from its commands long-poll (as ``CommandsRequest.held``). The reply
    # then carries commands only when one is new to the agent (every current command, as without it), else
    # none: a beat does not rebuild launches the poll already delivered. None: every current command.
    held: tuple[str, ...] | None = None


class MountSpec(_Msg):
    source: str
    target: str
    read_only: bool = False


class ContainerSpec(_Msg):
    """Run the rank in a container (``agent/containers.py``): the job's image, bind mounts, working directory."""

    image: str
    mounts: tuple[MountSpec, ...] = ()
    workdir: str = ""


class LaunchCommand(_Msg):
    kind: Literal["launch"] = "launch"
    assignment_id: str
    job_id: str
    argv: tuple[str, ...] = Field(min_length=1)  # never a shell string
    env: dict[str, str] = {}  # CUDA_VISIBLE_DEVICES, NCCL_IB_HCA, RANK, WORLD_SIZE, ... built by the server
    gpus: tuple[int, ...] = ()
    # Whose job: the agent runs it as the Unix user its configuration maps this tenant to.
    tenant: str = ""
    # Per rank, from the job spec; 0 = no limit. The agent enforces them with the rank's cgroup.
    cpu_millicores: int = 0
    memory_mib: int = 0
    # The gang's MPI hostfile (``host slots=N`` lines): the agent writes it into the rank's working directory
    # and names it in GPUPOOL_HOSTFILE. "" (a server before it): no hostfile.
    hostfile: str = Field(default="", max_length=1 << 20)
    # None: argv runs on the node. An agent before containers ignores it (and logs the unknown field).
    container: ContainerSpec | None = None


class StopCommand(_Msg):
    kind: Literal["stop"] = "stop"
    assignment_id: str
    grace_s: float = Field(default=30.0, ge=0)
    reason: str = ""


class SignalCommand(_Msg):
    """A checkpoint request before a preemption: the agent sends SIGUSR1 to the workload's process group.

    ``command_id`` names the stored command: the server repeats it until the agent lists it as ``executed``;
    the agent carries out one id once, however often it comes. "" (an older server): sent once."""

    kind: Literal["signal"] = "signal"
    assignment_id: str
    signal: Literal["checkpoint"] = "checkpoint"
    command_id: str = Field(default="", max_length=32, pattern=r"^[0-9]*$")


Command = Annotated[LaunchCommand | StopCommand | SignalCommand, Field(discriminator="kind")]


# Derived from the union, so a command added to it is known at once.
_COMMAND_KINDS = frozenset(m.model_fields["kind"].default for m in get_args(get_args(Command)[0]))


class _CarriesCommands(_Msg):
    """A reply with commands (a heartbeat's, a commands poll's): kinds this agent does not know are dropped."""

    commands: tuple[Command, ...] = ()
    _dropped: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _drop_unknown_kinds(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A command kind this agent does not know (from a newer server) is dropped, not a failed reply."""
        dropped: list[str] = []
        if isinstance(data, dict) and isinstance(data.get("commands"), list | tuple):
            known = []
            for c in data["commands"]:
                kind = c.get("kind") if isinstance(c, dict) else getattr(c, "kind", None)
                if isinstance(kind, str) and kind not in _COMMAND_KINDS:
                    dropped.append(kind)
                else:
                    known.append(c)
            data = {**data, "commands": known}
        reply = handler(data)
        if dropped:
            reply._dropped = tuple(dropped)
        return reply

    @property
    def dropped_kinds(self) -> tuple[str, ...]:
        """The command kinds left out of ``commands`` because this protocol does not know them."""
        return self._dropped


class HeartbeatReply(_CarriesCommands):
    protocol: int = PROTOCOL_VERSION
    heartbeat_interval_s: float
    server_time_s: float
    # Assignment ids whose reported end (exited, lost) the server has stored, or has nothing to store for: the
    # agent repeats an end on every beat until it is listed here. None: a server older than this field, whose
    # reply acknowledges every end the beat carried.
    acked: tuple[str, ...] | None = None


def command_key(command: LaunchCommand | StopCommand | SignalCommand) -> str:
    """``kind:assignment_id``: how an agent names a command it already holds (``CommandsRequest.held``)."""
    return f"{command.kind}:{command.assignment_id}"


class CommandsRequest(_Msg):
    protocol: int = PROTOCOL_VERSION
    # What the agent runs, as a heartbeat lists it: the server compares it with the assignments (not applied).
    workloads: tuple[WorkloadStatus, ...] = ()
    # ``command_key`` of each command of the previous answer: those alone do not end the wait, so a stop the
    # agent is carrying out (its process still alive) or a launch it refuses to repeat is not sent in a loop.
    held: tuple[str, ...] = ()
    executed: tuple[str, ...] | None = None  # as in ``HeartbeatRequest``


class CommandsReply(_CarriesCommands):
    """Every command derived at the answer (held ones included), as a heartbeat's reply carries them."""

    protocol: int = PROTOCOL_VERSION
    server_time_s: float


class ReportRequest(_Msg):
    protocol: int = PROTOCOL_VERSION
    workloads: tuple[WorkloadStatus, ...] = Field(min_length=1)
