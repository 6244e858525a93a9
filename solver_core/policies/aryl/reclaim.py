"""Which on-loan servers to hand back (Aryl §4, App. B, Alg. 1), and how to score the choice.

The inference side asks for N_R of its servers back; every job with GPUs on a returned server
either *scales in* (an elastic job that still holds an allowed GPU count elsewhere) or is
*preempted*. The goal is to preempt as few jobs as possible ("so fewer users are affected").
Costs are coupled: a job spanning several servers is preempted once however many of them go,
so this is a knapsack with dependent item values (NP-hard in general).

Data model (pure, so tests and benchmarks need no cluster): a :class:`ReclaimInstance` lists the
on-loan servers in loan order and, per job, the GPUs it holds on every server (on-loan or not)
plus the GPU counts it may keep running with. A job survives a reclaim iff the GPUs it keeps are
one of those counts -- exactly the rule the engine applies when it removes a node, so a
prediction made here is what the simulator then does. Rigid jobs may keep only their full size.

Selectors (each returns ``count`` server names):

* :func:`select_aryl` -- Aryl: first release servers whose loss preempts nobody (the flexible
  group, plus idle servers), then Alg. 1's greedy on the *server preemption cost*
  ``c_s = sum_{j on s} 1/|S_j|`` with cost updates after every pick.
* :func:`select_exact` -- the optimum as an integer programme (CP-SAT or any backend of
  :mod:`gpuplan.solver_core.backends`), under a time limit, falling back to the heuristic.
* :func:`select_scf` -- Smallest (job) Count First, static costs (the naive 0-1 knapsack).
* :func:`select_random` -- seeded random servers.

:class:`Reclaimer` wraps any of them as the engine's ``reclaimer(view, on_loan, count)`` and logs
a :class:`ReclaimOutcome` per request; :func:`reclaim_metrics` reduces the log to the paper's
metrics (preemptions, collateral damage, share of demand met by the flexible group).

Modules, by concept (every name stays importable from here): the data model, outcomes and
metrics in :mod:`.reclaim_model`, the heuristic selectors in :mod:`.reclaim_greedy`, the exact
one (components of the server-job graph, enumeration, ILP) in :mod:`.reclaim_exact`; this
module holds the dispatch (:func:`select`) and the engine adapter (:class:`Reclaimer`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuplan.models import ClusterView, SolverStats

from ...limits import SolveLimits
from .reclaim_exact import RECLAIM_WORK_S, components, select_exact
from .reclaim_greedy import (
    preemption_costs,
    select_aryl,
    select_random,
    select_scf,
    take_flexible,
)
from .reclaim_model import (
    ReclaimInstance,
    ReclaimJob,
    ReclaimOutcome,
    cost_table,
    evaluate,
    reclaim_metrics,
)

__all__ = [
    "RECLAIM_METHODS",
    "RECLAIM_WORK_S",
    "ReclaimInstance",
    "ReclaimJob",
    "ReclaimOutcome",
    "Reclaimer",
    "components",
    "cost_table",
    "evaluate",
    "preemption_costs",
    "reclaim_metrics",
    "select",
    "select_aryl",
    "select_exact",
    "select_random",
    "select_scf",
    "take_flexible",
]

RECLAIM_METHODS = ("aryl", "exact", "scf", "random")


def select(
    inst: ReclaimInstance, count: int, method: str = "aryl", *, seed: int = 0, **kw: object
) -> tuple[list[str], SolverStats]:
    """Dispatch by name (:data:`RECLAIM_METHODS`): the servers and how they were chosen.

    The stats say whether the answer is proven: ``optimal`` from the exact method, ``feasible``
    (backend ``cp-sat-lns``, with a bound) when its search improved an unproven answer,
    ``heuristic`` with ``fell_back`` when another backend ran out of budget, ``heuristic`` for
    the others.
    """
    if method == "exact":
        return select_exact(inst, count, **kw)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    if method == "aryl":
        chosen = select_aryl(inst, count, **kw)  # type: ignore[arg-type]
    elif method == "scf":
        chosen = select_scf(inst, count)
    elif method == "random":
        chosen = select_random(inst, count, seed)
    else:
        raise ValueError(f"unknown reclaim method {method!r}; choose one of {RECLAIM_METHODS}")
    return chosen, SolverStats(
        stage="reclaim",
        backend=method,
        status="heuristic",
        wall_ms=(time.perf_counter() - t0) * 1000.0,
    )


class Reclaimer:
    """An engine ``reclaimer(view, on_loan, count) -> names`` that logs every decision.

    ``flexible_first`` defaults to on for Aryl (its phase A) and off for the baselines, which
    the paper runs as plain server choosers. Random draws from one seeded generator across the
    whole run, so a run is reproducible.
    """

    def __init__(
        self,
        method: str = "aryl",
        *,
        seed: int = 0,
        backend: str = "cp-sat",
        limits: SolveLimits | None = None,
        flexible_first: bool | None = None,
    ) -> None:
        if method not in RECLAIM_METHODS:
            raise ValueError(f"unknown reclaim method {method!r}; choose one of {RECLAIM_METHODS}")
        self.method = method
        self.backend = backend
        self.limits = limits
        """The exact method's budget; None: the deterministic default (:data:`RECLAIM_WORK_S`)."""
        self.flexible_first = method == "aryl" if flexible_first is None else flexible_first
        self.rng = random.Random(seed)
        self.outcomes: list[ReclaimOutcome] = []
        self.flexible_source: Callable[[], Mapping[str, Mapping[str, Sequence[int]]]] | None = None
        """Set by a scheduler that knows its flexible workers (Aryl's policy does)."""

    def snapshot(self) -> dict[str, Any]:
        """The random method's generator state (its draws continue across a controller
        restart); the other methods choose from the view alone and save nothing. ``outcomes``
        is a log for explanations, not memory."""
        if self.method != "random":
            return {}
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def restore(self, state: dict[str, Any]) -> None:
        if "rng" in state:
            version, internal, gauss = state["rng"]
            self.rng.setstate((int(version), tuple(int(x) for x in internal), gauss))

    def choose(self, inst: ReclaimInstance, count: int) -> tuple[list[str], SolverStats | None]:
        picked: list[str] = []
        if self.flexible_first and self.method != "aryl":
            # the remaining choice must see the scale-ins already made
            picked, inst = take_flexible(inst, count)
            if len(picked) == count:
                return picked, None
            count -= len(picked)
        stats = None
        if self.method == "aryl":
            chosen = select_aryl(inst, count, flexible_first=self.flexible_first)
        elif self.method == "exact":
            chosen, stats = select_exact(inst, count, backend=self.backend, limits=self.limits)
        elif self.method == "scf":
            chosen = select_scf(inst, count)
        else:
            chosen = select_random(inst, count, self.rng)
        return picked + chosen, stats

    def __call__(self, view: ClusterView, on_loan: list[str], count: int) -> list[str]:
        t0 = time.perf_counter()
        hint = self.flexible_source() if self.flexible_source is not None else None
        inst = ReclaimInstance.from_view(view, on_loan, hint)
        chosen, stats = self.choose(inst, count)
        wall = (time.perf_counter() - t0) * 1000.0
        outcome = evaluate(inst, chosen)
        outcome.method = self.method
        outcome.time = view.now
        outcome.wall_ms = wall
        outcome.stats = stats
        self.outcomes.append(outcome)
        return chosen
