"""The work budget and the models' bounds (issue 23, items 1 and 3).

Each input that used to hang (memory growing without bound), end in an internal error or be
accepted as nonsense is reproduced through the real CLI with a scenario (or state, QPS, sweep)
file and must now be refused in one line naming the file and the field, exit 2, before any
simulation; a legitimate value next to it must still run. The budget's arithmetic is unit
tested, and checked against real runs (the span estimate is an upper bound of the simulated
span, the sample estimate of the samples taken).
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan import cli
from gpuplan.api import prepare, run
from gpuplan.models import Cluster, InputError, JobSpec, ScenarioSpec, ThroughputProfile
from gpuplan.models.bounds import MAX_OVERHEAD_S, SIMULATION_HORIZON_S
from gpuplan.scenarios.build import _usable_nodes, embedded_scenarios
from gpuplan.scenarios.work_budget import (
    Budget,
    check,
    check_jobs,
    estimate,
    horizon_s,
    job_span_s,
)

HANG_S = 120
"""A CLI call still running after this is a hang (each one here takes about a second)."""

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 1,
    "cluster": {"nodes": 2, "gpus_per_node": 4},
    "workload": {
        "source": "inline",
        "inline_jobs": [
            {"id": "a", "submit_time": 0, "requested_gpus": 2, "duration": 10},
            {
                "id": "b",
                "submit_time": 1,
                "requested_gpus": 4,
                "duration": 5,
                "elasticity": {"min_gpus": 1, "max_gpus": 8},
            },
        ],
    },
    "overheads": {"start_s": 0, "restart_s": 1},
}
"""Two jobs, about 10 s of simulated time."""

LOANING: dict[str, Any] = {
    **TINY,
    "name": "tiny-loaning",
    "cluster": {"nodes": 2, "gpus_per_node": 8},
    "loaning": {"servers": 2, "period_s": 3600, "horizon_s": 3600},
}


@contextlib.contextmanager
def _no_hang() -> Iterator[None]:
    def fail(*_: object) -> None:
        raise AssertionError(f"still running after {HANG_S} s: a hang")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with _no_hang():
        code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _with(base: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with ``dotted`` (``a.b.0.c``) set to ``value``."""
    doc = json.loads(json.dumps(base))
    node: Any = doc
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "s.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc))
    return path


def _refused(
    capsys: pytest.CaptureFixture[str], path: Path, field: str, *argv: str, file: Path | None = None
) -> str:
    """Simulate ``path``: exit 2, one line naming ``file`` (default ``path``) and ``field``."""
    argv = argv or ("simulate", "--scenario", str(path), "--policy", "fifo")
    code, out, err = _cli(capsys, *argv)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert str(file or path) in err and f"'{field}'" in err, err
    assert "Traceback" not in err and "internal error" not in err
    return err


def _runs(capsys: pytest.CaptureFixture[str], path: Path, policy: str = "fifo") -> dict:
    code, out, err = _cli(capsys, "simulate", "--scenario", str(path), "--policy", policy, "--json")
    assert code == 0, err
    return json.loads(out)


# ------------------------------------------------------------------ hangs: the work budget
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("engine.sample_interval_s", 1e-6),
        ("engine.round_interval_s", 1e-6),
    ],
)
def test_tiny_engine_intervals_are_refused(
    capsys, tmp_path: Path, field: str, value: float
) -> None:
    err = _refused(capsys, _write(tmp_path, _with(TINY, field, value)), field)
    assert "work budget" in err


def test_legitimate_fine_sampling_of_a_short_run_still_runs(capsys, tmp_path: Path) -> None:
    """sample_interval_s 0.001 on two jobs lasting ~10 s is ~10,000 samples: it runs, and
    takes (about) one sample per millisecond of the run."""
    result = _runs(capsys, _write(tmp_path, _with(TINY, "engine.sample_interval_s", 0.001)))
    assert result["unfinished"] == 0
    path = _write(tmp_path, _with(TINY, "engine.round_interval_s", 0.01), "r.json")
    assert _runs(capsys, path)["unfinished"] == 0


def _philly_default(tmp_path: Path, interval: float) -> Path:
    embedded = embedded_scenarios()["philly-default"]
    doc = yaml.safe_load(embedded.read_text())
    doc["workload"]["path"] = str(embedded.parent / doc["workload"]["path"])
    doc["engine"]["sample_interval_s"] = interval
    return _write(tmp_path, doc, "philly.yaml")


def test_philly_default_sampled_every_millisecond_is_refused(capsys, tmp_path: Path) -> None:
    """The embedded week-long scenario at 0.001 s: ~3e9 samples; at its own 600 s it runs
    (the budget passes it: checked on the prepared scenario, not simulated here)."""
    _refused(capsys, _philly_default(tmp_path, 0.001), "engine.sample_interval_s")
    prepared = prepare(str(_philly_default(tmp_path, 600)))
    work = estimate(
        prepared.spec,
        prepared.cluster,
        prepared.jobs,
        _usable_nodes(prepared.cluster, prepared.spec),
    )
    check(prepared.spec, work)
    assert 1_000 < work.samples < Budget().samples


def test_sweep_override_goes_through_the_budget(capsys, tmp_path: Path) -> None:
    scenario = _write(tmp_path, TINY, "tiny.yaml")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "scenarios": [
                    {"scenario": str(scenario), "overrides": {"engine.sample_interval_s": 1e-9}}
                ],
                "policies": ["fifo"],
            }
        )
    )
    code, _, err = _cli(
        capsys, "sweep", str(sweep), "--out", str(tmp_path / "out"), "--workers", "1"
    )
    # one line, before any run and its progress line, naming the sweep file, run and field
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert str(sweep) in err and "run tiny__fifo__seed0" in err, err
    assert "'engine.sample_interval_s'" in err and "work budget" in err
    runs = tmp_path / "out" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_a_sweep_rule_override_is_refused_before_any_run(capsys, tmp_path: Path) -> None:
    """A top-level ``overrides`` rule for one seed only: the seeds before it would have run
    (and printed progress) before the refusal; now nothing runs."""
    scenario = _write(tmp_path, TINY, "tiny.yaml")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "scenarios": [str(scenario)],
                "policies": ["fifo"],
                "seeds": [0, 1, 2, 3],
                "overrides": [{"seed": 3, "set": {"engine.sample_interval_s": 1e-9}}],
            }
        )
    )
    code, _, err = _cli(
        capsys, "sweep", str(sweep), "--out", str(tmp_path / "out"), "--workers", "1"
    )
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert str(sweep) in err and "run tiny__fifo__seed3" in err, err
    assert "'engine.sample_interval_s'" in err
    runs = tmp_path / "out" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_a_generated_workload_is_budgeted_on_its_declared_count(capsys, tmp_path: Path) -> None:
    """Ten million synthetic jobs (the model's bound) grew memory by more than 1.5 GiB before
    the budget saw them: the declared count is now checked before anything is generated."""
    doc = {
        **TINY,
        "workload": {
            "source": "synthetic",
            "jobs": 10_000_000,
            "arrival_rate_per_h": 10,
            "mean_duration_s": 60,
        },
    }
    err = _refused(capsys, _write(tmp_path, doc), "workload.jobs")
    assert "1,000,000 jobs" in err
    with pytest.raises(InputError, match="work budget"):
        check_jobs(Budget().jobs + 1, source=None, field="workload.jobs")
    check_jobs(Budget().jobs, source=None, field="workload.jobs")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("count", 1.8402052446610772e16),
        ("count", 10_000_000),
        ("count", 6.5),
        ("count", 0),
        ("count", True),
        ("elastic", 181),
        ("elastic", "1"),
        ("submit_span_s", float("inf")),
    ],
)
def test_aryl_testbed_counts_are_checked_naming_the_file(
    capsys, tmp_path: Path, field: str, value: Any
) -> None:
    """``jobs.count`` 1.8e16 in an Aryl testbed file was refused only as "input too large
    (MemoryError)", naming no file."""
    from gpuplan.scenarios.inference import _data_file

    testbed = json.loads(_data_file("aryl_testbed.json").read_text())
    testbed["jobs"][field] = value
    data = tmp_path / "testbed.json"
    data.write_text(json.dumps(testbed))
    doc = {
        **TINY,
        "cluster": {"nodes": 4, "gpus_per_node": 8, "gpu_type": "v100"},
        "workload": {"source": "aryl_testbed", "path": str(data), "mapping": "aryl"},
    }
    _refused(capsys, _write(tmp_path, doc), f"jobs.{field}", file=data)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("loaning.step_s", 1e-6),
        ("loaning.horizon_s", 1e300),
        ("loaning.servers", 131072),
    ],
)
def test_loaning_work_is_bounded(capsys, tmp_path: Path, field: str, value: float) -> None:
    _refused(capsys, _write(tmp_path, _with(LOANING, field, value)), field)


def test_loaning_nearby_values_still_run(capsys, tmp_path: Path) -> None:
    doc = _with(_with(LOANING, "loaning.step_s", 60), "loaning.servers", 16)
    assert _runs(capsys, _write(tmp_path, doc))["unfinished"] == 0


def test_loaning_step_budget_names_the_horizon_when_the_step_is_not_small(tmp_path: Path) -> None:
    """A default step over a 20-year loaning horizon: 2.1 million steps; the horizon is what
    to change."""
    spec = ScenarioSpec.model_validate(_with(LOANING, "loaning.horizon_s", 6e8))
    prepared = prepare(ScenarioSpec.model_validate(LOANING))  # the same jobs and cluster
    work = estimate(spec, prepared.cluster, prepared.jobs, _usable_nodes(prepared.cluster, spec))
    assert work.loan_steps == 2_000_000
    with pytest.raises(InputError) as err:
        check(spec, work, Budget(loan_steps=1_000_000))
    assert err.value.field == "loaning.horizon_s"


def test_a_twenty_year_start_pause_is_refused_and_a_day_is_not(capsys, tmp_path: Path) -> None:
    """overheads.start_s 630720000 is within the 20-year time bound but pushed two 10-s jobs to
    the simulator's 40-year stop, sampled hourly: overheads are bounded by a day."""
    _refused(
        capsys, _write(tmp_path, _with(TINY, "overheads.start_s", 630720000)), "overheads.start_s"
    )
    result = _runs(
        capsys, _write(tmp_path, _with(TINY, "overheads.start_s", MAX_OVERHEAD_S), "day.json")
    )
    assert result["unfinished"] == 0
    assert result["makespan_s"] >= MAX_OVERHEAD_S


def test_an_allowed_list_of_200000_entries_is_refused(capsys, tmp_path: Path) -> None:
    allowed = list(range(1, 200_001))
    doc = _with(
        TINY,
        "workload.inline_jobs.1.elasticity",
        {"min_gpus": 1, "max_gpus": 1 << 20, "allowed": allowed},
    )
    err = _refused(capsys, _write(tmp_path, doc), "elasticity.allowed")
    assert "row 2" in err
    doc = _with(
        TINY,
        "workload.inline_jobs.1.elasticity",
        {"min_gpus": 1, "max_gpus": 4096, "allowed": list(range(1, 4097))},
    )
    assert _runs(capsys, _write(tmp_path, doc, "ok.json"))["unfinished"] == 0


def test_too_many_candidate_sizes_name_the_job(tmp_path: Path) -> None:
    """Each job's counts are clipped to the usable GPUs; over the limit, the biggest
    contributor's row and field are named."""
    spec = ScenarioSpec.model_validate(TINY)
    prepared = prepare(spec)
    work = estimate(spec, prepared.cluster, prepared.jobs, _usable_nodes(prepared.cluster, spec))
    assert work.candidates == 1 + 8 and work.candidates_job == 1
    with pytest.raises(InputError) as err:
        check(spec, work, Budget(candidates=5), job_field=("f", 2, "elasticity.max_gpus"))
    assert (err.value.source, err.value.row, err.value.field) == ("f", 2, "elasticity.max_gpus")


# ------------------------------------------------------------------ nonsense refused
@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("workload.size_mix", {1: 1e308, 2: 1e308}, "workload.size_mix"),
        ("workload.size_mix", {10**9: 1.0}, "workload.size_mix"),
        ("workload.size_mix", {10**12: 1.0}, "workload.size_mix"),
        ("workload.time_scale", 1e-300, "workload.time_scale"),
        ("workload.time_scale", 1e300, "workload.time_scale"),
        ("workload.arrival_rate_per_h", 1e300, "workload.arrival_rate_per_h"),
    ],
)
def test_synthetic_nonsense_is_refused(
    capsys, tmp_path: Path, field: str, value: Any, named: str
) -> None:
    doc = {
        **TINY,
        "workload": {
            "source": "synthetic",
            "jobs": 5,
            "arrival_rate_per_h": 10,
            "mean_duration_s": 60,
            "size_mix": {1: 1, 2: 1},
        },
    }
    _refused(capsys, _write(tmp_path, _with(doc, field, value)), named)
    fine = _with(_with(doc, "workload.size_mix", {1: 1e9, 2: 1}), "workload.time_scale", 1e-4)
    assert _runs(capsys, _write(tmp_path, fine, "fine.json"))["unfinished"] == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("loaning.ratio", 1e300),
        ("loaning.ratio", 1e-300),
        ("loaning.headroom", 1e300),
    ],
)
def test_loaning_nonsense_is_refused(capsys, tmp_path: Path, field: str, value: float) -> None:
    _refused(capsys, _write(tmp_path, _with(LOANING, field, value)), field)


@pytest.mark.parametrize(
    "field", ["overheads.restart_s", "overheads.migrate_s", "learning.measure_s"]
)
def test_huge_pauses_are_refused(capsys, tmp_path: Path, field: str) -> None:
    _refused(capsys, _write(tmp_path, _with(TINY, field, 1e300)), field)


@pytest.mark.parametrize(
    ("points", "why"),
    [
        ({"1": 1.0, "2": 1e308}, "throughput"),
        ({"1": 1.0, "8": 1000.0}, "linear scaling"),
        ({"1000000000": 1.0}, "GPU count"),
        ({"1000000000000": 1.0}, "GPU count"),
    ],
)
def test_absurd_throughput_points_are_refused(
    capsys, tmp_path: Path, points: dict, why: str
) -> None:
    doc = _with(TINY, "workload.inline_jobs.0.throughput", {"points": points})
    err = _refused(capsys, _write(tmp_path, doc), "throughput.points")
    assert "row 1" in err and why in err
    # Gavel's measured profiles are superlinear up to 1.57x: that much is fine
    doc = _with(
        TINY,
        "workload.inline_jobs.0.throughput",
        {"points": {"1": 1.0, "2": 3.1}, "extrapolation": "flat"},
    )
    assert _runs(capsys, _write(tmp_path, doc, "ok.json"))["unfinished"] == 0


def _qps_scenario(tmp_path: Path, rows: str) -> Path:
    (tmp_path / "qps.csv").write_text("t_s,qps\n" + rows)
    return _write(tmp_path, _with(LOANING, "loaning.qps", "qps.csv"))


@pytest.mark.parametrize(
    ("rows", "field", "row"),
    [
        ("0,1\n300,nan\n", "qps", 3),
        ("0,1\n300,1e308\n", "qps", 3),
        ("0,1\n300,-2\n", "qps", 3),
        ("-300,1\n0,2\n", "t_s", 2),
        ("0,1\n600,2\n300,3\n", "t_s", 4),
        ("0,1\n0,2\n", "t_s", 3),
        ("0,1\ninf,2\n", "t_s", 3),
    ],
)
def test_bad_qps_rows_are_refused(capsys, tmp_path: Path, rows: str, field: str, row: int) -> None:
    path = _qps_scenario(tmp_path, rows)
    err = _refused(capsys, path, field, file=tmp_path / "qps.csv")
    assert f"row {row}," in err


@pytest.mark.parametrize(
    ("value", "column"), [("nan", "value"), ("1e308", "value"), ("-inf", "value")]
)
def test_bad_raw_trace_cells_are_refused(capsys, tmp_path: Path, value: str, column: str) -> None:
    """The raw GenAI trace format (Unix timestamps, one row per container and instant)."""
    (tmp_path / "qps.csv").write_text(
        "timestamp_anon,value,container_ip,request_type\n"
        "1662859176.0,0.09,,API Requests\n"
        f"1662859233.0,{value},,API Requests\n"
    )
    path = _write(tmp_path, _with(LOANING, "loaning.qps", "qps.csv"))
    err = _refused(capsys, path, column, file=tmp_path / "qps.csv")
    assert "row 3," in err


def test_a_good_qps_series_runs(capsys, tmp_path: Path) -> None:
    path = _qps_scenario(tmp_path, "0,1\n300,5\n600,2\n")
    assert _runs(capsys, path)["unfinished"] == 0


def test_a_qps_step_making_billions_of_bins_is_refused(capsys, tmp_path: Path) -> None:
    (tmp_path / "qps.csv").write_text("t_s,qps\n0,1\n600000000,2\n")
    doc = _with(_with(LOANING, "loaning.qps", "qps.csv"), "loaning.qps_step_s", 0.001)
    _refused(capsys, _write(tmp_path, doc), "loaning.qps_step_s", file=tmp_path / "qps.csv")


STATE: dict[str, Any] = {
    "now": 10.0,
    "cluster": {"nodes": [{"name": "n1", "gpus": 4}]},
    "jobs": [
        {
            "spec": {"id": "a", "submit_time": 0, "requested_gpus": 2, "duration": 100},
            "allocation": {"job_id": "a", "placement": {"n1": [0, 1]}},
        }
    ],
}


def test_an_allocation_with_an_empty_placement_is_refused(capsys, tmp_path: Path) -> None:
    path = _write(tmp_path, _with(STATE, "jobs.0.allocation.placement", {}), "state.json")
    code, out, err = _cli(capsys, "plan", "--state", str(path), "--policy", "fifo")
    assert code == 2 and err.count("\n") == 1, err
    assert str(path) in err and "placement" in err and "empty" in err
    good = _write(tmp_path, STATE, "good.json")
    code, out, err = _cli(capsys, "plan", "--state", str(good), "--policy", "fifo")
    assert code == 0 and json.loads(out)["allocations"]["a"]["placement"] == {"n1": [0, 1]}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("jobs.0.allocation.efficiency", 1e308),
        ("cluster.gpu_types", {"v100": {"name": "v100", "relative_speed": 1e300}}),
        ("jobs.0.pending_time", 1e300),
    ],
)
def test_state_nonsense_is_refused(capsys, tmp_path: Path, field: str, value: Any) -> None:
    path = _write(tmp_path, _with(STATE, field, value), "state.json")
    code, _, err = _cli(capsys, "plan", "--state", str(path), "--policy", "fifo")
    assert code == 2 and err.count("\n") == 1 and str(path) in err, err


def test_a_scenario_name_of_5000_characters_is_refused(capsys, tmp_path: Path) -> None:
    _refused(capsys, _write(tmp_path, _with(TINY, "name", "x" * 5000)), "name")


# ------------------------------------------------------------------ the arithmetic
def _job(job_id: str, submit: float, gpus: int, duration: float, **extra: Any) -> JobSpec:
    return JobSpec(id=job_id, submit_time=submit, requested_gpus=gpus, duration=duration, **extra)


def test_job_span_is_alone_at_minimum_size_on_the_slowest_type() -> None:
    cluster = Cluster.uniform(1, 4, "v100")
    job = _job("a", 0, 4, 100, elasticity={"min_gpus": 1, "max_gpus": 4})
    # linear profile, 4 GPUs x 100 s = 400 iterations; alone on 1 GPU: 400 s, + 5 s start
    assert job_span_s(job, cluster, cluster.nodes, start_s=5) == pytest.approx(405)
    mixed = Cluster(
        nodes=[
            *Cluster.uniform(1, 4, "v100").nodes,
            Cluster.uniform(1, 4, "k80").nodes[0].model_copy(update={"name": "k"}),
        ]
    )
    # a k80 is 1/4 of a v100: four times as long
    assert job_span_s(job, mixed, mixed.nodes) == pytest.approx(1600)
    pinned = job.model_copy(update={"gpu_type": "v100"})
    assert job_span_s(pinned, mixed, mixed.nodes) == pytest.approx(400)
    spread = _job(
        "s",
        0,
        2,
        10,
        throughput=ThroughputProfile(points={1: 1.0, 2: 2.0}, default_spread_factor=0.5),
    )
    # 20 iterations at 2 GPUs (rate 2) with the 0.5 spread factor: 20 s
    assert job_span_s(spread, cluster, cluster.nodes) == pytest.approx(20)


def test_horizon_is_last_arrival_plus_twice_the_area_plus_the_longest_job() -> None:
    cluster = Cluster.uniform(2, 4)  # 8 GPUs
    jobs = [_job("a", 0, 2, 100), _job("b", 50, 4, 10), _job("c", 20, 8, 30)]
    area = (100 * 2 + 10 * 4 + 30 * 8) / 8
    assert horizon_s(jobs, cluster, cluster.nodes) == pytest.approx(50 + 2 * area + 100)
    # a start pause lengthens every job once
    with_start = horizon_s(jobs, cluster, cluster.nodes, start_s=10)
    area = (110 * 2 + 20 * 4 + 40 * 8) / 8
    assert with_start == pytest.approx(50 + 2 * area + 110)
    # the simulator's stop caps it
    slow = _job("z", 0, 1, 1, throughput=ThroughputProfile(points={1: 1e-9}), total_iterations=1e15)
    assert horizon_s([slow], cluster, cluster.nodes) == SIMULATION_HORIZON_S


def test_counts_follow_the_horizon_and_saturate() -> None:
    spec = ScenarioSpec.model_validate(_with(TINY, "engine.sample_interval_s", 1e-300))
    prepared = prepare(ScenarioSpec.model_validate(TINY))
    nodes = _usable_nodes(prepared.cluster, spec)
    work = estimate(spec, prepared.cluster, prepared.jobs, nodes)
    assert work.samples > 1 << 61  # saturated, not an OverflowError
    spec = ScenarioSpec.model_validate(
        _with(_with(TINY, "engine.sample_interval_s", 2.0), "engine.round_interval_s", 0.5)
    )
    work = estimate(spec, prepared.cluster, prepared.jobs, nodes)
    assert work.samples == math.ceil(work.horizon_s / 2.0) + 1
    assert work.rounds == math.ceil(work.horizon_s / 0.5)
    assert work.events == 2 * 2 + work.rounds
    with pytest.raises(InputError) as err:
        check(spec, work, Budget(samples=work.samples - 1))
    assert err.value.field == "engine.sample_interval_s"
    with pytest.raises(InputError) as err:
        check(spec, work, Budget(rounds=work.rounds - 1))
    assert err.value.field == "engine.round_interval_s"
    with pytest.raises(InputError) as err:
        check(spec, work, Budget(events=work.events - 1))
    assert err.value.field == "engine.round_interval_s"  # the largest part
    check(spec, work, Budget(samples=work.samples, rounds=work.rounds, events=work.events))


def test_loaning_counts() -> None:
    spec = ScenarioSpec.model_validate(_with(LOANING, "loaning.step_s", 100))
    prepared = prepare(spec)
    work = estimate(spec, prepared.cluster, prepared.jobs, _usable_nodes(prepared.cluster, spec))
    assert work.loan_steps == 36 and work.loan_server_steps == 72
    assert work.horizon_s >= 3600  # the run lasts until the last loan event
    with pytest.raises(InputError) as err:
        check(spec, work, Budget(loan_steps=35))
    assert err.value.field == "loaning.step_s"
    with pytest.raises(InputError) as err:
        check(spec, work, Budget(loan_server_steps=71))
    assert err.value.field == "loaning.servers"


@pytest.mark.parametrize(
    ("scenario", "policies"),
    [
        ("aryl-testbed", ("aryl-sjf", "aryl")),
        ("sidecar-wl2", ("fifo", "srtf")),
    ],
)
def test_estimates_bound_real_runs(scenario: str, policies: tuple[str, ...]) -> None:
    """The horizon is an upper estimate of the simulated span, and the sample count of the
    samples taken, on embedded scenarios."""
    prepared = prepare(scenario)
    work = estimate(
        prepared.spec,
        prepared.cluster,
        prepared.jobs,
        _usable_nodes(prepared.cluster, prepared.spec),
    )
    for policy in policies:
        result = run(prepared, policy)
        assert result.end_time <= work.horizon_s
        assert len(result.samples) <= work.samples


def test_every_embedded_scenario_is_within_the_budget() -> None:
    """Checked by build() on every prepare: each embedded scenario that prepares here passes
    (the ones needing the shared traces are skipped when those are absent)."""
    for name in ("philly-default", "aryl-testbed", "ojpp-mixed", "sidecar-wl1"):
        prepare(name)
