"""Issue 16 on the REAL Slurm lab: node shapes, read-back, restarts without preemption, node health.

Same lab, user and controller subprocess as ``tests/slurm/test_controller.py`` (its fixtures are
reused); every wait polls a real state with a generous bound.
"""

# ruff: noqa: F811 - the lab fixtures are imported from test_controller and used by name
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from gpuplan.executors.control.controller import engine_id
from gpuplan.executors.control.journal import Journal
from gpuplan.executors.control.markers import spec_from_slurm
from gpuplan.executors.slurm.cli import SlurmJob, SlurmNode, parse_job_gpus
from gpuplan.models import NodeShape
from tests.labs.slurm.lab import SlurmLab

from .. import slurm_fixtures as fx
from .test_controller import (  # noqa: F401 - fixtures
    LAB_WAIT_S,
    PARTITION,
    PYTHON,
    V38_HELD,
    Controller,
    _cluster,
    _segments,
    _states,
    _wait,
    clean_partition,
    lab,
    shared,
    user,
)


def test_scontrol_detail_gives_per_node_gpu_indices() -> None:
    text = """JobId=5 JobName=x
   NumNodes=2 NumCPUs=3 NodeList=node[1-2]
     Nodes=node1 CPU_IDs=0-1 Mem=0 GRES=gpu:a100:2(IDX:0,2)
     Nodes=node2 CPU_IDs=0 Mem=0 GRES=gpu:a100:2(IDX:1-2)
     Nodes=node3 CPU_IDs=0 Mem=0
   MinCPUsNode=1"""
    assert parse_job_gpus(text) == {"node1": (0, 2), "node2": (1, 2), "node3": ()}
    assert parse_job_gpus("JobId=6 JobState=PENDING") == {}


def test_not_responding_nodes_are_unusable_whatever_their_base_state() -> None:
    def node(state: str, flags: list[str]) -> SlurmNode:
        return SlurmNode.from_json(
            {"name": "n1", "state": state, "state_flags": flags, "gres": "gpu:a100:4"}
        )

    assert node("IDLE", []).usable and node("MIXED", []).usable
    assert not node("IDLE", ["NOT_RESPONDING"]).usable
    assert not node("MIXED", ["NOT_RESPONDING"]).usable
    assert not node("IDLE", ["DRAIN"]).usable and not node("DOWN", []).usable


@pytest.mark.parametrize(
    ("admin", "comment", "tpn", "nodes", "shape", "counts"),
    [
        # a batch job: one node, elastic maximum capped at the largest node (4 GPUs)
        (
            "gpuplan:held;gpus=2;min=1;max=8;nodes=1;gpn=2",
            "gpuplan:work=5",
            "gres:gpu:2",
            1,
            NodeShape(max_nodes=1),
            (1, 2, 3, 4),
        ),
        # larger than a node and no ranks: exactly the hook's N x G (an older marker: from the TRES)
        (
            "gpuplan:held;gpus=8;min=8;max=8",
            "",
            "gres:gpu:a100:4",
            2,
            NodeShape(max_nodes=2, gpus_per_node=4),
            (8,),
        ),
        # starts its own ranks: may span nodes, G per node when it asked N x G
        (
            "gpuplan:held;gpus=8;min=4;max=8;nodes=2;gpn=4;ranks=1",
            "gpuplan:min=4",
            "gres:gpu:4",
            2,
            NodeShape(starts_ranks=True, gpus_per_node=4),
            (4, 8),
        ),
        (
            "gpuplan:held;gpus=2;min=1;max=4",
            "gpuplan:ranks,min=1",
            "",
            1,
            NodeShape(starts_ranks=True),
            (1, 2, 3, 4),
        ),
    ],
)
def test_node_shape_from_the_hook_marker(
    admin: str, comment: str, tpn: str, nodes: int, shape: NodeShape, counts: tuple[int, ...]
) -> None:
    job = SlurmJob.from_json(
        {
            **V38_HELD,
            "admin_comment": admin,
            "comment": comment,
            "tres_per_node": tpn,
            "node_count": nodes,
        }
    )
    spec = spec_from_slurm(job, origin=0, cluster=_cluster(), default_duration_s=60)
    assert spec.node_shape == shape
    assert spec.allowed_counts() == counts


def _sbatch(
    lab: SlurmLab,
    user: str,
    shared: Path,
    name: str,
    work: float,
    gpus: int,
    lo: int,
    hi: int,
    extra_comment: str = "",
) -> int:
    """``sbatch --gpus=N`` as a user (the hook marks, shapes and holds the job)."""
    proc = fx.submit_standin(
        lab, user, shared, name, work=work, gpus=gpus, lo=lo, hi=hi, extra_comment=extra_comment
    )
    return fx.submitted_id(proc)


def _args(policy: str) -> tuple[str, ...]:
    # without the restart gate: these tests check where every planned change lands
    return ("--policy", policy, "--interval", "0.5", "--stop-timeout", "20", "--no-restart-gate")


def _slurm_counts(lab: SlurmLab, slurm_id: int) -> dict[str, int]:
    return {n: len(g) for n, g in lab.cli(timeout=30).job_gpus(slurm_id).items() if g}


def test_single_node_jobs_stay_on_one_node_and_books_follow_slurm(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    """Six elastic ``--gpus=2`` jobs (1..4 GPUs) and one ``ranks`` job under max-min on 16
    GPUs: max-min wants uneven sizes, which without shapes it placed across nodes. Every job
    that does not start ranks must run on one node, and the engine's books (journaled each
    poll) must equal the per-node GPUs Slurm reports in ``scontrol show job -d``."""
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    ids = {f"s{i}": _sbatch(lab, user, shared, f"s{i}", 400.0, 2, 1, 4) for i in range(6)}
    ids["r"] = _sbatch(lab, user, shared, "r", 400.0, 2, 1, 4, extra_comment="ranks,")
    marker = lab.cli(timeout=30).job(ids["s0"]).admin_comment
    assert "nodes=1" in marker and "gpn=2" in marker and "ranks" not in marker, marker
    assert "ranks=1" in lab.cli(timeout=30).job(ids["r"]).admin_comment
    run = Controller(lab, db, log, args=_args("max-min"))
    try:
        _wait(
            "all seven running",
            lambda: (
                len(_states(lab, ids)) == 7
                and all(j.state == "RUNNING" for j in _states(lab, ids).values())
            ),
            LAB_WAIT_S,
            log,
        )
        with Journal(db, writer=False) as journal:
            spec = journal.job(engine_id(ids["s0"])).spec
        assert spec is not None and spec["node_shape"]["max_nodes"] == 1, spec

        def books_match() -> bool:
            states = _states(lab, ids)
            if not all(j.state == "RUNNING" for j in states.values()):
                return False
            with Journal(db, writer=False) as journal:
                rows = journal.jobs()
            return all(rows[engine_id(i)].placement == _slurm_counts(lab, i) for i in ids.values())

        _wait("engine books equal to Slurm's placement", books_match, 60, log)
        states = _states(lab, ids)
        for name, job in states.items():
            if name != "r":
                assert len(job.nodes) == 1, (name, job.nodes)
        with Journal(db, writer=False) as journal:
            rows = journal.jobs()
        assert sum(rows[engine_id(i)].gpus for i in ids.values()) == 16  # max-min fills all
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0


def _pids(shared: Path, name: str) -> set[int]:
    """Stand-in processes that committed work for ``name`` (one per Slurm incarnation)."""
    path = shared / f"{name}.log"
    return {int(seg["pid"]) for seg in _segments(shared, name)} if path.exists() else set()


@pytest.mark.parametrize("policy", ["afs-p", "tiresias-l"])
def test_a_killed_controller_stops_no_running_job(
    policy: str, lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    """Rigid and elastic jobs, more than fit, each long enough that none ends near the kill;
    once the policy has started some and queued the rest, the controller is SIGKILLed and
    started again. Through the new controller's reconciliation and first plans, every job that
    ran at the kill keeps running in the same Slurm incarnation and stand-in process."""
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    plan = [
        ("a", 600.0, 4, 4, 4),
        ("b", 500.0, 2, 1, 4),
        ("c", 600.0, 4, 4, 4),
        ("d", 300.0, 2, 2, 2),
        ("e", 500.0, 4, 2, 4),
        ("f", 600.0, 4, 4, 4),
        ("g", 200.0, 2, 1, 2),
        ("h", 600.0, 4, 4, 4),
    ]
    ids = {n: _sbatch(lab, user, shared, n, w, g, lo, hi) for n, w, g, lo, hi in plan}
    run = Controller(lab, db, log, args=_args(policy))
    try:
        _wait(
            "some jobs running and some queued",
            lambda: (
                sum(j.state == "RUNNING" for j in _states(lab, ids).values()) > 0
                and any(j.state == "PENDING" for j in _states(lab, ids).values())
            ),
            LAB_WAIT_S,
            log,
        )
        _wait(
            "every running job's stand-in committing",
            lambda: all(
                _pids(shared, n) for n, j in _states(lab, ids).items() if j.state == "RUNNING"
            ),
            LAB_WAIT_S,
            log,
        )
        with Journal(db, writer=False) as journal:
            assert journal.meta(f"policy_state:{policy}:0"), "policy memory never journaled"
    finally:
        run.kill()
    assert run.wait(LAB_WAIT_S) == -signal.SIGKILL
    at_kill = {n: j for n, j in _states(lab, ids).items() if j.state == "RUNNING"}
    pids = {n: _pids(shared, n) for n in at_kill}
    assert at_kill and all(len(p) == 1 for p in pids.values()), pids
    beat = Path(f"{db}.heartbeat")
    beat.unlink(missing_ok=True)
    run = Controller(lab, db, log, args=_args(policy))
    try:
        _wait(
            "the new controller's first completed cycle",
            lambda: beat.exists() and json.loads(beat.read_text() or "{}").get("run") == 2,
            LAB_WAIT_S,
            log,
        )
        # Watch it plan for a while (polls, not a sleep standing for a state): the jobs that
        # ran at the kill must stay in their incarnation the whole time.
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline:
            states = _states(lab, ids)
            moved = {
                n: (states[n].state, states[n].restart_count, _pids(shared, n))
                for n in at_kill
                if states[n].state != "RUNNING"
                or states[n].restart_count != at_kill[n].restart_count
                or _pids(shared, n) != pids[n]
            }
            assert not moved, f"{policy}: the restart stopped running jobs {moved}"
            time.sleep(0.5)
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
    assert f"restored {policy}'s memory" in log.read_text()
    with Journal(db, writer=False) as journal:
        stops = [
            a
            for a in journal.actions()
            if a.run_id == 2
            and a.kind != "start"
            and a.slurm_id in {j.job_id for j in at_kill.values()}
        ]
    assert not stops, stops


def test_a_node_whose_slurmd_stops_is_left_out_until_it_returns(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    """slurmd of the last node stops: as soon as Slurm flags it (``*``/NOT_RESPONDING) the
    controller places nothing there; four 4-GPU jobs then run three at a time. When slurmd
    returns, the fourth job starts on that node."""
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    node = lab.node_names[-1]
    cli = lab.cli(timeout=30)
    run = Controller(lab, db, log, args=_args("fifo"))
    lab.stop_node(node)
    try:
        _wait(
            f"{node} flagged unusable",
            lambda: not next(n for n in cli.nodes() if n.name == node).usable,
            180,
            log,
        )
        ids = {f"n{i}": _sbatch(lab, user, shared, f"n{i}", 4 * 90.0, 4, 4, 4) for i in range(4)}
        _wait(
            "three running, one held",
            lambda: sum(j.state == "RUNNING" for j in _states(lab, ids).values()) == 3,
            LAB_WAIT_S,
            log,
        )
        # Polls over a few controller cycles: the fourth job stays held, nothing on the node.
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            states = _states(lab, ids)
            assert sum(j.state == "RUNNING" for j in states.values()) == 3, states
            assert all(node not in j.nodes for j in states.values()), states
            time.sleep(0.5)
        lab.start_node(node)
        _wait(
            f"the fourth job running on {node}",
            lambda: any(
                j.state == "RUNNING" and j.nodes == (node,) for j in _states(lab, ids).values()
            ),
            180,
            log,
        )
    finally:
        lab.start_node(node)
        run.kill(signal.SIGTERM)
        run.wait(LAB_WAIT_S)
