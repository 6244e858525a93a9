"""Metrics on hand-computed cases: every expected number below is worked out in a comment."""

from __future__ import annotations

import csv
import io
import json

import pytest
from rich.console import Console

from gpuplan.executors.metrics import (
    RATIO_TITLE,
    compare_json,
    compare_table,
    format_duration,
    loaning_table,
    mean_summary,
    summarize,
    take_sample,
    write_job_csv,
    write_samples_csv,
)
from gpuplan.models import (
    ActiveJob,
    JobAllocation,
    JobRecord,
    JobSpec,
    RunResult,
    Sample,
    ThroughputProfile,
)
from gpuplan.models.records import LoaningMetrics
from gpuplan.plots import plot_jct_cdf, plot_timeseries

# P(1)=1, P(2)=1.8, P(4)=3.0: speed-ups 1.8 and 3.0 read straight off the table.
PROFILE = ThroughputProfile(points={1: 1.0, 2: 1.8, 4: 3.0})
# Same shape at twice the speed: P(1)=2, so speed-ups are unchanged but one-GPU time halves.
FAST = ThroughputProfile(points={1: 2.0, 2: 3.6, 4: 6.0})


def _spec(job_id: str, work: float, profile: ThroughputProfile = PROFILE) -> JobSpec:
    return JobSpec(
        id=job_id, submit_time=0.0, requested_gpus=1, total_iterations=work, throughput=profile
    )


def _running(job_id: str, gpus: int, profile: ThroughputProfile = PROFILE) -> ActiveJob:
    alloc = JobAllocation(job_id=job_id, placement={"n0": tuple(range(gpus))})
    job = ActiveJob(spec=_spec(job_id, 1000.0, profile), status="running")
    job.set_allocation(alloc)
    return job


def _pending(
    job_id: str,
    work: float,
    done: float,
    pending_time: float,
    pending_since: float | None,
    profile: ThroughputProfile = PROFILE,
) -> ActiveJob:
    return ActiveJob(
        spec=_spec(job_id, work, profile),
        status="pending",
        done=done,
        pending_time=pending_time,
        pending_since=pending_since,
    )


# --------------------------------------------------------------------------- take_sample
def test_cluster_efficiency_two_running_jobs() -> None:
    jobs = [_running("a", 2), _running("b", 4)]
    s = take_sample(100.0, jobs, capacity=8)
    assert s.cluster_efficiency == pytest.approx((1.8 + 3.0) / 8)  # 0.6
    assert s.running == 2
    assert s.gpus_allocated == 6
    assert s.capacity == 8
    assert s.queue_length == 0
    assert s.blocking_index == 0.0  # no pending jobs
    assert s.time == 100.0


def test_cluster_efficiency_divides_by_single_gpu_rate() -> None:
    # FAST on 2 GPUs: 3.6 / 2.0 = 1.8, the same speed-up as PROFILE despite twice the rate.
    s = take_sample(0.0, [_running("a", 2, FAST)], capacity=4)
    assert s.cluster_efficiency == pytest.approx(1.8 / 4)


def test_blocking_index_exact() -> None:
    now = 500.0
    # a: pending 100 s earlier + since t=200 -> 100 + 300 = 400 s;
    #    remaining 1000 - 200 = 800 it at P(1)=1 -> 800 s; ratio 0.5
    a = _pending("a", work=1000.0, done=200.0, pending_time=100.0, pending_since=200.0)
    # b: pending since t=300 -> 200 s; remaining 600 it at P(1)=2 -> 300 s; ratio 2/3
    b = _pending("b", work=600.0, done=0.0, pending_time=0.0, pending_since=300.0, profile=FAST)
    run = _running("r", 4)
    s = take_sample(now, [a, run, b], capacity=8)
    assert s.queue_length == 2
    assert s.running == 1
    assert s.blocking_index == pytest.approx((0.5 + 2 / 3) / 2)  # 7/12
    assert s.cluster_efficiency == pytest.approx(3.0 / 8)


def test_paused_job_uses_accumulated_pending_time_only() -> None:
    # pending_since None: only the stored 250 s count. Remaining 500 s on one GPU -> 0.5.
    a = _pending("a", work=500.0, done=0.0, pending_time=250.0, pending_since=None)
    assert take_sample(1e6, [a], capacity=1).blocking_index == pytest.approx(0.5)


def test_finished_jobs_are_ignored_and_zero_remaining_is_not_infinite() -> None:
    done = _running("f", 4)
    done.status = "finished"
    # z: no work left -> contributes 0 to BI but still counts in QL
    z = _pending("z", work=100.0, done=100.0, pending_time=50.0, pending_since=None)
    a = _pending("a", work=1000.0, done=200.0, pending_time=100.0, pending_since=200.0)
    s = take_sample(500.0, [done, z, a], capacity=8)
    assert s.queue_length == 2
    assert s.running == 0
    assert s.gpus_allocated == 0
    assert s.cluster_efficiency == 0.0
    assert s.blocking_index == pytest.approx((0.0 + 0.5) / 2)


def test_take_sample_is_single_pass_over_a_generator() -> None:
    jobs = [_running("a", 2), _running("b", 4)]
    s = take_sample(0.0, (j for j in jobs), capacity=8)
    assert s.running == 2
    assert s.cluster_efficiency == pytest.approx(0.6)


def test_empty_cluster_and_zero_capacity() -> None:
    s = take_sample(0.0, [], capacity=8)
    assert (s.queue_length, s.running, s.cluster_efficiency, s.blocking_index) == (0, 0, 0.0, 0.0)
    assert take_sample(0.0, [_running("a", 2)], capacity=0).cluster_efficiency == 0.0


# --------------------------------------------------------------------------- summarize
def _record(
    i: int,
    submit: float,
    queue: float | None,
    jct: float | None,
    *,
    preemptions: int = 0,
    resizes: int = 0,
    migrations: int = 0,
    lost: float = 0.0,
) -> JobRecord:
    finished = jct is not None
    return JobRecord(
        job_id=f"j{i}",
        requested_gpus=1,
        work=100.0,
        submit_time=submit,
        first_start=None if queue is None else submit + queue,
        finish_time=submit + jct if finished else None,
        queueing_time=queue,
        pending_time=queue or 0.0,
        jct=jct,
        gpu_seconds=10.0,
        done_iterations=100.0 if finished else 10.0,
        lost_iterations=lost,
        preemptions=preemptions,
        resizes=resizes,
        migrations=migrations,
    )


SUBMITS = [0.0, 10.0, 20.0, 30.0, 40.0]
QUEUES = [0.0, 5.0, 10.0, 15.0, 20.0]
JCTS = [10.0, 20.0, 30.0, 40.0, 100.0]  # finishes 10, 30, 50, 70, 140


def _finished_records(scale: float = 1.0) -> list[JobRecord]:
    return [
        _record(
            i,
            s,
            q,
            j * scale,
            preemptions=[0, 1, 0, 2, 0][i],
            resizes=[1, 0, 0, 0, 1][i],
            migrations=[0, 0, 1, 0, 0][i],
            lost=[0.0, 50.0, 0.0, 25.5, 0.0][i],
        )
        for i, (s, q, j) in enumerate(zip(SUBMITS, QUEUES, JCTS, strict=True))
    ]


def _samples() -> list[Sample]:
    return [
        Sample(
            time=t,
            queue_length=ql,
            running=r,
            cluster_efficiency=ce,
            blocking_index=bi,
            gpus_allocated=g,
            capacity=8,
        )
        for t, ql, r, ce, bi, g in [
            (0.0, 0, 2, 0.5, 0.0, 4),
            (3600.0, 2, 3, 0.75, 0.3, 6),
            (7200.0, 4, 4, 1.0, 0.6, 8),
        ]
    ]


def _result(jobs: list[JobRecord], policy: str = "base") -> RunResult:
    return RunResult(
        scenario="hand",
        policy=policy,
        jobs=jobs,
        samples=_samples(),
        decision_ms=[1.0, 2.0, 3.0, 4.0, 5.0],
        gpu_seconds_allocated=600.0,
        gpu_seconds_capacity=1000.0,
        events=42,
        wall_s=2.0,
        solver_calls=7,
        solver_fallbacks=1,
    )


def test_summarize_five_finished_jobs_exact() -> None:
    s = summarize(_result(_finished_records()))
    assert (s.jobs, s.finished, s.unfinished) == (5, 5, 0)
    # JCT 10,20,30,40,100: mean 40; median 30; linear p95 at rank 0.95*4 = 3.8 -> 40 + 0.8*60
    assert s.avg_jct_s == pytest.approx(40.0)
    assert s.median_jct_s == pytest.approx(30.0)
    assert s.p95_jct_s == pytest.approx(88.0)
    assert s.p99_jct_s == pytest.approx(40.0 + 0.96 * 60.0)  # 97.6
    # queueing 0,5,10,15,20: mean 10, median 10, p95 = 15 + 0.8*5, p99 = 15 + 0.96*5
    assert s.avg_queueing_s == pytest.approx(10.0)
    assert s.median_queueing_s == pytest.approx(10.0)
    assert s.p95_queueing_s == pytest.approx(19.0)
    assert s.p99_queueing_s == pytest.approx(19.8)
    assert s.makespan_s == pytest.approx(140.0)  # last finish 140 - first submit 0
    assert s.gpu_utilisation == pytest.approx(0.6)  # 600 / 1000
    assert (s.preemptions, s.resizes, s.migrations) == (3, 2, 1)
    assert s.lost_iterations == pytest.approx(75.5)
    assert s.mean_queue_length == pytest.approx(2.0)
    assert s.mean_cluster_efficiency == pytest.approx(0.75)
    assert s.mean_blocking_index == pytest.approx(0.3)
    # latencies 1..5 ms: p50 3, p95 = 4 + 0.8, p99 = 4 + 0.96, max 5
    assert s.decision_p50_ms == pytest.approx(3.0)
    assert s.decision_p95_ms == pytest.approx(4.8)
    assert s.decision_p99_ms == pytest.approx(4.96)
    assert s.decision_max_ms == pytest.approx(5.0)
    assert (s.events, s.solver_calls, s.solver_fallbacks) == (42, 7, 1)
    assert s.wall_s == 2.0
    assert s.jobs_per_s == pytest.approx(2.5)  # 5 jobs / 2 s
    assert (s.scenario, s.policy) == ("hand", "base")


def test_summarize_counts_unfinished_jobs() -> None:
    jobs = _finished_records()
    jobs.append(_record(5, 50.0, 5.0, None, preemptions=1, lost=10.0))  # started, not finished
    jobs.append(_record(6, 60.0, None, None))  # never started
    s = summarize(_result(jobs))
    assert (s.jobs, s.finished, s.unfinished) == (7, 5, 2)
    # statistics are over the finished five only: unchanged
    assert s.avg_jct_s == pytest.approx(40.0)
    assert s.p95_jct_s == pytest.approx(88.0)
    assert s.avg_queueing_s == pytest.approx(10.0)
    assert s.makespan_s == pytest.approx(140.0)
    # counters include unfinished jobs
    assert s.preemptions == 4
    assert s.lost_iterations == pytest.approx(85.5)
    assert s.jobs_per_s == pytest.approx(3.5)  # 7 jobs / 2 s


def test_summarize_recomputes_missing_jct_and_handles_empty_run() -> None:
    rec = _record(0, 100.0, 20.0, 50.0).model_copy(update={"jct": None, "queueing_time": None})
    s = summarize(_result([rec]))
    assert s.avg_jct_s == pytest.approx(50.0)  # finish 150 - submit 100
    assert s.avg_queueing_s == pytest.approx(20.0)  # first start 120 - submit 100
    empty = summarize(RunResult(scenario="x", policy="p", jobs=[]))
    assert (empty.jobs, empty.finished, empty.unfinished) == (0, 0, 0)
    assert empty.avg_jct_s is None and empty.makespan_s is None
    assert empty.gpu_utilisation is None and empty.jobs_per_s is None
    assert empty.mean_cluster_efficiency is None and empty.decision_p95_ms is None


# --------------------------------------------------------------------------- comparison
def _three_summaries():
    base = summarize(_result(_finished_records(1.0), "base"))  # avg JCT 40
    fast = summarize(_result(_finished_records(0.5), "fast"))  # avg JCT 20
    slow = summarize(_result(_finished_records(2.0), "slow"))  # avg JCT 80
    return [("base", base), ("fast", fast), ("slow", slow)]


def test_compare_json_ratio_is_baseline_over_policy() -> None:
    rows = compare_json(_three_summaries())
    assert [r["policy"] for r in rows] == ["base", "fast", "slow"]
    # 40/40, 40/20, 40/80
    assert [r["avg_jct_ratio"] for r in rows] == pytest.approx([1.0, 2.0, 0.5])
    assert rows[1]["avg_jct_s"] == pytest.approx(20.0)
    assert rows[0]["gpu_utilisation"] == pytest.approx(0.6)
    assert rows[0]["decision_p95_ms"] == pytest.approx(4.8)
    assert rows[0]["preemptions"] == 3 and rows[0]["resizes"] == 2
    assert rows[0]["makespan_s"] == pytest.approx(140.0)
    json.dumps(rows)  # plain JSON types only


def test_compare_table_rows_and_ratio_column() -> None:
    table = compare_table(_three_summaries())
    assert table.row_count == 3
    assert ">1 = better" in str(table.columns[-1].header)
    assert table.columns[-1].header == RATIO_TITLE
    buf = io.StringIO()
    Console(file=buf, width=250, color_system=None).print(table)
    text = buf.getvalue()
    for expected in ("1.00x", "2.00x", "0.50x", "40.0 s", "20.0 s", "2.3 min", "60.0%", "4.80"):
        assert expected in text, expected


def test_ratio_missing_when_policy_finished_nothing() -> None:
    none = summarize(RunResult(scenario="x", policy="none", jobs=[]))
    rows = compare_json([_three_summaries()[0], ("none", none)])
    assert rows[1]["avg_jct_ratio"] is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "—"), (12.34, "12.3 s"), (90.0, "1.5 min"), (7200.0, "2.00 h"), (172800.0, "2.00 d")],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


# --------------------------------------------------------------------------- CSV
def test_job_csv_round_trip(tmp_path) -> None:
    jobs = _finished_records()
    jobs.append(_record(5, 50.0, None, None))
    path = write_job_csv(_result(jobs), tmp_path / "out" / "jobs.csv")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == list(JobRecord.model_fields)
        rows = list(reader)
    assert len(rows) == 6
    assert float(rows[4]["jct"]) == 100.0
    assert int(rows[3]["preemptions"]) == 2
    assert rows[5]["jct"] == "" and rows[5]["finish_time"] == ""  # None -> empty cell
    assert rows[0]["model"] == ""


def test_samples_csv_round_trip(tmp_path) -> None:
    path = write_samples_csv(_result(_finished_records()), tmp_path / "samples.csv")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == list(Sample.model_fields)
        rows = list(reader)
    assert len(rows) == 3
    assert float(rows[1]["cluster_efficiency"]) == 0.75
    assert int(rows[2]["queue_length"]) == 4


# --------------------------------------------------------------------------- plots
def _is_png(path) -> bool:
    return path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_write_png(tmp_path) -> None:
    unfinished = [*_finished_records(2.0), _record(5, 50.0, None, None)]
    results = {
        "base": _result(_finished_records(), "base"),
        "slow": _result(unfinished, "slow"),
    }
    cdf = plot_jct_cdf(results, tmp_path / "jct_cdf.png")
    ts = plot_timeseries(results, tmp_path / "figs" / "timeseries.png")
    assert cdf == tmp_path / "jct_cdf.png" and _is_png(cdf)
    assert ts == tmp_path / "figs" / "timeseries.png" and _is_png(ts)


def test_plots_tolerate_empty_runs_and_leak_no_figures(tmp_path) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    empty = {"none": RunResult(scenario="x", policy="none", jobs=[])}
    assert _is_png(plot_jct_cdf(empty, tmp_path / "a.png"))
    assert _is_png(plot_timeseries(empty, tmp_path / "b.png"))
    assert plt.get_fignums() == before


# --------------------------------------------------------------------------- solver latency
def test_solver_latency_percentiles_over_every_solver_call() -> None:
    result = _result(_finished_records()).model_copy(
        update={"solver_ms": [5.0, 1.0, 4.0, 2.0, 3.0]}
    )
    s = summarize(result)
    # wall ms 1..5 (order does not matter): p50 3, p95 = 4 + 0.8, p99 = 4 + 0.96
    assert s.solver_p50_ms == pytest.approx(3.0)
    assert s.solver_p95_ms == pytest.approx(4.8)
    assert s.solver_p99_ms == pytest.approx(4.96)
    row = compare_json([("base", s)])[0]
    assert (row["solver_p50_ms"], row["solver_p99_ms"]) == (pytest.approx(3.0), pytest.approx(4.96))
    none = summarize(_result(_finished_records()))  # no solver call recorded
    assert none.solver_p50_ms is none.solver_p95_ms is none.solver_p99_ms is None
    assert compare_json([("base", none)])[0]["solver_p95_ms"] is None


def test_engine_records_the_wall_time_of_every_solver_call() -> None:
    from gpuplan.executors.simulator.run import simulate
    from gpuplan.models import Cluster, Elasticity
    from gpuplan.solver_core.registry import make_policy
    from tests.conftest import NO_OVERHEADS

    jobs = [
        JobSpec(
            id=f"e{i}",
            submit_time=10.0 * i,
            requested_gpus=4,
            duration=100.0 + i,
            elasticity=Elasticity(min_gpus=2, max_gpus=6),
        )
        for i in range(4)
    ]
    stats: list[float] = []
    result, _, _ = simulate(
        Cluster.uniform(2, 4),
        jobs,
        make_policy("aryl"),
        overheads=NO_OVERHEADS,
        on_plan=lambda v, p: stats.extend(s.wall_ms for s in p.stats),
    )
    assert result.solver_calls > 0 and result.solver_ms == stats  # one entry per call, in order
    s = summarize(result)
    assert min(stats) <= s.solver_p50_ms <= s.solver_p95_ms <= s.solver_p99_ms <= max(stats)


# --------------------------------------------------------------------------- rejected jobs
def _render(table) -> str:
    buf = io.StringIO()
    Console(file=buf, width=250, color_system=None).print(table)
    return buf.getvalue()


def test_rejected_jobs_are_counted_and_shown_only_when_present() -> None:
    clean = summarize(_result(_finished_records(), "clean"))
    hurt = summarize(
        _result(_finished_records(), "hurt").model_copy(
            update={"rejected": [("huge", "needs 16 GPUs; the cluster has 8"), ("a", "duplicate")]}
        )
    )
    assert clean.rejected == 0 and hurt.rejected == 2
    assert hurt.jobs == 5  # rejected arrivals are not jobs of the run
    assert [r["rejected"] for r in compare_json([("clean", clean), ("hurt", hurt)])] == [0, 2]
    assert "Rejected" not in _render(compare_table([("clean", clean)]))
    text = _render(compare_table([("clean", clean), ("hurt", hurt)]))
    assert "Rejected" in text
    header = [c.header for c in compare_table([("hurt", hurt)]).columns]
    cells = list(compare_table([("hurt", hurt)]).columns[header.index("Rejected")].cells)
    assert cells == ["2"]


# --------------------------------------------------------------------------- loaning
def _loaning(**kw: object) -> LoaningMetrics:
    base = dict(
        window_s=100.0,
        usage_training=0.8,
        usage_overall=0.6,
        usage_loaned=0.5,
        loaned_share=0.4,
        loaned_gpu_s=20.0,
        preemption_ratio=0.1,
        loan_offers=3,
        reclaims=2,
        servers_reclaimed=3,
        reclaim_preemptions=1,
        collateral_damage=0.25,
        met_by_flexible=0.5,
    )
    return LoaningMetrics(**{**base, **kw})


def test_loaning_metrics_flow_into_summary_json_table_and_means() -> None:
    a = summarize(_result(_finished_records(), "aryl").model_copy(update={"loaning": _loaning()}))
    b = summarize(
        _result(_finished_records(), "aryl").model_copy(
            update={"loaning": _loaning(usage_loaned=0.7, reclaims=4, collateral_damage=None)}
        )
    )
    row = compare_json([("aryl", a)])[0]
    assert row["loaning"]["usage_loaned"] == 0.5 and row["loaning"]["reclaims"] == 2
    json.dumps(row)
    mean = mean_summary([a, b])
    assert mean.loaning is not None
    assert mean.loaning.usage_loaned == pytest.approx(0.6)  # (0.5 + 0.7) / 2
    assert mean.loaning.reclaims == 3  # ints stay ints
    assert mean.loaning.collateral_damage is None  # None in one run -> None
    plain = summarize(_result(_finished_records(), "fifo"))
    assert loaning_table([("fifo", plain)]) is None
    assert mean_summary([plain, plain]).loaning is None
    text = _render(loaning_table([("aryl", a), ("fifo", plain)]))
    for expected in ("80.0%", "60.0%", "50.0%", "10.0%", "25.0%", "2 (3)"):
        assert expected in text, expected
