"""Issue 24, item 4: no policy places a single-node job over two nodes.

On the Slurm lab ``tiresias-l`` ran two ``max_nodes=1`` jobs split over two nodes (one at half
speed). The cause: a restarted controller put the held jobs it adopted into the engine's books
without their node shape (``Engine.shaped``), so the view said "no shaped job" and the delta
fast path placed them best-fit over any nodes. Covered here:

* the plan check's invariant (``check_actions``/``check_shapes`` through ``Executor.accept``):
  a plan that starts, grows or moves a job outside its node shape is refused, with a line
  naming the job, its nodes and the rule;
* every registered policy, simulated on a workload where splitting is tempting (one free GPU
  on each node while a rigid 2-GPU job waits, elastic jobs that could grow past their node):
  no applied plan ever spans two nodes for a job, every job finishes, and without node shapes
  the same workload does get split (so the workload tests something);
* the controller's adoption path (``Engine.add_pending`` / ``Engine.adopt``) keeps the shape;
* on the real Slurm lab, ``--nodes=1`` jobs under ``tiresias-l`` and ``afs-l`` through
  ``gpuplan slurm-controller`` (restarted once, the lab's trigger): none runs on two nodes.
"""

# ruff: noqa: F811 - the lab fixtures are imported from test_controller and used by name
from __future__ import annotations

import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gpuplan.executors.control.journal import Journal
from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.executors.slurm.cli import SlurmJob
from gpuplan.models import (
    Action,
    ActiveJob,
    AllocationPlan,
    Cluster,
    ClusterState,
    Elasticity,
    InputError,
    JobAllocation,
    JobSnapshot,
    JobSpec,
    LearningSpec,
    NodeShape,
    PlanRefused,
    ThroughputProfile,
)
from gpuplan.solver_core.diff import check_actions, check_plan, check_shapes
from gpuplan.solver_core.hooks import Foreseeing
from gpuplan.solver_core.registry import make_policy, policy_names
from tests.labs.slurm.lab import SlurmLab

from .. import slurm_fixtures as fx
from .test_controller import (  # noqa: F401 - fixtures
    LAB_WAIT_S,
    PARTITION,
    PYTHON,
    Controller,
    _assert_tiles,
    _states,
    _wait,
    clean_partition,
    lab,
    shared,
    user,
)

SINGLE = NodeShape(max_nodes=1)


def _spec(
    job_id: str,
    gpus: int,
    work: float = 1000.0,
    at: float = 0.0,
    shape: NodeShape | None = SINGLE,
    elastic: tuple[int, int] | None = None,
) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=at,
        requested_gpus=gpus,
        total_iterations=work,
        node_shape=shape,
        elasticity=Elasticity(min_gpus=elastic[0], max_gpus=elastic[1]) if elastic else None,
        throughput=ThroughputProfile.linear(1.0),
    )


# ------------------------------------------------------------------ the plan-check invariant
def _fragmented(*jobs: JobSnapshot) -> ClusterState:
    """Two 4-GPU nodes, three GPUs of each held by a single-node job: one free GPU per node."""
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
    )


def _plan(*actions: Action) -> AllocationPlan:
    return AllocationPlan(
        time=0,
        policy="hand-made",
        allocations={a.job_id: a.after for a in actions if a.after},
        actions=list(actions),
    )


SPLIT = JobAllocation(job_id="a", placement={"node000": (3,), "node001": (3,)})


def test_the_plan_check_refuses_a_single_node_job_over_two_nodes() -> None:
    view = _fragmented(JobSnapshot(spec=_spec("a", 2))).to_view()
    plan = _plan(Action(kind="start", job_id="a", after=SPLIT))
    with pytest.raises(
        ValueError,
        match=r"job a: start over 2 nodes \(node000: 1, node001: 1 "
        r"GPUs\), but it is a single-node job \(max_nodes=1\)",
    ):
        check_actions(view, plan)
    with pytest.raises(ValueError, match="single-node job"):
        check_plan(view, plan)
    with pytest.raises(ValueError, match="single-node job"):
        check_shapes(view, plan)
    # The same start for a job without a shape is a legal plan: only the shape is refused.
    free = _fragmented(JobSnapshot(spec=_spec("a", 2, shape=None))).to_view()
    check_plan(free, plan)


def test_every_executor_refuses_it_even_a_plan_it_trusts() -> None:
    """``Executor.accept``: a one-line ``PlanRefused`` naming the plan and the job, also for a
    delta plan the simulator would otherwise not re-check (``built=True``)."""
    state = _fragmented(JobSnapshot(spec=_spec("a", 2)))
    view = state.to_view()
    plan = _plan(Action(kind="start", job_id="a", after=SPLIT))
    executor = SimulatedCluster(state.cluster, [])
    assert executor.trusts_built_plans
    for built in (False, True):
        with pytest.raises(
            PlanRefused,
            match=r"^plan of hand-made at t=0: job a: start over 2 "
            r"nodes .* single-node job",
        ) as err:
            executor.accept(view, plan, built=built)
        assert "\n" not in str(err.value)


def test_growing_or_moving_a_job_off_its_node_is_refused() -> None:
    base = _fragmented(
        JobSnapshot(
            spec=_spec("a", 1, elastic=(1, 4)),
            allocation=JobAllocation(job_id="a", placement={"node000": (3,)}),
        )
    )
    view = base.to_view()
    before = view.running["a"].allocation
    grow = JobAllocation(job_id="a", placement={"node000": (3,), "node001": (3,)})
    with pytest.raises(ValueError, match="job a: resize over 2 nodes"):
        check_actions(view, _plan(Action(kind="resize", job_id="a", before=before, after=grow)))
    # An N x G job must hold exactly G GPUs on each node it uses.
    pair = NodeShape(gpus_per_node=2)
    state = ClusterState(
        now=0, cluster=Cluster.uniform(2, 4), jobs=[JobSnapshot(spec=_spec("n", 4, shape=pair))]
    )
    uneven = JobAllocation(job_id="n", placement={"node000": (0, 1, 2), "node001": (0,)})
    with pytest.raises(
        ValueError,
        match=r"job n: start on node000: 3, node001: 1 GPUs, but its "
        r"node shape needs exactly 2 GPUs on each node",
    ):
        check_actions(state.to_view(), _plan(Action(kind="start", job_id="n", after=uneven)))
    even = JobAllocation(job_id="n", placement={"node000": (0, 1), "node001": (0, 1)})
    check_actions(state.to_view(), _plan(Action(kind="start", job_id="n", after=even)))


# ------------------------------------------------------------------ the controller's path
def test_jobs_the_controller_adopts_keep_their_shape_under_tiresias_l() -> None:
    """What split j013 and j015 on the lab: after a restart the controller adopts running jobs
    (``Engine.adopt``) and held ones (``Engine.add_pending``); their shapes must reach the
    view, or Tiresias-L's delta path places the held 2-GPU job as 1 + 1."""
    cluster = Cluster.uniform(2, 4)
    engine = Engine(
        cluster, make_policy("tiresias-l"), SimulatedCluster(cluster, []), sample_interval_s=None
    )
    engine.check_delta_plans = True
    for job_id, node in (("x", "node000"), ("y", "node001")):
        job = ActiveJob(spec=_spec(job_id, 3), status="running", anchor_time=0, resume_time=0)
        engine.adopt(job, JobAllocation(job_id=job_id, placement={node: (0, 1, 2)}))
    engine.add_pending(ActiveJob(spec=_spec("a", 2), anchor_time=0, resume_time=0, pending_since=0))
    assert engine.shaped == {"x", "y", "a"}
    plan = engine.decide(0.0)
    assert [a for a in plan.actions if a.job_id == "a"] == []  # waits for a node with two free
    assert "a" in engine.pending


# ------------------------------------------------------------------ every policy, simulated
def tempting_workload(shape: NodeShape | None = SINGLE) -> list[JobSpec]:
    """Three 4-GPU nodes; at t=0 three 3-GPU jobs leave one free GPU on each node, then a
    rigid 2-GPU job and elastic 1-4 and 2-4 jobs (which could grow over two nodes) arrive;
    later arrivals keep the nodes fragmented as jobs end at different times. 10 jobs, 12 GPUs
    (offline-optimal's size)."""
    rows = [
        ("a", 3, 3000, 0, None),
        ("b", 3, 2400, 0, None),
        ("c", 3, 1800, 0, None),
        ("d", 2, 500, 5, None),
        ("e", 1, 1500, 5, (1, 4)),
        ("f", 2, 1200, 10, (2, 4)),
        ("g", 1, 300, 20, None),
        ("h", 2, 800, 30, (1, 4)),
        ("i", 2, 400, 40, None),
        ("j", 4, 600, 50, None),
    ]
    return [_spec(j, g, work, at, shape, elastic) for j, g, work, at, elastic in rows]


class ShapeWatch(SimulatedCluster):
    """The simulated cluster, recording every action it carries out that puts a job on more
    nodes than its spec allows (independent of the plan check, which would refuse it first)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.split: list[str] = []
        self.placed = 0

    def apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        for a in plan.actions:
            if a.after is None or a.kind == "keep":
                continue
            self.placed += 1
            limit = jobs[a.job_id].spec.node_shape
            allowed = (limit.max_nodes or 99) if limit is not None else 1
            if len(a.after.placement) > allowed:
                self.split.append(f"{a.kind} {a.job_id} on {sorted(a.after.placement)}")
        super().apply(plan, jobs)


def _run(policy: str, jobs: list[JobSpec]) -> tuple[ShapeWatch, Engine]:
    cluster = Cluster.uniform(3, 4)
    built = make_policy(policy, seed=0)
    if isinstance(built, Foreseeing):  # offline-optimal
        built.foresee(cluster, jobs)
    learning = LearningSpec(enabled=True) if policy.endswith("-learning") else None
    executor = ShapeWatch(cluster, jobs, learning=learning)
    engine = Engine(cluster, built, executor, sample_interval_s=None)
    engine.check_delta_plans = True
    engine.run()
    return executor, engine


@pytest.mark.parametrize("policy", sorted(policy_names()))
def test_no_policy_splits_a_single_node_job(policy: str) -> None:
    if policy == "offline-optimal":  # its exact model counts whole GPUs, so it refuses shapes
        with pytest.raises(InputError, match="offline-optimal: job a has a node shape"):
            _run(policy, tempting_workload())
        return
    executor, engine = _run(policy, tempting_workload())
    assert executor.placed > 0
    assert executor.split == []
    assert engine.plans_refused == 0
    finished = {r.job_id for r in engine.records if r.finish_time is not None}
    assert finished == {j.id for j in tempting_workload()}, "every job still runs to its end"


def test_without_shapes_the_workload_gets_split() -> None:
    """The workload is tempting: without ``node_shape`` (ShapeWatch then allows one node) the
    same policies do spread jobs over nodes, so the test above can fail."""
    splitters = [
        p
        for p in ("fifo-backfill", "tiresias-l", "afs-l", "srtf")
        if _run(p, tempting_workload(shape=None))[0].split
    ]
    assert "tiresias-l" in splitters and len(splitters) >= 3, splitters


# ------------------------------------------------------------------ the real Slurm lab
def _submit_one_node(
    lab: SlurmLab, user: str, shared: Path, name: str, work: float, gpus: int, lo: int, hi: int
) -> int:
    """``sbatch --nodes=1 --gpus=N``: a single-node job as operators submit one."""
    proc = fx.submit_standin(
        lab, user, shared, name, work=work, gpus=gpus, lo=lo, hi=hi, one_node=True
    )
    return fx.submitted_id(proc)


def _journal_rows(db: Path) -> dict[str, Any]:
    if not db.exists():
        return {}
    with Journal(db, writer=False) as journal:
        return journal.jobs()


def _all_completed(states: dict[str, SlurmJob]) -> bool:
    """Every job COMPLETED; a job that ended otherwise fails the test at once."""
    ended = {
        n: f"{sj.state} {sj.reason}"
        for n, sj in states.items()
        if sj.finished and sj.state != "COMPLETED"
    }
    assert not ended, f"jobs ended without completing: {ended}"
    return len(states) == 6 and all(sj.state == "COMPLETED" for sj in states.values())


@pytest.mark.parametrize("policy", ["tiresias-l", "afs-l"])
def test_single_node_jobs_are_never_split_on_the_lab(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None, policy: str
) -> None:
    """Four 3-GPU jobs leave one free GPU on each node; a rigid 2-GPU job and an elastic 1-4
    job then wait, and the controller is SIGKILLed and restarted while they do (what split
    j013 and j015: the restarted controller adopts them). Every job was submitted
    ``--nodes=1``: the journal records ``max_nodes=1``, no plan moves one over two nodes, and
    Slurm never runs one on two nodes (squeue sampled while they run)."""
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    args = (
        "--policy",
        policy,
        "--interval",
        "0.5",
        "--stop-timeout",
        "20",
        "--wake-file",
        str(lab.wake_file),
    )
    fillers = {
        f"F{k}": _submit_one_node(lab, user, shared, f"F{k}", 75.0, 3, 3, 3) for k in range(4)
    }
    run = Controller(lab, db, log, args=args)
    ids = dict(fillers)
    split: set[str] = set()

    def sample() -> dict[str, SlurmJob]:
        states = _states(lab, ids)
        split.update(n for n, sj in states.items() if sj.state == "RUNNING" and len(sj.nodes) > 1)
        return states

    try:
        _wait(
            "four 3-GPU jobs to run",
            lambda: sum(sj.state == "RUNNING" for sj in sample().values()) == 4,
            LAB_WAIT_S,
            log,
        )
        ids["D"] = _submit_one_node(lab, user, shared, "D", 20.0, 2, 2, 2)
        ids["E"] = _submit_one_node(lab, user, shared, "E", 20.0, 2, 1, 4)
        waiting = {f"slurm-{ids['D']}", f"slurm-{ids['E']}"}
        _wait(
            "the controller to journal D and E",
            lambda: waiting <= set(_journal_rows(db)),
            LAB_WAIT_S,
            log,
        )
        run.kill()
        assert run.wait(LAB_WAIT_S) == -signal.SIGKILL
        run = Controller(lab, db, log, args=args)
        _wait("every job to complete", lambda: _all_completed(sample()), LAB_WAIT_S, log)
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
    assert split == set(), f"ran on two nodes: {sorted(split)}"
    rows = _journal_rows(db)
    for name, sid in ids.items():
        spec = rows[f"slurm-{sid}"].spec
        assert spec["node_shape"]["max_nodes"] == 1, (name, spec["node_shape"])
        _assert_tiles(shared, name, 75.0 if name.startswith("F") else 20.0)
    with Journal(db, writer=False) as journal:
        placed = [(a.engine_id, a.kind, a.after) for a in journal.actions() if a.after]
    assert placed, "the journal holds the plans' actions"
    assert [p for p in placed if len(p[2]) > 1] == [], "no plan spans two nodes"
