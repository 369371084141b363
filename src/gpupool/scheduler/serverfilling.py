"""ServerFilling (Grosof, Scully, Harchol-Balter, Scheller-Wolf, SIGMETRICS'22 and '23): which jobs to serve.

For multiserver jobs whose server needs are powers of two dividing the server count ``k`` (GPUs here): rank
every job in the system by a priority (SRPT: remaining size; Gittins: the index of attained service), take
the minimal prefix of that ranking whose total need is at least ``k``, and serve the jobs of that prefix,
largest need first. With needs that are powers of two dividing ``k``, the largest-first prefix fills all
``k`` servers exactly (each need divides what the larger ones before it left), so no server idles while a
job waits, and the best-ranked jobs are always served.

This module is the pure choice; the policies that rank (``sf-srpt``, ``sf-gittins``) are in
``scheduler.policies``, and placement on hosts is the placer's: a running job keeps its GPUs, so on a
cluster of several hosts a large job of the prefix may need preemptions (of jobs outside the prefix) before
it fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Filling:
    """``served``: the minimal prefix; ``order``: every job, the prefix first (largest need first, then by
    rank), then the others by rank."""

    served: frozenset[str]
    order: tuple[str, ...]


def server_filling(ranked: Sequence[tuple[str, int]], servers: int) -> Filling:
    """``ranked``: (job id, servers it needs), best priority first; ``servers``: ``k``. A job that needs no
    whole server (a fractional GPU) counts as needing one. When the whole queue needs fewer than ``k``, every
    job is in the prefix."""
    need = 0
    cut = len(ranked)
    for i, (_, n) in enumerate(ranked):
        need += max(1, n)
        if need >= servers:
            cut = i + 1
            break
    head = sorted(range(cut), key=lambda i: (-max(1, ranked[i][1]), i))  # stable: rank breaks ties
    served = tuple(ranked[i][0] for i in head)
    return Filling(frozenset(served), served + tuple(jid for jid, _ in ranked[cut:]))
