"""``executors.pystats`` gives numpy's numbers bit for bit (summaries must not move when the
simulate path stops importing numpy: fingerprints and the README demo depend on them)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gpuplan.executors import pystats

SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 60, 127, 128, 129, 130, 255, 256, 257, 1000, 1031, 8191]
SIZES += [8192, 8193, 20_000, 65_537]


def _samples(rng: random.Random, n: int) -> list[list[float]]:
    """Values shaped like the summaries' inputs (JCTs, queueing, latencies) and worse ones."""
    return [
        [rng.expovariate(1 / 3600) for _ in range(n)],
        [rng.uniform(0, 1e-3) for _ in range(n)],
        [rng.lognormvariate(0, 6) for _ in range(n)],
        [float(rng.randrange(0, 10**6)) for _ in range(n)],
        [rng.choice([0.0, 1.0, 1e16, 1e-16, -3.5]) for _ in range(n)],
        [1.0 / 3.0] * n,
    ]


@pytest.mark.parametrize("n", SIZES)
def test_mean_and_percentiles_equal_numpy_bit_for_bit(n: int) -> None:
    rng = random.Random(n)
    for values in _samples(rng, n):
        arr = np.asarray(values, dtype=float)
        assert pystats.fsum_numpy(values) == float(arr.sum())
        assert pystats.mean(values) == float(arr.mean())
        assert pystats.mean(iter(values)) == float(np.fromiter(values, dtype=float).mean())
        qs = [50.0, 95.0, 99.0, 0.0, 100.0, 12.5, 99.9]
        want = [float(x) for x in np.percentile(arr, qs, method="linear")]
        got = pystats.percentiles(values, qs)
        assert got == want, (n, got, want)


def test_edge_cases_follow_numpy() -> None:
    assert pystats.mean([]) is None
    assert pystats.fsum_numpy([]) == 0.0
    with pytest.raises(ValueError):
        pystats.percentiles([], [50.0])
    for values in ([1.0, math.nan, 3.0], [math.inf, 1.0], [-math.inf, math.inf, 2.0]):
        with np.errstate(invalid="ignore"):
            want = [float(x) for x in np.percentile(np.asarray(values), [50.0, 99.0])]
        got = pystats.percentiles(values, [50.0, 99.0])
        assert [repr(x) for x in got] == [repr(x) for x in want], (values, got, want)
    with np.errstate(invalid="ignore"):
        want_mean = float(np.mean([math.inf, -math.inf]))
    assert repr(pystats.mean([math.inf, -math.inf])) == repr(want_mean)
    # ints are read as float64, as np.asarray(..., dtype=float) does
    assert pystats.mean([1, 2, 4]) == float(np.asarray([1, 2, 4], dtype=float).mean())


def test_maximum_equals_numpy() -> None:
    rng = random.Random(7)
    for n in (1, 2, 9, 130):
        values = [rng.expovariate(1.0) for _ in range(n)]
        assert pystats.maximum(values) == float(np.asarray(values).max())
    assert math.isnan(pystats.maximum([1.0, math.nan, 2.0]))
    assert math.isnan(float(np.max([1.0, math.nan, 2.0])))
