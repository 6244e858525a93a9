"""The executor interface shared by the simulated cluster, Slurm and SSH.

An executor is the engine's only contact with the world: it reports events (``next_events``)
and carries out plans (``apply``). It also owns job *progress* (how far each job has come),
because only it can observe or simulate execution speed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gpuplan.models import ActiveJob, AllocationPlan, ClusterView, Event, PlanRefused
from gpuplan.solver_core.diff import check_actions


@dataclass(frozen=True, slots=True)
class ExecutorCapabilities:
    """What an executor can do, so the engine only plans moves it can carry out.

    ``resize``: ``none`` (a running job keeps its size), ``restart`` (stop, checkpoint, restart at
    the new size), ``in_place`` (stop-free scaling, EDL/CoDDL). ``restart_latency_s`` is the
    measured or modelled cost of one restart. ``fractional_gpus``: the executor can run a job
    on a fraction of a GPU beside others (``JobAllocation.share`` < 1); Slurm without GPU
    sharding and the SSH executor cannot, and refuse such plans.
    """

    resize: Literal["none", "restart", "in_place"]
    pin_gpus: bool
    preempt_modes: tuple[str, ...]
    restart_latency_s: float
    fractional_gpus: bool = False


class Executor(ABC):
    """Carries out plans and reports events."""

    capabilities: ExecutorCapabilities

    def accept(self, view: ClusterView, plan: AllocationPlan) -> None:
        """Check ``plan`` against the cluster and this executor's capabilities before anything
        is carried out; raise :class:`~gpuplan.models.PlanRefused` naming the first problem.

        The engine calls it for every plan, so a policy bug (a GPU given twice, a node that is
        gone) or a plan this executor cannot honour stops the run with a clear message instead
        of corrupting state or half-running. Executors with more limits extend it.
        """
        where = f"plan of {plan.policy} at t={plan.time:g}"
        if not self.capabilities.fractional_gpus:
            for action in plan.actions:
                if action.after is not None and action.after.share < 1.0:
                    raise PlanRefused(
                        f"{where}: job {action.job_id} would get {action.after.share:g} of each "
                        f"GPU, but {type(self).__name__} cannot share GPUs between jobs")
        try:
            check_actions(view, plan)
        except ValueError as err:
            raise PlanRefused(f"{where}: {err}") from None

    @abstractmethod
    def next_events(self) -> tuple[float, list[Event]] | None:
        """The next batch of simultaneous events and their time, or None when nothing is left."""

    @abstractmethod
    def apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        """Carry out ``plan.actions``. ``jobs`` maps every action's job id to its state, already
        updated by the engine (status, allocation); the executor updates progress fields."""

    @abstractmethod
    def evict(self, job: ActiveJob, now: float, graceful: bool) -> None:
        """A job lost its GPUs outside a plan (node failure, reclaimed server)."""

    @abstractmethod
    def wake_at(self, time: float) -> None:
        """Deliver a :class:`~gpuplan.models.Timer` event at ``time``."""
