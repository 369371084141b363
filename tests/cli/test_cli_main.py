"""The ``gpupool`` entry point: its one command list matches the commands, a command imports only what it
uses (a real process, its modules listed at exit), and a missing extra is named in one line, exit 2."""

from __future__ import annotations

import inspect
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from gpupool import __version__
from gpupool.cli.errors import run_guarded
from gpupool.cli.main import COMMANDS, build

# What no client command may load: the server, agent, simulator and fabric code and their libraries.
HEAVY = ("gpupool.server", "gpupool.agent", "gpupool.sim", "gpupool.fabric", "gpupool.scheduler", "gpupool.store")
HEAVY_LIBS = ("numpy", "fastapi", "uvicorn", "sqlalchemy", "alembic", "matplotlib", "pynvml", "psycopg")


def test_every_listed_command_loads_and_its_help_is_the_commands_own() -> None:
    import importlib

    for name, entry in COMMANDS.items():
        target = getattr(importlib.import_module(entry.module), entry.attr)
        own = target.info.help if isinstance(target, typer.Typer) else inspect.getdoc(target)
        assert own is not None, name
        assert entry.help == own.split("\n\n")[0], f"COMMANDS[{name!r}].help differs from the command's own help"
        assert isinstance(build([name]), typer.Typer)


def _modules_after(tmp_path: Path, *argv: str) -> tuple[int, set[str], str]:
    """Run ``gpupool ARGV`` in a fresh interpreter and return the modules it had imported when it exited."""
    out = tmp_path / "modules.txt"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(out)!r}, 'w').write('\\n'.join(sorted(sys.modules))))\n"
        f"sys.argv = ['gpupool', *{list(argv)!r}]\n"
        "from gpupool.cli.start import main\n"  # the console script's entry point (pyproject.toml)
        "main()\n"
    )
    with socket.socket() as s:  # a port that refuses connections once the block ends
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GPUPOOL_SERVER": f"http://127.0.0.1:{port}", "GPUPOOL_TOKEN": "t"}
    env["GPUPOOL_CONFIG"] = "/nonexistent"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    return r.returncode, set(out.read_text().split()), r.stdout + r.stderr


def _loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_version_and_help_load_no_command(tmp_path: Path) -> None:
    code, modules, out = _modules_after(tmp_path, "--version")
    assert (code, out.strip()) == (0, __version__)
    assert _loaded(modules, (*HEAVY, *HEAVY_LIBS, "gpupool.client", "httpx", "pydantic", "rich")) == []
    assert _loaded(modules, ("typer", "click", "gpupool.cli.main")) == []  # answered before the framework loads
    code, modules, out = _modules_after(tmp_path, "--help")
    assert code == 0 and "jobs" in out and "server" in out and "sim" in out
    assert _loaded(modules, (*HEAVY, *HEAVY_LIBS, "gpupool.client", "httpx", "pydantic")) == []


def test_jobs_loads_the_client_only(tmp_path: Path) -> None:
    code, modules, out = _modules_after(tmp_path, "jobs")
    assert code == 2 and "error" in out  # nothing listens on that port: one line, exit 2
    assert "gpupool.client" in modules
    assert _loaded(modules, (*HEAVY, *HEAVY_LIBS)) == []


@pytest.mark.parametrize(
    ("module", "extra", "wanted"),
    [("fastapi", "", "server"), ("matplotlib", "sim", "draw"), ("numpy", "sim", "sim"), ("pynvml", "", "agent")],
)
def test_a_missing_extra_is_named(module: str, extra: str, wanted: str, capsys: pytest.CaptureFixture[str]) -> None:
    def run() -> None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)

    assert run_guarded(run, extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"pip install 'gpupool[{wanted}]'" in err and module in err


def test_a_missing_gpupool_module_is_a_bug_not_an_extra() -> None:
    def run() -> None:
        raise ModuleNotFoundError("No module named 'gpupool.nope'", name="gpupool.nope")

    with pytest.raises(ModuleNotFoundError):
        run_guarded(run, "server")
