"""Pollux (OSDI'21) workload files ``workloads*/workload-N.csv`` -> ``TraceJob`` rows.

Columns: ``name,time,application,num_replicas,batch_size``. The file holds no duration and no
iteration count: a Pollux job runs until its model reaches a target epoch count, so how long it
takes follows from the per-model profiles (``pollux/profiles/``) and the allocation it gets.
Both fields are therefore left ``None`` here; a mapping fills them in.

Data: Apache-2.0 (Petuum, Pollux artifact), arrivals sampled from Philly (CC BY 4.0); cite Qiao
et al., OSDI'21.
"""

from __future__ import annotations

from pathlib import Path

from .csvio import (
    gc_paused,
    parse_float,
    parse_int,
    parse_str,
    parse_unique_str,
    read_table,
    source_label,
)
from .trace_job import TraceJob
from .traces import build_job

__all__ = ["load_pollux_workload"]

_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


@gc_paused
def load_pollux_workload(path: str | Path) -> list[TraceJob]:
    """Jobs of one Pollux workload, sorted by ``(time, row)``.

    id = ``name`` verbatim (``cifar10-0``: what Pollux's own logs call the job), ``submit_time``
    = ``time`` (seconds inside the 8-hour window, not shifted to start at 0), ``model`` =
    ``application``, ``gpus`` = ``num_replicas`` and ``batch_size`` = ``batch_size`` (the
    "TunedJobs" request that non-adaptive baselines use; Pollux itself ignores both).
    """
    table = read_table(path, required=_COLUMNS)
    src, label = table.source, source_label(path)
    i_name, i_time, i_app, i_rep, i_bs = (table.col(c) for c in _COLUMNS)
    seen: dict[str, int] = {}
    records: list[tuple[float, int, dict[str, object]]] = []
    for row, f in table.rows:
        name = parse_unique_str(f[i_name], row, "name", src, seen)
        submit = parse_float(f[i_time], row, "time", src, ge=0)
        fields: dict[str, object] = {
            "id": name,
            "model": parse_str(f[i_app], row, "application", src),
            "gpus": parse_int(f[i_rep], row, "num_replicas", src, ge=1),
            "batch_size": parse_int(f[i_bs], row, "batch_size", src, ge=1),
        }
        records.append((submit, row, fields))
    records.sort(key=lambda r: (r[0], r[1]))
    return [
        build_job(src, row, submit_time=t, source=f"{label}, row {row}", **fields)
        for t, row, fields in records
    ]
