"""Heterogeneous training (Aryl App. A): the throughput of one job whose workers span GPU types.

App. A trains one data-parallel (BSP) job on V100 and T4 workers at once and balances the
per-iteration time by tuning local batch sizes online (a T4 starts at 1/4 of a V100's batch,
window 10, step 1). Tab. 10 states the *theoretical* throughput of such a job as the homogeneous
V100 throughput scaled by its compute in V100 units ("T4 to be one fourth of V100"):

    X_theory = X_V100(N) * (n_V100 + n_T4 / 4) / N,      N = n_V100 + n_T4       (App. A, Tab. 10)

Measured throughput fell 27 % short on average, so the paper's simulations run a heterogeneous job
at an efficiency ``e`` of the theoretical value -- ``e <= 0.7`` in the Advanced scenario,
``e = 1`` in the Ideal one (§7.1; digest §2.5, §5.2):

    X_mixed = e * X_theory                                                         (1)

The factor applies only while a job's workers really span GPU types; on one type it runs at its
ordinary throughput.

gpuplan's engine (``models.state.placement_rate``) paces a job on mixed types by its *slowest*
GPU (BSP without batch tuning): ``P(N) * min_i m_i * efficiency``, with ``m_i`` each GPU's speed
in reference-GPU units. :func:`mixed_efficiency` is the ``JobAllocation.efficiency`` that turns
that into (1): ``efficiency = e * mean_i m_i / min_i m_i``. With loaned servers as *normalised*
slots (the default ``loaning_cluster``: 8 T4 = 2 slots of V100 speed,
``scenarios.inference.normalised_slots``) every ``m_i`` is 1, ``n_T4 / 4`` is the slot count, and
the efficiency is exactly ``e``. On physical T4 GPUs (``normalise=False``) ``mean / min`` exceeds
1, and so may the efficiency: batch tuning lets the V100 workers run ahead of the slowest GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["ADVANCED_EFFICIENCY", "IDEAL_EFFICIENCY", "mixed_efficiency", "theoretical_throughput"]

ADVANCED_EFFICIENCY = 0.7
"""§7.1 "Advanced": heterogeneous jobs at <= 70 % of theoretical (Tab. 10: -27 % measured)."""
IDEAL_EFFICIENCY = 1.0
"""§7.1 "Ideal": heterogeneous training at ideal performance."""


def theoretical_throughput(
    homogeneous: float, gpus: Mapping[str, int], speed: Mapping[str, float]
) -> float:
    """Tab. 10's theoretical throughput: ``homogeneous`` (the job's throughput on N reference
    GPUs) x (sum of its GPUs in reference units) / N, for ``gpus`` = GPU type -> count and
    ``speed`` = GPU type -> compute relative to the reference type (V100 1, T4 1/4)."""
    n = sum(gpus.values())
    if n <= 0:
        return 0.0
    return homogeneous * sum(c * speed[t] for t, c in gpus.items()) / n


def mixed_efficiency(speeds: Iterable[float], efficiency: float) -> float:
    """``JobAllocation.efficiency`` that makes the engine's slowest-GPU pace equal Eq. (1).

    ``speeds`` = one speed multiplier per GPU of the placement; ``efficiency`` = App. A's ``e``.
    1.0 when all speeds are equal and ``e`` is 1 (see the module docstring)."""
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    s = list(speeds)
    if not s:
        return 1.0
    low = min(s)
    if low <= 0:
        raise ValueError("GPU speeds must be > 0")
    return efficiency * (sum(s) / len(s)) / low
