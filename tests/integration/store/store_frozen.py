"""Child process for the immutable-files test: stores jobs, makes the SQLite files immutable (chattr +i), then
reads, writes and asks for the write fault, and prints one JSON line of what it saw. In a child because the
failure this guards against is SIGBUS, which would end the test run itself.

Usage: python store_frozen.py DATABASE_PATH. Exit status 3: chattr +i was refused here.
"""

from __future__ import annotations

import json
import subprocess
import sys

from gpupool.domain.errors import StoreUnavailableError
from gpupool.domain.jobs import JobSpec
from gpupool.store import Store


def attempt(store: Store, job_id: str) -> str:
    try:
        store.submit_job(JobSpec(job_id, tenant="acme"), f"key-{job_id}", actor="t")
    except StoreUnavailableError as e:
        return e.reason
    return "stored"


def main(path: str) -> None:
    files = [path, f"{path}-wal", f"{path}-shm"]
    store = Store(f"sqlite:///{path}")
    store.migrate()
    store.create_tenant("acme", "admin")
    acked = [store.submit_job(JobSpec(f"j{i}", tenant="acme"), f"key-j{i}", actor="t")[0].job_id for i in range(5)]
    if subprocess.run(["chattr", "+i", *files], capture_output=True, check=False).returncode != 0:
        sys.exit(3)
    try:
        # The first read after a commit writes its read mark into the mapped -shm: SIGBUS before the fix.
        read = sorted(j.job_id for j in store.list_jobs())
        frozen = attempt(store, "while-frozen")
        fault = store.write_fault(max_age_s=0)
        health = None if fault is None else fault.reason
        read_again = sorted(j.job_id for j in store.list_jobs())
    finally:
        subprocess.run(["chattr", "-i", *files], check=True)
    after = attempt(store, "after")
    stored = sorted(j.job_id for j in store.list_jobs())
    store.close()
    out = {"acked": sorted(acked), "read": read, "read_again": read_again, "frozen": frozen, "health": health}
    print(json.dumps({**out, "after": after, "stored": stored}))


if __name__ == "__main__":
    main(sys.argv[1])
