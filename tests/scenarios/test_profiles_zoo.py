"""Profiles from the shared tables, the AFS zoo, the trace mappings and the synthetic generator."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.models.errors import InputError
from gpuplan.models.throughput import ThroughputProfile
from gpuplan.scenarios.mapping import afs_candidates, map_afs, map_elastic, map_rigid
from gpuplan.scenarios.profiles import (
    elasticflow_profile,
    gavel_colocation,
    gavel_profiles,
    pollux_default_local_bsz,
    pollux_profile,
)
from gpuplan.scenarios.synthetic import synthetic_jobs
from gpuplan.scenarios.trace_job import TraceJob
from gpuplan.scenarios.zoo import (
    AFS_TABLE4,
    build_afs_zoo,
    load_afs_zoo,
    peak_curve,
    zoo_document,
)

TABLE4_MAX = {
    "VGG16": 8,
    "GoogLeNet": 20,
    "Inception-v4": 52,
    "ResNet-50": 28,
    "DCGAN": 20,
    "Video Prediction": 28,
    "Chatbot": 4,
    "Deep Speech 2": 20,
    "Transformer": 44,
}


# --------------------------------------------------------------------------- traces
# ``traces`` is tests/conftest.py's fixture: the one way tests find the shared traces.


@pytest.fixture(scope="module")
def gavel(traces: Path) -> dict:
    return gavel_profiles(traces / "gavel" / "simulation_throughputs.json")


@pytest.fixture(scope="module")
def zoo() -> dict:
    return load_afs_zoo()


def _ef(traces: Path, name: str) -> Path:
    return traces / "elasticflow_profiles" / "throughputs_A100" / f"{name}.csv"


# --------------------------------------------------------------------------- Gavel
@pytest.mark.traces
def test_gavel_isolated_points_match_sources_md(gavel: dict) -> None:
    rn50 = gavel[("ResNet-50 (batch size 64)", "v100")]
    assert [rn50.points[c] for c in (1, 2, 4, 8)] == pytest.approx(
        [4.40, 7.92, 9.45, 17.30], abs=0.01
    )
    tr = gavel[("Transformer (batch size 128)", "v100")]
    assert [tr.points[c] for c in (1, 2, 4, 8)] == pytest.approx(
        [5.45, 10.07, 14.18, 30.88], abs=0.01
    )
    assert rn50.reference_gpu == "v100"
    assert "gavel/simulation_throughputs.json" in rn50.source
    assert "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c" in rn50.source


@pytest.mark.traces
def test_gavel_spread_factor_is_a_clamped_ratio(traces: Path, gavel: dict) -> None:
    raw = json.loads((traces / "gavel" / "simulation_throughputs.json").read_text())
    key = "('ResNet-50 (batch size 64)', 2)"
    expected = raw["v100_unconsolidated"][key]["null"] / raw["v100"][key]["null"]
    rn50 = gavel[("ResNet-50 (batch size 64)", "v100")]
    assert expected < 1
    assert rn50.spread_factor[2] == pytest.approx(expected)
    assert set(rn50.spread_factor) == {2, 4, 8}
    # at 4 GPUs the spread run measured faster (1.18x): clamped, spreading is never a bonus
    assert rn50.spread_factor[4] == 1.0
    assert all(0 < f <= 1 for p in gavel.values() for f in p.spread_factor.values())
    # single-GPU job types have one point and no spread entry
    assert gavel[("A3C", "v100")].points.keys() == {1}
    # k80 ResNet-50 bs128 at >1 GPU is 0.0 in the table (does not fit): left out, not zero
    assert gavel[("ResNet-50 (batch size 128)", "k80")].points.keys() == {1}
    assert not any(w.endswith("_unconsolidated") for _, w in gavel)


@pytest.mark.traces
def test_gavel_colocation_ratios(traces: Path) -> None:
    path = traces / "gavel" / "simulation_throughputs.json"
    raw = json.loads(path.read_text())
    coloc = gavel_colocation(path)
    a, b = "ResNet-50 (batch size 64)", "Transformer (batch size 128)"
    pair = raw["v100"][f"('{a}', 1)"][f"('{b}', 1)"]
    ratio = coloc[("v100", a, b, 1)]
    assert ratio == pytest.approx(
        (pair[0] / raw["v100"][f"('{a}', 1)"]["null"], pair[1] / raw["v100"][f"('{b}', 1)"]["null"])
    )
    assert ("v100", b, a, 1) in coloc
    assert all(x >= 0 for r in coloc.values() for x in r)
    assert any(r == (0.0, 0.0) for r in coloc.values())  # pairs that do not fit
    assert {k[0] for k in coloc} == {"v100", "p100", "k80"}
    with_spread = gavel_colocation(path, include_unconsolidated=True)
    assert any(k[0] == "v100_unconsolidated" for k in with_spread)


# --------------------------------------------------------------------------- Pollux
@pytest.mark.traces
def test_pollux_profile_packed_placements(traces: Path) -> None:
    model_dir = traces / "pollux" / "profiles" / "imagenet"
    assert pollux_default_local_bsz(model_dir) == 200
    prof = pollux_profile(model_dir)
    assert prof.reference_gpu == "t4"
    assert set(range(1, 17)) <= prof.points.keys()
    assert {20, 24, 32, 48, 64} <= prof.points.keys()  # from scalability.csv
    # packed 8 GPUs = placement "44": rate = 8 / step_time at local batch 200
    rows = (model_dir / "placements.csv").read_text().splitlines()
    step = next(float(r.split(",")[2]) for r in rows if r.startswith("44,200,"))
    assert prof.points[8] == pytest.approx(8 / step)
    steps = pollux_profile(model_dir, 200, per_step=True)
    assert steps.points[8] == pytest.approx(1 / step)
    assert prof.speedup(64) > 20  # ImageNet at a large local batch scales well
    assert "petuum/adaptdl@c793c7089bd3" in prof.source
    assert all(0 < f <= 1 for f in prof.spread_factor.values())


@pytest.mark.traces
def test_pollux_unknown_local_batch_names_field(traces: Path) -> None:
    with pytest.raises(InputError) as err:
        pollux_profile(traces / "pollux" / "profiles" / "bert", local_bsz=7)
    assert err.value.field == "local_bsz"


# --------------------------------------------------------------------------- ElasticFlow
@pytest.mark.traces
def test_elasticflow_bert_peaks_at_8(traces: Path) -> None:
    prof = elasticflow_profile(_ef(traces, "bert"), 64)
    assert prof.reference_gpu == "a100"
    assert sorted(prof.points) == [1, 2, 4, 8, 16, 32, 64]
    assert prof.peak_gpus == 8
    assert prof.points[64] < prof.points[8]  # raw decline kept
    assert prof.rate(64) == prof.rate(8)  # the envelope makes extra GPUs harmless
    assert prof.points[1] == pytest.approx(6.030661553957379)


@pytest.mark.traces
def test_elasticflow_empty_and_zero_cells_are_unmeasured(traces: Path) -> None:
    assert 64 not in elasticflow_profile(_ef(traces, "deepspeech2"), 32).points
    assert sorted(elasticflow_profile(_ef(traces, "resnet50_cifar10"), 64).points) == [1, 2, 4, 8]
    with pytest.raises(InputError) as err:
        elasticflow_profile(_ef(traces, "bert"), 4096)
    assert err.value.field == "global_batch_size"


# --------------------------------------------------------------------------- malformed input
def test_malformed_gavel_json(tmp_path: Path) -> None:
    bad = tmp_path / "t.json"
    bad.write_text('{"v100": {"(\'X\', 1)": {"null": "fast"}}}')
    with pytest.raises(InputError) as err:
        gavel_profiles(bad)
    assert err.value.field is not None and err.value.field.endswith("/null")
    assert str(bad) in str(err.value)

    bad.write_text('{"v100": {"X1": {"null": 1.0}}}')
    with pytest.raises(InputError) as err:
        gavel_profiles(bad)
    assert err.value.field == "v100/X1"

    bad.write_text('{"v100": {"(\'X\', 1)": {"null": 1.0, "(\'Y\', 1)": [1.0]}}}')
    with pytest.raises(InputError) as err:
        gavel_colocation(bad)
    assert "('Y', 1)" in (err.value.field or "")

    bad.write_text('{"v100": {\n  "(\'X\', 1)": {"null": 1.0,}}}')
    with pytest.raises(InputError) as err:
        gavel_profiles(bad)
    assert err.value.row == 2

    with pytest.raises(InputError):
        gavel_profiles(tmp_path / "missing.json")


def test_malformed_elasticflow_csv(tmp_path: Path) -> None:
    bad = tmp_path / "m.csv"
    bad.write_text("global_batch_size,1,2,4\n64,1.0,1.5,abc\n")
    with pytest.raises(InputError) as err:
        elasticflow_profile(bad, 64)
    assert (err.value.field, err.value.row) == ("4", 2)
    assert "field '4'" in str(err.value)

    bad.write_text("batch,1,2\n64,1.0,1.5\n")
    with pytest.raises(InputError) as err:
        elasticflow_profile(bad, 64)
    assert err.value.field == "global_batch_size"

    bad.write_text("global_batch_size,1,two\n64,1.0,1.5\n")
    with pytest.raises(InputError) as err:
        elasticflow_profile(bad, 64)
    assert err.value.field == "two"

    bad.write_text("global_batch_size,1,2\n64,1.0,-3\n")
    with pytest.raises(InputError) as err:
        elasticflow_profile(bad, 64)
    assert err.value.field == "2"

    bad.write_text("global_batch_size,1,2\n64,0,0\n")
    with pytest.raises(InputError):
        elasticflow_profile(bad, 64)


def test_malformed_pollux_csv(tmp_path: Path) -> None:
    (tmp_path / "placements.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,8,0.5,0.0\n2,8,slow,0.0\n"
    )
    with pytest.raises(InputError) as err:
        pollux_profile(tmp_path)
    assert (err.value.field, err.value.row) == ("step_time", 3)

    (tmp_path / "placements.csv").write_text("placement,step_time\n1,0.5\n")
    with pytest.raises(InputError) as err:
        pollux_profile(tmp_path)
    assert err.value.field == "local_bsz"

    (tmp_path / "placements.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,8,0.5,0\n2,8,0.3,0\n"
    )
    (tmp_path / "scalability.csv").write_text(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,x,8,0.2,0\n"
    )
    with pytest.raises(InputError) as err:
        pollux_profile(tmp_path)
    assert err.value.field == "num_replicas"

    (tmp_path / "scalability.csv").write_text(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n4,4,8,0.4,0\n"
    )
    prof = pollux_profile(tmp_path)  # well-formed minimal tables
    assert prof.points == pytest.approx({1: 2.0, 2: 2 / 0.3, 4: 10.0})


# --------------------------------------------------------------------------- the zoo
def test_zoo_models_peak_exactly_at_table4(zoo: dict) -> None:
    assert {name: m.max_gpus for name, m in zoo.items()} == TABLE4_MAX
    assert list(zoo) == [s.name for s in AFS_TABLE4]
    for name, model in zoo.items():
        p = model.profile
        assert sorted(p.points) == list(range(1, 65)), name
        assert p.extrapolation == "flat"
        raw = [p.points[c] for c in range(1, 65)]
        assert max(range(1, 65), key=lambda c: raw[c - 1]) == model.max_gpus, name
        assert p.peak_gpus == model.max_gpus, name
        m = model.max_gpus
        assert all(raw[i] < raw[i + 1] for i in range(m - 1)), f"{name} not rising to its peak"
        assert all(raw[i] >= raw[i + 1] for i in range(m - 1, 63)), f"{name} rises past peak"
        assert p.rate(64) == pytest.approx(p.points[m])  # envelope flat after the peak
        assert p.speedup(2) < 2  # sub-linear from the first extra GPU
        assert model.derivation and "Table 4" in model.derivation


def test_zoo_metadata(zoo: dict) -> None:
    assert zoo["VGG16"].batch_size == 256 and zoo["VGG16"].dataset == "ImageNet"
    assert zoo["Chatbot"].dataset == "OpenSubtitles"
    assert all(m.profile.reference_gpu == "v100" for m in zoo.values())
    assert "ElasticFlow" in zoo["ResNet-50"].profile.source
    assert "gavel" in zoo["Transformer"].profile.source


@pytest.mark.parametrize("m", [1, 2, 3, 4, 8, 20, 28, 44, 52, 64])
@pytest.mark.parametrize("f", [0.0, 0.05, 0.3, 0.9])
def test_peak_curve_argmax_is_exact(m: int, f: float) -> None:
    points, _ = peak_curve(1.0, f, m)
    assert max(points, key=points.__getitem__) == m
    assert ThroughputProfile(points=points).peak_gpus == m


def test_zoo_loads_without_shared_traces(tmp_path: Path) -> None:
    env = {**os.environ, "GPUPLAN_TRACES": str(tmp_path / "nowhere")}
    code = (
        "from gpuplan.scenarios.zoo import load_afs_zoo; "
        "z = load_afs_zoo(); print(len(z), z['Transformer'].profile.peak_gpus)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["9", "44"]


def _assert_same(a: object, b: object, path: str = "") -> None:
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9), path
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


@pytest.mark.traces
def test_shipped_zoo_equals_fresh_build(traces: Path) -> None:
    shipped = json.loads(
        (Path(__file__).resolve().parents[2] / "scenarios" / "data" / "afs_zoo.json").read_text()
    )
    fresh = json.loads(json.dumps(zoo_document(build_afs_zoo(traces))))
    _assert_same(fresh, shipped)


# --------------------------------------------------------------------------- AFS mapping
def _rows(n: int = 400, seed: int = 3) -> list[TraceJob]:
    mix = {1: 5, 2: 2, 3: 1, 4: 2, 7: 1, 8: 2, 16: 1, 24: 1, 32: 1, 48: 1, 52: 1, 64: 1}
    return synthetic_jobs(n, 60, mix, 4 * 3600, seed)


def test_afs_mapping_rule_and_duration(zoo: dict) -> None:
    rows = _rows()
    jobs = map_afs(rows, zoo, seed=7, cluster_gpus=64)
    assert [j.id for j in jobs] == [r.id for r in rows]
    for row, job in zip(rows, jobs, strict=True):
        model = zoo[job.model]
        if row.gpus <= 52:
            assert model.max_gpus >= row.gpus
            assert job.requested_gpus == row.gpus
        else:  # clamp rule: above the largest max -> Inception-v4 at 52
            assert (job.model, job.requested_gpus) == ("Inception-v4", 52)
        runtime = job.work / job.throughput.rate(job.requested_gpus)
        assert runtime == pytest.approx(row.duration, rel=1e-9)
        assert job.elasticity is not None
        assert (job.elasticity.min_gpus, job.elasticity.max_gpus) == (1, model.max_gpus)
        assert job.throughput == model.profile
        assert job.submit_time == row.submit_time


def test_afs_mapping_is_seeded(zoo: dict) -> None:
    rows = _rows(300)
    a = map_afs(rows, zoo, seed=11, cluster_gpus=64)
    b = map_afs(rows, zoo, seed=11, cluster_gpus=64)
    c = map_afs(rows, zoo, seed=12, cluster_gpus=64)
    assert [j.model_dump() for j in a] == [j.model_dump() for j in b]
    assert [j.model for j in a] != [j.model for j in c]
    # uniform among eligible: 1-GPU jobs see all nine models
    one_gpu = {j.model for r, j in zip(rows, a, strict=True) if r.gpus == 1}
    assert len(one_gpu) >= 7


def test_afs_mapping_clamps_to_cluster(zoo: dict) -> None:
    rows = [
        TraceJob(id="a", submit_time=0, gpus=48, duration=100.0, source="t.csv row 2"),
        TraceJob(id="b", submit_time=1, gpus=64, duration=50.0, source="t.csv row 3"),
        TraceJob(id="c", submit_time=2, gpus=4, duration=10.0, source="t.csv row 4"),
    ]
    jobs = map_afs(rows, zoo, seed=0, cluster_gpus=32)
    assert [j.model for j in jobs[:2]] == ["Inception-v4", "Inception-v4"]
    for row, job in zip(rows, jobs, strict=True):
        assert job.requested_gpus <= 32 and job.max_gpus <= 32
        assert job.work / job.throughput.rate(job.requested_gpus) == pytest.approx(row.duration)
    assert jobs[0].requested_gpus == 32 and jobs[1].requested_gpus == 32
    names = [m.name for m in afs_candidates(zoo, 30)[0]]
    assert names == ["Inception-v4", "Transformer"]


def test_afs_mapping_bad_rows(zoo: dict) -> None:
    row = TraceJob(id="x", submit_time=0, gpus=2, source="philly.csv row 17")
    with pytest.raises(InputError) as err:
        map_afs([row], zoo, seed=0, cluster_gpus=8)
    assert "philly.csv row 17" in str(err.value)
    with pytest.raises(InputError) as err:
        map_rigid([row])
    assert err.value.source == "philly.csv row 17"
    with pytest.raises(InputError) as err:
        map_afs([], zoo, seed=0, cluster_gpus=0)
    assert err.value.field == "cluster_gpus"
    with pytest.raises(InputError) as err:
        map_afs([row.model_copy(update={"duration": 5.0})], {}, seed=0, cluster_gpus=8)
    assert err.value.field == "zoo"


def test_afs_mapping_keeps_trace_iterations(zoo: dict) -> None:
    row = TraceJob(id="i", submit_time=0, gpus=2, iterations=1234.0, source="s row 1")
    (job,) = map_afs([row], zoo, seed=0, cluster_gpus=8)
    assert job.work == 1234.0


# --------------------------------------------------------------------------- rigid / elastic
def test_map_rigid_profiles_and_work() -> None:
    prof = ThroughputProfile(points={1: 2.0, 4: 6.0})
    rows = [
        TraceJob(id="a", submit_time=0, gpus=4, duration=100.0, model="m"),
        TraceJob(id="b", submit_time=5, gpus=3, duration=10.0, model="unknown"),
        TraceJob(id="c", submit_time=6, gpus=2, duration=10.0, iterations=77.0, model="m"),
    ]
    a, b, c = map_rigid(rows, {"m": prof})
    assert a.throughput is prof and a.work == pytest.approx(600.0)
    assert a.elasticity is None and a.allowed_counts() == (4,)
    assert b.throughput.extrapolation == "linear" and b.work == pytest.approx(30.0)
    assert b.model == "unknown"
    assert c.work == 77.0
    assert map_rigid(rows)[0].work == pytest.approx(400.0)  # linear fallback: GPU-seconds


def test_map_elastic_range() -> None:
    rows = [
        TraceJob(id="a", submit_time=0, gpus=3, duration=100.0),
        TraceJob(id="b", submit_time=0, gpus=24, duration=100.0),
    ]
    a, b = map_elastic(rows, cluster_gpus=32)
    assert (a.requested_gpus, a.min_gpus, a.max_gpus) == (3, 1, 6)
    assert (b.requested_gpus, b.max_gpus) == (24, 32)
    assert a.work == pytest.approx(300.0)
    with pytest.raises(InputError) as err:
        map_elastic(rows, max_factor=0.5)
    assert err.value.field == "max_factor"


# --------------------------------------------------------------------------- synthetic
def test_synthetic_counts_and_determinism() -> None:
    a = synthetic_jobs(200, 10, {1: 1, 4: 1}, 3600, seed=5)
    b = synthetic_jobs(200, 10, {1: 1, 4: 1}, 3600, seed=5)
    c = synthetic_jobs(200, 10, {1: 1, 4: 1}, 3600, seed=6)
    assert len(a) == 200 and len({j.id for j in a}) == 200
    assert a == b and a != c
    assert {j.gpus for j in a} == {1, 4}
    assert all(x.submit_time < y.submit_time for x, y in itertools.pairwise(a))
    assert synthetic_jobs(0, 10, {1: 1}, 60, seed=0) == []


def test_synthetic_statistics() -> None:
    rate, mean = 12.0, 7200.0
    jobs = synthetic_jobs(5000, rate, {1: 0.6, 2: 0.2, 8: 0.2}, mean, seed=42)
    gaps = [jobs[0].submit_time] + [
        b.submit_time - a.submit_time for a, b in itertools.pairwise(jobs)
    ]
    assert sum(gaps) / len(gaps) == pytest.approx(3600 / rate, rel=0.10)
    durations = sorted(j.duration for j in jobs)
    assert sum(durations) / len(durations) == pytest.approx(mean, rel=0.15)
    assert durations[len(durations) // 2] < 0.6 * mean  # heavy tail: median well below mean
    share_1 = sum(j.gpus == 1 for j in jobs) / len(jobs)
    assert share_1 == pytest.approx(0.6, abs=0.03)


def test_synthetic_with_zoo_keeps_draws(zoo: dict) -> None:
    plain = synthetic_jobs(300, 20, {1: 1, 16: 1, 64: 1}, 600, seed=9)
    with_zoo = synthetic_jobs(300, 20, {1: 1, 16: 1, 64: 1}, 600, seed=9, zoo=zoo)
    for p, z in zip(plain, with_zoo, strict=True):
        assert (p.submit_time, p.gpus, p.duration) == (z.submit_time, z.gpus, z.duration)
        assert z.model is not None and z.batch_size == zoo[z.model].batch_size
        assert zoo[z.model].max_gpus >= min(z.gpus, 52)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": -1}, "n"),
        ({"n": 2.5}, "n"),
        ({"arrival_rate_per_h": 0}, "arrival_rate_per_h"),
        ({"arrival_rate_per_h": math.inf}, "arrival_rate_per_h"),
        ({"size_mix": {}}, "size_mix"),
        ({"size_mix": {0: 1.0}}, "size_mix"),
        ({"size_mix": {1: -1.0}}, "size_mix"),
        ({"size_mix": {1: 0.0}}, "size_mix"),
        ({"mean_duration_s": -5}, "mean_duration_s"),
        ({"seed": "x"}, "seed"),
        ({"duration_sigma": 0}, "duration_sigma"),
    ],
)
def test_synthetic_validation(kwargs: dict, field: str) -> None:
    args = {
        "n": 10,
        "arrival_rate_per_h": 1.0,
        "size_mix": {1: 1.0},
        "mean_duration_s": 60.0,
        "seed": 0,
        **kwargs,
    }
    with pytest.raises(InputError) as err:
        synthetic_jobs(**args)
    assert err.value.field == field
    assert f"field '{field}'" in str(err.value)
