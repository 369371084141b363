"""Child process for the placement crash test: one write of a whole cycle's placements, killed by SIGKILL.

Usage: python store_placer.py DATABASE_URL WHEN. Places every pending job (one GPU each, in job order over the
nodes' GPUs in name order) with one ``record_allocations``. WHEN ``before-commit``: the process kills itself
once every statement of the write has run, before its commit. WHEN ``after-commit``: it prints ``stored`` once
the write returned (committed: the acknowledgement), then kills itself, as a leader dying before it tells any
agent.
"""

from __future__ import annotations

import os
import signal
import sys

from sqlalchemy import Connection

from gpupool.domain.jobs import Allocation, TaskAllocation
from gpupool.domain.states import JobState
from gpupool.store import Store
from gpupool.store.placements import PlacementRows


def main(url: str, when: str) -> None:
    store = Store(url)
    gpus = [(n.name, g) for n in store.list_nodes() for g in range(n.gpu_count)]
    jobs = sorted((j for j in store.load_state().jobs if j.state is JobState.PENDING), key=lambda j: j.job_id)
    batch = [
        (j.job_id, j.version, Allocation(j.job_id, (TaskAllocation(h, (g,)),)))
        for j, (h, g) in zip(jobs, gpus, strict=False)
    ]
    if when == "before-commit":
        write = PlacementRows.write

        def then_die(self: PlacementRows, conn: Connection) -> None:
            write(self, conn)  # every row of the batch written in the open transaction
            os.kill(os.getpid(), signal.SIGKILL)

        PlacementRows.write = then_die  # type: ignore[method-assign]
    got = store.record_allocations(batch, "scheduler")
    assert all(not isinstance(g, Exception) for g in got), got
    sys.stdout.write("stored\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
