"""Mean and linear percentiles in plain Python, bit-identical to numpy's.

A cold ``gpuplan simulate`` needs six numbers per run (means, p50/p95/p99 of JCT, queueing
and decision latency); importing numpy for them cost ~0.1 s of a 0.5 s start-up budget
(issue 28 item 4). These functions give the same floats numpy gives, not merely close ones,
so summaries, fingerprints and the README's demo table are unchanged:

* :func:`fsum_numpy` follows numpy's float64 ``add.reduce`` of a contiguous 1-D array: the
  result starts from the additive identity 0.0 and adds a pairwise sum (``pairwise_sum`` in
  numpy's ``loops_utils.h``: plain loop under 8 values, eight interleaved partial sums up to
  a block of 128, halves rounded down to a multiple of 8 above that);
* :func:`mean` is that sum divided by the count (``ndarray.mean``);
* :func:`percentiles` is ``np.percentile(values, qs, method="linear")``: virtual index
  ``(n - 1) * q / 100``, neighbours from the sorted values, and numpy's two-sided ``_lerp``
  (``a + d * t`` below ``t = 0.5``, ``b - d * (1 - t)`` from there); any NaN gives NaN.

``tests/engine/test_pystats.py`` compares every function with numpy on random arrays of many
sizes; run it again when numpy's major version changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

_BLOCK = 128
"""numpy's ``PW_BLOCKSIZE``: largest run summed with the eight interleaved accumulators."""


def _pairwise(values: Sequence[float], start: int, n: int) -> float:
    """numpy's ``pairwise_sum`` of ``values[start:start + n]``."""
    if n < 8:
        res = 0.0
        for i in range(start, start + n):
            res += values[i]
        return res
    if n <= _BLOCK:
        r0, r1, r2, r3, r4, r5, r6, r7 = values[start : start + 8]
        end = start + n - (n % 8)
        i = start + 8
        while i < end:
            r0 += values[i]
            r1 += values[i + 1]
            r2 += values[i + 2]
            r3 += values[i + 3]
            r4 += values[i + 4]
            r5 += values[i + 5]
            r6 += values[i + 6]
            r7 += values[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for j in range(i, start + n):
            res += values[j]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(values, start, n2) + _pairwise(values, start + n2, n - n2)


def fsum_numpy(values: Sequence[float]) -> float:
    """``float(np.sum(np.asarray(values, dtype=float)))``, without numpy."""
    floats = [float(v) for v in values]
    return 0.0 + _pairwise(floats, 0, len(floats))


def mean(values: Iterable[float]) -> float | None:
    """``ndarray.mean()`` of the values as float64; None when there are none."""
    floats = [float(v) for v in values]
    if not floats:
        return None
    return (0.0 + _pairwise(floats, 0, len(floats))) / len(floats)


def maximum(values: Iterable[float]) -> float:
    """``float(np.max(values))``: NaN if any value is NaN; ``values`` must not be empty."""
    floats = [float(v) for v in values]
    if any(math.isnan(v) for v in floats):
        return math.nan
    return max(floats)


def percentiles(values: Iterable[float], qs: Sequence[float]) -> list[float]:
    """``np.percentile(values, qs, method="linear")`` as floats; ``values`` must not be empty."""
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    if n == 0:
        raise ValueError("percentiles of no values")
    if any(math.isnan(v) for v in ordered):
        return [math.nan] * len(qs)
    out = []
    for q in qs:
        index = (n - 1) * (q / 100)
        if index >= n - 1:  # numpy: both neighbours are the last value, gamma from index -1
            below, above, gamma = n - 1, n - 1, index + 1
        else:
            below = math.floor(index)
            above, gamma = below + 1, index - below
        a, b = ordered[below], ordered[above]
        diff = b - a
        out.append(b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma)
    return out
