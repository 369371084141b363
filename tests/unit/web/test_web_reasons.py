"""The dashboard says every scheduler and store sentence again from codes and parameters (reasons.json), in
English and Chinese: each pattern matches the sentences the code writes, first match the right one, and each
catalogue has the template with exactly the pattern's parameters."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from gpupool.cluster import ClusterState, FabricIndex
from gpupool.domain.events import GpuHealthChanged, HealthGrade, JobPlaced, JobStarted, JobSubmitted, NodeDrained
from gpupool.domain.jobs import Allocation, JobSpec, TaskAllocation
from gpupool.fabric.generators import leaf_spine
from gpupool.scheduler import SchedulerConfig, ScheduleRequest, schedule
from gpupool.scheduler.settings import SchedulerSettings, scheduler_config, sharing_policy
from gpupool.web.pages import load_assets

I18N = resources.files("gpupool.web") / "static" / "i18n"
PATTERNS = [(k, re.compile(p)) for k, p in json.loads((I18N / "reasons.json").read_text())["patterns"]]
_PLACEHOLDER = re.compile(r"\{(\w+)\}")

# One sentence per pattern, as the code writes it (the f-strings of scheduler/, store/ranks.py, domain/).
SAMPLES = {
    "no_host_models_labels": "no host has GPU model A100 or H100 and labels zone=a,rack=b",
    "no_host_models": "no host has GPU model NVIDIA B200",
    "no_host_labels": "no host has labels zone=a",
    "no_host_props": "no host has the requested properties",
    "task_cpu_never": "a task needs 512000 millicores and 90000 MiB; no host has that much",
    "share_mem_never": "needs 90000 MiB of GPU memory; the largest GPU has less",
    "per_task_never": "needs 16 GPUs per task; the largest host on matching hosts has 8",
    "total_never": "needs 16000 GPUs; the fabric has 8184",
    "scope_never": "needs 64 GPUs in one NVLink island; the largest has 8",
    "share_none": "needs 2 x 250 milli-GPU/4096 MiB; no GPU on matching hosts has that much free",
    "share_topology": "needs 2 x 250 milli-GPU/4096 MiB in one leaf; no such domain has room",
    "share_few": "needs 4 x 500 milli-GPU/1024 MiB; only 3 GPU(s) can take one",
    "no_capacity": "needs 1 GPU; 0 are free",
    "out_of_service_share": "needs a share of a GPU with 4096 MiB; no GPU in service on matching hosts has it "
    "(the others are on hosts lost, drained or without an agent, or marked bad)",
    "out_of_service": "needs 4 task(s) of 8 GPUs; the hosts in service have 24 GPUs, room for 3 such task(s); 40 "
    "more GPU(s) are on hosts lost, drained or without an agent, or marked bad",
    "fragmented": "needs 4 task(s) of 8 GPUs on one host each; 30 GPUs are free but hosts have room for 2 such "
    "task(s) (the best host has 8 free)",
    "cpu_memory": "needs 2 task(s) of 8 GPUs, 1000 millicores and 500 MiB; hosts with the GPUs free lack the CPU "
    "or memory (room for 1)",
    "topology": "needs 64 GPUs under one leaf; the best leaf has 40 free",
    "island": "needs 8 GPUs in one NVLink island; the best island has 6 free",
    "rail_alignment": "needs 2 task(s) of 4 GPUs with the same GPU indices free on every host; no set of hosts has them",
    "gang": "needs 32 GPUs; 40 are free on matching hosts but no domain searched could hold the gang",
    "array_limit": "array j-1a2b has 4 elements placed or running, its cap (%4)",
    "deadline_infeasible": "needs 7200 s after a launch of 0.4 s, more than is left before its deadline t=1765099000",
    "reserved": "fits now, but its 7200 s would run past the reservation of j-9 from t=1765090000",
    "waiting_for_reservation": "needs 64 GPUs; 8 are free; holds a reservation of 8 host(s) from t=1765090000 (in 600 s)",
    "preempting_signal": "signalled 2 job(s) (j-1, j-2) to checkpoint; they are preempted at t=1765090000",
    "preempting": "preempted 2 job(s) (j-1, j-2) to free 16 GPUs; placed once they are gone",
    "preempted_for": "preempted for j-7 (priority): frees 16 GPUs with j-1, j-2",
    "pool_reclaim": "pool inference holds dgx00042 since t=1765090000; grace ended",
    "cycle_limit": "not considered: this cycle placed its limit of 500 jobs first",
    "blocked": "waits behind j-3, which does not fit (strict ordering)",
    "dependency_never": "dependency never satisfied: afterok: job j-4 ended failed",
    "dependency_unknown": "dependency never satisfied: afterany: job j-5 is not known",
    "dependency": "afterok: waits for job j-6 (running)",
    "quota_none": "tenant acme has no quota in pool inference",
    "quota_model": "tenant acme uses 64 of its 64 GPUs of H100 in pool default; needs 8; may borrow 0 more",
    "quota": "tenant acme uses 60.5 of its 64 GPUs in pool default; needs 8; may borrow 3.5 more",
    "time_limit_ran": "ran 3601 s, past its time limit of 3600 s",
    "time_limit_signal": "its time limit of 3600 s ends at t=1765090000: save your work",
    "attempt": "attempt 2: rank 1 on dgx00003 exited with 137; retry 2 of 3",
    "retry": "retry 1 of 3",
    "no_retry": "no retry left (3 used)",
    "rank_lost": "rank 0 on dgx00009 was lost by its agent",
    "rank_exit_why": "rank 1 on dgx00003 exited with 1: CUDA error",
    "rank_exit": "rank 1 on dgx00003 exited with -9",
    "rank_not_launched": "rank 0 was never launched on dgx00011 (95 s after its placement)",
    "all_exited_0": "every rank exited 0",
    "all_started": "every rank started",
    "cancelled": "cancelled",
    "cancel_requested": "cancel requested",
}


def key_of(sentence: str) -> str | None:
    return next((k for k, p in PATTERNS if p.search(sentence)), None)


def test_every_pattern_has_a_sample_and_the_sample_takes_its_own_pattern() -> None:
    assert set(SAMPLES) == {k for k, _ in PATTERNS}
    assert {k: key_of(s) for k, s in SAMPLES.items()} == {k: k for k in SAMPLES}


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_each_catalogue_says_each_sentence_with_exactly_its_parameters(lang: str) -> None:
    msgs = load_assets().messages[lang]
    for key, pattern in PATTERNS:
        template = msgs[f"reason.{key}"]
        assert set(_PLACEHOLDER.findall(template)) == set(pattern.groupindex), key


def test_the_chinese_templates_carry_no_english_words() -> None:
    """Parameters aside, a Chinese sentence is Chinese: no English word but units and names of things."""
    msgs = load_assets().messages["zh-CN"]
    allowed = {"GPU", "MiB", "NVLink", "CPU", "rank", "XID", "SU", "HCA", "API", "ID", "Esc", "CSV", "CDF", "Gb", "s"}
    for key, text in msgs.items():
        if key.split(".")[0] not in ("reason", "state", "code", "event", "priority", "scope"):
            continue
        words = set(re.findall(r"[A-Za-z]+", _PLACEHOLDER.sub("", text)))
        assert words <= allowed, (key, words - allowed)


def test_the_sentences_of_a_real_cycle_are_ones_the_page_knows() -> None:
    """The scheduler itself, on a small fabric with a GPU bad and jobs that cannot all fit: every waiting job's
    sentence takes the pattern its reason code calls for."""
    fab = leaf_spine(2, 2, 4, gpus_per_host=8)  # 64 GPUs
    state = ClusterState(FabricIndex(fab))
    state.apply(GpuHealthChanged(fab.hosts[0].name, 0, HealthGrade.BAD, 0))
    state.apply(NodeDrained(fab.hosts[1].name, 0))
    pending = [
        JobSpec("j-1", 0.0, tasks=4, gpus_per_task=8),
        JobSpec("j-2", 1.0, tasks=4, gpus_per_task=8),  # 32 + 32 > 63 good GPUs
        JobSpec("j-3", 2.0, tasks=1, gpus_per_task=16),  # never: the largest host has 8
        JobSpec("j-4", 3.0, tasks=100, gpus_per_task=8),  # never: the fabric has 64
        JobSpec("j-5", 4.0, tasks=3, gpus_per_task=7),
        JobSpec("j-7", 6.0, tasks=7, gpus_per_task=8),  # 56 GPUs: the fabric has them, the hosts in service not
        JobSpec("j-6", 5.0, gpu_models=("NVIDIA B200",)),
    ]
    got = schedule(ScheduleRequest(state.snapshot(), tuple(pending), 10.0, SchedulerConfig()))
    assert len(got.waiting) >= 5
    assert {w.reason.value for w in got.waiting} >= {"unsatisfiable", "no_matching_hosts", "unschedulable"}
    expect = {"no_capacity": {"no_capacity"}, "fragmented": {"fragmented", "gang"}, "unsatisfiable":
              {"per_task_never", "total_never", "scope_never"}, "no_matching_hosts": {"no_host_models"},
              "unschedulable": {"out_of_service", "out_of_service_share"}}  # fmt: skip
    for w in got.waiting:
        assert key_of(w.message) in expect[w.reason.value], (w.reason, w.message)


def test_the_deadline_and_reservation_sentences_of_a_real_cycle_are_ones_the_page_knows() -> None:
    """The default settings (admission, EASY backfill): a job too late for its deadline, the gang holding the
    reservation, and a job that fits but would run past it. Their sentences carry no time that moves with the
    clock (the server rewrites a stored reason whenever its text changes), and the page knows each."""
    fab = leaf_spine(2, 2, 4, gpus_per_host=8)  # 64 GPUs
    state = ClusterState(FabricIndex(fab))
    state.apply(JobSubmitted(JobSpec("r", 0.0, gpus_per_task=8, estimated_runtime_s=1000.0), 0.0))
    host0 = TaskAllocation(fab.hosts[0].name, tuple(range(8)), 1000, 0, 0, 0)
    state.apply(JobPlaced(Allocation("r", (host0,)), 0.0))
    state.apply(JobStarted("r", 0.0))
    pending = (
        JobSpec("big", 1.0, tasks=8, gpus_per_task=8, estimated_runtime_s=100.0),  # 64 GPUs: waits for r's end
        JobSpec("long", 2.0, estimated_runtime_s=5000.0),  # fits now, runs past the reservation
        JobSpec("late", 3.0, estimated_runtime_s=100.0, deadline_s=50.0),
    )
    s = SchedulerSettings()
    messages = {}
    for now in (10.0, 20.0):
        got = schedule(ScheduleRequest(state.snapshot(), pending, now, scheduler_config(s), sharing=sharing_policy(s)))
        assert {w.job_id: w.reason.value for w in got.waiting} == {
            "late": "deadline_infeasible",
            "big": "waiting_for_reservation",
            "long": "reserved",
        }
        for w in got.waiting:
            assert key_of(w.message) == w.reason.value, (w.reason, w.message)
        messages[now] = {w.job_id: w.message for w in got.waiting if w.job_id != "big"}  # big's says "in N s"
    assert messages[10.0] == messages[20.0]
