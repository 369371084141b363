"""The pure scheduling decision: snapshot + pending jobs + now + config -> placements, preemptions, reasons.
May import: ``gpupool.cluster``, ``gpupool.fabric``, ``gpupool.domain``, NumPy, the standard library.
Must not import: clocks, random, uuid, asyncio, os, sockets, ``store``, ``server``, ``agent``, ``sim``.
"""

from gpupool.scheduler.cycle import schedule
from gpupool.scheduler.placers import PLACERS, get_placer
from gpupool.scheduler.policies import POLICIES, get_policy
from gpupool.scheduler.types import (
    NO_SHARING,
    BackfillMode,
    CycleInputs,
    Ending,
    Preemption,
    PreemptionConfig,
    ReasonCode,
    Reservation,
    SchedulerConfig,
    ScheduleRequest,
    ScheduleResult,
    SharingPolicy,
    Signal,
    SignalKind,
    TelemetryWeights,
    Waiting,
)

__all__ = [
    "NO_SHARING",
    "PLACERS",
    "POLICIES",
    "BackfillMode",
    "CycleInputs",
    "Ending",
    "Preemption",
    "PreemptionConfig",
    "ReasonCode",
    "Reservation",
    "ScheduleRequest",
    "ScheduleResult",
    "SchedulerConfig",
    "SharingPolicy",
    "Signal",
    "SignalKind",
    "TelemetryWeights",
    "Waiting",
    "get_placer",
    "get_policy",
    "schedule",
]
