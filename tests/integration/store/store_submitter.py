"""Child process for the crash test: submits jobs in a tight loop, printing each id only after its commit.

Usage: python store_submitter.py DATABASE_URL PREFIX. Runs until killed.
"""

from __future__ import annotations

import sys

from gpupool.domain.jobs import JobSpec
from gpupool.store import Store


def main(url: str, prefix: str) -> None:
    store = Store(url)
    i = 0
    while True:
        job, _ = store.submit_job(JobSpec(f"{prefix}{i}", tenant="acme"), f"key-{prefix}{i}", actor="burst")
        # The line is the acknowledgement: written only once submit_job has returned, i.e. after the commit.
        sys.stdout.write(job.job_id + "\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
