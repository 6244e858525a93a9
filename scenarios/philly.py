"""Microsoft Philly job trace (Pollux's one-row-per-job ``philly.csv``) -> ``TraceJob`` rows.

Columns used: ``timestamp`` (submission, ``YYYY-MM-DD HH:MM:SS``), ``duration`` (seconds of
execution at ``num_gpus``), ``num_gpus``, ``cluster`` (the virtual-cluster hash). ``gpu_time`` is
``duration * num_gpus`` and is ignored. The file is not sorted by time, so rows are sorted by
``(submit time, original row)`` which keeps ties in file order and the result deterministic.

Data: Microsoft Philly trace, CC BY 4.0, Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU
Clusters for DNN Training Workloads", USENIX ATC'19 (derived CSV from the Pollux artifact).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gpuplan.models.errors import InputError

from .csvio import (
    gc_paused,
    parse_datetime,
    parse_float,
    parse_int,
    parse_str,
    read_table,
    source_label,
)
from .trace_job import TraceJob
from .traces import build_job, select_window

__all__ = ["load_philly", "philly_vcs"]

_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")

# (absolute submit seconds, data row, duration, gpus, vc)
_Record = tuple[float, int, float, int, str]


def _read(path: str | Path) -> list[_Record]:
    """Parse and validate every row (also those a later filter drops, so errors are stable)."""
    table = read_table(path, required=_COLUMNS)
    src = table.source
    i_ts, i_dur, i_gpu, i_vc = (table.col(c) for c in _COLUMNS)
    return [
        (
            parse_datetime(f[i_ts], row, "timestamp", src),
            row,
            parse_float(f[i_dur], row, "duration", src, gt=0),
            parse_int(f[i_gpu], row, "num_gpus", src, ge=1),
            parse_str(f[i_vc], row, "cluster", src),
        )
        for row, f in table.rows
    ]


@gc_paused
def load_philly(
    path: str | Path,
    vc: str | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
    max_jobs: int | None = None,
    *,
    vc_origin: bool = False,
) -> list[TraceJob]:
    """Philly jobs, sorted by submit time, optionally one VC and a time window.

    Origin: ``submit_time`` is seconds after the earliest ``timestamp`` in the **whole file**
    (2017-09-04 10:30:41 for the shared copy), whichever VC is selected, so windows taken from
    different VCs line up on one clock. With ``vc_origin=True`` (needs ``vc``) the origin is that
    VC's own first submission instead, the convention of Gavel's per-VC traces.

    The window ``[start_s, end_s)`` and ``max_jobs`` (first N in submit order inside the window)
    apply to that relative ``submit_time``; times are not shifted to the window start. The id is
    ``philly-<vc>-<row>`` with the 1-based data row in the file, so it survives filtering.
    """
    if vc_origin and vc is None:
        raise InputError("vc_origin=True needs a vc to take the origin from", field="vc")
    records = _read(path)
    origin = min(r[0] for r in records)
    if vc is not None:
        selected = [r for r in records if r[4] == vc]
        if not selected:
            known = ", ".join(sorted({r[4] for r in records}))
            raise InputError(f"no jobs for VC {vc!r}; VCs in this file: {known}", source=str(path))
        records = selected
    if vc_origin:
        origin = min(r[0] for r in records)
    records.sort(key=lambda r: (r[0], r[1]))
    times = [r[0] - origin for r in records]
    label = source_label(path)
    src = str(path)
    window = select_window(times, start_s, end_s, max_jobs)
    return [
        build_job(
            src,
            r[1],
            id=f"philly-{r[4]}-{r[1]}",
            submit_time=t,
            gpus=r[3],
            duration=r[2],
            vc=r[4],
            source=f"{label}, row {r[1]}",
        )
        for r, t in zip(records[window], times[window], strict=True)
    ]


@gc_paused
def philly_vcs(path: str | Path) -> dict[str, int]:
    """Jobs per virtual cluster, largest first (ties by name), to pick a VC for a scenario."""
    counts = Counter(r[4] for r in _read(path))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
