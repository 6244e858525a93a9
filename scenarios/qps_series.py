"""QPS series for the capacity-loaning scenarios: reading, validating and binning a request rate.

Split out of :mod:`gpuplan.scenarios.inference` because file parsing (the shared Alibaba GenAI
QPS trace or the embedded 5-minute aggregate, its cell limits and the binning to ``step_s``)
changes for different reasons than the inference-side model that consumes the series
(:class:`~gpuplan.scenarios.inference.InferenceLoad`, loan / reclaim events, clusters).
:mod:`gpuplan.scenarios.inference` re-exports every name here.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from gpuplan.models import InputError
from gpuplan.models.bounds import MAX_QPS, MAX_TIME_S

from .input_files import MAX_TRACE_BYTES, read_text
from .traces import resolve_trace_path

__all__ = ["QpsSeries", "load_qps"]

EMBEDDED_QPS = "aryl_genai_qps_5min.csv"
SHARED_QPS = "alibaba_genai_v2026/qps.csv"
MAX_TIMESTAMP = 1e11
"""Raw trace timestamps are Unix times (1.66e9 in the GenAI trace): within +-3,000 years."""
MAX_QPS_BINS = 10_000_000
"""Bins of a QPS series (``span / qps_step_s``): 95 years of 5-minute bins; a tiny
``qps_step_s`` would otherwise allocate arrays without bound."""


# --------------------------------------------------------------------------------------------
# QPS series
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QpsSeries:
    """Request rate per ``step_s`` bin from t = 0 (piecewise constant)."""

    step_s: float
    values: np.ndarray

    @property
    def duration_s(self) -> float:
        return self.step_s * len(self.values)

    @property
    def peak(self) -> float:
        return float(self.values.max())


def _data_file(name: str) -> Path:
    return Path(str(resources.files("gpuplan.scenarios").joinpath("data", name)))


def load_qps(
    path: str | Path | None = None,
    step_s: float = 300.0,
    request_types: Iterable[str] | None = None,
) -> QpsSeries:
    """A QPS series binned to ``step_s``.

    ``path`` None reads the embedded 5-minute aggregate (only for ``step_s`` = 300 and all
    request types; otherwise the shared raw trace). A raw trace file
    (``timestamp_anon,value,container_ip,request_type``) is summed over containers per sampling
    instant, averaged per bin, and empty bins repeat the previous value. A two-column
    ``t_s,qps`` file is read as an already binned series.
    """
    if step_s <= 0 or not math.isfinite(step_s):
        raise InputError(f"step_s must be a finite number > 0, got {step_s!r}", field="step_s")
    if path is None:
        if step_s == 300.0 and request_types is None:
            path = _data_file(EMBEDDED_QPS)
        else:
            path = resolve_trace_path(SHARED_QPS)
    path = Path(path)
    text = read_text(path, "QPS series", limit=MAX_TRACE_BYTES, bom=True)
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        fields = reader.fieldnames or []
        if fields[:2] == ["t_s", "qps"]:
            pairs = _series_rows(reader, path)
            if request_types is not None:
                raise InputError("an aggregated series has no request types", source=str(path))
            series = _bin(pairs, step_s, already_binned=True, source=str(path))
        elif {"timestamp_anon", "value", "request_type"} <= set(fields):
            keep = None if request_types is None else set(request_types)
            instants: dict[float, float] = {}
            for i, r in enumerate(reader, start=2):
                if keep is not None and r["request_type"] not in keep:
                    continue
                t = _number(
                    r["timestamp_anon"], path, i, "timestamp_anon", MAX_TIMESTAMP, -MAX_TIMESTAMP
                )
                v = _number(r["value"], path, i, "value", MAX_QPS)
                instants[t] = instants.get(t, 0.0) + v
            if not instants:
                raise InputError("no samples left after filtering", source=str(path))
            t0 = min(instants)
            series = _bin(
                [(t - t0, v) for t, v in sorted(instants.items())], step_s, source=str(path)
            )
        else:
            raise InputError(f"unknown QPS file columns {fields}", source=str(path))
    return QpsSeries(step_s, series)


def _number(
    text: str | None, path: Path, row: int, column: str, limit: float, low: float = 0.0
) -> float:
    """One QPS-file cell: a finite number in [``low``, ``limit``] (``nan`` or ``1e308`` in a
    row used to end in an internal error or a series of infinities)."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(
            f"not a number: {text!r}", source=str(path), row=row, field=column
        ) from None
    if not (math.isfinite(value) and low <= value <= limit):
        raise InputError(
            f"{value!r} is not a finite number in [{low:g}, {limit:g}]",
            source=str(path),
            row=row,
            field=column,
        )
    return value


def _series_rows(reader: csv.DictReader, path: Path) -> list[tuple[float, float]]:
    """``t_s,qps`` rows: times in [0, ``MAX_TIME_S``] and strictly increasing (a time that
    goes back or repeats is a broken series, not a second sample), QPS in [0, ``MAX_QPS``]."""
    pairs: list[tuple[float, float]] = []
    for i, r in enumerate(reader, start=2):
        t = _number(r["t_s"], path, i, "t_s", MAX_TIME_S)
        if pairs and t <= pairs[-1][0]:
            raise InputError(
                f"time {t:g} is not after the previous row's {pairs[-1][0]:g} "
                "(times must increase)",
                source=str(path),
                row=i,
                field="t_s",
            )
        pairs.append((t, _number(r["qps"], path, i, "qps", MAX_QPS)))
    return pairs


def _bin(
    pairs: Sequence[tuple[float, float]],
    step_s: float,
    already_binned: bool = False,
    source: str | None = None,
) -> np.ndarray:
    if not pairs:
        raise InputError("empty QPS series", source=source)
    span = max(t for t, _ in pairs)
    if span / step_s >= MAX_QPS_BINS:
        raise InputError(
            f"the series spans {span:g} s: {span / step_s:.3g} bins of "
            f"qps_step_s = {step_s:g} s exceed {MAX_QPS_BINS:,}",
            source=source,
            field="loaning.qps_step_s",
        )
    bins = int(span // step_s) + 1
    sums = np.zeros(bins)
    counts = np.zeros(bins)
    for t, v in pairs:
        k = int(t // step_s)
        sums[k] += v
        counts[k] += 1
    out = np.zeros(bins)
    prev = 0.0
    for k in range(bins):
        prev = sums[k] / counts[k] if counts[k] else prev
        out[k] = prev
    return out
