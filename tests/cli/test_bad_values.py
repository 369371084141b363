"""Every command, every bad value: zero, negative, huge, not-a-number, non-UTF-8 files, missing folders, folders
where files go, unreachable servers and databases.

The invariant, for each case: exit code 2, one line on stderr that starts ``error:`` and names the problem
(the option, the file or the setting), no traceback, within a bounded time (no hang: an impossible size is
refused before it is built), and nothing written (the working folder and the server's jobs unchanged).

The hand-picked cases (the issue's thirteen tracebacks, the values that hung or exited 0) run as real
``gpupool`` processes. The drawn ones (hypothesis: numbers past every bound, bytes that are not UTF-8) run
the same entry point in this process, where a hundred examples cost what three processes would.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from gpupool.cli.errors import run_guarded
from gpupool.cli.main import COMMANDS, build
from gpupool.fabric import jsonio
from gpupool.fabric.generators import superpod
from procs import ADMIN, PG, ServerProc, free_port

DEADLINE_S = 30  # a case that takes longer hangs: the refusal of an impossible value is immediate


@dataclass(frozen=True)
class Files:
    root: Path  # the working folder of every case; its contents must not change
    fabric: Path  # a valid fabric (one SuperPOD SU)
    trace: Path  # a valid itp trace
    binary: Path  # bytes that are not UTF-8
    folder: Path  # an empty folder
    regular: Path  # a regular file that is no folder


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("work")
    fabric = root / "fabric.json"
    jsonio.save(superpod(1), fabric)
    trace = root / "trace.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\n" + "".join(f"j{i},{i * 60},600,8\n" for i in range(8)))
    binary = root / "binary.dat"
    binary.write_bytes(b"\x00\xff\xfe\x80 not text \xc3\x28")
    (root / "folder").mkdir()
    regular = root / "regular"
    regular.write_text("a file\n")
    return Files(root, fabric, trace, binary, root / "folder", regular)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    data = tmp_path_factory.mktemp("srv")
    srv = ServerProc(f"sqlite:///{data / 'gpupool.db'}", data, data / "server.log")
    try:
        srv.token = srv.tenant_token("team")  # type: ignore[attr-defined]
        yield srv
    finally:
        srv.stop()


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time: what "nothing written" compares."""
    out = {}
    for p in sorted(root.rglob("*")):
        st_ = p.lstat()
        out[str(p.relative_to(root))] = (st_.st_size, st_.st_mtime_ns)
    return out


def job_count(srv: ServerProc) -> int:
    return len(srv.all_jobs())


def assert_refused(code: int, err: str, names: tuple[str, ...]) -> None:
    """Exit 2, one line ``error: ...`` naming one of ``names``, no traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, f"exit {code}: {err[-2000:]}"
    assert "Traceback" not in err, err[-2000:]
    assert len(lines) == 1, f"{len(lines)} lines on stderr: {err[-2000:]}"
    assert lines[0].startswith("error: "), lines[0]
    assert any(n in lines[0] for n in names), f"names none of {names}: {lines[0]}"


def run_forked(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """``gpupool ARGV`` through ``main``'s own path (``run_guarded`` over the app in non-standalone mode) in a
    forked child: a real process with its exit code and stderr, killed (with whatever it started) past
    ``DEADLINE_S``, for the cost of a fork rather than an interpreter start."""
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 99
            try:
                os.setpgid(0, 0)
                os.chdir(cwd)
                os.environ.update(env)
                os.dup2(err.fileno(), 2)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                # pytest's capture replaced sys.stdout/err with its own files: back to the real descriptors
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
                code = run_guarded(lambda: build(argv)(args=argv, prog_name="gpupool", standalone_mode=False))
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        deadline = time.monotonic() + DEADLINE_S
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"gpupool {' '.join(argv)} hung (no answer within {DEADLINE_S} s)")
            threading.Event().wait(0.005)  # poll interval, bounded by the deadline above
        err.seek(0)
        return os.waitstatus_to_exitcode(done[1]), err.read().decode("utf-8", "replace")


# -- hand-picked ---------------------------------------------------------------------------------------------
# (argv with {fabric}, {trace}, {binary}, {folder}, {regular}, {down} placeholders; what the line must name;
# whether it talks to the test's server). The issue's thirteen tracebacks come first.
CASES: list[tuple[str, tuple[str, ...], bool]] = [
    ("submit --gpus 0 -- /bin/true", ("--gpus",), True),
    ("submit --gpus -1 -- /bin/true", ("--gpus",), True),
    ("submit --tasks 99999999999999999999 -- /bin/true", ("--tasks",), True),
    ("submit -F {binary}", ("binary.dat", "UTF-8"), True),
    ("fabric import ibnetdiscover {binary} -o nope/out.json", ("-o", "nope"), False),
    ("fabric generate superpod --sus 1 -o nope/out.json", ("-o", "nope"), False),
    ("fabric draw {fabric} -o nope/out.svg", ("-o", "nope"), False),
    ("sim run --trace {trace} --format itp --gpus 16 --out {regular}", ("--out",), False),
    ("sim run --trace {trace} --format itp --gpus 16 --out /proc/nope", ("/proc/nope",), False),
    ("sim run --trace {trace} --format itp --fabric {imported} --out out", ("GPUs", "imported.json"), False),
    ("fabric export nccl {imported} dgx001", ("GPUs", "imported.json"), False),
    ("server --database-url postgresql+psycopg://postgres@127.0.0.1:{down}/test", ("database_url",), False),
    (
        "server --database-url " + PG.rsplit("/", 1)[0] + "/gpupool_no_such_db",
        ("database_url", "does not exist"),
        False,
    ),
    # impossible values that hung or exited 0
    ("fabric generate superpod --sus 100000 -o out.json", ("--sus",), False),
    ("fabric generate fat-tree --k 1000 -o out.json", ("--k",), False),
    ("fabric generate leaf-spine --leaves 1000 --spines 2 --hosts-per-leaf 1000 -o out.json", ("hosts",), False),
    ("sim run --trace {trace} --format itp --gpus 99999999999 --out out", ("--gpus",), False),
    ("sim run --trace {huge} --format itp --gpus 16 --out out", ("huge.csv:2", "GPUs"), False),
    ("demo --duration -1", ("--duration",), False),
    ("server --config {treu} --print-config", ("treu.yaml:2", "preemption"), False),
    # files: missing, a folder, not UTF-8
    ("fabric show nope.json", ("nope.json",), False),
    ("fabric show {folder}", ("folder",), False),
    ("fabric show {binary}", ("binary.dat",), False),
    ("fabric diff {fabric} {binary}", ("binary.dat",), False),
    ("fabric import slurm {binary} -o out.json", ("binary.dat",), False),
    ("fabric import labels {binary} -o out.json", ("binary.dat",), False),
    ("fabric merge {fabric} --inventory nope -o out.json", ("nope",), False),
    ("fabric generate superpod -o {folder}", ("-o", "folder"), False),
    ("fabric export slurm {binary}", ("binary.dat",), False),
    ("sim run --trace {binary} --format itp --gpus 16 --out out", ("binary.dat",), False),
    ("sim run --trace {trace} --format itp --gpus 16 --calendar {binary} --out out", ("binary.dat",), False),
    ("sim run --trace {trace} --format itp --gpus 16 --config {binary} --out out", ("binary.dat",), False),
    ("sim pack --nodes {binary} --pods {binary} --placement frag --out {regular}", ("--out",), False),
    ("sim replay {binary}", ("binary.dat", "UTF-8"), False),
    ("sim replay {folder}", ("folder", "cannot read the journal"), False),
    ("server --config {binary} --print-config", ("binary.dat",), False),
    ("agent --server http://127.0.0.1:{down} --join-token t --interval 0", ("--interval",), False),
    ("agent --server http://127.0.0.1:{down} --join-token t --emulate --fabric {binary}", ("binary.dat",), False),
    # client commands: the server's checks, a server that is down
    ("jobs --limit 0", ("limit",), True),
    ("jobs --state done", ("--state",), True),
    ("jobs --sort size", ("--sort",), True),
    ("jobs --order up", ("--order",), True),
    ("jobs -o id,nope", ("-o/--columns", "nope"), True),
    ("jobs -o ,", ("-o/--columns",), True),
    ("jobs --since yesterday-ish", ("--since",), True),
    ("jobs --until 99999-01-01", ("--until",), True),
    ("jobs --since 1e300", ("--since",), True),
    ("jobs --watch 0", ("--watch",), True),
    ("jobs --watch nan", ("--watch",), True),
    ("nodes --state gone", ("--state",), True),
    ("pools --format xml", ("--format", "xml"), True),
    ("usage --from now-5parsecs", ("--from", "parsecs"), True),
    ("logs nope --tail -1", ("tail",), True),
    ("usage --from -5", ("from",), True),
    ("job j-does-not-exist", ("j-does-not-exist",), True),
    ("jobs", ("does not answer",), False),
    ("admin tenants create team-b --weight -1", ("--weight",), True),
    # the operator's commands: flags, files, names the server does not hold
    ("admin tenants create bad/name", ("NAME",), True),
    ("admin tenants create team-b --weight nan", ("--weight",), True),
    ("admin tenants create", ("NAME",), True),
    ("admin tenants create team-b -f {admin}", ("--file", "not both"), True),
    ("admin tenants create -f {binary}", ("binary.dat", "UTF-8"), True),
    ("admin tenants create -f nope/tenants.yaml", ("nope/tenants.yaml",), True),
    ("admin tenants create -f {folder}", ("folder",), True),
    ("admin tenants create -f {badtenant}", ("badtenant.yaml:3", "tenants[0].weight"), True),
    ("admin tenants update team", ("--weight",), True),
    ("admin tenants update team --weight 0", ("--weight",), True),
    ("admin tenants update ghost --weight 2", ("ghost",), True),
    ("admin tenants delete ghost", ("ghost",), True),
    ("admin quotas list --tenant ghost", ("ghost",), True),
    ("admin quotas set team --pool p --nominal -1", ("--nominal",), True),
    ("admin quotas set team --pool p --nominal 99999999999999999999", ("--nominal",), True),
    ("admin quotas set team --pool p --nominal 1 --borrowing-limit -2", ("--borrowing-limit",), True),
    ("admin quotas set team --pool p --nominal 1 --lending-limit 1e3", ("--lending-limit",), True),
    ("admin quotas set team --nominal 1", ("--pool",), True),
    ("admin quotas set team --pool p", ("--nominal",), True),
    ("admin quotas set ghost --pool p --nominal 1", ("ghost",), True),
    ("admin quotas set -f {badquota}", ("badquota.yaml:5", "quotas[1].nominal_gpus"), True),
    ("admin quotas set -f {admin}", ("admin.yaml", "no quotas:"), True),
    ("admin quotas delete team --pool nope", ("no quota",), True),
    ("admin pools set .hidden", ("NAME",), True),
    ("admin pools set p --calendar {binary}", ("binary.dat", "UTF-8"), True),
    ("admin pools set p --calendar {badcal}", ("badcal.toml:5", "share"), True),
    ("admin pools set -f {badpools}", ("badpools.yaml:1", "unknown section"), True),
    ("admin pools set -f {badpoolcal}", ("badpoolcal.yaml:3", "time zone"), True),
    ("admin pools delete ghost", ("ghost",), True),
    ("admin calendars show ghost", ("ghost",), True),
    ("admin calendars set ghost {calendar}", ("ghost",), True),
    ("admin calendars set p {badcal}", ("badcal.toml:5",), True),
    ("admin calendars clear ghost", ("ghost",), True),
    ("admin calendars check {binary}", ("binary.dat", "UTF-8"), False),
    ("admin calendars check nope.toml", ("nope.toml",), False),
    ("admin calendars check {calendar} --at yesterday-ish", ("--at",), False),
    ("admin calendars now ghost", ("ghost",), True),
    ("admin calendars now ghost --at 2026-13-01", ("--at",), True),
    ("admin apply -f {badquota}", ("badquota.yaml:5",), True),
    ("admin apply -f {calendar}", ("calendar.toml",), True),
    ("admin apply", ("--file",), True),
    # batch scripts, accounting, job files
    ("sbatch {binary}", ("binary.dat", "UTF-8"), True),
    ("sbatch {folder}", ("folder", "cannot read the batch script"), True),
    ("sbatch {trace}", ("trace.csv:1", "#!"), True),
    ("sbatch", ("give the batch script",), True),
    ("acct --since yesterday-ish", ("--since",), True),
    ("acct --until now-5parsecs", ("--until", "parsecs"), True),
    ("acct statement --month 2026-13", ("2026-13",), True),
    ("spec check {binary}", ("binary.dat", "UTF-8"), False),
    ("spec check {folder}", ("folder",), False),
]


def _fill(argv: str, files: Files, down: int) -> list[str]:
    extra = files.root / "imported.json"
    if not extra.exists():  # an import knows HCAs, not GPUs
        src = Path(__file__).parent.parent / "data/ibnetdiscover/dgx-h100-ndr-superpod-qm9701-leaf-spine.txt"
        subprocess.run([sys.executable, "-m", "gpupool", "fabric", "import", "ibnetdiscover", str(src), "-o", str(extra)],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
    huge = files.root / "huge.csv"
    if not huge.exists():
        huge.write_text("job_id,submission_time,duration,num_gpu\nj0,0,100,1e20\n")
    treu = files.root / "treu.yaml"
    if not treu.exists():
        treu.write_text("scheduler:\n  preemption: treu\n")
    for name, text in ADMIN_FILES.items():
        if not (files.root / name).exists():
            (files.root / name).write_text(text)
    values = {"fabric": files.fabric, "trace": files.trace, "binary": files.binary, "folder": files.folder,
              "regular": files.regular, "imported": extra, "huge": huge, "treu": treu, "down": down,
              **{n.split(".")[0]: files.root / n for n in ADMIN_FILES}}  # fmt: skip
    return [w.format(**values) for w in argv.split()]


# The operator's files, good and bad (each bad one's fault on the line its case names).
ADMIN_FILES = {
    "admin.yaml": "tenants:\n  - name: team\n",
    "badtenant.yaml": "tenants:\n  - name: t1\n    weight: -3\n",
    "badquota.yaml": "quotas:\n  - {tenant: team, pool: p, nominal_gpus: 1}\n  - tenant: team\n    pool: p\n"
    "    nominal_gpus: -1\n",
    "badpools.yaml": "pool:\n  - name: p\n",
    "badpoolcal.yaml": 'pools:\n  - name: p\n    calendar_toml: |\n      timezone = "Mars/Olympus"\n',
    "badcal.toml": 'timezone = "UTC"\n[[pool]]\nname = "x"\nsus = [1]\nshare = 1.5\n',
    "calendar.toml": 'timezone = "UTC"\n',
}

ISSUE_TRACEBACKS = 13  # the first CASES run as `python -m gpupool`, the entry point a user runs


@pytest.mark.parametrize(
    ("n", "argv", "names", "talks"), [(n, *c) for n, c in enumerate(CASES)], ids=[c[0][:48] for c in CASES]
)
def test_a_bad_value_is_one_line_and_exit_2(
    n: int, argv: str, names: tuple[str, ...], talks: bool, files: Files, server: ServerProc, preloaded: None
) -> None:
    down = free_port()  # nothing listens there
    args = _fill(argv, files, down)
    before, jobs_before = tree(files.root), job_count(server)
    token = ADMIN if argv.startswith("admin") else server.token  # type: ignore[attr-defined]
    env = {"GPUPOOL_SERVER": server.base if talks else f"http://127.0.0.1:{down}", "GPUPOOL_TOKEN": token,
           "GPUPOOL_CONFIG": "/nonexistent", "GPUPOOL_ADMIN_TOKEN": ADMIN,
           "GPUPOOL_DATA_DIR": str(files.root / "folder")}  # fmt: skip
    if n < ISSUE_TRACEBACKS:
        try:
            r = subprocess.run([sys.executable, "-m", "gpupool", *args], capture_output=True, text=True,
                               env={**os.environ, **env}, cwd=files.root, timeout=DEADLINE_S)  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"gpupool {argv} hung (no answer within {DEADLINE_S} s)")
        code, err = r.returncode, r.stderr
    else:
        code, err = run_forked(args, env, files.root)
    assert_refused(code, err, names)
    assert tree(files.root) == before, "the command wrote something"
    assert job_count(server) == jobs_before, "the command stored a job"


def test_every_command_has_a_case() -> None:
    """A new command comes with its bad values here (or in the drawn cases below)."""
    covered = {c[0].split()[0] for c in CASES} | {d[0].split()[0] for d in DRAWN}
    missing = sorted(set(COMMANDS) - covered - {"cancel", "drain", "undrain", "label"})
    assert missing == [], f"commands without a bad-value case: {missing}"


# -- drawn -----------------------------------------------------------------------------------------------------
# (argv template with {bad}, the kind of bound, what the line must name). Kinds: "count" takes 1 up to a size
# that can be built, "positive" any number >= 1, "nonneg" 0 up to a bound, "seconds" a positive finite number
# up to a bound, "port" 0..65535; each draws values past its bounds.
DRAWN: list[tuple[str, str, tuple[str, ...]]] = [
    ("fabric generate superpod --sus {bad} -o out.json", "count", ("--sus",)),
    ("fabric generate fat-tree --k {bad} -o out.json", "count", ("--k", "fat-tree")),
    ("fabric generate fat-tree --gpus-per-host {bad} -o out.json", "nonneg", ("--gpus-per-host",)),
    ("fabric generate leaf-spine --leaves {bad} --spines 2 --hosts-per-leaf 4 -o out.json", "count", ("--leaves",)),
    ("fabric generate leaf-spine --leaves 2 --spines {bad} --hosts-per-leaf 4 -o out.json", "count", ("--spines",)),
    (
        "fabric generate leaf-spine --leaves 2 --spines 2 --hosts-per-leaf {bad} -o out.json",
        "count",
        ("--hosts-per-leaf",),
    ),
    ("fabric merge {fabric} --gpus-per-host {bad} --gpu-model H100 -o out.json", "count", ("--gpus-per-host",)),
    ("sim run --trace {trace} --format itp --gpus {bad} --out out", "count", ("--gpus",)),
    ("sim run --trace {trace} --format itp --gpus 16 --gpus-per-host {bad} --out out", "count", ("--gpus-per-host",)),
    ("sim run --trace {trace} --format itp --gpus 16 --limit {bad} --out out", "positive", ("--limit",)),
    ("sim run --trace {trace} --format itp --gpus 16 --max-lost-s {bad} --out out", "seconds", ("--max-lost-s",)),
    (
        "sim run --trace {trace} --format itp --gpus 16 --launch-latency {bad} --out out",
        "seconds",
        ("--launch-latency",),
    ),
    (
        "sim compare --trace {trace} --format itp --gpus 16 --policies fifo --placements topology --exit-latency {bad}"
        " --out out",
        "seconds",
        ("--exit-latency",),
    ),
    ("sim pack --nodes {trace} --pods {trace} --placement frag --tune {bad}", "seconds", ("--tune",)),
    ("demo --duration {bad}", "seconds", ("--duration",)),
    ("demo --hosts {bad}", "count", ("--hosts",)),
    ("demo --interval {bad}", "seconds", ("--interval",)),
    ("demo --wave {bad}", "seconds", ("--wave",)),
    ("agent --server http://127.0.0.1:9 --join-token t --interval {bad}", "seconds", ("--interval",)),
    ("server --port {bad} --print-config", "port", ("--port", "port")),
    ("admin tenants create t --weight {bad}", "weight", ("--weight",)),
    ("admin tenants update t --weight {bad}", "weight", ("--weight",)),
    ("admin quotas set t --pool p --nominal {bad}", "nonneg", ("--nominal",)),
    ("admin quotas set t --pool p --nominal 1 --borrowing-limit {bad}", "nonneg", ("--borrowing-limit",)),
    ("admin quotas set t --pool p --nominal 1 --lending-limit {bad}", "nonneg", ("--lending-limit",)),
]

HUGE = 10**15
OFFLINE = {"GPUPOOL_SERVER": "http://127.0.0.1:9", "GPUPOOL_CONFIG": "/nonexistent"}


def bad_values(kind: str) -> st.SearchStrategy[str]:
    ints = st.integers(max_value=0) if kind in ("count", "positive") else st.integers(max_value=-1)
    if kind == "port":
        ints = st.integers(max_value=-1) | st.integers(min_value=65536)
    numbers = ints if kind == "positive" else ints | st.integers(min_value=HUGE, max_value=10**30)
    if kind == "weight":  # a fair-share weight: above 0, at most a million
        return (ints | st.integers(min_value=10**6 + 1, max_value=10**30)).map(str) | st.sampled_from(
            ["nan", "inf", "-inf", "1e300", "0.0", "-1e-9", "1000000.5"]
        )
    if kind == "seconds":
        numbers = numbers | st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.5, 1e300])
    return numbers.map(str)


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(DRAWN).flatmap(lambda c: st.tuples(st.just(c), bad_values(c[1]))))
def test_drawn_bad_numbers_are_refused(case: tuple[tuple[str, str, tuple[str, ...]], str], drawn_files: Files) -> None:
    (template, _kind, names), bad = case
    args = [w.format(bad=bad, fabric=drawn_files.fabric, trace=drawn_files.trace) for w in template.split()]
    note(" ".join(args))
    before = tree(drawn_files.root)
    code, err = run_forked(args, OFFLINE, drawn_files.root)
    assert_refused(code, err, names)
    assert tree(drawn_files.root) == before


# Every command that reads a file the user names, with the file's place in its argv.
READERS = [
    "fabric show {f}",
    "fabric diff {f} {f}",
    "fabric import ibnetdiscover {f} -o out.json",
    "fabric import iblinkinfo {f} -o out.json",
    "fabric import lst {f} -o out.json",
    "fabric import slurm {f} -o out.json",
    "fabric import labels {f} -o out.json",
    "fabric import ibnetdiscover {fabric} --node-name-map {f} -o out.json",
    "fabric import ibnetdiscover {fabric} --host-map {f} -o out.json",
    "fabric export json {f}",
    "fabric export slurm {f}",
    "fabric export labels {f}",
    "fabric export ibnetdiscover {f}",
    "sim run --trace {f} --format itp --gpus 16 --out out",
    "sim run --trace {f} --format philly --gpus 16 --out out",
    "sim run --trace {trace} --format itp --gpus 16 --calendar {f} --out out",
    "sim run --trace {trace} --format itp --gpus 16 --failures {f} --out out",
    "sim run --trace {trace} --format itp --fabric {f} --out out",
    "sim run --trace {trace} --format itp --gpus 16 --config {f} --out out",
    "sim pack --nodes {f} --pods {f} --placement frag",
    "submit -F {f}",
    "server --config {f} --print-config",
    "admin tenants create -f {f}",
    "admin tenants update -f {f}",
    "admin quotas set -f {f}",
    "admin pools set -f {f}",
    "admin pools set p --calendar {f}",
    "admin calendars check {f}",
    "admin calendars set p {f}",
    "admin apply -f {f}",
]


def not_utf8() -> st.SearchStrategy[bytes]:
    def bad(b: bytes) -> bool:
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    return st.binary(min_size=1, max_size=200).filter(bad)


@pytest.fixture(scope="module")
def preloaded() -> None:
    """Every command's module imported once here, so that each forked child starts with them loaded."""
    for entry in COMMANDS.values():
        importlib.import_module(entry.module)


@pytest.fixture(scope="module")
def drawn_files(tmp_path_factory: pytest.TempPathFactory, preloaded: None) -> Files:
    root = tmp_path_factory.mktemp("drawn")
    fabric = root / "fabric.json"
    jsonio.save(superpod(1), fabric)
    trace = root / "trace.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\nj0,0,600,8\n")
    return Files(root, fabric, trace, root / "bytes.bin", root, trace)


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(template=st.sampled_from(READERS), data=not_utf8())
def test_files_that_are_not_utf8_are_refused(template: str, data: bytes, drawn_files: Files) -> None:
    bad = drawn_files.root / "bytes.bin"
    bad.write_bytes(data)
    args = [w.format(f=bad, fabric=drawn_files.fabric, trace=drawn_files.trace) for w in template.split()]
    note(f"{' '.join(args)}: {data!r}")
    before = tree(drawn_files.root)
    code, err = run_forked(args, OFFLINE, drawn_files.root)
    assert_refused(code, err, ("bytes.bin",))
    assert tree(drawn_files.root) == before


def test_a_server_that_is_down_is_one_line(files: Files, preloaded: None) -> None:
    """Every client command against a port where nothing listens: one line naming the server, exit 2."""
    down = f"http://127.0.0.1:{free_port()}"
    for argv in ("jobs", "job j-1", "cancel j-1", "nodes", "drain dgx001", "undrain dgx001", "label dgx001",
                 "pools", "usage", "logs j-1", "admin tenants create t", "admin tokens create --tenant t",
                 "admin tokens list", "admin tokens revoke x", "admin join-tokens create", "admin join-tokens list",
                 "admin join-tokens revoke x", "submit -- /bin/true", "admin tenants list",
                 "admin tenants update t --weight 2", "admin tenants delete t", "admin quotas list",
                 "admin quotas set t --pool p --nominal 1", "admin quotas delete t --pool p", "admin pools list",
                 "admin pools set p", "admin pools delete p", "admin calendars show p", "admin calendars clear p",
                 "admin calendars now p"):  # fmt: skip
        code, err = run_forked(argv.split(), {"GPUPOOL_SERVER": down, "GPUPOOL_CONFIG": "/nonexistent"}, files.root)
        assert_refused(code, err, (down,))
    with pytest.raises(httpx.ConnectError):  # and it really was down
        httpx.get(down, timeout=2)
