"""The SQLite files under a store: an index (-shm) that cannot be written is never touched (the kernel's answer
to a write into its mapping is SIGBUS), and nothing is acknowledged that went into a replaced file.

Invariants: with the files immutable, acknowledged jobs are still read, a write is refused as ``read_only``,
the write fault says so at once, and writes resume once the files are writable; after the file is replaced,
every write is refused as ``replaced`` (none reaches the log that the new file would read), including one that
committed after the rename, and the write fault says ``replaced`` at once, whatever the latest write found."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from gpupool.domain.errors import StoreUnavailableError
from gpupool.domain.jobs import JobSpec
from gpupool.store import Store


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    s.migrate()
    s.create_tenant("acme", "admin")
    yield s
    s.close()


def submit(store: Store, job_id: str) -> None:
    store.submit_job(JobSpec(job_id, tenant="acme"), f"key-{job_id}", actor="t")


def replace_with_a_copy(db: Path) -> None:
    """What a tool that rewrites the file does: a copy renamed over it (a new inode under the same name)."""
    shutil.copy2(db, db.with_name("copy.db"))
    os.replace(db.with_name("copy.db"), db)


def test_immutable_files_are_read_not_written_and_the_process_lives(tmp_path: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("no chattr here")
    db = tmp_path / "gpupool.db"
    child = Path(__file__).with_name("store_frozen.py")
    try:
        done = subprocess.run([sys.executable, str(child), str(db)], capture_output=True, text=True, timeout=120)
    finally:
        files = [db, db.with_name("gpupool.db-wal"), db.with_name("gpupool.db-shm")]
        subprocess.run(["chattr", "-i", *map(str, files)], capture_output=True, check=False)
    if done.returncode == 3:
        pytest.skip("cannot make the files immutable here (chattr +i needs root and ext4/xfs/tmpfs support)")
    assert done.returncode == 0, f"the store's process ended with {done.returncode}: {done.stderr[-2000:]}"
    seen: dict[str, Any] = json.loads(done.stdout)
    assert seen["read"] == seen["acked"] and seen["read_again"] == seen["acked"]
    assert (seen["frozen"], seen["health"]) == ("read_only", "read_only")
    assert seen["after"] == "stored" and seen["stored"] == sorted([*seen["acked"], "after"])


def test_a_replaced_file_refuses_writes_and_the_write_fault_says_so_at_once(sqlite_store: Store) -> None:
    submit(sqlite_store, "j0")
    assert sqlite_store.write_fault() is None  # a write committed just now
    replace_with_a_copy(Path(sqlite_store.url.removeprefix("sqlite:///")))
    fault = sqlite_store.write_fault()  # not the latest write's success: it went to the file that is gone
    assert fault is not None and fault.reason == "replaced"
    with pytest.raises(StoreUnavailableError) as refused:
        submit(sqlite_store, "j1")
    assert refused.value.reason == "replaced"
    sqlite_store.close()
    again = Store(sqlite_store.url)  # the new file, with the log it shares the name of: the refused job is not in it
    try:
        assert [j.job_id for j in again.list_jobs()] == ["j0"]
    finally:
        again.close()


def test_a_write_whose_commit_went_into_the_replaced_file_is_refused_not_acknowledged(sqlite_store: Store) -> None:
    db = Path(sqlite_store.url.removeprefix("sqlite:///"))
    replaced: list[bool] = []

    def replace_before_the_commit(_conn: Any) -> None:  # after every check before the COMMIT, once
        if not replaced:
            replace_with_a_copy(db)
            replaced.append(True)

    event.listen(sqlite_store._engine, "commit", replace_before_the_commit)
    with pytest.raises(StoreUnavailableError) as refused:
        submit(sqlite_store, "j0")
    assert replaced and refused.value.reason == "replaced"
