"""SQLite write failures on real files and real server processes: the server answers 503 STORE_UNAVAILABLE with
a reason and Retry-After, /healthz says the store is not writable and why, the process never dies, and every
acknowledged job is stored. A full disk is a small tmpfs; a read-only file is an immutable one (chattr +i).
Both need root (mount, CAP_LINUX_IMMUTABLE), as CI has; elsewhere they are skipped."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from procs import ServerProc, wait_for

BIG_ENV = {"PAYLOAD": "x" * 8000}  # a submit that needs fresh pages: a full disk fails it


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: a disk that fills in seconds."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def submit(base: str, token: str, key: str, env: dict[str, str] | None = None) -> httpx.Response:
    body: dict[str, Any] = {"command": ["true"], "env": env or {}}
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    return httpx.post(f"{base}/v1/jobs", json=body, headers=headers, timeout=30)


def fill(path: Path) -> Path:
    """Write zeros to a file on ``path``'s filesystem until it is full. Unbuffered: a buffered file would keep
    the bytes a full disk refused and raise ENOSPC again when closed (as it did once the free space stopped
    being a multiple of the write's size)."""
    filler = path / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def test_a_full_disk_answers_503_disk_full_and_recovers_when_space_returns(small_disk: Path, tmp_path: Path) -> None:
    srv = ServerProc(f"sqlite:///{small_disk / 'gpupool.db'}", small_disk, tmp_path / "server.log")
    try:
        token = srv.tenant_token("acme")
        acked = {}
        for i in range(20):
            r = submit(srv.base, token, f"before-{i}", BIG_ENV)
            assert r.status_code == 201, r.text
            acked[f"before-{i}"] = r.json()["job"]["id"]
        filler = fill(small_disk)
        refused: list[httpx.Response] = []

        def until_refused() -> bool:
            r = submit(srv.base, token, f"full-{len(acked) + len(refused)}", BIG_ENV)
            if r.status_code == 201:
                acked[f"full-{len(acked) + len(refused)}"] = r.json()["job"]["id"]
                return False
            refused.append(r)
            return True

        wait_for(until_refused, 30, "a submit refused on the full disk")
        r = refused[0]
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "STORE_UNAVAILABLE" and r.json()["reason"] == "disk_full"
        assert r.headers["Retry-After"] == "1"

        def health_says_full() -> bool:
            submit(srv.base, token, "probe", BIG_ENV)  # a real write to witness the disk
            got = srv.health()
            return got is not None and got[0] == 503 and got[1]["store_reason"] == "disk_full"

        wait_for(health_says_full, 15, "/healthz to report the full disk")
        assert srv.proc.poll() is None

        filler.unlink()
        wait_for(lambda: submit(srv.base, token, "after", BIG_ENV).status_code in (200, 201), 15, "submits again")
        wait_for(lambda: (srv.health() or (0, {}))[0] == 200, 15, "/healthz ok again")
        stored = {j["idempotency_key"]: j["id"] for j in srv.all_jobs()}
        assert all(stored.get(k) == v for k, v in acked.items()), "an acknowledged job is missing"
        assert srv.proc.poll() is None
    finally:
        srv.stop()


def chattr(flag: str, paths: list[Path]) -> bool:
    done = subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, check=False)
    return done.returncode == 0


def test_a_read_only_database_file_answers_503_and_the_server_lives(tmp_path: Path) -> None:
    """The files made immutable under a running server (chattr +i): it never dies (a write into SQLite's mapped
    -shm index would be SIGBUS, and a reader's first statement after a commit writes there; the loop's reads
    did, in 1 of 2 runs before the fix), writes answer 503 read_only, /healthz says the store is not writable,
    the acknowledged jobs are still read, and writes resume once the files are writable again."""
    data = tmp_path / "data"
    data.mkdir()
    srv = ServerProc(f"sqlite:///{data / 'gpupool.db'}", data, tmp_path / "server.log")
    files = [data / n for n in ("gpupool.db", "gpupool.db-wal", "gpupool.db-shm")]
    try:
        token = srv.tenant_token("acme")
        acked = [submit(srv.base, token, f"k{i}").json()["job"]["id"] for i in range(10)]
        if shutil.which("chattr") is None or not chattr("+i", files):
            pytest.skip("cannot make the files immutable here (chattr +i needs root and ext4/xfs/tmpfs support)")
        try:
            r = submit(srv.base, token, "while-read-only")
            assert r.status_code == 503, r.text
            assert r.json()["code"] == "STORE_UNAVAILABLE" and r.json()["reason"] == "read_only"
            got = srv.health()
            assert got is not None and got[0] == 503 and got[1]["store_writable"] is False
            assert got[1]["store_reason"] == "read_only"
            # Reads still work: the jobs acknowledged before are all there.
            assert {j["id"] for j in srv.all_jobs()} == set(acked)
            assert srv.proc.poll() is None
        finally:
            chattr("-i", files)
        wait_for(lambda: submit(srv.base, token, "writable-again").status_code == 201, 15, "writes again")
        assert srv.proc.poll() is None
    finally:
        srv.stop()


def test_a_replaced_database_file_is_refused_not_a_sigbus(tmp_path: Path) -> None:
    """A copy renamed over the file (how tools make a file read-only or restore one): the server must not open
    the new inode beside the old one (SQLite would truncate the -shm the old connections map: SIGBUS), nor
    acknowledge writes into the old inode, which no path names any more: a write is checked after its COMMIT
    too, and /healthz says 503 from the first request after the replace, not 200 on the strength of a write
    that committed just before it (1 of 2 runs before the fix)."""
    data = tmp_path / "data"
    data.mkdir()
    db = data / "gpupool.db"
    srv = ServerProc(f"sqlite:///{db}", data, tmp_path / "server.log")
    try:
        token = srv.tenant_token("acme")
        acked = [submit(srv.base, token, f"k{i}").json()["job"]["id"] for i in range(10)]
        shutil.copy2(db, data / "copy.db")
        os.replace(data / "copy.db", db)
        stop = threading.Event()
        answers: list[int] = []

        def reader() -> None:  # concurrent readers make the pool open new connections, to the new inode
            with httpx.Client(base_url=srv.base, timeout=30) as c:
                while not stop.is_set():
                    answers.append(c.get("/healthz").status_code)

        readers = [threading.Thread(target=reader) for _ in range(8)]
        for t in readers:
            t.start()
        try:
            r = submit(srv.base, token, "after-replace")
            assert r.status_code == 503 and r.json()["reason"] == "replaced", r.text
            wait_for(lambda: len(answers) > 200, 60, "concurrent requests")
        finally:
            stop.set()
            for t in readers:
                t.join()
        assert srv.proc.poll() is None
        assert set(answers) == {503}
    finally:
        srv.stop()
    # Restarted, the server uses the new file: the jobs acknowledged before the copy are in it.
    again = ServerProc(f"sqlite:///{db}", data, tmp_path / "server2.log")
    try:
        assert {j["id"] for j in again.all_jobs()} == set(acked)
        assert submit(again.base, token, "k-new").status_code == 201
    finally:
        again.stop()


def test_a_truncated_wal_index_is_a_logged_fatal_error_not_a_silent_death(tmp_path: Path) -> None:
    """SQLite maps the -shm file; truncating it under a running server faults on the next access. Nothing in the
    process can survive that (the known limit of WAL mode); what it can do is leave its stack in the log."""
    data = tmp_path / "data"
    data.mkdir()
    srv = ServerProc(f"sqlite:///{data / 'gpupool.db'}", data, tmp_path / "server.log")
    try:
        token = srv.tenant_token("acme")
        assert submit(srv.base, token, "k0").status_code == 201
        os.truncate(data / "gpupool.db-shm", 0)

        def died() -> bool:
            if srv.proc.poll() is None:
                with contextlib.suppress(httpx.HTTPError):
                    submit(srv.base, token, "k1")
            return srv.proc.poll() is not None

        wait_for(died, 30, "the fault")
        assert srv.proc.returncode == -signal.SIGBUS
        assert "Fatal Python error: Bus error" in srv.log_path.read_text()
    finally:
        srv.stop()
