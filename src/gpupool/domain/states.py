"""Job and node state machines as data: each allowed edge names its cause; one function validates changes."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import TypeVar

from gpupool.domain.errors import TransitionError


class JobState(StrEnum):
    PENDING = "pending"
    PLACED = "placed"  # the scheduler decided; the agent has not confirmed the start yet
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"  # stopped at its time limit


class NodeState(StrEnum):
    UP = "up"
    DRAINED = "drained"  # kept out of new placements; running work may finish
    LOST = "lost"  # unreachable: its allocations are gone


JOB_TRANSITIONS: Mapping[tuple[JobState, JobState], str] = MappingProxyType(
    {
        (JobState.PENDING, JobState.PLACED): "the scheduler placed it (JobPlaced)",
        (JobState.PENDING, JobState.CANCELLED): "the user cancelled it before it was placed",
        (JobState.PLACED, JobState.RUNNING): "the agent reported that every task started (JobStarted)",
        (JobState.PLACED, JobState.PENDING): "preempted or its node lost before it started: back in the queue",
        (JobState.PLACED, JobState.FAILED): "a task failed to launch",
        (JobState.RUNNING, JobState.FINISHED): "every task exited with success (JobFinished)",
        (JobState.RUNNING, JobState.FAILED): "a task exited with an error (JobFinished, not succeeded)",
        (JobState.RUNNING, JobState.PENDING): "preempted (JobPreempted) or a node it ran on was lost: requeued",
        (JobState.RUNNING, JobState.CANCELLED): "the user cancelled it while it ran",
        (JobState.RUNNING, JobState.TIMEOUT): "it ran past its time limit (the scheduler's Ending)",
    }
)

NODE_TRANSITIONS: Mapping[tuple[NodeState, NodeState], str] = MappingProxyType(
    {
        (NodeState.UP, NodeState.DRAINED): "an operator or a health rule drained it (NodeDrained)",
        (NodeState.UP, NodeState.LOST): "its agent stopped reporting (NodeLost)",
        (NodeState.DRAINED, NodeState.UP): "an operator returned it to service (NodeRestored)",
        (NodeState.DRAINED, NodeState.LOST): "its agent stopped reporting while drained (NodeLost)",
        (NodeState.LOST, NodeState.UP): "its agent reported again (NodeRestored)",
    }
)

S = TypeVar("S", JobState, NodeState)


def transition(table: Mapping[tuple[S, S], str], current: S, new: S, subject: str) -> S:
    """Return ``new`` if the table allows ``current -> new``; raise TransitionError naming the subject if not."""
    if (current, new) not in table:
        raise TransitionError(f"{subject}: cannot go from {current.value} to {new.value}")
    return new
