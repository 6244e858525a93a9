"""SJF in the Tiresias simulator's sense: smallest requested GPU count first, preemptive.

Tiresias' simulator (SymbioticLab/Tiresias ``simulator/``, scheme ``sjf``) has no job lengths
to rank by, so its "shortest job" is the job asking for the fewest GPUs. At every decision all
active jobs are ranked by ``(requested GPUs, submit time, id)`` and, in that order, each gets
its requested GPUs while they last; a job that does not fit is skipped (work-conserving
backfill) and a running job that falls out of the selection is preempted. Rigid: a job runs at
exactly its request or not at all.
"""

from __future__ import annotations

from gpuplan.models import ActiveJob

from ...helpers.running_order import RunningOrder
from ...placement.best_fit import best_fit_placement
from ...policy import StagedPolicy
from ...registry import parameterless
from .shortest_first import ShortestFirst


def gpu_count(job: ActiveJob, now: float) -> float:
    """The rank key: the job's requested GPU count (constant, so queued entries stay valid)."""
    return float(job.spec.requested_gpus)


def sjf_shares() -> ShortestFirst:
    """A fresh SJF shares stage (fewest requested GPUs first)."""
    return ShortestFirst(gpu_count, order=RunningOrder(gpu_count, static=True), sized=True)


POLICIES = [
    parameterless("sjf", lambda: StagedPolicy("sjf", sjf_shares(), best_fit_placement)),
]
