"""The scale bench under overload (issue 28 item 2) at a size a test can afford.

Runs :func:`tests.bench.scale.main` as ``make bench`` would, through its child processes,
on 16 and 32 GPUs: two policies (FIFO, and AFS-L on the elastic ladders) at both offered loads.
What must hold: every row is a finished run of the named policy, size and load; the engine's
FIFO reproduces the reference heap loop's mean JCT at each load (load 1.5 really queues:
mean JCT far above the mean duration); ratios are taken against the first size; the JSON file
holds the rows; and a run past its CPU budget comes back as a miss with its progress, not a
hang.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import scale

SIZES = "16:200,32:400"
POLICIES = ("fifo", "afs-l")


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path]:
    out = tmp_path_factory.mktemp("scale") / "rows.json"
    argv = ["--sizes", SIZES, "--loads", "0.9,1.5", "--policies", ",".join(POLICIES)]
    argv += ["--cpu-limit", "300", "--workers", "2", "--json", str(out)]
    return scale.main(argv), out


def test_rows_cover_every_case_and_finish(rows: tuple[list[dict], Path]) -> None:
    got, _ = rows
    cases = {(r["gpus"], r["jobs"], r["policy"], r["load"]) for r in got}
    want = {(g, n, p, ld) for g, n in ((16, 200), (32, 400)) for p in POLICIES for ld in (0.9, 1.5)}
    assert cases == want and len(got) == len(want)
    for r in got:
        assert not r["over_budget"] and "failed" not in r, r
        assert r["finished"] == r["jobs"], r
        assert r["cpu_s"] > 0 and r["jobs_per_cpu_s"] == pytest.approx(r["jobs"] / r["cpu_s"])
        assert r["peak_rss_mib"] > 10 and r["decisions"] > 0
        assert r["decision_p99_ms"] >= r["decision_p50_ms"] >= 0


def test_fifo_matches_the_reference_loop_at_each_load(rows: tuple[list[dict], Path]) -> None:
    got, _ = rows
    fifo = [r for r in got if r["policy"] == "fifo"]
    assert len(fifo) == 4
    for r in fifo:
        assert r["fifo_matches_reference"] is True
        assert r["mean_jct_s"] == pytest.approx(r["reference_mean_jct_s"], rel=1e-6)
    # overload is real: at 1.5 the queue grows, so FIFO's mean JCT is above 0.9's
    by_load = {(r["gpus"], r["load"]): r["mean_jct_s"] for r in fifo}
    for gpus in (16, 32):
        assert by_load[(gpus, 1.5)] > 1.2 * by_load[(gpus, 0.9)]  # seeded: 1.37 at 16 GPUs


def test_ratios_against_the_first_size_and_json(rows: tuple[list[dict], Path]) -> None:
    got, path = rows
    for r in got:
        if (r["gpus"], r["jobs"]) == (16, 200):
            assert r["ratio_to_base"] == pytest.approx(1.0)
        else:
            base = next(
                b
                for b in got
                if (b["gpus"], b["policy"], b["load"]) == (16, r["policy"], r["load"])
            )
            assert r["ratio_to_base"] == pytest.approx(r["jobs_per_cpu_s"] / base["jobs_per_cpu_s"])
    assert json.loads(path.read_text()) == got
    assert scale.misses(got) == []


def test_same_jobs_for_every_policy_elastic_ladders() -> None:
    a = scale.overload_workload(32, 300, 1.5)
    assert a == scale.overload_workload(32, 300, 1.5)  # seeded
    assert sum(j.elastic for j in a) > len(a) / 2
    assert all(1 <= j.requested_gpus <= j.max_gpus <= 32 for j in a)
    # the load only moves arrivals: sizes and work are the same draws
    b = scale.overload_workload(32, 300, 0.9)
    assert [j.requested_gpus for j in a] == [j.requested_gpus for j in b]
    assert a[-1].submit_time < b[-1].submit_time


def test_over_budget_run_is_a_miss_with_progress() -> None:
    row = scale.measure(1_024, 20_000, "afs-l", 1.5, profile=False, cpu_limit=1.0)
    assert row["over_budget"] is True and "failed" not in row
    assert 0 <= row["finished"] < 20_000
    assert row["cpu_s"] >= 0.5
    missed = scale.misses([{**row, "ratio_to_base": None}])
    assert len(missed) == 1 and "over the CPU budget" in missed[0]
    assert "> 1 CPU-s" in scale.format_row(row, 1.0)


def test_huge_rows_below_the_goal_are_misses() -> None:
    base = {"policy": "srtf", "load": 1.5, "over_budget": False, "finished": 1}
    rows = [
        {**base, "gpus": 64, "jobs": 2_000, "jobs_per_cpu_s": 2_000.0},
        {**base, "gpus": 8_192, "jobs": 100_000, "jobs_per_cpu_s": 1_200.0},
        {**base, "policy": "fifo", "gpus": 8_192, "jobs": 100_000, "jobs_per_cpu_s": 900.0},
    ]
    scale._with_ratios(rows, (64, 2_000))
    assert rows[1]["ratio_to_base"] == pytest.approx(0.6) and rows[2]["ratio_to_base"] is None
    assert scale.misses(rows) == [
        "fifo at load 1.5 on 8192 GPUs / 100,000 jobs: ratio unknown (no base row) < 0.5"
    ]
    rows[1]["jobs_per_cpu_s"] = 900.0
    scale._with_ratios(rows, (64, 2_000))
    assert "srtf at load 1.5 on 8192 GPUs / 100,000 jobs: ratio 0.45 < 0.5" in scale.misses(rows)
