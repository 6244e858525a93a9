"""Fit Pollux's per-iteration time model to measured step times with ``scipy.optimize``.

The shared Pollux tables (``pollux/profiles/<model>/``) measure step times only at the
placements that were run (1..16 GPUs on 4-GPU nodes, plus a few larger multi-node runs). A
throughput table can interpolate between those counts but cannot say anything about a count or
placement it never saw. Pollux (Qiao et al., OSDI'21) instead fits a seven-parameter model
of one iteration and predicts any (GPUs, nodes, per-GPU batch, accumulation) from it; this
module does that fit and turns the model into a :class:`ThroughputProfile`.

Model, with ``a`` replicas on ``n`` nodes, per-GPU batch ``m`` and ``s`` accumulation steps::

    T_grad(m)   = alpha_c + beta_c * m                    (forward + backward)
    T_sync(a,n) = 0                                       if a == 1
                = alpha_r + beta_r * (a - 2)              if n == 1 ("local": one node)
                = alpha_n + beta_n * (a - 2)              if n >= 2 ("node": cross-node)
    T_iter      = s * T_grad + (T_grad**gamma + T_sync**gamma) ** (1 / gamma),  gamma >= 1

``gamma`` is the overlap of computation and all-reduce (1: none, large: full overlap).
Throughput is ``a * m * (s + 1) / T_iter`` samples/s.

Fit (deterministic, no random restarts): ``scipy.optimize.least_squares`` (trust-region
reflective, bounds) over the *logarithm* of each parameter, minimising the squared log error of
the predicted step time plus, where the table gives ``sync_time``, the squared log error of the
predicted compute time against ``step_time - sync_time`` (the reference simulator's definition
of compute time). Lower bounds 1e-8 on every alpha/beta, ``gamma`` in [1, 10]. As in AdaptDL's
``fit_perf_params``, parameters the samples cannot identify are pinned instead of fitted: with a
single per-GPU batch ``alpha_c`` is fixed to half the mean compute time, without multi-node
samples ``alpha_n``/``beta_n`` sit at the lower bound, likewise ``alpha_r``/``beta_r`` without
single-node multi-GPU samples, and both betas without a sample above 2 replicas. AdaptDL's two
small regularisers (gamma towards 1, betas towards 0) are left out so that a noise-free table is
recovered exactly; see ``docs/profiles.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from gpuplan.models.errors import InputError
from gpuplan.models.throughput import Extrapolation, ThroughputProfile
from gpuplan.scenarios.profiles import (
    _PLACEMENT_COLS,
    _SCALABILITY_COLS,
    _cell_float,
    _cell_int,
    _cell_placement,
    _make_profile,
    _read_csv,
    pollux_default_local_bsz,
    source_label,
)

__all__ = [
    "FitResult",
    "PerfSample",
    "PolluxPerfParams",
    "fit_pollux_params",
    "fitted_pollux_profile",
    "pollux_samples",
    "predict_step_time",
]

_LOWER = 1e-8
"""Lower bound of every alpha/beta (AdaptDL's slack that keeps logs finite)."""
_GAMMA_MAX = 10.0
"""Upper bound of gamma: 10 is already close to max(T_grad, T_sync)."""
_START = (1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3)
"""Fixed initial point (AdaptDL's): alpha 0.1 s, beta 0.01 s, gamma just above 1."""

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class PolluxPerfParams:
    """The seven parameters of Pollux's iteration-time model (seconds, seconds per sample)."""

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def as_tuple(self) -> tuple[float, ...]:
        """Parameters in declaration order (the optimiser's vector layout)."""
        return astuple(self)


@dataclass(frozen=True)
class PerfSample:
    """One measured configuration: ``step_time`` seconds per optimizer step.

    ``sync_time`` (optional) is the measured all-reduce time of the step; when given and
    ``accum == 0`` the fit also matches the compute time ``step_time - sync_time``. ``where``
    locates the sample (file and row) for error messages.
    """

    nodes: int
    replicas: int
    local_bsz: float
    step_time: float
    sync_time: float | None = None
    accum: int = 0
    where: str = ""


@dataclass(frozen=True)
class FitResult:
    """Fitted parameters plus how well and how reliably they were found."""

    params: PolluxPerfParams
    rmsle: float
    """Root-mean-square of ln(predicted / measured) step time (= of throughput) over samples."""
    max_abs_log_error: float
    n_samples: int
    success: bool
    message: str
    fixed: tuple[str, ...]
    """Parameters pinned because the samples cannot identify them."""


# --------------------------------------------------------------------------- model
def _predict(
    theta: FloatArray,
    nodes: FloatArray,
    replicas: FloatArray,
    bsz: FloatArray,
    accum: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """(iteration time, compute time) for every sample under parameter vector ``theta``."""
    alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma = theta
    compute = alpha_c + beta_c * bsz
    retro = np.maximum(replicas - 2.0, 0.0)
    sync = np.where(nodes > 1, alpha_n + beta_n * retro, alpha_r + beta_r * retro)
    sync = np.where(replicas > 1, sync, 0.0)
    # p-norm scaled by the larger term so gamma up to 10 cannot overflow or underflow.
    top = np.maximum(compute, sync)
    overlap = top * ((compute / top) ** gamma + (sync / top) ** gamma) ** (1.0 / gamma)
    return accum * compute + overlap, compute


def predict_step_time(
    params: PolluxPerfParams, gpus: int, nodes: int, local_bsz: float, accum: int = 0
) -> float:
    """Seconds per optimizer step on ``gpus`` replicas over ``nodes`` nodes (Pollux T_iter)."""
    if gpus < 1 or nodes < 1 or nodes > gpus:
        raise InputError(f"need 1 <= nodes ({nodes}) <= gpus ({gpus})", field="gpus")
    if not (math.isfinite(local_bsz) and local_bsz > 0) or accum < 0:
        raise InputError(
            f"need local_bsz > 0 and accum >= 0, got {local_bsz}, {accum}", field="local_bsz"
        )
    step, _ = _predict(
        np.asarray(params.as_tuple(), dtype=float),
        np.array([float(nodes)]),
        np.array([float(gpus)]),
        np.array([float(local_bsz)]),
        np.array([float(accum)]),
    )
    return float(step[0])


# --------------------------------------------------------------------------- samples
def _check_sample(s: PerfSample, where: str, row: int | None = None) -> None:
    """Raise InputError (located at ``where``/``row``) unless ``s`` is a possible measurement."""

    def bad(message: str, field: str) -> InputError:
        return InputError(message, source=where, row=row, field=field)

    for name in ("nodes", "replicas", "accum"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(f"expected an integer, got {value!r}", name)
    for name in ("local_bsz", "step_time", "sync_time"):
        value = getattr(s, name)
        if value is None and name == "sync_time":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad(f"expected a number, got {value!r}", name)
        if not math.isfinite(value):
            raise bad(f"expected a finite number, got {value!r}", name)
    if s.nodes < 1 or s.replicas < s.nodes:
        raise bad(f"need 1 <= nodes ({s.nodes}) <= replicas ({s.replicas})", "replicas")
    for name in ("local_bsz", "step_time"):
        if getattr(s, name) <= 0:
            raise bad(f"must be > 0, got {getattr(s, name)!r}", name)
    if s.accum < 0:
        raise bad(f"must be >= 0, got {s.accum}", "accum")
    if s.sync_time is not None and not 0 <= s.sync_time < s.step_time:
        raise bad(f"sync_time {s.sync_time} must be in [0, step_time {s.step_time})", "sync_time")


def pollux_samples(model_dir: Path | str) -> list[PerfSample]:
    """Every row of a Pollux model's ``placements.csv`` and ``scalability.csv`` as samples.

    A placement string has one digit per node (GPUs on it), so ``nodes = len(placement)`` and
    ``replicas = sum(digits)``; scalability rows state both. ``sync_time`` is used when the
    column exists. Malformed cells raise :class:`InputError` naming file, row and column.
    """
    mdir = Path(model_dir)
    ppath = mdir / "placements.csv"
    samples: list[PerfSample] = []
    for line, row in _read_csv(ppath, _PLACEMENT_COLS):
        placement = _cell_placement(row, source=str(ppath), line=line)
        samples.append(
            _table_sample(
                row, ppath, line, nodes=len(placement), replicas=sum(int(d) for d in placement)
            )
        )
    spath = mdir / "scalability.csv"
    if spath.exists():
        for line, row in _read_csv(spath, _SCALABILITY_COLS):
            samples.append(
                _table_sample(
                    row,
                    spath,
                    line,
                    nodes=_cell_int(row, "num_nodes", source=str(spath), line=line),
                    replicas=_cell_int(row, "num_replicas", source=str(spath), line=line),
                )
            )
    if not samples:
        raise InputError("no measurement rows", source=str(ppath), field="step_time")
    return samples


def _table_sample(
    row: dict[str, str], path: Path, line: int, *, nodes: int, replicas: int
) -> PerfSample:
    src = str(path)
    sync_text = (row.get("sync_time") or "").strip()
    sample = PerfSample(
        nodes=nodes,
        replicas=replicas,
        local_bsz=float(_cell_int(row, "local_bsz", source=src, line=line)),
        step_time=_cell_float(row, "step_time", source=src, line=line),
        sync_time=(_cell_float(row, "sync_time", source=src, line=line) if sync_text else None),
        where=f"{src}, row {line}",
    )
    _check_sample(sample, src, line)
    return sample


# --------------------------------------------------------------------------- fit
def _pinned(
    nodes: FloatArray, replicas: FloatArray, bsz: FloatArray, compute: FloatArray
) -> dict[int, float]:
    """Index -> fixed value for the parameters these samples cannot identify (AdaptDL rules)."""
    pinned: dict[int, float] = {}
    if len(np.unique(bsz)) == 1:
        mean_compute = float(np.mean(compute)) if compute.size else 0.0
        pinned[0] = max(mean_compute / 2.0, _LOWER)
    if not np.any(nodes > 1):
        pinned[2] = pinned[3] = _LOWER
    if not np.any((nodes == 1) & (replicas > 1)):
        pinned[4] = pinned[5] = _LOWER
    if not np.any(replicas > 2):
        pinned[3] = pinned[5] = _LOWER
    return pinned


def fit_pollux_params(samples: Sequence[PerfSample]) -> FitResult:
    """Least-squares fit of :class:`PolluxPerfParams` to measured step times (log space).

    Deterministic: fixed start point, no randomness, so the same samples give bit-identical
    parameters. Raises :class:`InputError` for no samples or a non-finite / impossible value.
    """
    from scipy.optimize import least_squares  # here: importing it costs more than a fit

    if not samples:
        raise InputError("no samples to fit", field="samples")
    for i, s in enumerate(samples, start=1):
        _check_sample(s, s.where or f"sample {i}")
    nodes = np.array([s.nodes for s in samples], dtype=float)
    replicas = np.array([s.replicas for s in samples], dtype=float)
    bsz = np.array([s.local_bsz for s in samples], dtype=float)
    accum = np.array([s.accum for s in samples], dtype=float)
    log_step = np.log(np.array([s.step_time for s in samples], dtype=float))
    has_compute = np.array([s.sync_time is not None and s.accum == 0 for s in samples])
    compute_meas = np.array(
        [s.step_time - s.sync_time for s in samples if s.sync_time is not None and s.accum == 0],
        dtype=float,
    )
    log_compute = np.log(compute_meas)

    # Without any sync_time the step time stands in for the compute time of AdaptDL's rule.
    pinned = _pinned(nodes, replicas, bsz, compute_meas if compute_meas.size else np.exp(log_step))
    free = [i for i in range(7) if i not in pinned]
    start = np.log(np.array(_START, dtype=float))
    lower = np.full(7, math.log(_LOWER))
    upper = np.full(7, np.inf)
    lower[6], upper[6] = 0.0, math.log(_GAMMA_MAX)

    exact = np.array(_START, dtype=float)
    for i, value in pinned.items():
        exact[i] = value

    def theta_of(x: FloatArray) -> FloatArray:
        theta = exact.copy()  # pinned values exactly as chosen, not exp(log(value))
        theta[free] = np.exp(x)
        return theta

    def residuals(x: FloatArray) -> FloatArray:
        step, compute = _predict(theta_of(x), nodes, replicas, bsz, accum)
        return np.concatenate([np.log(step) - log_step, np.log(compute[has_compute]) - log_compute])

    result = least_squares(
        residuals,
        start[free],
        jac="3-point",
        bounds=(lower[free], upper[free]),
        method="trf",
        x_scale=1.0,
        ftol=1e-14,
        xtol=1e-14,
        gtol=1e-14,
        max_nfev=5000,
    )
    theta = theta_of(result.x)
    theta[6] = min(max(theta[6], 1.0), _GAMMA_MAX)  # exp(log(gamma)) may leave [1, 10] by 1ulp
    params = PolluxPerfParams(*(float(v) for v in theta))
    step, _ = _predict(theta, nodes, replicas, bsz, accum)
    err = np.log(step) - log_step
    names = tuple(f.name for f in fields(PolluxPerfParams))
    return FitResult(
        params=params,
        rmsle=float(np.sqrt(np.mean(err**2))),
        max_abs_log_error=float(np.max(np.abs(err))),
        n_samples=len(samples),
        success=bool(result.success),
        message=str(result.message),
        fixed=tuple(names[i] for i in sorted(pinned)),
    )


# --------------------------------------------------------------------------- profile
def fitted_pollux_profile(
    model_dir: Path | str,
    local_bsz: int | None = None,
    *,
    max_gpus: int = 64,
    node_size: int | None = None,
    per_step: bool = False,
    extrapolation: Extrapolation = "flat",
    fit: FitResult | None = None,
) -> ThroughputProfile:
    """A Pollux model's scaling curve at per-GPU batch ``local_bsz``, from the fitted model.

    Unlike :func:`~gpuplan.scenarios.profiles.pollux_profile`, whose points are only the
    measured counts, this has a point at every count 1..``max_gpus``, each on the packed
    placement (fewest nodes of ``node_size`` GPUs; default: the largest per-node digit in
    placements.csv). Rates follow ``pollux_profile``'s convention: ``k / T_iter(k)`` local
    batches/s by default, ``1 / T_iter(k)`` with ``per_step``. ``spread_factor[k]`` for
    ``2 <= k <= node_size`` is the model's one-GPU-per-node rate / packed rate, clamped to 1.
    ``local_bsz`` defaults to :func:`pollux_default_local_bsz`; ``fit`` reuses a fit of the
    same directory instead of fitting again.
    """
    mdir = Path(model_dir)
    where = str(mdir)
    if max_gpus < 1:
        raise InputError(f"max_gpus must be >= 1, got {max_gpus}", source=where, field="max_gpus")
    if local_bsz is None:
        local_bsz = pollux_default_local_bsz(mdir)
    elif local_bsz < 1:
        raise InputError(
            f"local_bsz must be >= 1, got {local_bsz}", source=where, field="local_bsz"
        )
    samples = pollux_samples(mdir) if node_size is None or fit is None else []
    if node_size is None:
        node_size = max((s.replicas for s in samples if s.nodes == 1), default=1)
    if node_size < 1:
        raise InputError(
            f"node_size must be >= 1, got {node_size}", source=where, field="node_size"
        )
    result = fit if fit is not None else fit_pollux_params(samples)

    def rate(gpus: int, nodes: int) -> float:
        step = predict_step_time(result.params, gpus, nodes, local_bsz)
        return 1.0 / step if per_step else gpus / step

    points = {g: rate(g, -(-g // node_size)) for g in range(1, max_gpus + 1)}
    spread = {g: min(1.0, rate(g, g) / points[g]) for g in range(2, min(node_size, max_gpus) + 1)}
    unit = "steps/s" if per_step else "local batches/s (k/step_time)"
    return _make_profile(
        where,
        points=points,
        reference_gpu="t4",
        extrapolation=extrapolation,
        spread_factor=spread,
        source=(
            f"{source_label(mdir)} local_bsz={local_bsz} Pollux model fitted by "
            f"scipy least_squares (RMSLE {result.rmsle:.3f}, {result.n_samples} samples), "
            f"packed placements 1..{max_gpus}, {unit}"
        ),
    )
