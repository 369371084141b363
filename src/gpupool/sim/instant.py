"""An actuator whose decisions take effect in the cluster state at once: cycles run one after another with no
launch, exit or failure in between (benchmarks of the cycle, tests of what the loop does with its results)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobFinished, JobPlaced, JobPreempted, JobStarted
from gpupool.domain.jobs import Allocation
from gpupool.scheduler.types import Ending, Preemption, Signal, Waiting


class InstantWorld:
    """Placed jobs start at once, ended and preempted ones leave at once. ``refuse()`` True refuses a placement
    (as the server's store may: the job waits again next cycle); ``left``: the last cycle's waiting jobs;
    ``placed``: how many placements took effect."""

    def __init__(self, state: ClusterState, refuse: Callable[[], bool] | None = None) -> None:
        self.state, self.refuse = state, refuse
        self.placed = 0
        self.left: Sequence[Waiting] = ()

    def end(self, ending: Ending, now_s: float) -> bool:
        self.state.apply(JobFinished(ending.job_id, now_s, succeeded=False))
        return True

    def preempt(self, preemption: Preemption, now_s: float) -> bool:
        self.state.apply(JobPreempted(preemption.job_id, now_s, preemption.reason.value))
        return True

    def place(self, allocation: Allocation, now_s: float) -> bool:
        if self.refuse is not None and self.refuse():
            return False
        self.state.apply(JobPlaced(allocation, now_s))
        self.state.apply(JobStarted(allocation.job_id, now_s))
        self.placed += 1
        return True

    def signal(self, signal: Signal, now_s: float) -> bool:
        return True

    def waiting(self, waiting: Sequence[Waiting]) -> None:
        self.left = waiting
