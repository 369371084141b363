"""`gpupool sim run/compare/pack` as users call them: a real process, a small self-made trace, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpupool.cli.sim import _settings
from gpupool.domain.errors import InputError
from gpupool.sim.world import EXIT_LATENCY_S, LAUNCH_LATENCY_S


def gpupool(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def itp(tmp: Path, bad: bool = False) -> Path:
    rows = ["job_id,submission_time,duration,num_gpu"]
    rows += [f"j{i},{i * 300},{600 + 97 * i % 3000},{[1, 2, 4, 8][i % 4]}" for i in range(30)]
    if bad:
        rows.insert(5, "broken,notanumber,10,1")
    p = tmp / "trace.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def test_run_writes_every_output(tmp_path: Path) -> None:
    trace = itp(tmp_path)
    r = gpupool("sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16", "--gpus-per-host", "8",
                "--policy", "las", "--placement", "topology", "--seed", "1", "--out", "out", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    for name in ("metrics.json", "jobs.csv", "report.md", "utilisation.png", "jct_cdf.png", "queue.png"):
        assert (out / name).stat().st_size > 0, name
    m = json.loads((out / "metrics.json").read_text())
    assert (m["jobs"], m["finished"]) == (30, 30)
    assert m["lb_avg_jct_s"] <= m["avg_jct_s"]
    header = (out / "jobs.csv").read_text().splitlines()[0]
    assert header.startswith("id,submit,start,end,gpus,hosts,leaves,preemptions")


def test_the_world_s_latencies_are_options_and_every_world_setting_is_reported(tmp_path: Path) -> None:
    trace = itp(tmp_path)
    r = gpupool("sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16", "--out", "default", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    world = json.loads((tmp_path / "default" / "metrics.json").read_text())["world"]
    assert (world["launch_latency_s"], world["exit_latency_s"]) == (LAUNCH_LATENCY_S, EXIT_LATENCY_S)
    assert {"restart_overhead_s", "checkpoint_interval_s", "failures.repair_s", "runtime.nic_gbs",
            "runtime.comm_share.training", "telemetry_interval_s", "min_cycle_interval_s"} <= set(world)  # fmt: skip
    r = gpupool("sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16", "--launch-latency", "30",
                "--exit-latency", "5", "--out", "slow", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "slow" / "report.md").read_text()
    assert "- world.launch_latency_s: 30.0" in report and "- world.exit_latency_s: 5.0" in report
    assert "- world.runtime.comm_share.training: 0.1" in report
    rows = (tmp_path / "slow" / "jobs.csv").read_text().splitlines()[1:]
    waits = [float(r.split(",")[2]) - float(r.split(",")[1]) for r in rows]
    assert min(waits) == pytest.approx(30.0)  # no job starts sooner than the launch latency after its arrival


def test_bad_rows_fail_with_file_and_line_or_are_skipped(tmp_path: Path) -> None:
    trace = itp(tmp_path, bad=True)
    args = ("sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16", "--policy", "fifo",
            "--placement", "topology", "--out", "out")  # fmt: skip
    r = gpupool(*args, cwd=tmp_path)
    assert r.returncode == 2
    assert "trace.csv:6" in r.stderr and "Traceback" not in r.stderr
    r = gpupool(*args, "--skip-bad-rows", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["bad_rows_skipped"] == 1


def test_run_takes_the_hrrn_policy_by_name(tmp_path: Path) -> None:
    r = gpupool("sim", "run", "--trace", itp(tmp_path), "--format", "itp", "--gpus", "16", "--gpus-per-host", "8",
                "--policy", "hrrn", "--placement", "topology", "--seed", "1", "--out", "h", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "h" / "metrics.json").read_text())
    assert m["finished"] == 30


def test_bad_input_exits_2_without_traceback(tmp_path: Path) -> None:
    trace = itp(tmp_path)
    for extra in (["--policy", "nope", "--placement", "topology"], ["--policy", "fifo", "--placement", "nope"]):
        r = gpupool(
            "sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16", *extra, "--out", "o", cwd=tmp_path
        )
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    r = gpupool("sim", "run", "--trace", trace, "--format", "itp", "--policy", "fifo", "--placement", "topology",
                "--out", "o", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and "--fabric" in r.stderr


def test_topology_flags_reach_the_run_and_a_bad_mode_exits_2(tmp_path: Path) -> None:
    trace = itp(tmp_path)
    base = ("sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16")
    r = gpupool(*base, "--topology", "sometimes", "--out", "o", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "error: --topology: unknown topology mode 'sometimes'; known: required, preferred, any" in r.stderr
    r = gpupool(*base, "--topology", "any", "--topology-wait-s", "600", "--out", "a", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "a" / "report.md").read_text()
    assert "- topology: any" in report and "- scheduler.topology_wait_s: 600.0" in report


def test_compare_runs_every_pair(tmp_path: Path) -> None:
    trace = itp(tmp_path)
    r = gpupool("sim", "compare", "--trace", trace, "--format", "itp", "--gpus", "16", "--policies", "fifo,las",
                "--placements", "topology,best-fit", "--out", "cmp", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [(x["policy"], x["placement"]) for x in rows] == [
        ("fifo", "topology"), ("fifo", "best-fit"), ("las", "topology"), ("las", "best-fit")
    ]  # fmt: skip
    assert (tmp_path / "cmp" / "las-best-fit" / "metrics.json").is_file()


def test_pack_json(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},32000,131072,{8 if i < 3 else 2},T4\n" for i in range(6)))  # fmt: skip
    (tmp_path / "pods.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
        f"p{i},1000,1024,{[1, 1, 2, 0][i % 4]},{[500, 1000, 1000, 0][i % 4]}\n" for i in range(20)))  # fmt: skip
    r = gpupool("sim", "pack", "--nodes", "nodes.csv", "--pods", "pods.csv", "--placement", "frag", "--tune", "1.3",
                "--seed", "42", "--json", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["total_gpus"] == 30
    assert {"100", "130"} <= set(doc["alloc_ratio_at"])
    assert doc["unallocated_gpus_at_130"] >= 0


def test_sharing_options_reach_the_run_and_a_bad_calendar_names_its_line(tmp_path: Path) -> None:
    trace = itp(tmp_path)
    cal = tmp_path / "cal.toml"
    cal.write_text('timezone = "UTC"\ndefault_pool = "default"\n\n[[pool]]\nname = "inference"\nhosts = ["node001"]\n'
                   'share = 1.0\nshare_outside = 0.0\nwindows = [{ days = "mon-sun", start = "08:00", end = "20:00" }]\n')  # fmt: skip
    base = ("sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16", "--policy", "fifo",
            "--placement", "topology", "--out", "out")  # fmt: skip
    r = gpupool(*base, "--preemption", "--backfill", "easy", "--calendar", cal, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["finished"] == 30
    cal.write_text(cal.read_text().replace("share = 1.0", "share = 2.0"))
    r = gpupool(*base, "--calendar", cal, cwd=tmp_path)
    assert r.returncode == 2 and "cal.toml:7" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_failure_trace_reaches_the_run_and_a_bad_line_exits_2(tmp_path: Path) -> None:
    trace = itp(tmp_path)
    fails = tmp_path / "failures.csv"
    fails.write_text("time_s,kind,host,gpu\n1000,host,node001\n2000,gpu,node002,0\n")
    base = ("sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16", "--policy", "fifo",
            "--placement", "topology", "--out", "out", "--failures", fails)  # fmt: skip
    r = gpupool(*base, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["failures"] == 2 and m["finished"] == 30
    fails.write_text("time_s,kind,host,gpu\n1000,host,node077\n")
    r = gpupool(*base, cwd=tmp_path)
    assert r.returncode == 2 and "failures.csv:2" in r.stderr and "node077" in r.stderr, r.stderr


def test_an_unknown_backfill_mode_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown backfill 'sometimes'; known: none, easy, conservative"):
        _settings(None, {"backfill": "sometimes"})


def test_gittins_with_preemption_by_service_and_las_thresholds(tmp_path: Path) -> None:
    trace = itp(tmp_path)
    base = ("sim", "run", "--trace", trace, "--format", "itp", "--gpus", "16", "--gpus-per-host", "8",
            "--placement", "topology", "--preemption", "--preemption-by-service", "--max-lost-s", "60")  # fmt: skip
    r = gpupool(*base, "--policy", "gittins", "--out", "g", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "g" / "metrics.json").read_text())["finished"] == 30
    r = gpupool(*base, "--policy", "las", "--las-thresholds", "500,5000", "--out", "l", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "l" / "metrics.json").read_text())["finished"] == 30
    # --preemption alone with gittins preempts by its index at checkpoints (the report states it).
    short = [a for a in base if a not in ("--preemption-by-service", "--max-lost-s", "60")]
    r = gpupool(*short, "--policy", "gittins", "--out", "p", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = (tmp_path / "p" / "report.md").read_text()
    assert "- effective preemption_by_service: True" in report and "- effective max_lost_s: 60.0" in report
    assert "- scheduler.policy: gittins" in report and "- preemptible_jobs: True" in report
    for bad in ("5000,500", "x", "-1"):
        r = gpupool(*base, "--policy", "las", "--las-thresholds", bad, "--out", "b", cwd=tmp_path)
        assert r.returncode == 2 and "--las-thresholds" in r.stderr and "Traceback" not in r.stderr, r.stderr
