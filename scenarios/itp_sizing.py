"""The sizing rule of the embedded ITP scenarios (``scenarios/data/itp-clusterNN``).

The ITP files say nothing about the clusters' sizes (ElasticFlow's paper replays them on
clusters of its own choosing), so each embedded scenario gets a cluster of 8-GPU servers (ITP
nodes have 8 GPUs) sized by one rule, reproducible from the file alone:

    nodes = max(ceil(largest request / 8), ceil(offered load / (target x 8)))

where the offered load is the trace's GPU-seconds divided by its submission span (the mean
number of busy GPUs if every job ran at once on arrival) and ``target`` = 0.8: on average the
cluster is 80 % busy, so queues form in bursts but the backlog does not grow for ever.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuplan.models import InputError

from .trace_job import TraceJob

__all__ = ["ITP_GPUS_PER_NODE", "ITP_TARGET_LOAD", "itp_cluster_nodes", "offered_load"]

ITP_GPUS_PER_NODE = 8
ITP_TARGET_LOAD = 0.8


def offered_load(rows: Sequence[TraceJob]) -> float:
    """Mean busy GPUs: sum of duration x GPUs over the span of submissions."""
    if not rows or any(r.duration is None for r in rows):
        raise InputError("offered load needs rows with durations", field="duration")
    times = [r.submit_time for r in rows]
    span = max(times) - min(times)
    if span <= 0:
        raise InputError("offered load needs submissions spread over time", field="submit_time")
    return sum(r.duration * r.gpus for r in rows) / span  # type: ignore[operator]


def itp_cluster_nodes(
    rows: Sequence[TraceJob],
    target: float = ITP_TARGET_LOAD,
    gpus_per_node: int = ITP_GPUS_PER_NODE,
) -> int:
    """Servers of ``gpus_per_node`` GPUs by the rule in the module docstring."""
    if not 0 < target <= 1:
        raise InputError(f"target must be in (0, 1], got {target}", field="target")
    largest = max(r.gpus for r in rows)
    return max(
        math.ceil(largest / gpus_per_node), math.ceil(offered_load(rows) / (target * gpus_per_node))
    )
