"""Pollux throughput-model fit: exact recovery, fit quality on the shared tables, the fitted
profile's shape, determinism and input errors."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from gpuplan.models.errors import InputError
from gpuplan.scenarios.profiles import pollux_profile
from gpuplan.scenarios.throughput_fit import (
    FitResult,
    PerfSample,
    PolluxPerfParams,
    fit_pollux_params,
    fitted_pollux_profile,
    pollux_samples,
    predict_step_time,
)

from ..conftest import need_traces

MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

TRUE = PolluxPerfParams(
    alpha_c=0.05, beta_c=0.004, alpha_n=0.3, beta_n=0.02, alpha_r=0.04, beta_r=0.01, gamma=1.7
)
# (nodes, replicas): single GPU, one node, and several multi-node sizes.
LAYOUTS = ((1, 1), (1, 2), (1, 3), (1, 4), (2, 2), (2, 5), (2, 8), (3, 12), (4, 16), (8, 32))
BATCHES = (8, 16, 32, 64, 128)


def _synthetic(params: PolluxPerfParams, *, with_sync: bool, accum: int = 0) -> list[PerfSample]:
    """Noise-free samples of ``params``; sync_time makes step - sync the exact compute time."""
    out = []
    for nodes, replicas in LAYOUTS:
        for bsz in BATCHES:
            step = predict_step_time(params, replicas, nodes, bsz, accum)
            compute = params.alpha_c + params.beta_c * bsz
            out.append(
                PerfSample(
                    nodes,
                    replicas,
                    float(bsz),
                    step,
                    sync_time=step - compute if with_sync else None,
                    accum=accum,
                )
            )
    return out


def _assert_close(got: PolluxPerfParams, want: PolluxPerfParams, rel: float) -> None:
    for name, value in dataclasses.asdict(want).items():
        assert getattr(got, name) == pytest.approx(value, rel=rel), name


@pytest.fixture(scope="module")
def pollux_dir() -> Path:
    return need_traces("pollux", "profiles")


@pytest.fixture(scope="module")
def fits(pollux_dir: Path) -> dict[str, FitResult]:
    return {m: fit_pollux_params(pollux_samples(pollux_dir / m)) for m in MODELS}


# --------------------------------------------------------------------------- model
def test_predict_worked_example() -> None:
    """Hand-computed: 8 GPUs on 2 nodes, m=32: T_grad = 0.05+0.128 = 0.178,
    T_sync = 0.3 + 0.02*6 = 0.42, T = (0.178^1.7 + 0.42^1.7)^(1/1.7); 1 GPU has no sync."""
    want = (0.178**1.7 + 0.42**1.7) ** (1 / 1.7)
    assert predict_step_time(TRUE, 8, 2, 32) == pytest.approx(want, rel=1e-12)
    assert predict_step_time(TRUE, 8, 2, 32, accum=2) == pytest.approx(want + 2 * 0.178, rel=1e-12)
    assert predict_step_time(TRUE, 1, 1, 32) == pytest.approx(0.178, rel=1e-12)
    # one node uses the local pair (alpha_r, beta_r): 4 GPUs -> T_sync = 0.04 + 0.01*2
    local = (0.178**1.7 + 0.06**1.7) ** (1 / 1.7)
    assert predict_step_time(TRUE, 4, 1, 32) == pytest.approx(local, rel=1e-12)


# --------------------------------------------------------------------------- (a) recovery
@pytest.mark.parametrize("with_sync", [True, False])
def test_recovers_known_parameters(with_sync: bool) -> None:
    fit = fit_pollux_params(_synthetic(TRUE, with_sync=with_sync))
    assert fit.success, fit.message
    assert fit.fixed == ()
    _assert_close(fit.params, TRUE, rel=1e-3)
    assert fit.rmsle < 1e-6


def test_recovers_with_accumulation_and_other_gamma() -> None:
    truth = dataclasses.replace(TRUE, gamma=3.0, alpha_r=0.01, beta_n=0.05)
    samples = _synthetic(truth, with_sync=True) + _synthetic(truth, with_sync=False, accum=3)
    fit = fit_pollux_params(samples)
    _assert_close(fit.params, truth, rel=1e-3)
    assert fit.n_samples == len(samples)


def test_unidentifiable_parameters_are_pinned() -> None:
    """One node only: the cross-node pair cannot be fitted and stays at the lower bound; one
    batch size only: alpha_c is half the mean measured compute time (AdaptDL's rule)."""
    single_node = [s for s in _synthetic(TRUE, with_sync=True) if s.nodes == 1]
    fit = fit_pollux_params(single_node)
    assert fit.fixed == ("alpha_n", "beta_n")
    assert (fit.params.alpha_n, fit.params.beta_n) == (1e-8, 1e-8)
    assert fit.params.alpha_r == pytest.approx(TRUE.alpha_r, rel=1e-3)

    one_batch = [s for s in _synthetic(TRUE, with_sync=True) if s.local_bsz == 32]
    fit = fit_pollux_params(one_batch)
    assert fit.fixed == ("alpha_c",)
    mean_compute = np.mean([s.step_time - (s.sync_time or 0.0) for s in one_batch])
    assert fit.params.alpha_c == pytest.approx(mean_compute / 2, rel=1e-12)


# --------------------------------------------------------------------------- (b) real tables
# Measured (docs/profiles.md): RMSLE 0.102 (imagenet) .. 0.131 (ncf).
def test_fit_quality_on_shared_profiles(fits: dict[str, FitResult], pollux_dir: Path) -> None:
    for model, fit in fits.items():
        assert fit.success, (model, fit.message)
        assert fit.rmsle < 0.15, model
        samples = pollux_samples(pollux_dir / model)
        rel = np.array(
            [
                abs(
                    predict_step_time(fit.params, s.replicas, s.nodes, s.local_bsz) / s.step_time
                    - 1
                )
                for s in samples
            ]
        )
        # measured: median 4..7 %, 90th percentile 16..21 %, 93..98 % of rows within 25 %
        assert np.median(rel) < 0.08, model
        assert np.quantile(rel, 0.9) < 0.23, model
        assert np.mean(rel <= 0.25) > 0.92, model
        assert 1.0 <= fit.params.gamma <= 10.0


def test_fitted_profile_matches_table_where_the_model_fits(
    fits: dict[str, FitResult], pollux_dir: Path
) -> None:
    """imagenet scales smoothly and is within 8 % of every packed table point; single-node
    counts (1..4) of every model are within 19 % (yolov3 at 2 GPUs; the others within 13 %).
    Two-node runs of bert/ncf/yolov3 are slower than three-node ones in the table, which no
    single cross-node pair (alpha_n, beta_n) can reproduce, so 5..8 GPUs are not checked."""
    for model in MODELS:
        table = pollux_profile(pollux_dir / model)
        fitted = fitted_pollux_profile(pollux_dir / model, fit=fits[model])
        errors = {g: abs(fitted.points[g] / r - 1) for g, r in table.points.items()}
        assert max(errors[g] for g in (1, 2, 3, 4)) < 0.19, model
        if model == "imagenet":
            assert max(errors.values()) < 0.08


# --------------------------------------------------------------------------- (c) shape
def test_fitted_profile_is_positive_and_monotone_per_regime(
    fits: dict[str, FitResult], pollux_dir: Path
) -> None:
    for model in MODELS:
        prof = fitted_pollux_profile(pollux_dir / model, fit=fits[model], max_gpus=128)
        assert sorted(prof.points) == list(range(1, 129))
        pts = prof.points
        assert all(r > 0 for r in pts.values())
        # no drop within one node (1..4) nor within the multi-node regime (5..128); the step
        # from 4 to 5 GPUs crosses the network and may drop (the envelope then holds rate(4)).
        assert all(pts[k + 1] >= pts[k] for k in range(1, 4)), model
        assert all(pts[k + 1] >= pts[k] for k in range(5, 128)), model
        # a spread placement is never faster than a packed one on a single node
        assert set(prof.spread_factor) == {2, 3, 4}
        assert all(0 < f <= 1 for f in prof.spread_factor.values())


def test_fitted_profile_extrapolates_past_the_table(
    fits: dict[str, FitResult], pollux_dir: Path
) -> None:
    """The raw table stops at 64 GPUs and holds flat; the model keeps predicting growth."""
    model = pollux_dir / "imagenet"
    table = pollux_profile(model)
    fitted = fitted_pollux_profile(model, fit=fits["imagenet"], max_gpus=128)
    assert table.rate(128) == table.rate(64)
    assert fitted.rate(128) > 1.5 * fitted.rate(64)
    # 17 GPUs is unmeasured in placements.csv: the table interpolates, the model predicts
    assert 17 not in table.points and 17 in fitted.points
    assert "fitted" in fitted.source and "RMSLE" in fitted.source


def test_fitted_profile_defaults_and_per_step(pollux_dir: Path) -> None:
    model = pollux_dir / "imagenet"
    fitted = fitted_pollux_profile(model, max_gpus=8)  # fits by itself, local_bsz 200
    steps = fitted_pollux_profile(model, 200, max_gpus=8, per_step=True)
    for g in range(1, 9):
        assert fitted.points[g] == pytest.approx(g * steps.points[g], rel=1e-12)
    assert "local_bsz=200" in fitted.source


# --------------------------------------------------------------------------- (d) determinism
def test_fit_is_deterministic(pollux_dir: Path) -> None:
    samples = pollux_samples(pollux_dir / "yolov3")
    first, second = fit_pollux_params(samples), fit_pollux_params(list(samples))
    assert first == second
    assert fitted_pollux_profile(pollux_dir / "yolov3", fit=first) == fitted_pollux_profile(
        pollux_dir / "yolov3", fit=second
    )


# --------------------------------------------------------------------------- (e) bad input
def test_no_samples() -> None:
    with pytest.raises(InputError) as err:
        fit_pollux_params([])
    assert err.value.field == "samples"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"step_time": math.nan}, "step_time"),
        ({"local_bsz": math.inf}, "local_bsz"),
        ({"step_time": -1.0}, "step_time"),
        ({"sync_time": 5.0}, "sync_time"),
        ({"replicas": 0}, "replicas"),
        ({"nodes": 1.5}, "nodes"),
    ],
)
def test_bad_sample_names_field(change: dict[str, object], field: str) -> None:
    good = _synthetic(TRUE, with_sync=True)
    bad = dataclasses.replace(good[3], **change, where="mine.csv, row 5")  # type: ignore[arg-type]
    with pytest.raises(InputError) as err:
        fit_pollux_params([*good[:3], bad])
    assert err.value.field == field
    assert err.value.source == "mine.csv, row 5"


def test_bad_csv_names_file_row_field(tmp_path: Path) -> None:
    (tmp_path / "placements.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,8,0.5,0.0\n2,8,nan,0.0\n"
    )
    with pytest.raises(InputError) as err:
        pollux_samples(tmp_path)
    assert (err.value.field, err.value.row) == ("step_time", 3)
    assert "placements.csv" in str(err.value)

    (tmp_path / "placements.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,8,0.5,0.0\n2,8,0.3,0.4\n"
    )
    with pytest.raises(InputError) as err:
        fitted_pollux_profile(tmp_path)
    assert (err.value.field, err.value.row) == ("sync_time", 3)

    (tmp_path / "placements.csv").write_text("placement,local_bsz,step_time\n")
    with pytest.raises(InputError) as err:
        pollux_samples(tmp_path)
    assert err.value.field == "step_time"

    missing = tmp_path / "nowhere"
    with pytest.raises(InputError, match="cannot read"):
        fitted_pollux_profile(missing)


@pytest.mark.parametrize("placement", ["20", "1x", "", "\u0661"])
def test_a_bad_placement_names_file_row_field_in_both_readers(
    tmp_path: Path, placement: str
) -> None:
    """The fit's reader and the table profile's reader refuse one bad placement cell alike."""
    (tmp_path / "placements.csv").write_text(
        f"placement,local_bsz,step_time\n1,8,0.5\n{placement},8,0.3\n", encoding="utf-8"
    )
    for read in (pollux_samples, pollux_profile):
        with pytest.raises(InputError, match="placement must be digits 1-9") as err:
            read(tmp_path)
        assert (err.value.field, err.value.row) == ("placement", 3), read
        assert "placements.csv" in str(err.value)


def test_minimal_table_without_sync_column(tmp_path: Path) -> None:
    """Only step times, one node: the fit still runs, pins the cross-node pair, and the profile
    reproduces the table at its measured counts."""
    rows = [
        (p, b, predict_step_time(TRUE, int(p), 1, b))
        for p in ("1", "2", "3", "4")
        for b in (16, 32, 64)
    ]
    text = "placement,local_bsz,step_time\n" + "".join(f"{p},{b},{t!r}\n" for p, b, t in rows)
    (tmp_path / "placements.csv").write_text(text)
    fit = fit_pollux_params(pollux_samples(tmp_path))
    assert fit.fixed == ("alpha_n", "beta_n")
    assert fit.rmsle < 1e-6
    prof = fitted_pollux_profile(tmp_path, 32, max_gpus=4, fit=fit)
    for g in (1, 2, 3, 4):
        assert prof.points[g] == pytest.approx(g / predict_step_time(TRUE, g, 1, 32), rel=1e-4)


def test_predict_rejects_impossible_configuration() -> None:
    with pytest.raises(InputError):
        predict_step_time(TRUE, 2, 3, 8)
    with pytest.raises(InputError):
        predict_step_time(TRUE, 2, 1, 0)
