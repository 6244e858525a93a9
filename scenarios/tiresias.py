"""Tiresias (NSDI'19) simulator inputs: the 60-job trace and the cluster shape files.

``60_job.csv``: ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``; a small
hand-made example, not a production log (the 480-job trace was never published). ``interval``
(gap to the next submission) is redundant with ``submit_time`` and dropped.

``n32g4.csv``-style shapes: ``num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,
mem_p_node``, one data row. CPU and memory are dropped: :class:`~gpuplan.models.Node` models
GPUs only.

Data: Apache-2.0 (SymbioticLab/Tiresias); cite Gu et al., NSDI'19.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from gpuplan.models import Cluster, Node
from gpuplan.models.errors import InputError

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

__all__ = ["load_tiresias", "load_tiresias_cluster"]

_JOB_COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration")
_SHAPE_COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node")


@gc_paused
def load_tiresias(path: str | Path) -> list[TraceJob]:
    """Jobs of a Tiresias trace, sorted by ``(submit_time, row)``.

    id = ``tiresias-<job_id>`` (the raw ids are bare integers, which would collide with other
    traces in a merged workload), ``gpus`` = ``num_gpu``, ``submit_time`` = ``submit_time``,
    ``iterations``, ``model`` = ``model_name``, ``duration`` = ``duration`` (at ``num_gpu``).
    """
    table = read_table(path, required=_JOB_COLUMNS)
    src, label = table.source, source_label(path)
    i_id, i_gpu, i_sub, i_it, i_model, i_dur = (table.col(c) for c in _JOB_COLUMNS)
    seen: dict[str, int] = {}
    records: list[tuple[float, int, dict[str, object]]] = []
    for row, f in table.rows:
        job_id = parse_unique_str(f[i_id], row, "job_id", src, seen)
        submit = parse_float(f[i_sub], row, "submit_time", src, ge=0)
        fields: dict[str, object] = {
            "id": f"tiresias-{job_id}",
            "gpus": parse_int(f[i_gpu], row, "num_gpu", src, ge=1),
            "iterations": parse_float(f[i_it], row, "iterations", src, gt=0),
            "model": parse_str(f[i_model], row, "model_name", src),
            "duration": parse_float(f[i_dur], row, "duration", src, gt=0),
        }
        records.append((submit, row, fields))
    records.sort(key=lambda r: (r[0], r[1]))
    return [
        build_job(src, row, submit_time=t, source=f"{label}, row {row}", **fields)
        for t, row, fields in records
    ]


def load_tiresias_cluster(path: str | Path, gpu_type: str = "v100") -> Cluster:
    """A :class:`Cluster` from a Tiresias shape file.

    ``num_switch`` x ``num_node_p_switch`` nodes of ``num_gpu_p_node`` GPUs each; node
    ``sw{s}-n{k:03d}`` sits in rack and switch ``sw{s}`` (Tiresias models one top-of-rack switch
    per group of nodes, so rack and switch coincide). The file names no GPU type, hence
    ``gpu_type``. Exactly one data row is expected: a second shape would be ambiguous.
    """
    table = read_table(path, required=_SHAPE_COLUMNS)
    src = table.source
    if len(table.rows) != 1:
        raise InputError(
            f"expected exactly one cluster shape row, found {len(table.rows)}", source=src
        )
    row, f = table.rows[0]
    switches, per_switch, gpus = (
        parse_int(f[table.col(c)], row, c, src, ge=1) for c in _SHAPE_COLUMNS
    )
    try:
        return Cluster(
            nodes=[
                Node(
                    name=f"sw{s}-n{k:03d}",
                    gpus=gpus,
                    gpu_type=gpu_type,
                    rack=f"sw{s}",
                    switch=f"sw{s}",
                )
                for s in range(switches)
                for k in range(per_switch)
            ]
        )
    except ValidationError as err:
        first = err.errors()[0]
        raise InputError(first["msg"], source=src, row=row) from None
