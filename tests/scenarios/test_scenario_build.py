"""Scenario building: impossible input is an error naming the row and field; loaning blocks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpuplan import api
from gpuplan.models import InputError, LoanOffer, ReclaimRequest, ThroughputProfile
from gpuplan.scenarios.build import build, embedded_scenarios, resolve_scenario
from gpuplan.scenarios.inference import aryl_testbed
from gpuplan.scenarios.mapping import map_rigid
from gpuplan.scenarios.trace_job import TraceJob

from ..conftest import need_traces


def _write(tmp_path: Path, data: dict, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _build(tmp_path: Path, data: dict):
    spec, base = resolve_scenario(str(_write(tmp_path, data)))
    return build(spec, base)


def _error(tmp_path: Path, data: dict) -> InputError:
    with pytest.raises(InputError) as err:
        _build(tmp_path, data)
    return err.value


def _inline(*jobs: dict, cluster: dict | None = None, **extra: object) -> dict:
    return {
        "name": "t",
        "cluster": cluster or {"nodes": 2, "gpus_per_node": 4},
        "workload": {"source": "inline", "inline_jobs": list(jobs)},
        **extra,
    }


def _job(job_id: str, gpus: int, **kw: object) -> dict:
    return {"id": job_id, "submit_time": 0, "requested_gpus": gpus, "duration": 10, **kw}


# ------------------------------------------------------------------------- impossible jobs
def test_inline_job_larger_than_the_cluster_names_row_and_field(tmp_path: Path) -> None:
    err = _error(tmp_path, _inline(_job("a", 8), _job("big", 9)))
    assert (err.source, err.row, err.field) == ("workload.inline_jobs", 2, "requested_gpus")
    assert str(err).startswith("workload.inline_jobs, row 2, field 'requested_gpus': job big")
    assert "9 GPUs" in str(err) and "has 8" in str(err)
    assert len(_build(tmp_path, _inline(_job("a", 8))).jobs) == 1  # 8 of 8 fits


def test_elastic_minimum_is_what_must_fit(tmp_path: Path) -> None:
    ok = _job("e", 6, elasticity={"min_gpus": 6, "max_gpus": 64})
    assert _build(tmp_path, _inline(ok)).jobs[0].max_gpus == 64  # max may exceed the cluster
    bad = _job("e", 9, elasticity={"min_gpus": 9, "max_gpus": 64})
    err = _error(tmp_path, _inline(bad))
    assert (err.row, err.field) == (1, "elasticity.min_gpus")


def test_gpu_type_restricted_job_must_fit_that_type(tmp_path: Path) -> None:
    nodes = [
        {"name": "v0", "gpus": 4, "gpu_type": "v100"},
        {"name": "v1", "gpus": 4, "gpu_type": "v100"},
        {"name": "k0", "gpus": 2, "gpu_type": "k80"},
    ]
    cluster = {"nodes": nodes}
    assert _build(tmp_path, _inline(_job("k", 2, gpu_type="k80"), cluster=cluster)).jobs
    err = _error(tmp_path, _inline(_job("ok", 8), _job("k", 4, gpu_type="k80"), cluster=cluster))
    assert (err.row, err.field) == (2, "requested_gpus")
    assert "4 k80 GPUs" in err.message and "has 2" in err.message
    err = _error(tmp_path, _inline(_job("a", 1, gpu_type="a100"), cluster=cluster))
    assert (err.row, err.field) == (1, "gpu_type") and "a100" in err.message


def test_inference_nodes_do_not_count_without_a_loaning_block(tmp_path: Path) -> None:
    nodes = [
        {"name": "t0", "gpus": 4},
        {"name": "i0", "gpus": 4, "gpu_type": "t4", "pool": "inference"},
    ]
    err = _error(tmp_path, _inline(_job("a", 6), cluster={"nodes": nodes}))
    assert err.field == "requested_gpus" and "has 4" in err.message  # never lent: never usable


def test_duplicate_job_ids_are_an_error(tmp_path: Path) -> None:
    err = _error(tmp_path, _inline(_job("a", 1), _job("b", 1), _job("a", 2)))
    assert (err.source, err.row, err.field) == ("workload.inline_jobs", 3, "id")
    assert "duplicate job id 'a' (first at workload.inline_jobs, row 1)" in err.message


def test_invalid_inline_job_rows_count_from_one(tmp_path: Path) -> None:
    err = _error(tmp_path, _inline(_job("a", 1), {"id": "b", "submit_time": 0}))
    assert err.row == 2 and err.source == "workload.inline_jobs"


def test_trace_row_errors_read_file_row_field(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,10,1,10,vc\n2017-10-01 00:00:05,10,16,160,vc\n"
    )
    data = {
        "name": "t",
        "cluster": {"nodes": 2, "gpus_per_node": 4},
        "workload": {"source": "philly", "path": "t.csv"},
    }
    err = _error(tmp_path, data)
    # the same form as a parse error: "<path>, row <n>, field '<f>': ..." with the full path
    assert str(err).startswith(f"{csv}, row 2, field 'gpus': job philly-vc-2 needs at least 16")
    csv.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:00,ten,1,10,vc\n"
    )
    assert str(_error(tmp_path, data)).startswith(f"{csv}, row 1, field 'duration':")


def test_unknown_cluster_gpu_type_is_an_input_error(tmp_path: Path) -> None:
    err = _error(tmp_path, _inline(_job("a", 1), cluster={"nodes": 1, "gpu_type": "tpu"}))
    assert err.field.startswith("cluster.") and "tpu" in err.message


# ------------------------------------------------------------------------- Gavel profiles
def test_map_rigid_require_profile_rejects_unknown_models() -> None:
    prof = ThroughputProfile(points={1: 2.0, 4: 6.0})
    rows = [
        TraceJob(
            id="a", submit_time=0, gpus=1, iterations=10.0, model="m", source="/x/v.trace, row 1"
        ),
        TraceJob(
            id="b",
            submit_time=0,
            gpus=1,
            iterations=10.0,
            model="ResNet-9000",
            source="/x/v.trace, row 2",
        ),
    ]
    assert map_rigid(rows[:1], {"m": prof}, require_profile="job_type")[0].throughput is prof
    with pytest.raises(InputError) as err:
        map_rigid(rows, {"m": prof}, require_profile="job_type")
    assert str(err.value).startswith(
        "/x/v.trace, row 2, field 'job_type': no throughput profile for model 'ResNet-9000'"
    )
    # without require_profile the unknown model's iterations still cannot become time
    with pytest.raises(InputError) as err:
        map_rigid(rows, {"m": prof})
    assert str(err.value).startswith("/x/v.trace, row 2, field 'iterations':")
    timed = rows[1].model_copy(update={"duration": 50.0})
    assert map_rigid([timed], {"m": prof})[0].throughput.extrapolation == "linear"  # fallback


def test_gavel_scenario_with_unknown_job_type_fails(tmp_path: Path) -> None:
    need_traces("gavel", "simulation_throughputs.json")
    trace = tmp_path / "v.trace"
    trace.write_text(
        "ResNet-50 (batch size 64)\tpython3 main.py\t-n\t1\t100\t0\t1\n"
        "Frobnicator (batch size 8)\tpython3 f.py\t-n\t1\t100\t5\t1\n"
    )
    data = {
        "name": "g",
        "cluster": {"nodes": 1, "gpus_per_node": 4},
        "workload": {"source": "gavel", "path": "v.trace"},
    }
    err = _error(tmp_path, data)
    assert (err.source, err.field) == (f"{trace}, row 2", "job_type")
    assert "'Frobnicator (batch size 8)'" in err.message


# ------------------------------------------------------------------------- loaning
def test_aryl_testbed_scenario_is_the_python_testbed() -> None:
    assert "aryl-testbed" in embedded_scenarios()
    for seed in (0, 1):
        prepared = api.prepare("aryl-testbed", seed=seed)
        ref = aryl_testbed(seed)
        assert prepared.cluster == ref.cluster
        assert prepared.jobs == ref.jobs
        assert list(prepared.events) == ref.events
        assert replace(prepared.load, series=None) == replace(ref.load, series=None)
        assert np.array_equal(prepared.load.series.values, ref.load.series.values)
        assert {e.kind for e in prepared.events} == {"loan_offer", "reclaim_request"}


def _loaning(tmp_path: Path, **loaning: object) -> dict:
    (tmp_path / "qps.csv").write_text("t_s,qps\n0,2.0\n300,0.0\n")
    block = {
        "servers": 2,
        "gpus_per_server": 8,
        "qps": "qps.csv",
        "period_s": 600,
        "step_s": 300,
        "peak_busy": 1.0,
        "base_busy": 0.0,
        "headroom": 0.0,
        "horizon_s": 1200,
        **loaning,
    }
    return _inline(
        _job("a", 4),
        _job("b", 9, submit_time=1),
        cluster={"nodes": 2, "gpus_per_node": 4},
        loaning=block,
    )


def test_loaning_block_builds_pools_and_events_from_its_series(tmp_path: Path) -> None:
    built = _build(tmp_path, _loaning(tmp_path))
    pools = [(n.name, n.pool, n.gpus, n.gpu_type) for n in built.cluster.nodes]
    assert pools == [
        ("t000", "training", 4, "v100"),
        ("t001", "training", 4, "v100"),
        ("i000", "inference", 2, "t4-norm"),
        ("i001", "inference", 2, "t4-norm"),
    ]
    # series 2 then 0 QPS over a 600 s period, peak 2 -> both servers needed, then none
    assert built.events == [
        LoanOffer(time=300, count=2),
        ReclaimRequest(time=600, count=2),
        LoanOffer(time=900, count=2),
    ]
    # job b (9 GPUs) fits only with the loaned servers: 8 training + 4 normalised slots
    assert [j.id for j in built.jobs] == ["a", "b"]
    phys = _build(tmp_path, _loaning(tmp_path, normalise=False, ratio=0.5))
    assert {n.gpus for n in phys.cluster.nodes if n.pool == "inference"} == {8}
    assert phys.cluster.gpu_type("t4").relative_speed == pytest.approx(0.5)


def test_run_passes_loan_events_and_reports_loaning_metrics(tmp_path: Path) -> None:
    prepared = api.prepare(str(_write(tmp_path, _loaning(tmp_path))))
    result = api.run(prepared, "fifo-backfill")
    rec = {r.job_id: r for r in result.jobs}
    # b (9 GPUs) can only start when both servers are lent at t = 300
    assert rec["b"].first_start == 300.0 and rec["b"].finish_time is not None
    m = result.loaning
    assert m is not None and (m.loan_offers, m.reclaims, m.servers_reclaimed) == (2, 1, 2)
    assert m.loaned_gpu_s == 0.0  # usage stops at the last submission (t = 1)
    plain = api.run(
        api.PreparedScenario(
            prepared.spec.model_copy(update={"loaning": None}), prepared.cluster, prepared.jobs
        ),
        "fifo-backfill",
    )
    assert plain.loaning is None and plain.rejected == []
    assert {r.job_id: r.finish_time for r in plain.jobs}["b"] is None  # no loans: never runs


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"servers": 0}, "loaning.servers"),
        ({"peak_busy": 1.5}, "loaning.peak_busy"),
        ({"ratio": -1}, "loaning.ratio"),
        ({"step_s": 0}, "loaning.step_s"),
        ({"surge": 3}, "loaning.surge"),
        ({"base_busy": 0.9, "peak_busy": 0.5}, "loaning"),
        ({"gpu_type": "tpu"}, "loaning.gpu_type"),
        ({"qps": "nope.csv"}, "loaning.qps"),
    ],
)
def test_malformed_loaning_block_names_the_field(tmp_path: Path, patch: dict, field: str) -> None:
    err = _error(tmp_path, _loaning(tmp_path, **patch))
    assert err.field == field
    if field == "loaning.qps":
        assert "nope.csv" in str(err) and "not found" in str(err)
    if field == "loaning":
        assert "base_busy" in err.message


def test_loaning_needs_a_server_count_for_the_training_pool(tmp_path: Path) -> None:
    data = _loaning(tmp_path)
    data["cluster"] = {"nodes": [{"name": "t0", "gpus": 8}]}
    assert _error(tmp_path, data).field == "cluster.nodes"


def test_bad_qps_file_is_an_input_error(tmp_path: Path) -> None:
    data = _loaning(tmp_path)
    (tmp_path / "qps.csv").write_text("t_s,qps\n0,lots\n")
    err = _error(tmp_path, data)
    # the QPS file's row and column (the row checks of tests/scenarios/test_work_budget.py)
    assert err.field == "qps" and err.row == 2 and str(tmp_path / "qps.csv") in str(err)


def test_elastic_mapping_is_applied(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:00,10,2,20,vc\n"
        "2017-10-01 00:00:05,10,6,60,vc\n"
    )
    data = {
        "name": "t",
        "cluster": {"nodes": 2, "gpus_per_node": 4},
        "workload": {"source": "philly", "path": "t.csv", "mapping": "elastic"},
    }
    jobs = _build(tmp_path, data).jobs
    # [1, 2 x request] capped at the cluster's 8 GPUs (before: silently rigid)
    assert [(j.min_gpus, j.requested_gpus, j.max_gpus) for j in jobs] == [(1, 2, 4), (1, 6, 8)]


# ------------------------------------------------------------------------- embedded ITP scenarios
def test_embedded_itp_scenarios_follow_the_sizing_rule() -> None:
    """Each itp-clusterNN scenario replays its whole raw file rigidly on the cluster the
    documented rule (scenarios/itp_sizing.py) derives from that file."""
    from gpuplan.scenarios.build import load_rows
    from gpuplan.scenarios.itp_sizing import itp_cluster_nodes, offered_load

    need_traces("elasticflow_itp")
    names = [n for n in embedded_scenarios() if n.startswith("itp-")]
    assert names == [f"itp-cluster{c}" for c in ("01", "04", "05", "07", "09", "10")]
    for name in names:
        spec, base = resolve_scenario(name)
        rows = load_rows(spec.workload, base, spec.seed)
        assert spec.workload.mapping == "rigid" and spec.cluster.gpus_per_node == 8
        assert spec.cluster.nodes == itp_cluster_nodes(rows), name
        capacity = spec.cluster.nodes * 8  # type: ignore[operator]
        assert offered_load(rows) <= 0.8 * capacity or max(r.gpus for r in rows) > capacity - 8
