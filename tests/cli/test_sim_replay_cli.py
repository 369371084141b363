"""`gpupool sim replay JOURNAL` as users call it: a real process on a journal written by the server's writer
(``server.journal.Journal``); exit 0 when the decisions are the same, 1 listing what differs, 2 on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpupool.cluster import ClusterState
from gpupool.domain.events import JobPlaced, JobSubmitted
from gpupool.domain.jobs import Allocation, JobSpec
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler import NO_SHARING, SchedulerConfig
from gpupool.scheduler.driver import CycleDriver
from gpupool.server.journal import Journal


class _Place:
    """What the server's actuator does with a placement, reduced to the state (no store)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def preempt(self, *_: object) -> bool:
        return True

    def place(self, allocation: Allocation, now_s: float) -> bool:
        self.state.apply(JobPlaced(allocation, now_s))
        return True

    def signal(self, *_: object) -> bool:
        return True

    def waiting(self, *_: object) -> None:
        return None


def write_journal(path: Path) -> None:
    """Two cycles: a 2x8 gang placed, then a 1-GPU job placed beside it and one that cannot fit waiting."""
    config = SchedulerConfig()
    journal = Journal(path, config, 3600.0)
    state = journal.new_state(leaf_spine(2, 1, 2, gpus_per_host=8))
    driver = CycleDriver(config, 3600.0)
    for now, jobs in ((10.0, [JobSpec("gang", tasks=2, gpus_per_task=8)]),
                      (20.0, [JobSpec("one"), JobSpec("big", tasks=3, gpus_per_task=8)])):  # fmt: skip
        for spec in jobs:
            state.apply(JobSubmitted(spec, now))
        journal.cycle(now, [j.job_id for j in jobs], NO_SHARING)
        run = driver.run_cycle(state.snapshot(), jobs, NO_SHARING, _Place(state), now)
        journal.decided(run.result)
    journal.close()


def gpupool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_the_same_decisions_exit_0_and_json_lists_the_placements(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write_journal(path)
    r = gpupool("sim", "replay", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "same decisions: 2 cycles, 2 placements, 0 preemptions"
    out = json.loads(gpupool("sim", "replay", "--json", path).stdout)
    assert out["same"] and [p["job"] for p in out["placements"]] == ["gang", "one"]
    assert [len(p["tasks"]) for p in out["placements"]] == [2, 1]


def test_a_decision_the_scheduler_would_not_make_exits_1_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    write_journal(path)
    lines = path.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "decided")
    doc = json.loads(lines[last])
    doc["result"]["waiting"] = []  # the server said nothing about "big"
    lines[last] = json.dumps(doc)
    path.write_text("\n".join(lines) + "\n")
    r = gpupool("sim", "replay", path)
    assert r.returncode == 1, r.stderr
    assert f"cycle 2 (line {last + 1}, t=20.000): job big waits: the server says not waiting, the replay" in r.stdout
    assert r.stdout.rstrip().endswith("1 differences in 2 cycles")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda lines: [*lines[:2], "{not json", *lines[2:]], "journal.jsonl:3: not JSON"),
        (
            lambda lines: [lines[0].replace('"version":1', '"version":9'), *lines[1:]],
            "journal.jsonl:1: journal version 9",
        ),
        (lambda lines: [*lines[:3], '{"kind": "event", "event": {"_t": "Popen"}}', *lines[3:]], "unknown type 'Popen'"),
        (lambda lines: [*lines[:3], '{"kind": "rm"}', *lines[3:]], "journal.jsonl:4: not a journal record"),
        (lambda lines: lines[1:], "journal.jsonl:5: a cycle before the journal's start record"),
    ],
    ids=["not-json", "version", "unknown-type", "unknown-kind", "no-start"],
)
def test_a_journal_that_is_not_one_exits_2_with_one_line_naming_where(
    tmp_path: Path, edit: Callable[[list[str]], list[str]], message: str
) -> None:
    path = tmp_path / "journal.jsonl"
    write_journal(path)
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
    r = gpupool("sim", "replay", path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_missing_journal_exits_2(tmp_path: Path) -> None:
    r = gpupool("sim", "replay", tmp_path / "nope.jsonl")
    assert r.returncode == 2 and "cannot read the journal" in r.stderr and "Traceback" not in r.stderr
