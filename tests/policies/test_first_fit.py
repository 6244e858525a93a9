"""The first-fit placement wrapper (the "adding a policy" walkthrough's example)."""

from __future__ import annotations

from gpuplan.models import Cluster, ClusterState, JobAllocation, JobSnapshot, JobSpec
from gpuplan.solver_core.diff import build_plan, check_plan
from gpuplan.solver_core.registry import make_policy, wrapper_names


def _spec(job_id: str, gpus: int, **kw: object) -> JobSpec:
    return JobSpec(id=job_id, submit_time=0, requested_gpus=gpus, total_iterations=100.0, **kw)


def _state() -> ClusterState:
    """node000 has 4 free GPUs, node001 only one (job x holds 0-2)."""
    return ClusterState(
        now=0,
        cluster=Cluster.uniform(2, 4),
        jobs=[
            JobSnapshot(
                spec=_spec("x", 3),
                allocation=JobAllocation(job_id="x", placement={"node001": (0, 1, 2)}),
            ),
            JobSnapshot(spec=_spec("a", 1)),
        ],
    )


def test_first_fit_takes_the_first_node_where_best_fit_takes_the_fullest() -> None:
    assert "first-fit" in wrapper_names()  # declared in policies/__init__.py, code in its file
    view = _state().to_view()
    best = make_policy("fifo").decide(view).placements
    first = make_policy("fifo(wrappers=[first-fit])").decide(view).placements
    assert best["a"].placement == {"node001": (3,)}
    assert first["a"].placement == {"node000": (0,)}
    assert first["x"] is view.running["x"].allocation  # unchanged jobs keep their GPUs
    check_plan(
        view, build_plan(view, make_policy("fifo(wrappers=[first-fit])").decide(view), "first-fit")
    )


def test_first_fit_never_spans_gpu_types_for_a_plain_job() -> None:
    cluster = Cluster(
        nodes=[
            {"name": "a", "gpus": 2, "gpu_type": "k80"},
            {"name": "b", "gpus": 2, "gpu_type": "v100"},
        ]
    )
    jobs = [
        JobSnapshot(spec=_spec("plain", 3)),
        JobSnapshot(spec=_spec("mixed", 3, heterogeneous=True)),
    ]
    view = ClusterState(now=0, cluster=cluster, jobs=jobs[:1]).to_view()
    assert "plain" not in make_policy("fifo(wrappers=[first-fit])").decide(view).placements
    view = ClusterState(now=0, cluster=cluster, jobs=jobs[1:]).to_view()
    placed = make_policy("fifo(wrappers=[first-fit])").decide(view).placements["mixed"]
    assert placed.placement == {"a": (0, 1), "b": (0,)}
