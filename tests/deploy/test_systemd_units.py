"""The systemd units in deploy/systemd as systemd itself reads them (``systemd-analyze``, offline: no systemd
runs as PID 1 on the build machines).

Invariants: both units load without a single warning (an unknown or misspelt key is only a warning to
systemd, so the test refuses any output), with ``gpupool`` where ExecStart says (here: this environment's);
the server's sandbox keeps its exposure score at most 2.0 ("OK"); the agent's is reported, not bounded, since
it keeps root and the host on purpose (the unit says what it keeps).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
SERVER_MAX_EXPOSURE = 2.0


def _installed(tmp_path: Path, name: str) -> Path:
    """The unit as an operator installs it, with ExecStart pointing at this environment's gpupool."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: install Debian's systemd package (.ci/run does)"
    gpupool = Path(sys.executable).parent / "gpupool"
    assert gpupool.exists(), gpupool
    text = (UNITS / name).read_text().replace("/usr/local/bin/gpupool", str(gpupool))
    unit = tmp_path / name
    unit.write_text(text)
    return unit


@pytest.mark.parametrize("name", ["gpupool-server.service", "gpupool-agent.service"])
def test_unit_verifies_without_a_warning(tmp_path: Path, name: str) -> None:
    unit = _installed(tmp_path, name)
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout + r.stderr) == (0, ""), r.stdout + r.stderr


def _exposure(unit: Path) -> float:
    r = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
    assert r.returncode == 0 and m is not None, r.stdout + r.stderr
    return float(m.group(1))


def test_the_server_sandbox_scores_ok(tmp_path: Path) -> None:
    assert _exposure(_installed(tmp_path, "gpupool-server.service")) <= SERVER_MAX_EXPOSURE


def test_a_misspelt_key_is_caught(tmp_path: Path) -> None:
    # The check above must be able to fail: systemd only warns about a key it does not know.
    unit = _installed(tmp_path, "gpupool-agent.service")
    unit.write_text(unit.read_text().replace("ProtectSystem=full", "ProtectSytem=full"))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "Unknown key" in r.stderr and "ProtectSytem" in r.stderr
