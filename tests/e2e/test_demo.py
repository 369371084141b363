"""``gpupool demo`` as a real process: it starts a server and agents, runs jobs, and leaves no process behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpupool.agent.runtime import process_start_ticks


def alive(pid: int) -> bool:
    st = process_start_ticks(pid)
    return st is not None and st[1] != "Z"


def test_demo_runs_jobs_and_cleans_up_every_process(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "gpupool", "demo", "--hosts", "4", "--duration", "25", "--interval", "0.5"]
    out = subprocess.run(
        [*argv, "--wave", "60", "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "API        http://127.0.0.1:" in out.stdout and "gpupool jobs" in out.stdout
    assert "every process stopped" in out.stdout
    pids = json.loads((tmp_path / "pids.json").read_text())
    assert len(pids) == 5  # the server and four agents
    assert not [p for p in pids if alive(p)]
    launches = list((tmp_path / "agents").glob("*/workloads/*/launch.json"))
    assert launches, "no task ever started"
    for rec in launches:
        meta = json.loads(rec.read_text())
        now = process_start_ticks(meta["pid"])
        assert now is None or now[0] != meta["start_ticks"] or now[1] == "Z"
    finished = [r for r in launches if (r.parent / "stdout.log").read_text().endswith("done\n")]
    assert finished, "no task ran to completion"
    assert any("training rank 1 of 2" in (r.parent / "stdout.log").read_text() for r in launches)
