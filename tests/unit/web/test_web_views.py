"""The dashboard's pure pieces: payloads (tenant hiding, order, slack, leaf flags), language choice, sim reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpupool.domain.calendar import parse_calendar
from gpupool.domain.errors import ParseError
from gpupool.fabric.generators import superpod
from gpupool.web.fabricview import (
    FREE,
    HIDDEN,
    LEAF_CONGESTED,
    LEAF_DOWN,
    LEAF_ERRORING,
    GpuTelemetry,
    HostTelemetry,
    LiveCache,
    NodeView,
    PortTelemetry,
    RankView,
    diff_live,
    fabric_live,
    fabric_static,
)
from gpupool.web.pages import load_assets, pick_language, render
from gpupool.web.simreport import plot_path, read_report
from gpupool.web.views import HIDDEN_HOLDER, JobView, host_payload, lending, pool_calendar, queue_payload

FABRIC = superpod(1)
RANKS = [
    RankView("j-a", "acme", 0, "dgx001", (0, 1, 2, 3, 4, 5, 6, 7)),
    RankView("j-a", "acme", 1, "dgx002", (0, 1, 2, 3, 4, 5, 6, 7)),
    RankView("j-g", "globex", 0, "dgx002", ()),  # a rank with no GPUs must not break anything
    RankView("j-g", "globex", 0, "dgx003", (4, 5)),
]


def _job(job_id: str, tenant: str, priority: int, submit: float, **kw: object) -> JobView:
    base: dict[str, object] = dict(
        job_id=job_id, tenant=tenant, pool="default", name="", priority=priority, priority_name="normal", tasks=1,
        gpus_per_task=8, submit_time_s=submit, deadline_s=None, estimated_runtime_s=None, reason_code="no_capacity",
        reason="needs 8 GPUs",
    )  # fmt: skip
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


def _keys() -> LiveCache:
    return LiveCache()


def test_fabric_live_draws_every_host_hides_other_tenants_and_counts_only_schedulable_gpus() -> None:
    nodes = [NodeView("dgx001", "up", (0,) * 8), NodeView("dgx002", "drained", (0, 1, 2, 0, 0, 0, 0, 0))]
    static = fabric_static(FABRIC, 3)
    assert len(static["hosts"]) == 31 and sum(len(g["hosts"]) for g in static["groups"]) == 31
    assert len(static["tiers"]["leaf"]) == 8 and sorted(leaf[1] for leaf in static["tiers"]["leaf"]) == list(range(8))
    keys = _keys()
    p = fabric_live(FABRIC, nodes, RANKS, {}, "acme", keys.job_key)
    assert p["state"][:3] == [0, 1, 3]  # up, drained, no agent
    assert list(p["jobs"].values()) == [["j-a", "acme", "", ""]]
    off3 = static["gpu_offset"][2]
    assert p["alloc"][off3 + 4 : off3 + 6] == [HIDDEN, HIDDEN] and p["alloc"][off3] == FREE
    assert "j-g" not in json.dumps(p)
    assert p["health"][8:11] == [0, 1, 2] and p["health"][16] == -1
    assert "util" not in p  # telemetry only when asked for
    # 31 hosts of 8 GPUs: only dgx001 is up; the drained host's GPUs and 29 hosts without an agent offer none.
    assert p["summary"]["gpus"] == 248 and p["summary"]["schedulable_gpus"] == 8
    assert p["summary"]["hosts_by_state"] == {"up": 1, "drained": 1, "lost": 0, "unregistered": 29}
    assert p["summary"]["bad_gpus"] == 1 and p["summary"]["allocated_gpus"] == 18
    admin = fabric_live(FABRIC, nodes, RANKS, {}, None, keys.job_key)
    assert sorted(j[0] for j in admin["jobs"].values()) == ["j-a", "j-g"] and HIDDEN not in admin["alloc"]


def test_telemetry_colours_gpus_and_flags_the_worst_link_of_each_leaf() -> None:
    t = {
        "dgx001": HostTelemetry(
            {0: GpuTelemetry(55.4, 61.0)},
            (PortTelemetry("mlx5_0", "up", 3.0, 0.0), PortTelemetry("mlx5_1", "up", 0.0, 5e4)),
        ),
        "dgx002": HostTelemetry({}, (PortTelemetry("mlx5_0", "down", None, None),)),
    }
    p = fabric_live(FABRIC, [], [], t, None, _keys().job_key, gpu_telemetry=True)
    assert p["util"][0] == 55 and p["temp"][0] == 61 and p["util"][1] is None
    leaves = fabric_static(FABRIC, 1)["tiers"]["leaf"]
    flags = {leaf[1]: p["leaf_flag"][i] for i, leaf in enumerate(leaves)}
    assert flags[0] == LEAF_DOWN  # erroring on dgx001, down on dgx002: the worst wins
    assert flags[1] == LEAF_CONGESTED and flags[2] == 0
    assert LEAF_ERRORING > LEAF_CONGESTED
    # Leaf flags come with every answer; the per-GPU numbers only when asked for.
    assert fabric_live(FABRIC, [], [], t, None, _keys().job_key)["leaf_flag"] == p["leaf_flag"]


def _apply(held: dict[str, object], answer: dict[str, object]) -> dict[str, object]:
    """What fabric.js's GP.applyLive does, in Python."""
    if "live" in answer:
        return dict(answer["live"])  # type: ignore[call-overload]
    if answer.get("same"):
        return held
    out = dict(held)
    for name, ch in answer["diff"].items():  # type: ignore[attr-defined]
        if name == "summary":
            out[name] = ch
        elif name == "jobs":
            jobs = {**held["jobs"], **ch["set"]}  # type: ignore[dict-item]
            out[name] = {k: v for k, v in jobs.items() if k not in ch["del"]}
        elif "all" in ch:
            out[name] = ch["all"]
        else:
            a = list(held[name])  # type: ignore[call-overload]
            for i in range(0, len(ch["set"]), 2):
                a[ch["set"][i]] = ch["set"][i + 1]
            out[name] = a
    return out


def test_a_page_that_sends_its_digest_gets_only_what_changed() -> None:
    """The invariant: applying the answer to what the page holds gives exactly the new live part, whatever it
    held (the same state, an older one the cache knows, or one it never sent)."""
    cache = LiveCache(size=2)
    nodes = [NodeView(f"dgx{i:03d}", "up", (0,) * 8) for i in range(1, 32)]
    first = fabric_live(FABRIC, nodes, RANKS[:2], {}, None, cache.job_key)
    a1 = cache.answer(first, None)
    assert a1["live"] == first
    assert cache.answer(first, a1["digest"]) == {"digest": a1["digest"], "same": True}
    nodes[4] = NodeView("dgx005", "up", (0, 0, 2, 0, 0, 0, 0, 0))  # a GPU goes bad
    ranks = [*RANKS[2:], RankView("j-n", "acme", 0, "dgx006", (0, 1), "default", "new")]  # j-a ends, two start
    second = fabric_live(FABRIC, nodes, ranks, {}, None, cache.job_key)
    a2 = cache.answer(second, a1["digest"])
    assert _apply(first, a2) == second
    diff = a2["diff"]
    assert diff["health"] == {"set": [4 * 8 + 2, 2]}
    assert len(diff["alloc"]["set"]) == 2 * (16 + 2 + 2)  # j-a's 16 GPUs freed, j-g's 2 and j-n's 2 taken
    assert set(diff["jobs"]["set"]) == {str(cache.job_key("j-g")), str(cache.job_key("j-n"))}
    assert diff["jobs"]["del"] == [str(cache.job_key("j-a"))]
    # A digest the cache no longer holds (it keeps two) gets the whole live part.
    cache.answer(fabric_live(FABRIC, [], [], {}, None, cache.job_key), None)
    assert "live" in cache.answer(second, a1["digest"])
    assert diff_live(second, second) == {"summary": second["summary"]}


def test_host_payload_names_rails_and_never_another_tenants_job() -> None:
    h = host_payload(FABRIC, "dgx003", NodeView("dgx003", "up", ()), RANKS, None, "acme")
    assert [g["hca"] for g in h["gpus"]] == [f"mlx5_{i}" for i in range(8)]
    assert [x["rail"] for x in h["hcas"]] == list(range(8))
    assert h["gpus"][4]["job"] == HIDDEN_HOLDER and h["jobs"] == []
    assert "j-g" not in json.dumps(h)
    assert host_payload(None, "ghost", None, [], None, None)["state"] == "unregistered"


def test_queue_is_in_policy_order_with_admission_and_slack() -> None:
    jobs = [
        _job("b", "acme", 2, 10.0),
        _job("a", "acme", 2, 10.0),
        _job("hi", "acme", 3, 50.0, deadline_s=1000.0, estimated_runtime_s=300.0),
        _job("x", "globex", 4, 0.0),
        _job("late", "acme", 1, 0.0, deadline_s=200.0, estimated_runtime_s=300.0, reason_code="deadline_infeasible"),
    ]
    q = queue_payload(jobs, 100.0, "acme")
    assert [j["id"] for j in q] == ["hi", "a", "b", "late"]
    assert q[0]["admission"] == "admitted" and q[0]["slack_s"] == 600.0
    assert q[3]["admission"] == "infeasible" and q[3]["slack_s"] == -200.0
    assert q[1]["admission"] is None and q[1]["waiting_s"] == 90.0
    assert queue_payload(jobs, 100.0, None)[0]["id"] == "x"
    # The leader's last cycle knows the policy's order: that order first, the jobs it did not see after.
    by_policy = queue_payload(jobs, 100.0, None, {"late": 1, "b": 2, "x": 3})
    assert [j["id"] for j in by_policy] == ["late", "b", "x", "hi", "a"]
    assert [j["order"] for j in by_policy] == [1, 2, 3, 4, 5]


def test_pool_calendar_segments_cover_the_day_and_lending_is_per_tenant() -> None:
    cal = parse_calendar(
        'timezone = "UTC"\ndefault_pool = "train"\n[[pool]]\nname = "infer"\nsus = [1]\nshare = 0.5\n'
        'share_outside = 0.25\nwindows = [{ days = "mon-sun", start = "08:00", end = "20:00" }]\n',
        source="test",
    )
    midnight = 1_700_006_400.0  # 2023-11-15 00:00 UTC
    (rule,) = pool_calendar(cal, midnight)
    assert rule["fraction_now"] == 0.25
    assert [s[2] for s in rule["segments"]] == [0.25, 0.5, 0.25]
    assert rule["segments"][1][0] == midnight + 8 * 3600
    rows = lending([("acme", "p", "", 16, "c"), ("globex", "p", "", 8, "c")], {("acme", "p"): 24.0}, "acme")
    assert rows == [
        {"tenant": "acme", "pool": "p", "gpu_model": "", "cohort": "c", "nominal_gpus": 16, "used_gpus": 24.0,
         "borrowed_gpus": 8.0, "lendable_gpus": 0.0}
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "cookie", "header", "want"),
    [
        (None, None, "zh-CN,zh;q=0.9,en;q=0.8", "zh-CN"),
        (None, None, "en-US,en;q=0.9,zh-CN;q=0.8", "en"),
        (None, None, "fr-FR, zh-TW;q=0.5", "zh-CN"),
        (None, None, "en;q=0.2, zh;q=0.7", "zh-CN"),
        (None, None, None, "en"),
        (None, "zh-CN", "en", "zh-CN"),
        ("en", "zh-CN", "zh", "en"),
        ("xx", None, "zh", "zh-CN"),
    ],
)
def test_language_from_switch_cookie_or_browser(
    query: str | None, cookie: str | None, header: str | None, want: str
) -> None:
    assert pick_language(query, cookie, header) == want


def test_catalogues_agree_and_pages_render_without_placeholders() -> None:
    assets = load_assets()
    assert set(assets.messages["en"]) == set(assets.messages["zh-CN"])
    for page in assets.bodies:
        for lang in assets.messages:
            html = render(assets, page, lang)
            assert "{{" not in html and "%%" not in html
    assert "<title>gpupool · 队列</title>" in render(assets, "queue", "zh-CN")


def test_sim_report_reads_metrics_jobs_and_plots(tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text('{"jobs": 2, "utilisation": 0.5}')
    (tmp_path / "jobs.csv").write_text("id,submit,start,end,gpus\na,0,3600,7200,8\nb,0,,,8\n")
    (tmp_path / "utilisation.png").write_bytes(b"\x89PNG")
    r = read_report(str(tmp_path))
    assert r["metrics"]["utilisation"] == 0.5 and r["jobs"] == 2
    assert r["wait_h"] == [1.0] and r["jct_h"] == [2.0] and r["plots"] == ["utilisation.png"]
    assert plot_path(str(tmp_path), "utilisation.png").name == "utilisation.png"
    with pytest.raises(ParseError, match="not a plot name"):
        plot_path(str(tmp_path), "../metrics.json")


def test_malformed_sim_folders_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="not a folder"):
        read_report(str(tmp_path / "missing"))
    with pytest.raises(ParseError, match=r"no metrics\.json"):
        read_report(str(tmp_path))
    (tmp_path / "metrics.json").write_text('{\n "a": 1,\n oops\n}')
    with pytest.raises(ParseError) as e:
        read_report(str(tmp_path))
    assert e.value.line == 3 and str(tmp_path / "metrics.json") in str(e.value.source)
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "jobs.csv").write_text("id,submit,start,end\na,0,1,2\nb,zero,1,2\n")
    with pytest.raises(ParseError) as e:
        read_report(str(tmp_path))
    assert e.value.line == 3


def test_a_path_the_os_refuses_is_a_clear_error_not_a_crash() -> None:
    import pytest

    from gpupool.domain.errors import ParseError
    from gpupool.web import simreport

    with pytest.raises(ParseError, match="cannot open"):
        simreport.read_report("/tmp/" + "x" * 5000)
    with pytest.raises(ParseError, match="not a folder"):
        simreport.read_report("/nonexistent/folder")


def test_a_live_part_made_of_the_same_state_is_not_built_again() -> None:
    cache = LiveCache()
    calls: list[int] = []

    def build() -> dict[str, object]:
        calls.append(1)
        return fabric_live(FABRIC, [], RANKS, {}, None, cache.job_key)

    made_of = ([("dgx001", "up", (0,) * 8)], [("j-a", 0, "dgx001", (0, 1))])
    first, d1 = cache.built(None, made_of, build)
    again, d2 = cache.built(None, ([("dgx001", "up", (0,) * 8)], [("j-a", 0, "dgx001", (0, 1))]), build)
    assert again is first and d1 == d2 and len(calls) == 1
    cache.built(None, ([("dgx001", "up", (0, 2) + (0,) * 6)], made_of[1]), build)  # a GPU went bad
    cache.built("acme", made_of, build)  # another tenant's slot
    cache.built(None, None, build)  # with telemetry: always built
    assert len(calls) == 4
