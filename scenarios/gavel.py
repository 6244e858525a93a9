"""Gavel (OSDI'20) ``.trace`` files -> ``TraceJob`` rows (the throughput JSON is ``profiles.py``).

Tab-separated, no header, two shapes told apart by the column count of the first row:

* 7 columns, ``msr_philly_per_vc_seed0/<vc>.trace`` (Philly-derived, one file per VC):
  ``job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor``;
* 10 columns, ``physical_cluster/*.trace`` (Gavel's synthetic generator):
  ``job_type, command, working_directory, num_steps_arg, needs_data_dir, total_steps,
  scale_factor, priority_weight, SLO, arrival_time``.

Every row must have the first row's count. ``command``, ``working_directory``,
``num_steps_arg``, ``needs_data_dir``, ``priority_weight`` and ``SLO`` (always -1 in the shared
copies) describe how Gavel launches a job, not the job itself, and are dropped.

Data: MIT, Copyright (c) 2020 Stanford Future Data Systems; per-VC traces derived from the
Philly trace (CC BY 4.0, Jeon et al. ATC'19). Cite Narayanan et al., OSDI'20.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpuplan.models.errors import InputError

from .csvio import gc_paused, parse_float, parse_int, parse_str, read_table, source_label
from .trace_job import TraceJob
from .traces import build_job

__all__ = ["load_gavel_trace"]

# column count -> (total_steps, arrival_time, scale_factor) positions
_LAYOUTS: dict[int, tuple[int, int, int]] = {7: (4, 5, 6), 10: (5, 9, 6)}
_BATCH = re.compile(r"\(batch size (\d+)\)")


@gc_paused
def load_gavel_trace(path: str | Path) -> list[TraceJob]:
    """Jobs of one Gavel trace, sorted by ``(arrival_time, row)``.

    ``model`` = ``job_type`` verbatim (e.g. ``"ResNet-50 (batch size 64)"``, the key into
    Gavel's throughput table), ``batch_size`` = the number in its ``(batch size N)`` suffix when
    there is one (A3C and CycleGAN have none), ``iterations`` = ``total_steps``, ``gpus`` =
    ``scale_factor``, ``submit_time`` = ``arrival_time`` (per-VC files count from that VC's first
    job). Duration is not in the file: it is ``total_steps`` / throughput. For the 7-column
    per-VC files ``vc`` is the file stem (the files are named by Philly VC); id is
    ``gavel-<stem>-<row>``.
    """
    table = read_table(path, delimiter="\t", header=False, quoting=False)
    src, label, stem = table.source, source_label(path), Path(path).stem
    width = len(table.rows[0][1])
    if width not in _LAYOUTS:
        raise InputError(
            f"expected 7 (per-VC) or 10 (physical cluster) tab-separated fields, found {width}",
            source=src,
            row=table.rows[0][0],
        )
    i_steps, i_arrival, i_scale = _LAYOUTS[width]
    vc = stem if width == 7 else None
    records: list[tuple[float, int, dict[str, object]]] = []
    for row, f in table.rows:
        if len(f) != width:
            raise InputError(
                f"expected {width} tab-separated fields like row {table.rows[0][0]}, "
                f"found {len(f)}",
                source=src,
                row=row,
            )
        job_type = parse_str(f[0], row, "job_type", src)
        batch = _BATCH.search(job_type)
        submit = parse_float(f[i_arrival], row, "arrival_time", src, ge=0)
        fields: dict[str, object] = {
            "id": f"gavel-{stem}-{row}",
            "model": job_type,
            "batch_size": int(batch.group(1)) if batch and int(batch.group(1)) >= 1 else None,
            "iterations": parse_float(f[i_steps], row, "total_steps", src, gt=0),
            "gpus": parse_int(f[i_scale], row, "scale_factor", src, ge=1),
            "vc": vc,
        }
        records.append((submit, row, fields))
    records.sort(key=lambda r: (r[0], r[1]))
    return [
        build_job(src, row, submit_time=t, source=f"{label}, row {row}", **fields)
        for t, row, fields in records
    ]
