"""Node shapes: single-node and N x G jobs are only ever placed in their shape."""

from __future__ import annotations

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterState,
    ClusterView,
    JobAllocation,
    JobSnapshot,
    JobSpec,
    NodeShape,
)
from gpuplan.solver_core.diff import check_plan
from gpuplan.solver_core.registry import make_policy

from ..conftest import NO_OVERHEADS

SINGLE = NodeShape(max_nodes=1)


def _spec(job_id: str, gpus: int, shape: NodeShape | None = None, **kw: object) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=0,
        requested_gpus=gpus,
        total_iterations=1000.0,
        node_shape=shape,
        **kw,
    )


def _fragmented(*jobs: JobSnapshot) -> ClusterView:
    """Two 4-GPU nodes with one free GPU each (x and y hold three GPUs on each)."""
    return ClusterState(
        now=0,
        cluster=Cluster.uniform(2, 4),
        jobs=[
            JobSnapshot(
                spec=_spec("x", 3),
                allocation=JobAllocation(job_id="x", placement={"node000": (0, 1, 2)}),
            ),
            JobSnapshot(
                spec=_spec("y", 3),
                allocation=JobAllocation(job_id="y", placement={"node001": (0, 1, 2)}),
            ),
            *jobs,
        ],
    ).to_view()


def test_a_single_node_job_is_never_split() -> None:
    plain = make_policy("fifo-backfill").decide(_fragmented(JobSnapshot(spec=_spec("a", 2))))
    assert plain.placements["a"].placement == {"node000": (3,), "node001": (3,)}
    view = _fragmented(JobSnapshot(spec=_spec("a", 2, SINGLE)))
    shaped = make_policy("fifo-backfill").decide(view)
    assert "a" not in shaped.placements  # waits for a node with two free GPUs


def test_n_by_g_jobs_take_whole_g_blocks() -> None:
    view = ClusterState(
        now=0,
        cluster=Cluster.uniform(3, 4),
        jobs=[
            JobSnapshot(
                spec=_spec("x", 1),
                allocation=JobAllocation(job_id="x", placement={"node000": (0,)}),
            ),
            JobSnapshot(spec=_spec("a", 4, NodeShape(gpus_per_node=2))),
        ],
    ).to_view()
    placed = make_policy("fifo-backfill").decide(view).placements["a"]
    assert sorted(len(g) for g in placed.placement.values()) == [2, 2]
    assert NodeShape(gpus_per_node=2).allows(placed.placement)


def test_a_single_node_elastic_job_grows_only_on_its_node() -> None:
    elastic = {"min_gpus": 1, "max_gpus": 8}
    view = ClusterState(
        now=0,
        cluster=Cluster.uniform(2, 4),
        jobs=[
            JobSnapshot(
                spec=_spec("a", 2, SINGLE, elasticity=elastic),
                allocation=JobAllocation(job_id="a", placement={"node000": (0, 1)}),
            ),
        ],
    ).to_view()
    decision = make_policy("afs-l").decide(view)
    assert decision.shares["a"] > 4  # AFS-L would give it more than one node holds
    placed = decision.placements["a"]
    assert list(placed.placement) == ["node000"] and placed.gpus == 4  # its node, no split


def test_an_n_by_g_job_shrinks_by_whole_nodes() -> None:
    elastic = {"min_gpus": 2, "max_gpus": 8, "allowed": [2, 4, 6, 8]}
    view = ClusterState(
        now=0,
        cluster=Cluster.uniform(2, 4),
        jobs=[
            JobSnapshot(
                spec=_spec("a", 4, NodeShape(gpus_per_node=2), elasticity=elastic),
                allocation=JobAllocation(
                    job_id="a", placement={"node000": (0, 1), "node001": (0, 1)}
                ),
            ),
        ],
    ).to_view()
    from gpuplan.solver_core.placement.best_fit import best_fit_placement

    placed = best_fit_placement(view, {"a": 2}, [])["a"]
    assert placed.placement == {"node000": (0, 1)}


def test_stages_that_ignore_shapes_are_guarded() -> None:
    """first-fit knows nothing of shapes; the policy's guard leaves the split job out."""
    view = _fragmented(JobSnapshot(spec=_spec("a", 2, SINGLE)))
    decision = make_policy("fifo-backfill(wrappers=[first-fit])").decide(view)
    assert "a" not in decision.placements


@pytest.mark.parametrize(
    "policy", ["fifo-backfill", "srtf", "afs-l", "tiresias-l", "max-min", "afs-p"]
)
def test_no_plan_ever_breaks_a_shape(policy: str) -> None:
    shapes = [SINGLE, NodeShape(gpus_per_node=2), None]
    jobs = [
        JobSpec(
            id=f"j{i}",
            submit_time=30.0 * i,
            requested_gpus=[2, 4, 3][i % 3],
            duration=400.0 + 90 * (i % 7),
            node_shape=shapes[i % 3],
            elasticity={"min_gpus": 1, "max_gpus": 6} if i % 2 else None,
        )
        for i in range(30)
    ]
    jobs = [j for j in jobs if j.node_shape is None or j.node_shape.allows_count(j.requested_gpus)]
    seen = {"plans": 0}

    def hook(view: ClusterView, plan: AllocationPlan) -> None:
        check_plan(view, plan)
        seen["plans"] += 1
        for job_id, alloc in plan.allocations.items():
            spec = (view.running.get(job_id) or view.pending[job_id]).spec
            if spec.node_shape is not None:
                assert spec.node_shape.allows(alloc.placement), (job_id, alloc.placement)

    result, _, _ = simulate(
        Cluster.uniform(4, 4), jobs, make_policy(policy), overheads=NO_OVERHEADS, on_plan=hook
    )
    assert seen["plans"] > 0
    assert all(r.finish_time is not None for r in result.jobs)
