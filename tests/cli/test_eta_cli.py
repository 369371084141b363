"""``gpupool job ID`` says when a pending job is expected to start, in one human line."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from cli_server import cli_server, run, tenant_token

from gpupool.cli.eta import expected_start_line

NOW = datetime(2026, 3, 4, 13, 53, 0).timestamp()  # local time, as the line shows it


def test_the_line_says_how_long_and_at_what_local_time() -> None:
    assert expected_start_line(NOW + 12 * 60 + 30, NOW) == "expected start: in 12 min (14:05)"
    assert expected_start_line(NOW + 42, NOW) == "expected start: in 42 s (13:53)"
    assert expected_start_line(NOW + 3 * 3600 + 5 * 60, NOW) == "expected start: in 3 h 5 min (16:58)"
    assert expected_start_line(NOW + 2 * 86400 + 4 * 3600, NOW) == "expected start: in 2 d 4 h (2026-03-06 17:53)"
    assert expected_start_line(NOW - 5, NOW) == "expected start: now (13:52)"
    assert expected_start_line(None, NOW).startswith("expected start: unknown")


def test_job_shows_the_expected_start_of_a_pending_job_only(tmp_path: Path) -> None:
    """No host has joined: nothing can say when the job starts, and the line says so (never a made-up time)."""
    with cli_server(tmp_path) as url:
        token = tenant_token(url, "team-a")
        code, out, err = run(url, token, "submit", "--gpus", "2", "--", "python", "-c", "1")
        assert code == 0, err
        job_id = out.split()[0]
        code, out, err = run(url, token, "job", job_id)
        assert code == 0, err
        assert "expected start: unknown" in out
        assert run(url, token, "cancel", job_id)[0] == 0
        code, out, _ = run(url, token, "job", job_id)
        assert code == 0 and "cancelled" in out and "expected start" not in out
