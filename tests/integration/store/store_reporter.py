"""Child process for the rank batch crash test: stores one batch of rank reports through the server's group commit
(``RankBatcher``), prints ``committed`` once it has returned (after the commit, where the server would answer
the agents), then waits to be killed.

Usage: python store_reporter.py DATABASE_URL, the batch on stdin as one JSON line of
[job_id, allocation, rank, host, state, exit_code, reason] lists (awaited on an event loop, as a request does,
while the writer thread commits).
"""

from __future__ import annotations

import asyncio
import json
import sys

from gpupool.server.rankbatch import RankBatcher
from gpupool.store import Store
from gpupool.store.ranks import RankReport


def main(url: str) -> None:
    store = Store(url)
    reports = [(RankReport(*row), f"agent:{row[3]}") for row in json.loads(sys.stdin.readline())]
    asyncio.run(RankBatcher(store.record_ranks).stored(reports))
    sys.stdout.write("committed\n")
    sys.stdout.flush()
    sys.stdin.read()  # the answer is never sent: the test kills this process while it waits here


if __name__ == "__main__":
    main(sys.argv[1])
