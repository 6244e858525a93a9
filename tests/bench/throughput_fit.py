"""Pollux throughput-model fit: cost and quality on the six shared Pollux models.

``python -m tests.bench.throughput_fit`` fits every model in ``pollux/profiles/`` and prints
the fitted parameters and RMSLE as the Markdown table of ``docs/profiles.md``, then the fit time
as a ratio against reading the same tables (``pollux_samples``) in the same run, so the ratio
survives a change of machine; absolute times are printed beside it. Goal: a fit costs at most
a few table reads (it runs whenever a profile is built from a directory).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpuplan.scenarios.throughput_fit import fit_pollux_params, pollux_samples
from tests.conftest import traces_dir, traces_expected

MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


def _best_ms(fn: Callable[[], Any], repeat: int) -> tuple[Any, float]:
    """(result, best wall ms over ``repeat`` calls): the minimum, as ``timeit`` recommends on a
    shared machine where the median mostly measures other processes."""
    best = float("inf")
    result: Any = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, (time.perf_counter() - start) * 1000.0)
    return result, best


def main(argv: Sequence[str] = ()) -> None:
    """Print the parameter table and the fit/read time ratio per model."""
    repeat = 2 if "--quick" in argv else 5
    found = traces_dir()  # the tests' one way: $GPUPLAN_TRACES, else ../shared/traces
    if found is None or not (found / "pollux" / "profiles").is_dir():
        print(f"skipped: no pollux/profiles under {traces_expected()}")
        return
    root = found / "pollux" / "profiles"
    print(f"load average {os.getloadavg()[0]:.2f}, best of {repeat}")
    print(
        "| model | samples | alpha_c | beta_c | alpha_n | beta_n | alpha_r | beta_r | gamma "
        "| RMSLE |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    timings = []
    for model in MODELS:
        samples, read_ms = _best_ms(lambda m=model: pollux_samples(root / m), repeat)
        fit, fit_ms = _best_ms(lambda s=samples: fit_pollux_params(s), repeat)
        p = fit.params
        cells = " | ".join(f"{v:.3g}" for v in p.as_tuple())
        print(f"| {model} | {fit.n_samples} | {cells} | {fit.rmsle:.3f} |")
        timings.append((model, fit_ms, read_ms, fit.success))
    print()
    for model, fit_ms, read_ms, ok in timings:
        print(
            f"{model:12s} fit {fit_ms:7.1f} ms = {fit_ms / read_ms:5.2f} x read "
            f"({read_ms:.1f} ms){'' if ok else '  NOT CONVERGED'}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
