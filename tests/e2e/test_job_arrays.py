"""End to end, on the real server and emulated agents: arrays and dependency chains as their processes saw
them run.

- A 20-element array with ``%4`` never has more than 4 elements' processes alive at once (their own
  clocks say so), though the 16 free GPUs would take all of them; each element sees its index.
- An ``afterok`` chain runs in order, through a server kill -9 while a link runs; a chain with a failing
  link cancels the rest, each with the reason (which job ended how).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_cluster import HOSTS, Cluster, running, shared_dir
from isolation_support import python_for_others
from procs import until

AGENTS = HOSTS[:2]  # 16 GPUs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running(tmp_path_factory.mktemp("arrays"), AGENTS) as c:
        yield c


def timed(out: Path, name: str, seconds: float = 0.0, code: int = 0) -> str:
    """Writes when it started and ended (its own clock) as ``<name>.start``/``.end``, then exits ``code``."""
    return (
        "import os, sys, time\n"
        f"path = {str(out)!r} + '/' + {name!r}.format(**os.environ)\n"
        "open(path + '.start', 'w').write(repr(time.time()))\n"
        f"time.sleep({seconds})\n"
        "open(path + '.end', 'w').write(repr(time.time()))\n"
        f"sys.exit({code})\n"
    )


def test_an_array_capped_at_4_never_runs_more_than_4_at_once(cluster: Cluster) -> None:
    """Invariant: the cap is the scheduler's (an admit-stage rule), so at no moment do more than 4 elements
    run, whatever capacity is free; every element runs once, with its own index."""
    c = cluster
    out = shared_dir(c, "array")
    body = {
        "command": [python_for_others(), "-c", timed(out, "{GPUPOOL_ARRAY_INDEX}", 1.0)],
        "gpus_per_task": 1,
        "tenant": "acme",
        "array": "0-19%4",
    }
    r = c.http.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    array_id = r.json()["array_id"]
    until(lambda: c.http.get(f"/v1/arrays/{array_id}").json()["states"] == {"finished": 20}, 120, "all 20 finished")
    runs = [(float((out / f"{i}.start").read_text()), float((out / f"{i}.end").read_text())) for i in range(20)]
    most = max(sum(1 for s, e in runs if s <= t < e) for t, _ in runs)
    assert most <= 4, f"{most} elements ran at once"
    assert most == 4, "the cap was never reached: the test would not see it broken"
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".start") == sorted(f"{i}.start" for i in range(20))


def submit(c: Cluster, code: str, after: str | None = None) -> str:
    deps = [{"kind": "afterok", "jobs": [after]}] if after else []
    return c.submit(code, tasks=1, gpus=8, after=deps)


def test_an_afterok_chain_runs_in_order_and_a_broken_link_cancels_the_rest(cluster: Cluster) -> None:
    """Invariant: a job starts only after the job it names finished with every rank exiting 0, even when
    the server is killed -9 while the link before it runs; a link that fails cancels every later link,
    each naming the job that broke it."""
    c = cluster
    out = shared_dir(c, "chain")
    a = submit(c, timed(out, "a", 0.5))
    b = submit(c, timed(out, "b", 3.0), a)
    cc = submit(c, timed(out, "c"), b)
    until(lambda: (out / "b.start").exists(), 60, "b started")
    c.server.kill()
    c.server.wait(10)
    c.restart()
    until(lambda: c.job(cc)["state"] == "finished", 90, "the chain finished")
    t = {n: (float((out / f"{n}.start").read_text()), float((out / f"{n}.end").read_text())) for n in "abc"}
    assert t["a"][1] <= t["b"][0] and t["b"][1] <= t["c"][0], t

    ok = submit(c, timed(out, "ok"))
    bad = submit(c, timed(out, "bad", code=1), ok)
    after_bad = submit(c, timed(out, "never1"), bad)
    last = submit(c, timed(out, "never2"), after_bad)
    until(lambda: c.job(last)["state"] == "cancelled", 60, "the rest of the chain cancelled")
    assert c.job(bad)["state"] == "failed"
    for job, broke, how in ((after_bad, bad, "failed"), (last, after_bad, "cancelled")):
        rec = c.job(job)
        assert rec["reason_code"] == "dependency_never_satisfied"
        assert rec["reason"] == f"dependency never satisfied: afterok: job {broke} ended {how}"
    assert not (out / "never1.start").exists() and not (out / "never2.start").exists()
