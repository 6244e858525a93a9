"""Best-fit placement, plan diffs and the JSON state round trip."""

from __future__ import annotations

import pytest

from gpuplan import plan as make_plan
from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterState,
    JobAllocation,
    JobSnapshot,
    JobSpec,
    Node,
)
from gpuplan.solver_core.diff import build_plan, check_plan
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policy import Decision


def _job(job_id: str, gpus: int, **kw: object) -> JobSpec:
    return JobSpec(id=job_id, submit_time=0, requested_gpus=gpus, duration=100, **kw)


def _state(
    cluster: Cluster,
    running: dict[str, dict[str, tuple[int, ...]]],
    pending: list[JobSpec],
    sizes: dict[str, int],
) -> ClusterState:
    jobs = [
        JobSnapshot(spec=_job(j, sizes[j]), allocation=JobAllocation(job_id=j, placement=p))
        for j, p in running.items()
    ]
    jobs += [JobSnapshot(spec=s) for s in pending]
    return ClusterState(now=10, cluster=cluster, jobs=jobs)


def test_best_fit_picks_tightest_node_and_packs() -> None:
    cluster = Cluster.uniform(3, 4)
    # node000 has 1 free, node001 has 3 free, node002 has 4 free
    state = _state(
        cluster, {"a": {"node000": (0, 1, 2)}, "b": {"node001": (0,)}}, [], {"a": 3, "b": 1}
    )
    view = state.to_view()
    shares = {"a": 3, "b": 1, "x": 1}
    view.pending["x"] = view.running["a"].__class__(spec=_job("x", 1))
    got = best_fit_placement(view, shares, [])
    assert got["x"].placement == {"node000": (3,)}  # tightest fit
    assert got["a"] is view.running["a"].allocation  # unchanged jobs keep their GPUs
    shares = {"a": 3, "b": 1, "y": 6}
    view.pending.clear()
    view.pending["y"] = view.running["a"].__class__(spec=_job("y", 6))
    got = best_fit_placement(view, shares, [])
    # 6 GPUs: the whole free node first, then best fit for 2 (node001 has 3 free, node000 1)
    assert got["y"].placement == {"node002": (0, 1, 2, 3), "node001": (1, 2)}


def test_shrink_keeps_packed_part_and_grow_prefers_own_nodes() -> None:
    cluster = Cluster.uniform(2, 4)
    state = _state(cluster, {"a": {"node000": (0, 1, 2), "node001": (0,)}}, [], {"a": 4})
    view = state.to_view()
    got = best_fit_placement(view, {"a": 3}, [])
    assert got["a"].placement == {"node000": (0, 1, 2)}
    got = best_fit_placement(view, {"a": 6}, [])
    assert got["a"].placement == {"node000": (0, 1, 2, 3), "node001": (0, 1)}


def test_gpu_type_restriction() -> None:
    cluster = Cluster(
        nodes=[Node(name="k", gpus=4, gpu_type="k80"), Node(name="v", gpus=4, gpu_type="v100")]
    )
    state = ClusterState(
        now=0, cluster=cluster, jobs=[JobSnapshot(spec=_job("x", 2, gpu_type="v100"))]
    )
    got = best_fit_placement(state.to_view(), {"x": 2}, [])
    assert list(got["x"].placement) == ["v"]


def test_plan_actions_and_validation() -> None:
    cluster = Cluster.uniform(2, 4)
    state = _state(
        cluster,
        {
            "keep": {"node000": (0,)},
            "grow": {"node000": (1,)},
            "move": {"node000": (2,)},
            "stop": {"node000": (3,)},
        },
        [_job("new", 2)],
        {"keep": 1, "grow": 1, "move": 1, "stop": 1},
    )
    view = state.to_view()
    placements = {
        "keep": view.running["keep"].allocation,
        "grow": JobAllocation(job_id="grow", placement={"node000": (1, 3)}),
        "move": JobAllocation(job_id="move", placement={"node001": (0,)}),
        "new": JobAllocation(job_id="new", placement={"node001": (1, 2)}),
    }
    plan = build_plan(view, Decision(shares={}, placements=placements), "t", include_keep=True)
    kinds = {a.job_id: a.kind for a in plan.actions}
    assert kinds == {
        "keep": "keep",
        "grow": "resize",
        "move": "migrate",
        "stop": "preempt",
        "new": "start",
    }
    check_plan(view, plan)
    bad = plan.model_copy(
        update={
            "allocations": {
                **plan.allocations,
                "x": JobAllocation(job_id="x", placement={"node001": (2,)}),
            }
        }
    )
    with pytest.raises(ValueError, match="over-committed"):
        check_plan(view, bad)


def test_plan_from_state_file_round_trip() -> None:
    cluster = Cluster.uniform(2, 2)
    state = ClusterState(
        now=0,
        cluster=cluster,
        jobs=[JobSnapshot(spec=_job("a", 2)), JobSnapshot(spec=_job("b", 1))],
    )
    again = ClusterState.model_validate_json(state.model_dump_json())
    plan = make_plan(again, "fifo")
    assert plan.gpus_of("a") == 2 and plan.gpus_of("b") == 1
    assert AllocationPlan.model_validate_json(plan.model_dump_json()) == plan


def test_inconsistent_state_is_rejected_with_location() -> None:
    cluster = Cluster.uniform(1, 2)
    state = _state(
        cluster, {"a": {"node000": (0, 1)}, "b": {"node000": (1,)}}, [], {"a": 2, "b": 1}
    )
    with pytest.raises(ValueError, match=r"jobs\[1\].allocation: GPU node000:1 is taken"):
        state.to_view()
