"""The package as users install it: ``python -m build`` makes a wheel and an sdist; each installs into a fresh
virtual environment (the tested versions of constraints.txt, from pip's cache or PyPI) and works there.

Invariants: ``gpupool[agent]`` pulls no web framework, database or plotting library, and its agent joins a
real server; the base install (from the sdist) is the client alone, and a command that needs an extra says
which, in one line with exit code 2. One build and two environments for the whole session (~1 min of CPU).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool import __version__
from gpupool.fabric import jsonio
from gpupool.fabric.generators import leaf_spine
from procs import until

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
ADMIN = "packaging-admin"
# What a GPU node must not carry: the server's web framework, database layer and drivers, and plotting.
NOT_ON_A_NODE = {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "psycopg-binary"}
NOT_ON_A_NODE |= {"prometheus-client", "matplotlib", "pillow", "fonttools", "python-json-logger"}


def run(*argv: str | Path, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``argv`` without the caller's PYTHONPATH: a fresh environment must find only what was installed in it
    (a source tree on the path would hide a missing file or dependency, and confuses pip's view of it)."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build per test session, shared by the xdist workers (whose temp folders share a parent)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = root / "dist"
    with (root / "dist.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "built").exists():
            r = run(PY, "-m", "build", "--outdir", out, REPO)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            (out / "built").touch()
    return out


def venv_with(root: Path, requirement: str) -> Path:
    """A fresh virtual environment with ``requirement`` installed at the tested versions; its bin folder."""
    # No pip of its own (bootstrapping one costs seconds): this environment's pip installs into it.
    assert run(PY, "-m", "venv", "--without-pip", root).returncode == 0
    pip = [PY, "-m", "pip", "--python", root / "bin" / "python", "install", "-q", "--disable-pip-version-check"]
    r = run(*pip, "-c", REPO / "constraints.txt", requirement)
    assert r.returncode == 0, r.stderr[-3000:]
    return root / "bin"


def installed(bin_dir: Path) -> set[str]:
    r = run(PY, "-m", "pip", "--python", bin_dir / "python", "list", "--format=json", "--disable-pip-version-check")
    return {d["name"].lower().replace("_", "-") for d in json.loads(r.stdout)}


def test_build_makes_a_wheel_and_an_sdist_with_the_data_files(dist: Path) -> None:
    (wheel,) = dist.glob(f"gpupool-{__version__}-py3-none-any.whl")
    (sdist,) = dist.glob(f"gpupool-{__version__}.tar.gz")
    assert wheel.stat().st_size > 0
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "src/gpupool/py.typed", "src/gpupool/cli/main.py"):
        assert needed in names, needed
    assert any(n.startswith("src/gpupool/store/migrations/versions/") for n in names)
    assert any(n.startswith("src/gpupool/web/static/") for n in names)
    # /docs is Swagger UI from the package (server/openapi.py): its two files and their licences in the wheel
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = set(whl.namelist())
    for f in ("swagger-ui-bundle.js", "swagger-ui.css", "swagger-ui.LICENSE", "swagger-ui-bundle.js.LICENSE.txt"):
        assert f"gpupool/web/static/vendor/{f}" in in_wheel, f


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, httpx.Client]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GPUPOOL_DATA_DIR=str(tmp_path / "data"), GPUPOOL_ADMIN_TOKEN=ADMIN)
    env.update(GPUPOOL_PORT=str(port), GPUPOOL_LOG_LEVEL="warning", GPUPOOL_HEARTBEAT_INTERVAL_S="0.2")
    proc = subprocess.Popen([PY, "-m", "gpupool", "server"], env=env)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"})

    def healthy() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return http.get("/healthz").status_code == 200
        return False

    try:
        until(healthy, 60, "server up")
        yield f"http://127.0.0.1:{port}", http
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        http.close()


def test_the_agent_extra_is_lean_and_its_agent_joins_a_server(
    dist: Path, tmp_path: Path, server: tuple[str, httpx.Client]
) -> None:
    (wheel,) = dist.glob("*.whl")
    bin_dir = venv_with(tmp_path / "venv", f"gpupool[agent] @ {wheel.as_uri()}")
    dists = installed(bin_dir)
    assert {"gpupool", "numpy", "nvidia-ml-py", "httpx", "pydantic"} <= dists
    assert dists & NOT_ON_A_NODE == set(), sorted(dists)

    gpupool = bin_dir / "gpupool"
    assert run(gpupool, "--version").stdout.strip() == __version__
    r = run(gpupool, "server")
    assert r.returncode == 2 and r.stderr.strip().endswith("pip install 'gpupool[server]'"), r.stderr
    assert r.stderr.count("\n") == 1

    url, http = server
    fabric = leaf_spine(leaves=1, spines=1, hosts_per_leaf=1, gpus_per_host=8)
    fabric_path = tmp_path / "fabric.json"
    jsonio.save(fabric, fabric_path)
    join = http.post("/v1/join-tokens", json={}).json()["token"]
    argv = [str(gpupool), "agent", "--server", url, "--join-token", join, "--host", fabric.hosts[0].name]
    argv += ["--state-dir", str(tmp_path / "agent"), "--emulate", "--fabric", str(fabric_path)]
    agent = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        until(lambda: [n["state"] for n in http.get("/v1/nodes").json()["nodes"]] == ["up"], 60, "agent joined")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=15)


def test_the_sdist_installs_the_client_alone_and_names_missing_extras(dist: Path, tmp_path: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    bin_dir = venv_with(tmp_path / "venv", str(sdist))
    dists = installed(bin_dir)
    assert {"gpupool", "httpx", "typer", "rich", "pydantic", "pyyaml"} <= dists
    assert dists & (NOT_ON_A_NODE | {"numpy", "nvidia-ml-py"}) == set(), sorted(dists)

    gpupool = bin_dir / "gpupool"
    with socket.socket() as s:  # nothing listens there once the block ends
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GPUPOOL_SERVER=f"http://127.0.0.1:{port}", GPUPOOL_TOKEN="t")
    r = run(gpupool, "jobs", env=env)
    assert r.returncode == 2 and r.stderr.startswith("error:") and r.stderr.count("\n") == 1, r.stderr
    for argv, extra in (
        (["fabric", "show", "f.json"], "sim"),
        (["agent", "--server", "x", "--join-token", "t"], "agent"),
    ):
        r = run(gpupool, *argv)
        assert r.returncode == 2 and f"pip install 'gpupool[{extra}]'" in r.stderr, r.stderr
