"""Aryl's Advanced scenario and no-lending twins as scenarios (issue 29, docs/results/aryl.md).

``workload.heterogeneous_share`` flags the bench's heterogeneous jobs (``heterogeneous_jobs``
with the scenario's seed), ``loaning.lend: false`` keeps the inference pool and its load but
no loan events, and a run of a loaning scenario reports the Tab. 5 columns the bench computes
(raw overall usage, usage bound, heterogeneous and mixed job counts).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpuplan import api
from gpuplan.cli import main
from gpuplan.models import InputError
from gpuplan.scenarios.build import resolve_scenario
from gpuplan.scenarios.inference import heterogeneous_jobs, loaning_scenario
from gpuplan.scenarios.loaning_usage import raw_overall
from gpuplan.scenarios.usage_bound import window_usage_bound


def _same_load(a: object, b: object) -> bool:
    """Two inference loads are equal (their series compared as arrays)."""
    return replace(a, series=None) == replace(b, series=None) and np.array_equal(
        a.series.values, b.series.values
    )


def _testbed(**workload: object) -> object:
    spec, _ = resolve_scenario("aryl-testbed")
    return spec.model_copy(
        update={"workload": spec.workload.model_copy(update=workload)}, deep=True
    )


def test_heterogeneous_share_flags_the_benchs_draw() -> None:
    """The flagged jobs are ``heterogeneous_jobs(jobs, share, seed)`` of the same mix, only
    among jobs not pinned to a GPU type; share 0 flags none."""
    for seed in (0, 3):
        plain = api.prepare(_testbed(), seed=seed).jobs
        flagged = api.prepare(_testbed(heterogeneous_share=0.1), seed=seed).jobs
        assert flagged == heterogeneous_jobs(plain, 0.1, seed)
        marked = [j for j in flagged if j.heterogeneous]
        assert len(marked) == round(0.1 * len(plain))
        assert all(j.gpu_type is None for j in marked)
    assert not any(j.heterogeneous for j in api.prepare(_testbed()).jobs)


@pytest.mark.parametrize("bad", ["-0.1", "1.5", ".nan", "lots"])
def test_a_bad_heterogeneous_share_is_one_line(tmp_path: Path, capsys, bad: str) -> None:
    spec, _ = resolve_scenario("aryl-testbed")
    raw = spec.model_dump(mode="json", exclude_defaults=True)
    raw["workload"]["heterogeneous_share"] = "@@"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw).replace("'@@'", bad))
    code = main(["simulate", "--scenario", str(path), "--policy", "fifo"])
    err = capsys.readouterr().err
    assert code == 2
    assert "workload.heterogeneous_share" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_lend_false_keeps_the_pool_and_load_without_loans() -> None:
    """The same cluster and load as the lending scenario, no events; a run reports usage over
    both pools and no reclaims."""
    spec, _ = resolve_scenario("aryl-testbed")
    lending = api.prepare(spec)
    quiet = api.prepare(
        spec.model_copy(update={"loaning": spec.loaning.model_copy(update={"lend": False})})
    )
    assert lending.events and not quiet.events
    assert quiet.cluster == lending.cluster and _same_load(quiet.load, lending.load)
    m = api.run(quiet, "fifo").loaning
    assert m is not None and m.reclaims == 0 and m.collateral_damage is None
    assert m.usage_overall > 0 and m.usage_overall_raw is not None


def test_a_loaning_run_reports_the_benchs_columns() -> None:
    """Raw overall usage, the usage bound and the job counts equal what the bench's functions
    give on the same run's hook (the bench imports the same functions)."""
    prepared = api.prepare("aryl-testbed")
    result = api.run(prepared, "aryl")
    m = result.loaning
    assert m is not None
    last = max(j.submit_time for j in prepared.jobs)
    training = prepared.cluster.gpus_in_pool("training")
    assert m.usage_bound == window_usage_bound(prepared.jobs, training, last)
    assert 0 < m.usage_overall_raw < 1 and m.usage_overall_raw != m.usage_overall
    assert m.heterogeneous_jobs == 0 and m.mixed_jobs == 0
    # raw_overall itself: a busy slot counts 4 T4 (8 T4 = 2 normalised slots)
    assert raw_overall.__module__ == "gpuplan.scenarios.loaning_usage"


def test_a_scenario_without_an_inference_pool_reports_no_loaning() -> None:
    assert api.run_scenario("philly-default", "fifo").loaning is None


@pytest.mark.traces
@pytest.mark.parametrize(
    ("name", "trace"),
    [
        ("aryl-philly-6c71a0", "Philly VC 6c71a0, days 18-32"),
        ("aryl-itp-cluster07", "ITP cluster07, days 14-21"),
    ],
)
def test_the_advanced_and_training_scenarios_are_the_benchs(
    traces: Path, name: str, trace: str
) -> None:
    """``-advanced`` builds the bench's Advanced jobs on its cluster and loan events;
    ``-training`` its cluster and load with no events (the bench's non-lending rows)."""
    from tests.bench.aryl import result_traces

    spec = result_traces()[trace]
    rows = spec["rows"]()
    origin = min(r.submit_time for r in rows)
    rows = [r.model_copy(update={"submit_time": r.submit_time - origin}) for r in rows]
    ref = loaning_scenario(rows, spec["training"], spec["inference"], seed=0, name=trace)
    adv = api.prepare(f"{name}-advanced")
    assert adv.cluster == ref.cluster
    assert adv.jobs == heterogeneous_jobs(ref.jobs, 0.1, 0)
    assert list(adv.events) == list(ref.events)
    alone = api.prepare(f"{name}-training")
    assert alone.cluster == ref.cluster and alone.jobs == ref.jobs
    assert not alone.events and _same_load(alone.load, ref.load)


def test_heterogeneous_share_is_validated_by_the_model() -> None:
    spec, _ = resolve_scenario("aryl-testbed")
    with pytest.raises((InputError, ValueError)):
        spec.workload.model_validate({**spec.workload.model_dump(), "heterogeneous_share": 2})
