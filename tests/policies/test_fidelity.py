"""Replays agree with the traces and with the reference simulators (issue 12).

Two kinds of checks, numbers and explanations in ``docs/results/fidelity.md``:

* **loaders keep the trace's durations**: for every source, a rigid mapping with zero
  overheads on a cluster big enough that nobody waits gives every job its trace duration as
  JCT (for sources without a duration column, the duration the throughput table implies);
* **differential**: our engine against the numbers the upstream simulators print on their own
  inputs (Tiresias 60-job trace, Pollux workload 1, Gavel's artifact trace). Where our number
  cannot reach theirs the test pins ours and points to the doc.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gpuplan.api import prepare, run
from gpuplan.models import InputError, ScenarioSpec
from gpuplan.models.records import RunResult
from gpuplan.scenarios.mapping import map_afs, map_rigid
from gpuplan.scenarios.pollux_jobs import pollux_step_time, pollux_steps
from gpuplan.scenarios.profiles import gavel_profiles
from gpuplan.scenarios.trace_job import TraceJob
from gpuplan.scenarios.zoo import load_afs_zoo

from ..conftest import traces_dir

TRACES: Path | None = traces_dir()
needs_traces = pytest.mark.usefixtures("traces")
"""tests/conftest.py's fixture: missing traces skip the test (with the reason), or fail it
under CI."""
pytestmark = pytest.mark.traces

ZERO = {"start_s": 0, "restart_s": 0, "migrate_s": 0, "preempt_s": 0}
"""Overheads off: a job's JCT is then exactly its run time when it never waits."""
POLLUX_OVERHEADS = {"start_s": 30, "restart_s": 30, "migrate_s": 30, "preempt_s": 0}
"""Pollux ``Job.reallocate``: every (re)allocation costs a 30-s ``rescale_time``."""
POLLUX_TIRESIAS = {"base": "tiresias-l", "thresholds": [57600], "promote_knob": None}
"""Pollux's ``TiresiasPolicy``: one 16-GPU-hour threshold, no starvation knob."""


def _run(spec: dict[str, Any], policy: str) -> RunResult:
    return run(prepare(ScenarioSpec.model_validate({"name": "fidelity", **spec})), policy)


def _avg_jct(result: RunResult) -> float:
    jcts = [j.jct for j in result.jobs]
    assert all(j is not None for j in jcts), "every job must finish"
    return sum(jcts) / len(jcts)  # type: ignore[arg-type]


def _makespan(result: RunResult) -> float:
    return max(j.finish_time for j in result.jobs) - min(j.submit_time for j in result.jobs)  # type: ignore[type-var,operator]


# ----------------------------------------------------------------- loaders keep durations
def _assert_jct_is_duration(
    workload: dict[str, Any],
    nodes: int,
    gpus: int = 8,
    expected: dict[str, float] | None = None,
    gpu_type: str = "v100",
) -> int:
    """Replay ``workload`` rigid, no overheads, on ``nodes`` x ``gpus``; JCT == duration."""
    spec = {
        "cluster": {"nodes": nodes, "gpus_per_node": gpus, "gpu_type": gpu_type},
        "workload": workload,
        "overheads": ZERO,
    }
    prepared = prepare(ScenarioSpec.model_validate({"name": "replay", **spec}))
    result = run(prepared, "fifo-backfill")
    want = expected or {j.id: j.duration for j in prepared.jobs}
    assert all(r.queueing_time == 0 for r in result.jobs), "the cluster must be empty enough"
    for rec in result.jobs:
        assert rec.jct == pytest.approx(want[rec.job_id], rel=1e-9), rec.job_id
    return len(result.jobs)


@needs_traces
def test_philly_rigid_jct_equals_trace_duration() -> None:
    n = _assert_jct_is_duration(
        {"source": "philly", "path": "philly_pollux/philly.csv", "vc": "2869ce", "max_jobs": 150},
        nodes=64,
    )
    assert n == 150


@needs_traces
@pytest.mark.parametrize("source", ["itp", "itp_augmented"])
def test_itp_rigid_jct_equals_trace_duration(source: str) -> None:
    # augmented rows carry num_iteration of a model we have no profile for: the duration wins
    n = _assert_jct_is_duration(
        {"source": source, "path": "elasticflow_itp/augmented/cluster10.csv", "max_jobs": 120},
        nodes=128,
    )
    assert n == 120


@needs_traces
def test_tiresias_rigid_jct_equals_trace_duration() -> None:
    from gpuplan.scenarios.tiresias import load_tiresias

    rows = load_tiresias(TRACES / "tiresias" / "60_job.csv")  # type: ignore[operator]
    durations = {r.id: r.duration for r in rows}
    assert durations["tiresias-0"] == 164 and rows[0].iterations == 606  # the job 0
    n = _assert_jct_is_duration(
        {"source": "tiresias", "path": "tiresias/60_job.csv"}, nodes=64, expected=durations
    )  # type: ignore[arg-type]
    assert n == 60


@needs_traces
def test_gavel_rigid_jct_equals_steps_over_v100_rate() -> None:
    """Gavel rows have no duration: theirs is total_steps / V100 steps/s at scale_factor."""
    from gpuplan.scenarios.gavel import load_gavel_trace

    root: Path = TRACES / "gavel"  # type: ignore[operator]
    table = gavel_profiles(root / "simulation_throughputs.json")
    rows = load_gavel_trace(root / "physical_cluster" / "artifact_evaluation.trace")
    want = {
        r.id: r.iterations / table[(r.model, "v100")].rate(r.gpus)  # type: ignore[operator,index]
        for r in rows
    }
    n = _assert_jct_is_duration(
        {"source": "gavel", "path": "gavel/physical_cluster/artifact_evaluation.trace"},
        nodes=16,
        expected=want,
    )
    assert n == 15


@needs_traces
def test_pollux_rigid_jct_equals_steps_times_step_time() -> None:
    """Pollux rows have no duration: theirs is steps(batch) x fitted step time (packed)."""
    from gpuplan.scenarios.pollux import load_pollux_workload

    root: Path = TRACES / "pollux"  # type: ignore[operator]
    rows = load_pollux_workload(root / "workloads" / "workload-1.csv")[:40]
    want = {
        r.id: pollux_steps(root / "profiles" / r.model, r.batch_size)  # type: ignore[operator,arg-type]
        * pollux_step_time(
            root / "profiles" / r.model,
            r.batch_size,  # type: ignore[operator,arg-type]
            r.gpus,
            math.ceil(r.gpus / 4),
        )
        for r in rows
    }
    n = _assert_jct_is_duration(
        {"source": "pollux", "path": "pollux/workloads/workload-1.csv", "max_jobs": 40},
        nodes=400,
        gpus=4,
        expected=want,
        gpu_type="t4",
    )  # Pollux profiled T4s
    assert n == 40


def test_iterations_without_profile_or_duration_is_an_error_naming_the_row() -> None:
    row = TraceJob(
        id="j",
        submit_time=0,
        gpus=2,
        iterations=500.0,
        model="vgg19",
        source="/x/60_job.csv, row 7",
    )
    with pytest.raises(InputError) as err:
        map_rigid([row])
    assert str(err.value).startswith("/x/60_job.csv, row 7, field 'iterations':")
    assert "no throughput profile" in str(err.value)
    with pytest.raises(InputError, match="row 7"):
        map_afs([row], load_afs_zoo(), seed=0, cluster_gpus=64)
    # with a duration the row is fine and keeps it; iterations of an unprofiled model are unused
    timed = row.model_copy(update={"duration": 164.0})
    job = map_rigid([timed])[0]
    assert job.duration == 164.0 and job.total_iterations == pytest.approx(164.0 * 2)


# ----------------------------------------------------------------- differential: Tiresias
@needs_traces
@pytest.mark.parametrize(
    "policy", ["fifo", "fifo-backfill", "srtf", "srsf", "sjf", "tiresias-l", "dlas"]
)
def test_tiresias_60_jobs_on_16x4_every_policy_matches_upstream(policy: str) -> None:
    """Upstream Tiresias simulator, 60_job.csv on n16g4: 178.417 s average JCT for every
    scheme (64 GPUs: no job ever waits)."""
    spec = {
        "cluster": {"nodes": 16, "gpus_per_node": 4},
        "workload": {"source": "tiresias", "path": "tiresias/60_job.csv"},
        "overheads": ZERO,
        "policies": {
            "dlas": {
                "base": "tiresias-l",
                "service": "time",
                "thresholds": [3250, 7200, 18000],
                "promote_knob": None,
            }
        },
    }
    assert _avg_jct(_run(spec, policy)) == pytest.approx(178.417, abs=5e-4)


# ----------------------------------------------------------------- differential: Pollux
def _pollux(mapping: str) -> dict[str, Any]:
    return {
        "cluster": {"nodes": 16, "gpus_per_node": 4, "gpu_type": "t4"},
        "workload": {
            "source": "pollux",
            "path": "pollux/workloads/workload-1.csv",
            "mapping": mapping,
        },
        "overheads": POLLUX_OVERHEADS,
        "policies": {"pollux-tiresias": POLLUX_TIRESIAS},
    }


@needs_traces
def test_pollux_workload1_tiresias_within_10_percent() -> None:
    ours = _avg_jct(_run(_pollux("rigid"), "pollux-tiresias"))
    assert ours == pytest.approx(2473.65, rel=0.10)
    assert ours == pytest.approx(2442.54, rel=1e-3)  # measured, docs/results/fidelity.md


@needs_traces
def test_pollux_workload1_optimus_within_10_percent() -> None:
    ours = _avg_jct(_run(_pollux("elastic"), "optimus"))
    assert ours == pytest.approx(4087.06, rel=0.10)
    assert ours == pytest.approx(4172.61, rel=1e-3)  # measured, docs/results/fidelity.md


@needs_traces
def test_pollux_mapping_is_honoured() -> None:
    rigid = prepare(ScenarioSpec.model_validate({"name": "r", **_pollux("rigid")}))
    elastic = prepare(ScenarioSpec.model_validate({"name": "e", **_pollux("elastic")}))
    assert all(j.elasticity is None for j in rigid.jobs)
    by_id = {j.id: j for j in elastic.jobs}
    assert by_id["ncf-2"].elasticity.max_gpus == 1  # type: ignore[union-attr]
    cifar = by_id["cifar10-0"]  # batch 2048, cifar10's smallest per-GPU batch is 32
    assert cifar.elasticity.max_gpus == 64 and cifar.requested_gpus == 6  # type: ignore[union-attr]
    resizes = sum(r.resizes for r in run(elastic, "optimus").jobs)
    assert resizes > 0
    with pytest.raises(InputError, match=r"workload\.mapping"):
        prepare(ScenarioSpec.model_validate({"name": "a", **_pollux("afs")}))


@needs_traces
def test_pollux_batch_size_changes_the_work() -> None:
    """Same model, larger global batch: fewer steps, but more than the batch ratio implies
    (statistical efficiency below 1), so more samples."""
    ncf: Path = TRACES / "pollux" / "profiles" / "ncf"  # type: ignore[operator]
    small, large = pollux_steps(ncf, 1024), pollux_steps(ncf, 16384)
    assert large < small
    assert large * 16384 > small * 1024


POLLUX_ROUND_S = 60.0
"""Pollux's simulator steps the cluster 60 s at a time (``Cluster.step(60)``)."""


def _pollux_rounds_file(tmp_path: Path, mapping: str, rounds: bool) -> Path:
    """Workload 1 as a scenario *file*, as a user would write it (JSON is YAML)."""
    import json

    spec: dict[str, Any] = {"name": f"pollux-{mapping}", **_pollux(mapping)}
    spec["workload"]["path"] = str(TRACES / "pollux" / "workloads" / "workload-1.csv")  # type: ignore[operator]
    if rounds:
        spec["engine"] = {"round_interval_s": POLLUX_ROUND_S, "decide_only_at_rounds": True}
    path = tmp_path / f"pollux-{mapping}-{'rounds' if rounds else 'events'}.yaml"
    path.write_text(json.dumps(spec))
    return path


def _off_round(t: float, origin: float) -> bool:
    k = (t - origin) / POLLUX_ROUND_S
    return abs(k - round(k)) > 1e-9 * max(1.0, k)


def _change_times(path: Path, policy: str) -> tuple[float, list[float]]:
    """(first event time, times of every plan that changes an allocation) of one replay."""
    from gpuplan.executors.simulator.run import simulate

    prepared = prepare(str(path))
    engine = prepared.spec.engine
    times: list[float] = []

    def hook(view: Any, plan: Any) -> None:
        if plan.actions:
            times.append(plan.time)

    simulate(
        prepared.cluster,
        prepared.jobs,
        prepared.make_policy(policy),
        overheads=prepared.spec.overheads,
        events=prepared.events,
        round_interval_s=engine.round_interval_s,
        decide_only_at_rounds=engine.decide_only_at_rounds,
        sample_interval_s=None,
        on_plan=hook,
    )
    return min(j.submit_time for j in prepared.jobs), times


@needs_traces
@pytest.mark.parametrize(
    ("mapping", "policy"), [("rigid", "pollux-tiresias"), ("elastic", "optimus")]
)
def test_pollux_60s_rounds_change_allocations_only_at_round_boundaries(
    tmp_path: Path, mapping: str, policy: str
) -> None:
    """``engine: {round_interval_s: 60, decide_only_at_rounds: true}`` in a scenario file:
    every start, resize and preemption happens at a multiple of 60 s after the first event
    (the first submission), as in Pollux; the same file without it changes allocations at
    event times (completions mid-round), so the check can fail."""
    origin, times = _change_times(_pollux_rounds_file(tmp_path, mapping, True), policy)
    assert len(times) > 40  # every job starts at least once
    assert not [t for t in times if _off_round(t, origin)]
    _, free = _change_times(_pollux_rounds_file(tmp_path, mapping, False), policy)
    assert sum(_off_round(t, origin) for t in free) > 10

    result = run(prepare(str(_pollux_rounds_file(tmp_path, mapping, True))), policy)
    starts = [r.first_start for r in result.jobs]
    assert all(s is not None and not _off_round(s, origin) for s in starts)


@needs_traces
def test_pollux_workload1_with_60s_rounds_numbers() -> None:
    """Workload 1 with Pollux's 60-s rounds (docs/results/fidelity.md): Tiresias within
    0.3 % of upstream's 2,473.65 s; Optimus within 10 % of 4,087.06 s."""
    rounds = {"engine": {"round_interval_s": POLLUX_ROUND_S, "decide_only_at_rounds": True}}
    tiresias = _avg_jct(_run({**_pollux("rigid"), **rounds}, "pollux-tiresias"))
    optimus = _avg_jct(_run({**_pollux("elastic"), **rounds}, "optimus"))
    assert tiresias == pytest.approx(2473.65, rel=0.003)
    assert optimus == pytest.approx(4087.06, rel=0.10)
    assert (tiresias, optimus) == pytest.approx((2468.41, 4451.43), rel=1e-3)  # measured


# ----------------------------------------------------------------- differential: Gavel
GAVEL_CLUSTER = {
    "nodes": [
        {"name": "v0", "gpus": 2, "gpu_type": "v100"},
        {"name": "k0", "gpus": 4, "gpu_type": "k80"},
    ]
}


@needs_traces
def test_gavel_artifact_fifo_pinned() -> None:
    """Gavel reports 6,517.2 s average JCT and 8,982.9 s makespan. Ours is pinned: the
    makespan cannot be reached with simulation_throughputs.json, where ResNet-18 (bs 128) alone
    needs 19,944 s on a K80 and our best-fit placement (like Gavel's seeded random choice in
    our port) puts it there; see docs/results/fidelity.md, "Gavel"."""
    result = _run(
        {
            "cluster": GAVEL_CLUSTER,
            "overheads": ZERO,
            "workload": {
                "source": "gavel",
                "path": "gavel/physical_cluster/artifact_evaluation.trace",
            },
        },
        "fifo",
    )
    assert _avg_jct(result) == pytest.approx(5444.76, rel=1e-3)
    assert _makespan(result) == pytest.approx(19944.3, rel=1e-3)


@needs_traces
def test_gavel_fifo_reference_port_average_jct_within_10_percent() -> None:
    """Our port of Gavel's FIFO (tests/reference/gavel_fifo.py: random worker type with seed 0,
    360-s rounds) gets the average JCT within 10 % of Gavel's; its makespan has the same K80
    outlier as our engine."""
    from gpuplan.scenarios.gavel import load_gavel_trace
    from tests.reference.gavel_fifo import GavelJob, simulate_fifo

    root: Path = TRACES / "gavel"  # type: ignore[operator]
    table = gavel_profiles(root / "simulation_throughputs.json")
    rows = load_gavel_trace(root / "physical_cluster" / "artifact_evaluation.trace")

    def rate_of(model: str) -> Any:
        return lambda worker, k: table[(model, worker)].rate(k)

    jobs = [
        GavelJob(i, r.submit_time, r.iterations, r.gpus, rate_of(r.model))  # type: ignore[arg-type]
        for i, r in enumerate(rows)
    ]
    out = simulate_fifo(jobs, {"v100": 2, "k80": 4}, seed=0, round_s=360.0)
    avg = sum(f - rows[i].submit_time for i, (_, _, f) in out.items()) / len(out)
    assert avg == pytest.approx(6517.2, rel=0.10)
    assert avg == pytest.approx(6361.7, abs=0.1)
    assert max(f for _, _, f in out.values()) == pytest.approx(19944.3, abs=0.1)
