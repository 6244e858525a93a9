"""Pollux goodput: throughput x statistical efficiency of a job at a chosen batch size.

Pollux (Qiao et al., OSDI'21, §3) scores a configuration of a job -- ``a`` replicas on ``n``
nodes, per-GPU (atomic) batch ``m``, ``s`` gradient-accumulation steps, global batch
``M = a * m * (s + 1)`` -- by its *goodput*, the training progress it makes per second:

* **statistical efficiency** (Eq. 2): with the gradient noise ``var`` and the squared gradient
  norm ``sqr`` measured in the current epoch (the gradient noise scale is ``var / sqr``) and
  ``r = M / M0`` the batch relative to the initial batch ``M0``, one step at ``M`` makes
  ``gain(M) = (var + sqr) / (var / r + sqr)`` steps' worth of progress at ``M0``
  (``1 <= gain <= r``); ``EFFICIENCY = gain / r`` per example;
* **throughput** (Eqs. 3-5): ``T_grad = alpha_c + beta_c * m``; ``T_sync = 0`` on one replica,
  ``alpha_r + beta_r * (a - 2)`` on one node, ``alpha_n + beta_n * (a - 2)`` across nodes;
  ``T_iter = s * T_grad + (T_grad**gamma + T_sync**gamma) ** (1 / gamma)`` seconds per step;
* **goodput** (Eq. 1): ``THROUGHPUT x EFFICIENCY = M / T_iter * gain / r``, i.e.
  ``M0 * gain / T_iter`` examples/s. Dividing by ``M0``: ``gain / T_iter`` scale-invariant
  iterations per second, the unit a job's work is counted in here (the Pollux simulator's
  ``progress``).

Each job picks the batch that maximises goodput for its allocation (Eq. 6, ``optimize``: as
Pollux's ``GoodputFunction.optimize``, 50 geometrically spaced global batches between
``max(M0, a * min_local)`` and the largest batch, split into atomic batch and accumulation
steps, candidates whose atomic batch leaves ``[min_local, max_local]`` scoring 0).

:class:`GoodputModel` is what a job carries for this (``JobSpec.goodput``): the fitted
iteration-time parameters and the gradient statistics of every validated batch and epoch.
The scenario loader fills it (``scenarios/pollux_jobs.py``, mapping ``goodput``); the
``pollux`` policy reads it. Kept here, in the model layer, because both sides need the same
formulas and ``solver_core`` may not import ``scenarios``.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:  # numpy is imported by optimize() alone: a job model must not load it
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["GoodputModel", "gain", "iteration_time"]

CANDIDATES = 50
"""Global batch sizes tried per allocation (``np.geomspace``'s default, as Pollux)."""
_EPS = 1e-8
"""Tolerance of Pollux's floor/ceil operations."""


def gain(batch: float, init_batch: float, sqr: float, var: float) -> float:
    """Eq. 2's progress per step at ``batch`` in steps at ``init_batch`` (1 when no noise)."""
    scale = batch / init_batch
    denom = var / scale + sqr
    return (var + sqr) / denom if denom > 0 else 1.0


def iteration_time(
    perf: tuple[float, ...], nodes: int, replicas: int, atomic: float, accum: int
) -> float:
    """Eqs. 4-5's seconds per optimizer step (``perf`` = alpha_c, beta_c, alpha_n, beta_n,
    alpha_r, beta_r, gamma)."""
    alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma = perf
    grad = alpha_c + beta_c * atomic
    if replicas <= 1:
        sync = 0.0
    elif nodes <= 1:
        sync = alpha_r + beta_r * (replicas - 2)
    else:
        sync = alpha_n + beta_n * (replicas - 2)
    top = max(grad, sync)
    overlap = top * ((grad / top) ** gamma + (sync / top) ** gamma) ** (1.0 / gamma)
    return accum * grad + overlap


class GoodputModel(BaseModel):
    """A job's goodput inputs: iteration-time parameters, batch limits, gradient statistics.

    ``batches`` are the validated global batches (ascending); ``grad_sqr[i][e]`` and
    ``grad_var[i][e]`` the statistics of epoch ``e`` at ``batches[i]``, linear in the batch
    between validated ones (clamped outside). ``epoch_ends[e]`` is the progress (scale-
    invariant iterations) at which epoch ``e`` ends; the last one is the job's work.
    ``fixed_batch`` pins the global batch (Pollux runs NCF at 32,768).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    perf: tuple[float, float, float, float, float, float, float]
    init_batch: int = Field(ge=1)
    max_batch: int = Field(ge=1)
    min_local: int = Field(ge=1)
    max_local: int = Field(ge=1)
    batches: tuple[int, ...] = Field(min_length=1)
    grad_sqr: tuple[tuple[float, ...], ...]
    grad_var: tuple[tuple[float, ...], ...]
    epoch_ends: tuple[float, ...] = Field(min_length=1)
    fixed_batch: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> GoodputModel:
        epochs = len(self.epoch_ends)
        if list(self.batches) != sorted(set(self.batches)):
            raise ValueError("batches must be strictly increasing")
        for name in ("grad_sqr", "grad_var"):
            table = getattr(self, name)
            if len(table) != len(self.batches) or any(len(row) < epochs for row in table):
                raise ValueError(f"{name}: one row of >= {epochs} epochs per batch")
        if any(b <= a for a, b in zip(self.epoch_ends, self.epoch_ends[1:], strict=False)):
            raise ValueError("epoch_ends must increase")
        if self.init_batch > self.max_batch or self.min_local > self.max_local:
            raise ValueError("need init_batch <= max_batch and min_local <= max_local")
        return self

    @property
    def work(self) -> float:
        """Progress at the end of the last epoch: the job's total work."""
        return self.epoch_ends[-1]

    def epoch_at(self, progress: float) -> int:
        """The epoch a job that has made ``progress`` is in (the last one once done)."""
        return min(bisect.bisect_right(self.epoch_ends, progress), len(self.epoch_ends) - 1)

    def grad_stats(self, batch: float, epoch: int) -> tuple[float, float]:
        """``(sqr, var)`` at ``batch`` in ``epoch``, linear between bracketing batches."""
        b = self.batches
        hi = min(bisect.bisect_left(b, batch), len(b) - 1)
        lo = hi if b[hi] <= batch else max(hi - 1, 0)
        sqr_lo, var_lo = self.grad_sqr[lo][epoch], self.grad_var[lo][epoch]
        if b[lo] == b[hi] or not b[lo] <= batch <= b[hi]:
            return sqr_lo, var_lo
        w = (batch - b[lo]) / (b[hi] - b[lo])
        return (
            (1 - w) * sqr_lo + w * self.grad_sqr[hi][epoch],
            (1 - w) * var_lo + w * self.grad_var[hi][epoch],
        )

    def goodput(self, nodes: int, replicas: int, atomic: int, accum: int, epoch: int) -> float:
        """True progress/s of a configuration in ``epoch``: Eq. 1 with the statistics of its
        own global batch (what the job experiences, as the Pollux simulator's ``Job.step``)."""
        batch = replicas * atomic * (accum + 1)
        sqr, var = self.grad_stats(batch, epoch)
        return gain(batch, self.init_batch, sqr, var) / iteration_time(
            self.perf, nodes, replicas, atomic, accum
        )

    def optimize(
        self,
        nodes: int,
        replicas: NDArray[np.int64],
        sqr: float,
        var: float,
        node_gpus: int = 4,
    ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
        """Best ``(goodput, atomic batch, accumulation steps)`` for each replica count (on
        ``nodes`` nodes, or packed on ``ceil(replicas / node_gpus)`` when ``nodes`` is 0),
        scored with one epoch's statistics ``(sqr, var)`` as Pollux's agent does (Eq. 6).
        Replica counts with no feasible batch score 0."""
        import numpy as np  # only the Pollux policy calls this; gpuplan.models stays numpy-free

        a = np.asarray(replicas, dtype=np.int64)
        n = np.maximum(1, -(-a // node_gpus)) if nodes == 0 else np.full_like(a, nodes)
        lo = np.maximum(self.init_batch, self.min_local * a).astype(float)
        hi = float(self.max_batch)
        if self.fixed_batch is not None:
            batch = np.full((1, a.size), float(self.fixed_batch))
        else:
            t = np.linspace(0.0, 1.0, CANDIDATES)[:, None]
            batch = np.exp(np.log(lo)[None, :] * (1 - t) + math.log(hi) * t)
        local = batch / a
        accum = np.ceil(local / self.max_local - _EPS) - 1
        single = (a == 1) & (local > self.init_batch + _EPS)
        accum = np.where(single, np.maximum(accum, 1), accum).astype(np.int64)
        accum = np.maximum(accum, 0)
        atomic = np.ceil(local / (accum + 1) - _EPS).astype(np.int64)
        alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma = self.perf
        grad = alpha_c + beta_c * atomic
        retro = np.maximum(a - 2, 0)
        sync = np.where(n > 1, alpha_n + beta_n * retro, alpha_r + beta_r * retro)
        sync = np.where(a > 1, sync, 0.0) * np.ones_like(grad)
        top = np.maximum(grad, sync)
        t_iter = accum * grad + top * ((grad / top) ** gamma + (sync / top) ** gamma) ** (
            1.0 / gamma
        )
        total = a * atomic * (accum + 1)
        scale = total / self.init_batch
        denom = var / scale + sqr
        g = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
        good = g / t_iter
        ok = (atomic >= self.min_local) & (atomic <= self.max_local)
        if self.fixed_batch is None:
            ok &= total >= self.init_batch * (1 - _EPS)
        good = np.where(ok, good, 0.0)
        best = np.argmax(good, axis=0)
        cols = np.arange(a.size)
        return good[best, cols], atomic[best, cols], accum[best, cols]
