"""OJPAP inside the simulation loop: the ``ojpp`` wrapper monitors the simulator's observed
per-GPU interference and migrates single workers off persistently over-interfered GPUs.

The wrapper plans with a *believed* matrix (every pair 0.05) while the simulator's truth has
a type-``v`` worker slowed by 60 % next to a type-``x`` one: packing co-locates them, and only
observation can tell."""

from __future__ import annotations

import json

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    Cluster,
    ClusterView,
    JobSpec,
    MemoryProfile,
    Overheads,
    placement_rate,
)
from gpuplan.scenarios.ojpp_interference import OjppInterference
from gpuplan.solver_core.params import PolicyConfig
from gpuplan.solver_core.policies.ojpp.ojpap import Ojpap
from gpuplan.solver_core.policies.ojpp.ojpp import OjppParams
from gpuplan.solver_core.registry import make_policy

from ..conftest import CapacityChecker

BELIEVED = {"v": {"v": 0.05, "x": 0.05}, "x": {"v": 0.05, "x": 0.05}}
TRUE = {"v": {"v": 0.05, "x": 0.6}, "x": {"v": 0.05, "x": 0.05}}
QUIET = MemoryProfile(gamma=0.1, delta=0.1, p=0.0, compute=0.3)
SPIKY = MemoryProfile(gamma=0.2, delta=0.5, p=0.3, compute=0.3)
CLUSTER = Cluster.uniform(1, 4)
OVERHEADS = Overheads(start_s=0, restart_s=0, sidecar_s=0, stop_free_s=0, migrate_s=10)
ROUND = 100.0


def _policy(ojpap: bool = True, **kw: object):
    cfg = PolicyConfig(
        name="t",
        base="fifo",
        wrappers=("ojpp",),
        values={
            "tau_max": 0.5,
            "theta_max": 0.1,
            "theta_balance": 1.0,
            "interference": BELIEVED,
            "ojpap": ojpap,
            "ojpap_interval_s": ROUND,
            "ojpap_migration_s": 10.0,
            **kw,
        },
    )
    return make_policy("t", configs={"t": cfg})


def _job(
    job_id: str,
    model: str,
    gpus: int,
    work: float,
    submit: float = 0.0,
    memory: MemoryProfile = QUIET,
) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=gpus,
        total_iterations=work,
        model=model,
        memory=memory,
    )


def _run(jobs: list[JobSpec], policy=None, seed: int = 0, interference: bool = True):
    policy = policy if policy is not None else _policy()
    checker = CapacityChecker()
    moves: list[tuple[float, str, dict, dict]] = []

    def hook(view: ClusterView, plan) -> None:
        checker(view, plan)
        moves.extend(
            (view.now, a.job_id, dict(a.before.placement), dict(a.after.placement))
            for a in plan.actions
            if a.kind == "migrate"
        )

    result, _, executor = simulate(
        CLUSTER,
        jobs,
        policy,
        overheads=OVERHEADS,
        on_plan=hook,
        record_segments=True,
        seed=seed,
        sample_interval_s=None,
        interference=OjppInterference(TRUE) if interference else None,
    )
    return result, executor, policy, moves


def test_the_cheapest_worker_leaves_the_overloaded_gpu_and_the_rate_recovers() -> None:
    # V (2 workers, long) and X (1 worker) start together; the packer puts X next to V#0
    jobs = [_job("V", "v", 2, 4000.0), _job("X", "x", 1, 1000.0)]
    result, executor, policy, moves = _run(jobs)
    # EWMA from 0 at a = 0.7 of a steady 0.6: 0.18, 0.306, 0.394 -- the third round (t = 300)
    # is the third above 0.1 (round 0 at t = 0 saw nothing yet): exactly one migration, of
    # V's worker on GPU 0 (V has the most time left, so moving it costs the least), to a new
    # GPU (GPU 1 holds V's other worker)
    assert moves == [(300.0, "V", {"node000": (0, 1)}, {"node000": (1, 2)})]
    fired = [row["t"] for row in policy.memory.trace if row["triggered"]]
    assert fired == [300.0]
    records = {r.job_id: r for r in result.jobs}
    assert (records["V"].migrations, records["X"].migrations) == (1, 0)
    segments = [s for s in executor.segments if s.job_id == "V"]
    full = placement_rate(jobs[0], CLUSTER, _alloc("V", {"node000": (1, 2)}, 0.3))
    assert abs(segments[0].rate - full / 1.6) < 1e-9  # slowed by the true 0.6
    # after the migration pause (10 s), V runs at its full, interference-free rate
    assert segments[-1].start == 310.0 and abs(segments[-1].rate - full) < 1e-9
    # ... and finishes earlier than without OJPAP, despite the pause
    plain, _, _, none = _run(jobs, _policy(ojpap=False))
    assert none == []
    assert records["V"].finish_time < {r.job_id: r for r in plain.jobs}["V"].finish_time


def _alloc(job_id: str, placement: dict, share: float):
    from gpuplan.models import JobAllocation

    return JobAllocation(job_id=job_id, placement=placement, share=share)


def test_a_transient_spike_does_not_migrate_but_a_persistent_one_does() -> None:
    # V alone for two rounds; Y (type x) arrives at 150 next to a V worker and leaves at 225:
    # one monitoring round (t = 200) sees 0.6, then the EWMA decays (0.18, 0.126, 0.088)
    transient = [_job("V", "v", 2, 4000.0), _job("Y", "x", 1, 75.0, submit=150.0)]
    _, _, policy, moves = _run(transient)
    assert moves == []
    rows = {row["t"]: row for row in policy.memory.trace}
    assert rows[200.0]["max"] == 0.6 and rows[300.0]["max"] == 0.0
    assert not any(row["triggered"] for row in policy.memory.trace)
    # the same neighbour staying is a persistent rise: rounds 200, 300, 400 -> move at 400
    # (of V's worker: V has more time left than Y, so moving it costs less)
    persistent = [_job("V", "v", 2, 4000.0), _job("Y", "x", 1, 2000.0, submit=150.0)]
    _, _, policy, moves = _run(persistent)
    assert [(t, job) for t, job, _, _ in moves] == [(400.0, "V")]


def test_same_seed_same_run_and_the_seed_draws_the_collisions() -> None:
    jobs = [
        _job("A", "v", 2, 3000.0, memory=SPIKY),
        _job("B", "v", 2, 3000.0, memory=SPIKY),
        _job("C", "x", 1, 2000.0, submit=50.0, memory=SPIKY),
    ]

    def trace(seed: int) -> tuple[list, list, list]:
        result, _, policy, moves = _run(jobs, seed=seed)
        return (
            [(r.job_id, r.finish_time, r.migrations) for r in result.jobs],
            [(row["t"], row["max"], row["moves"]) for row in policy.memory.trace],
            moves,
        )

    first = trace(1)
    assert trace(1) == first
    # observed slowdowns are the matrix term plus the window's drawn collisions: they vary
    # from round to round and from seed to seed, around the expected penalty
    observed = [m for _, m, _ in first[1] if m > 0]
    assert len(set(observed)) > 1
    assert [m for _, m, _ in trace(2)[1]] != [m for _, m, _ in first[1]]


def test_no_observations_no_ojpap() -> None:
    """Without an interference model (as on Slurm and SSH) the view's field is empty: OJPAP
    never observes, never asks for a wake-up and changes nothing."""
    jobs = [_job("V", "v", 2, 4000.0), _job("X", "x", 1, 1000.0)]
    with_it, _, policy, moves = _run(jobs, interference=False)
    without, _, _, _ = _run(jobs, _policy(ojpap=False), interference=False)
    assert moves == [] and policy.memory.trace == [] and not policy.memory.observing
    assert [(r.job_id, r.finish_time) for r in with_it.jobs] == [
        (r.job_id, r.finish_time) for r in without.jobs
    ]
    assert with_it.events == without.events  # no extra timer events either
    online = Ojpap(OjppParams(ojpap=True))
    view = ClusterView(0.0, CLUSTER, {n.name: n for n in CLUSTER.nodes}, {}, {}, {})
    assert not online.due(view) and online.next_wakeup(view) is None


def test_a_restored_policy_decides_exactly_as_the_original() -> None:
    """The EWMA, hold counters and round index are the policy's memory: a controller restart
    (snapshot -> JSON -> restore on a fresh policy) between rounds 200 and 300 changes
    nothing, and without the restore the migration comes later."""
    from gpuplan.executors.engine import Engine
    from gpuplan.executors.simulator.cluster import SimulatedCluster

    jobs = [_job("V", "v", 2, 4000.0), _job("X", "x", 1, 1000.0)]

    def run(restore: bool | None) -> list[tuple[str, float | None, int]]:
        executor = SimulatedCluster(CLUSTER, jobs, OVERHEADS, interference=OjppInterference(TRUE))
        engine = Engine(CLUSTER, _policy(), executor, sample_interval_s=None)
        swapped = False
        while (batch := executor.next_events()) is not None:
            if restore is not None and not swapped and batch[0] > 250.0:
                fresh = _policy()
                if restore:
                    fresh.restore(json.loads(json.dumps(engine.policy.snapshot())))
                engine.policy, swapped = fresh, True
            engine.handle(*batch)
        return [(r.job_id, r.finish_time, r.migrations) for r in engine.result().jobs]

    straight = run(None)
    assert run(True) == straight
    assert run(False) != straight


def test_a_base_policy_memory_is_kept_beside_ojpaps() -> None:
    cfg = PolicyConfig(name="t", base="tiresias-l", wrappers=("ojpp",), values={"ojpap": True})
    policy = make_policy("t", configs={"t": cfg})
    state = json.loads(json.dumps(policy.snapshot()))
    assert set(state) == {"base", "ojpap"} and state["ojpap"]["round"] == -1
    state["ojpap"]["round"] = 7
    fresh = make_policy("t", configs={"t": cfg})
    fresh.restore(state)
    assert fresh.snapshot()["ojpap"]["round"] == 7
    assert fresh.snapshot()["base"] == state["base"]


def test_observations_follow_the_rate_model_and_cost_nothing_unread(monkeypatch) -> None:
    """A model without ``observe`` is reported as ``1 / factor - 1`` of the worst worker per
    shared GPU; and a policy that never reads the field never has it computed."""
    from gpuplan.executors.simulator import observe
    from gpuplan.models.interference import PairwiseInterference

    calls = []
    real = observe.ObservedInterference._compute

    def counted(self):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(self)

    monkeypatch.setattr(observe.ObservedInterference, "_compute", counted)
    jobs = [
        _job("V", "v", 2, 4000.0),
        _job("X", "x", 1, 1000.0),
        JobSpec(id="W", submit_time=100.0, requested_gpus=1, total_iterations=100.0),
    ]
    model = PairwiseInterference({("v", "x"): 0.5})  # v keeps half its speed next to x
    seen: list[dict] = []

    def hook(view: ClusterView, plan) -> None:
        seen.append(dict(view.interference))

    simulate(
        CLUSTER,
        jobs,
        _policy(ojpap=False),
        overheads=OVERHEADS,
        interference=model,
        sample_interval_s=None,
    )
    assert calls == []  # fifo-ojpp never reads it
    simulate(
        CLUSTER,
        jobs,
        _policy(ojpap=False),
        overheads=OVERHEADS,
        interference=model,
        sample_interval_s=None,
        on_plan=hook,
    )
    # at W's arrival (t = 100) V#0 and X share GPU 0: V is 100 % slower there; GPU 1 holds
    # V#1 alone; W's whole GPU is not a shared one
    assert seen[1] == {("node000", 0): 1.0, ("node000", 1): 0.0}
    assert len(calls) == len(seen)  # computed once per view that was read


def test_new_placements_avoid_a_pair_ojpap_learned_is_bad() -> None:
    # V and X start together (X next to V#0); OJPAP sees the true 0.6 and moves V away at 300,
    # learning the floor 0.6 for (v, x). Z (type x) arrives at 500: the believed matrix (0.05)
    # would put it next to V again (GPU 1, which the run without OJPAP does), and OJPAP would
    # have to move V a second time; with the learned floor the packer puts Z beside X instead.
    jobs = [
        _job("V", "v", 2, 4000.0),
        _job("X", "x", 1, 1000.0),
        _job("Z", "x", 1, 1000.0, submit=500.0),
    ]

    def starts(policy) -> tuple[dict, list]:
        placed: dict[str, dict] = {}
        migrations: list[tuple[float, str]] = []

        def hook(view: ClusterView, plan) -> None:
            for a in plan.actions:
                if a.kind == "start":
                    placed[a.job_id] = dict(a.after.placement)
                elif a.kind == "migrate":
                    migrations.append((view.now, a.job_id))

        simulate(
            CLUSTER,
            jobs,
            policy,
            overheads=OVERHEADS,
            on_plan=hook,
            seed=0,
            sample_interval_s=None,
            interference=OjppInterference(TRUE),
        )
        return placed, migrations

    placed, migrations = starts(_policy(ojpap=False))
    assert placed["Z"] == {"node000": (1,)}  # next to V's second worker: the bad pair
    # floors used by moves only (ojpap_floors_place off): Z re-creates the pair, and OJPAP
    # has to move V a second time
    placed, migrations = starts(_policy(ojpap_floors_place=False))
    assert placed["Z"] == {"node000": (1,)}
    assert [job for _, job in migrations] == ["V", "V"]
    policy = _policy()
    placed, migrations = starts(policy)
    assert migrations == [(300.0, "V")]  # only the first move; none to undo Z's placement
    assert policy.memory.floor[("v", "x")] == 0.6
    assert placed["Z"] == {"node000": (0,)}  # beside X (x-x: 0.05), off V's GPUs 1 and 2
