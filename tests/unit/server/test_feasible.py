"""The submit check's pure rule (``server.feasible.never_runs``): which jobs can never run on the registered
nodes and defined pools, and why; nothing is refused before a node has registered."""

from __future__ import annotations

import threading

import pytest

from gpupool.domain.errors import GpupoolError
from gpupool.domain.events import HealthGrade
from gpupool.domain.jobs import GpuShare, JobSpec, Scaling
from gpupool.domain.states import NodeState
from gpupool.server.feasible import SubmitCheck, UnschedulableError, facts, never_runs
from gpupool.server.labels import NoMatchingNodesError
from gpupool.store.records import NodeRecord


def node(name: str, gpus: int, model: str = "H100", **labels: str) -> NodeRecord:
    return NodeRecord(name, NodeState.LOST, model, gpus, tuple(labels.items()), (HealthGrade.OK,) * gpus, None, 1)


NODES = [node("a", 8, zone="x"), node("b", 8, zone="y"), node("c", 4, "A100", zone="x")]


def why(job: JobSpec, nodes: list[NodeRecord] = NODES, pools: tuple[str, ...] = ()) -> str | None:
    err = never_runs(job, facts(nodes, pools))
    return None if err is None else f"{err.code}: {err}"


def test_nothing_is_refused_before_a_node_registers_unless_it_asks_for_labels() -> None:
    assert why(JobSpec("j", tasks=99, gpus_per_task=8), []) is None
    assert (why(JobSpec("j", node_selector=(("zone", "x"),)), []) or "").startswith("NO_MATCHING_NODES")


def test_gpus_are_counted_over_every_registered_node_whatever_its_state() -> None:
    assert why(JobSpec("j", tasks=2, gpus_per_task=8)) is None  # a and b, though lost
    assert "room for 2 such task(s)" in (why(JobSpec("j", tasks=3, gpus_per_task=8)) or "")
    assert "the largest registered node has 8" in (why(JobSpec("j", gpus_per_task=16)) or "")
    assert why(JobSpec("j", tasks=5, gpus_per_task=4)) is None  # 2 + 2 + 1 tasks of 4
    elastic = JobSpec("j", tasks=6, gpus_per_task=8, min_tasks=2, scaling=Scaling.LINEAR)
    assert why(elastic) is None
    assert why(JobSpec("j", tasks=64, share=GpuShare(250, 0))) is None


def test_models_and_labels_narrow_the_nodes_counted() -> None:
    assert "the 1 registered node(s) with the requested" in (
        why(JobSpec("j", tasks=2, gpus_per_task=4, gpu_models=("A100",))) or ""
    )
    refused = why(JobSpec("j", gpu_models=("B200",))) or ""
    assert refused.startswith("NO_MATCHING_NODES") and "GPU models on nodes: A100, H100" in refused
    assert why(JobSpec("j", tasks=2, gpus_per_task=8, node_selector=(("zone", "x"),))) is not None
    assert why(JobSpec("j", tasks=1, gpus_per_task=8, node_selector=(("zone", "x"),))) is None
    assert (why(JobSpec("j", node_selector=(("zone", "z"),))) or "").startswith("NO_MATCHING_NODES")


def test_a_pool_must_be_defined_once_pools_are_in_use() -> None:
    assert why(JobSpec("j", pool="anything")) is None
    refused = why(JobSpec("j", pool="anything"), pools=("training", "inference")) or ""
    assert refused == "UNKNOWN_POOL: pool 'anything' is not defined; the defined pools: inference, training"
    assert why(JobSpec("j", pool="training"), pools=("training",)) is None


class _SlowReads:
    """The store's node read, held open until ``go`` is set; counts the reads."""

    def __init__(self) -> None:
        self.reads, self.go, self.entered = 0, threading.Event(), threading.Event()

    def __call__(self) -> list[NodeRecord]:
        self.reads += 1
        self.entered.set()
        assert self.go.wait(30)
        return NODES


def _checks(fits: SubmitCheck, jobs: list[JobSpec]) -> tuple[list[threading.Thread], list[GpupoolError | None]]:
    out: list[GpupoolError | None] = []

    def one(job: JobSpec) -> None:
        try:
            fits.check(job)
            out.append(None)
        except GpupoolError as e:
            out.append(e)

    threads = [threading.Thread(target=one, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    return threads, out


def test_submits_that_find_the_facts_stale_together_share_one_read_and_a_refusal_reads_its_own() -> None:
    reads, clock = _SlowReads(), [0.0]
    fits = SubmitCheck(reads, reads, lambda: (), 1.0, lambda: clock[0])
    threads, out = _checks(fits, [JobSpec(f"j{i}") for i in range(5)])
    assert reads.entered.wait(30)
    reads.go.set()
    for t in threads:
        t.join(30)
    assert out == [None] * 5 and reads.reads == 1  # one read for the five
    with pytest.raises(UnschedulableError, match="largest registered node has 8"):
        fits.check(JobSpec("big", gpus_per_task=16))  # refused on a read of its own, not on the kept facts
    assert reads.reads == 2


def test_a_read_begun_before_an_invalidation_is_not_kept() -> None:
    reads, clock = _SlowReads(), [0.0]
    fits = SubmitCheck(reads, reads, lambda: (), 1.0, lambda: clock[0])
    threads, out = _checks(fits, [JobSpec("j")])
    assert reads.entered.wait(30)
    fits.invalidate()  # a node removed while the read was under way
    reads.go.set()
    threads[0].join(30)
    assert out == [None] and not fits.cached_ok(JobSpec("j"))


class _Reads:
    """A node read that counts its calls and returns what ``nodes`` holds then."""

    def __init__(self, nodes: list[NodeRecord]) -> None:
        self.nodes, self.reads = nodes, 0

    def __call__(self) -> list[NodeRecord]:
        self.reads += 1
        return list(self.nodes)


def test_the_host_caches_nodes_let_a_job_in_and_only_the_stores_refuse_one() -> None:
    """A node registered a moment ago on another replica is in the store, not yet in this host cache: a job only
    it can hold is let in on the store's read; a job nothing can hold is refused on the store's read too."""
    recent, fresh, clock = _Reads(NODES), _Reads([*NODES, node("d", 16)]), [0.0]
    fits = SubmitCheck(recent, fresh, lambda: (), 1.0, lambda: clock[0])
    fits.check(JobSpec("small"))
    assert (recent.reads, fresh.reads) == (1, 0)  # let in by the host cache's nodes: no store read
    fits.check(JobSpec("big", gpus_per_task=16))
    assert (recent.reads, fresh.reads) == (1, 1)  # the cached facts refuse it: judged on the store's read
    with pytest.raises(UnschedulableError, match="largest registered node has 16"):
        fits.check(JobSpec("huge", gpus_per_task=32))
    assert fresh.reads == 2


def test_the_facts_of_an_unchanged_node_record_are_made_once() -> None:
    """The host cache hands back the same record for a node whose row did not change: its facts are kept; a
    changed node's new record gets new facts (its labels count at once)."""
    nodes = list(NODES)
    recent, clock = _Reads(nodes), [0.0]
    fits = SubmitCheck(recent, recent, lambda: (), 1.0, lambda: clock[0])
    first = fits._read(fresh=False)
    recent.nodes[2] = node("c", 4, "A100", zone="z")
    clock[0] = 2.0
    second = fits._read(fresh=False)
    assert [a is b for a, b in zip(first.nodes, second.nodes, strict=True)] == [True, True, False]
    assert second.nodes[2].labels == frozenset({("zone", "z")})
    with pytest.raises(NoMatchingNodesError):
        fits.check(JobSpec("x", node_selector=(("zone", "q"),)))
    fits.check(JobSpec("x", node_selector=(("zone", "z"),)))  # the changed node's new label lets it in


def test_after_a_removal_here_the_next_check_reads_the_store_not_the_host_cache() -> None:
    """A label removed on this replica may still show in the host cache: until a fresh read, jobs are judged on
    the store's nodes, so one only the removed label matched is refused."""
    recent, fresh, clock = _Reads(NODES), _Reads([node("a", 8), node("b", 8), node("c", 4, "A100")]), [0.0]
    fits = SubmitCheck(recent, fresh, lambda: (), 1.0, lambda: clock[0])
    fits.check(JobSpec("x", node_selector=(("zone", "x"),)))
    assert (recent.reads, fresh.reads) == (1, 0)
    fits.invalidate()  # zone removed from every node here
    with pytest.raises(NoMatchingNodesError):
        fits.check(JobSpec("x", node_selector=(("zone", "x"),)))
    assert (recent.reads, fresh.reads) == (1, 1)
    clock[0] = 2.0  # past the ttl, after the fresh read: the host cache serves again
    fits.check(JobSpec("small"))
    assert (recent.reads, fresh.reads) == (2, 1)
