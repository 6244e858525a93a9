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
from gpuplan.models.state import NO_OBSERVATIONS
from gpuplan.solver_core.diff import check_actions, check_shapes


@dataclass(frozen=True, slots=True)
class ExecutorCapabilities:
    """What an executor can do, so the engine only plans moves it can carry out.

    ``resize``: ``none`` (a running job keeps its size), ``restart`` (stop, checkpoint, restart at
    the new size), ``in_place`` (stop-free scaling, EDL/CoDDL). ``restart_latency_s`` is the
    measured or modelled cost of one restart. ``fractional_gpus``: the executor can run a job
    on a fraction of a GPU beside others (``JobAllocation.share`` < 1); Slurm without GPU
    sharding and the SSH executor cannot, and refuse such plans. ``in_place_latency_s``: the
    measured or modelled pause of one in-place resize (only meaningful with ``in_place``).
    """

    resize: Literal["none", "restart", "in_place"]
    pin_gpus: bool
    preempt_modes: tuple[str, ...]
    restart_latency_s: float
    fractional_gpus: bool = False
    in_place_latency_s: float = 0.0

    def resize_cost(self, in_place_possible: bool = True) -> tuple[str, float]:
        """How one resize is carried out here and the pause it costs: ``("in_place",
        in_place_latency_s)`` when this executor resizes in place and this move allows it,
        else ``("restart", restart_latency_s)`` — a policy that wants stop-free scaling on an
        executor (or a move) that cannot do it pays a checkpoint-restart, and the caller
        must say so (log, count), never hide it. ``("none", inf)``: cannot resize at all."""
        if self.resize == "in_place" and in_place_possible:
            return "in_place", self.in_place_latency_s
        if self.resize == "none":
            return "none", float("inf")
        return "restart", self.restart_latency_s


class Executor(ABC):
    """Carries out plans and reports events."""

    capabilities: ExecutorCapabilities
    touched: set[str] | None = None
    """Ids of the jobs whose progress fields this executor wrote since the engine last took
    them (see :mod:`.change_log`): an executor that can name every write it makes (the
    simulator) keeps a set here and adds to it on every write; None (Slurm, SSH: progress is
    observed) means unknown, and the engine's views then carry no change set."""
    trusts_built_plans: bool = False
    """Whether :meth:`accept` may skip the per-GPU re-check of a plan the engine built from a
    delta (``built=True``). Only the simulator says yes, where that check was a measurable
    share of each event; a real cluster keeps it (a refused plan is a clear error there, a
    bookkeeping failure half-way through carrying a plan out is not), at no cost worth
    saving next to an ``sbatch`` or an SSH round trip."""

    def accept(self, view: ClusterView, plan: AllocationPlan, *, built: bool = False) -> None:
        """Check ``plan`` against the cluster and this executor's capabilities before anything
        is carried out; raise :class:`~gpuplan.models.PlanRefused` naming the first problem.

        The engine calls it for every plan, so a policy bug (a GPU given twice, a node that is
        gone) or a plan this executor cannot honour stops the run with a clear message instead
        of corrupting state or half-running. Executors with more limits extend it.

        ``built``: the engine built the actions itself from a delta on this very view (starts
        on GPUs its free index holds, preemptions of running jobs); on an executor that
        :attr:`trusts_built_plans` (the simulator) the per-GPU re-check
        (:func:`check_actions`) is then skipped, the capability checks and the node-shape
        check (:func:`check_shapes`: no single-node job over two nodes) still run, and
        ``Engine.check_delta_plans`` turns the re-check back on (the tests do).
        """
        where = f"plan of {plan.policy} at t={plan.time:g}"
        if not self.capabilities.fractional_gpus:
            for action in plan.actions:
                if action.after is not None and action.after.share < 1.0:
                    raise PlanRefused(
                        f"{where}: job {action.job_id} would get {action.after.share:g} of each "
                        f"GPU, but {type(self).__name__} cannot share GPUs between jobs"
                    )
        try:
            if built and self.trusts_built_plans:
                check_shapes(view, plan)  # the node-shape invariant holds on every executor
            else:
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

    def observed_interference(self, now: float) -> Mapping[tuple[str, int], float]:
        """Per shared GPU, the slowdown its co-located workers are observed to suffer now
        (``ClusterView.interference``). Slurm and SSH measure none: empty, so online
        adjusters (OJPAP) do nothing there; the simulator overrides it."""
        return NO_OBSERVATIONS
