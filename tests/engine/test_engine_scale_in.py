"""A node's graceful scale-in is a plan like any other: the executor's ``accept`` checks it.

When a loaned server is reclaimed, an elastic job on it keeps its other GPUs (scale-in, no
preemption). That shrink used to reach ``executor.apply`` without ``accept``; now it is a
one-action plan the executor checks on the state before the node leaves, and a refused one
evicts the job instead (the node must go either way).
"""

from __future__ import annotations

import logging

import pytest

from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterView,
    Elasticity,
    LoanOffer,
    Node,
    PlanRefused,
    ReclaimRequest,
)
from gpuplan.solver_core.registry import make_policy
from tests.conftest import NO_OVERHEADS, rigid

CLUSTER = Cluster(
    nodes=[Node(name="t0", gpus=2, pool="training"), Node(name="i0", gpus=2, pool="inference")]
)
EVENTS = [LoanOffer(time=1, count=1), ReclaimRequest(time=20, count=1)]


class Watching(SimulatedCluster):
    """The simulator, keeping every plan it was asked to accept; ``refuse_resizes`` refuses
    any plan with a resize in it."""

    def __init__(self, *args: object, refuse_resizes: bool = False, **kw: object) -> None:
        super().__init__(*args, **kw)
        self.accepted: list[tuple[ClusterView, AllocationPlan, set[str], dict]] = []
        """(view, plan, the view's usable nodes, its running jobs' allocations) at the call:
        the view's dicts are the engine's live ones."""
        self.refuse_resizes = refuse_resizes

    def accept(self, view: ClusterView, plan: AllocationPlan, *, built: bool = False) -> None:
        if self.refuse_resizes and any(a.kind == "resize" for a in plan.actions):
            raise PlanRefused(f"plan at t={plan.time:g}: no resizes here")
        super().accept(view, plan, built=built)
        held = {j: job.allocation for j, job in view.running.items()}
        self.accepted.append((view, plan, set(view.nodes), held))


def _run(refuse: bool) -> tuple[Engine, Watching]:
    elastic = rigid("e", 2, 4, 100, elasticity=Elasticity(min_gpus=2, max_gpus=4))
    executor = Watching(
        CLUSTER, [elastic], events=EVENTS, overheads=NO_OVERHEADS, refuse_resizes=refuse
    )
    engine = Engine(CLUSTER, make_policy("fifo-backfill"), executor)
    engine.run()
    return engine, executor


def test_a_reclaim_scale_in_is_accepted_before_it_is_carried_out() -> None:
    engine, executor = _run(refuse=False)
    shrinks = [s for s in executor.accepted if any(a.kind == "resize" for a in s[1].actions)]
    assert len(shrinks) == 1
    view, plan, nodes, held = shrinks[0]
    (action,) = plan.actions
    assert (plan.time, action.job_id) == (20.0, "e")
    assert dict(action.after.placement) == {"t0": (0, 1)}
    assert plan.allocations == {"e": action.after}
    # checked on the state before the server left: it is still usable, e still holds it
    assert nodes == {"t0", "i0"} and held["e"] is action.before
    assert view.changed is None  # a checking view takes no change set from the policy's
    (record,) = engine.result().jobs
    assert (record.resizes, record.preemptions) == (1, 0)
    assert engine.ledger.capacity == 2 and engine.ledger.on_loan == []


def test_a_refused_scale_in_evicts_the_job_instead(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gpuplan.executors.engine_nodes"):
        engine, _ = _run(refuse=True)
    assert "scale-in of e off i0 refused" in caplog.text
    (record,) = engine.result().jobs
    assert (record.resizes, record.preemptions) == (0, 1)
    # evicted: pending again (rigid FIFO waits for its 4 GPUs), the books empty
    assert engine.pending["e"].allocation is None and engine.running == {}
    engine.ledger.check([])
