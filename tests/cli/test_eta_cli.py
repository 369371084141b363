"""``gpupool job ID`` says when a pending job is expected to start (``expected start``, a human time)."""

from __future__ import annotations

from pathlib import Path

from cli_server import cli_server, run, tenant_token

from gpupool.cli.human import when
from gpupool.cli.views import _expected


def test_job_shows_the_expected_start_of_a_pending_job_only(tmp_path: Path) -> None:
    """No host has joined: nothing can say when the job starts, and the line says so (never a made-up time)."""
    with cli_server(tmp_path) as url:
        token = tenant_token(url, "team-a")
        code, out, err = run(url, token, "submit", "--gpus", "2", "--", "python", "-c", "1")
        assert code == 0, err
        job_id = out.split()[0]
        code, out, err = run(url, token, "job", job_id)
        assert code == 0, err
        assert any(line.split()[:3] == ["expected", "start", "unknown"] for line in out.splitlines()), out
        assert run(url, token, "cancel", job_id)[0] == 0
        code, out, _ = run(url, token, "job", job_id)
        assert code == 0 and "cancelled" in out and "expected start" not in out


def test_the_expected_start_is_a_time_and_how_far_off_it_is() -> None:
    now = 1_796_600_000.0
    assert _expected(now + 12 * 60 + 30, now) == f"{when(now + 750)} (in 12m)"
    assert _expected(now + 2 * 86_400 + 5, now) == f"{when(now + 172_805)} (in 2d)"
    assert _expected(now - 5, now) == f"{when(now - 5)} (now)"
    assert _expected(None, now).startswith("unknown")
