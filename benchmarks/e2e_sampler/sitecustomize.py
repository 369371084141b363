"""cProfile on every thread of the server under ``e2e_throughput.py --profile`` (py-spy is not on the machine).

Python imports ``sitecustomize`` at start-up from the path: the benchmark puts this directory on the server's
PYTHONPATH with E2E_PROFILE_OUT set. cProfile alone sees only the thread that enabled it, and the server's work
is on its scheduling loop, group-commit writer, beat workers and thread pool: so every thread's ``run`` is
wrapped to profile itself (on the thread's CPU clock, not the wall: the machine is shared), the main thread
(the event loop) included. Every 2 s a daemon thread merges the profilers' entries (``getstats``, read under
the GIL) into E2E_PROFILE_OUT as JSON: function -> [calls, own CPU s, cumulative CPU s], so the benchmark can
take the difference over its measured window.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import threading
import time

_profiles: list[cProfile.Profile] = []
# The garbage collector's passes by generation: [collections, CPU s of the thread that ran them, objects
# collected], written beside the functions as ``gc:gen0``.. (a pass runs inside whatever function allocated last,
# so cProfile spreads its cost over them; this names it).
_gc: dict[str, list[float]] = {}
_gc_started: list[float] = []


def _label(code: object) -> str:
    if isinstance(code, str):
        return code  # a C function
    c = code  # a code object
    return f"{os.path.basename(c.co_filename)}:{c.co_firstlineno}({c.co_name})"  # type: ignore[attr-defined]


def _dump(path: str) -> None:
    while True:
        time.sleep(2.0)
        merged: dict[str, list[float]] = {}
        for prof in list(_profiles):
            for e in prof.getstats():
                row = merged.setdefault(_label(e.code), [0, 0.0, 0.0])
                row[0] += e.callcount
                row[1] += e.inlinetime
                row[2] += e.totaltime
        for gen, row in list(_gc.items()):
            merged[gen] = [row[0], row[1], row[1]]
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(merged, f)
        os.replace(tmp, path)


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_started[:] = [time.thread_time()]
    elif _gc_started:
        row = _gc.setdefault(f"gc:gen{info['generation']}", [0, 0.0])
        row[0] += 1
        row[1] += time.thread_time() - _gc_started[0]


def _install(path: str) -> None:
    gc.callbacks.append(_on_gc)
    # Started before ``run`` is wrapped: its own reads stay out of the profile.
    threading.Thread(target=_dump, args=(path,), daemon=True, name="e2e-profile").start()
    # ``_bootstrap_inner``, not ``run``: a subclass that overrides ``run`` (anyio's worker threads: the beat
    # workers and the thread pool) would bypass a wrapped ``Thread.run`` and its CPU would go unseen.
    original = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def bootstrap(self: threading.Thread) -> None:
        prof = cProfile.Profile(time.thread_time)
        _profiles.append(prof)
        prof.enable()
        try:
            original(self)
        finally:
            prof.disable()

    threading.Thread._bootstrap_inner = bootstrap  # type: ignore[attr-defined]
    main = cProfile.Profile(time.thread_time)
    _profiles.append(main)
    main.enable()


if os.environ.get("E2E_PROFILE_OUT"):
    _install(os.environ["E2E_PROFILE_OUT"])
