"""The ``ojpp`` wrapper in short simulations: jobs with memory profiles share GPUs, every plan
passes ``check_plan``, every shared GPU meets OJPP's rules (independent checker), and running
OJPP jobs are never moved."""

from __future__ import annotations

import random

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import AllocationPlan, Cluster, ClusterView, JobSpec, MemoryProfile
from gpuplan.models.ojpp import OjppInstance
from gpuplan.solver_core.policies.ojpp import check_solution
from gpuplan.solver_core.registry import make_policy, policy_names

from ..conftest import NO_OVERHEADS, CapacityChecker

TAU, THETA, SPREAD = 0.1, 0.3, 0.2


def _jobs(seed: int) -> list[JobSpec]:
    rng = random.Random(seed)
    jobs = []
    for n in range(14):
        mem = MemoryProfile(
            gamma=rng.choice([0.05, 0.1, 0.2]),
            delta=rng.choice([0.1, 0.2, 0.4]),
            p=rng.choice([0.05, 0.1, 0.3]),
            compute=rng.choice([0.25, 0.3, 0.5]),
        )
        jobs.append(
            JobSpec(
                id=f"m{n}",
                submit_time=n * 10.0,
                requested_gpus=rng.randint(1, 3),
                total_iterations=500.0,
                memory=mem,
                model=rng.choice(["a", "b"]),
            )
        )
    for n in range(3):
        jobs.append(
            JobSpec(id=f"w{n}", submit_time=n * 15.0, requested_gpus=2, total_iterations=800.0)
        )
    return jobs


class OjppChecker(CapacityChecker):
    """check_plan, then OJPP's rules on the GPUs the memory-profile jobs share."""

    def __init__(self, specs: dict[str, JobSpec]) -> None:
        super().__init__()
        self.specs = specs
        self.max_sharing = 0
        self.moves = 0
        """Moves of running OJPP jobs while no job left the cluster (must stay 0 under FIFO:
        only a departure can change the balance of who shares with whom)."""
        self.previous: set[str] = set()

    def __call__(self, view: ClusterView, plan: AllocationPlan) -> None:
        super().__call__(view, plan)
        ojpp = {j: a for j, a in plan.allocations.items() if self.specs[j].memory is not None}
        moved = sum(a.kind == "migrate" and a.job_id in ojpp for a in plan.actions)
        left = self.previous - set(view.running)  # co-runners that finished since last plan
        if not left:
            self.moves += moved  # a move with nothing changed around the job is a defect
        self.previous = set(view.running) | {a.job_id for a in plan.actions if a.kind == "start"}
        gpus: dict[tuple[str, int], list[str]] = {}
        for job_id, alloc in ojpp.items():
            assert alloc.share == self.specs[job_id].memory.compute  # type: ignore[union-attr]
            for i, (node, g) in enumerate(sorted(alloc.gpu_set())):
                gpus.setdefault((node, g), []).append(f"{job_id}#{i}")
        for node, g in gpus:
            assert not any(
                g in a.placement.get(node, ()) for j, a in plan.allocations.items() if j not in ojpp
            ), "a whole-GPU job on an OJPP GPU"
        self.max_sharing = max([self.max_sharing, *(len(w) for w in gpus.values())])
        if not ojpp:
            return
        inst = OjppInstance.model_validate(
            {
                "tau_max": TAU,
                "theta_max": THETA,
                "theta_balance": SPREAD,
                "interference": {"a": {"a": 0.2, "b": 0.1}, "b": {"a": 0.1, "b": 0.2}},
                "jobs": [
                    {
                        "id": j,
                        "workers": a.gpus,
                        "alpha": self.specs[j].memory.compute,
                        "gamma": self.specs[j].memory.gamma,
                        "delta": self.specs[j].memory.delta,
                        "p": self.specs[j].memory.p,
                        "type": self.specs[j].model,
                    }
                    for j, a in ojpp.items()
                ],
            }
        )
        assert check_solution(inst, list(gpus.values())) == []


@pytest.mark.parametrize("base", ["fifo", "srtf", "afs-l"])
def test_memory_profile_jobs_share_gpus_and_every_plan_is_valid(base: str) -> None:
    jobs = _jobs(1)
    checker = OjppChecker({j.id: j for j in jobs})
    policy = make_policy(
        f"{base}(wrappers=[ojpp],tau_max={TAU},theta_max={THETA},theta_balance={SPREAD})"
    )
    result, _, _ = simulate(
        Cluster.uniform(2, 4), jobs, policy, overheads=NO_OVERHEADS, on_plan=checker
    )
    assert all(r.finish_time is not None for r in result.jobs)
    assert checker.plans > 5 and checker.max_sharing >= 2
    if base == "fifo":
        assert checker.moves == 0


def test_presets_are_registered_and_the_default_matrix_applies() -> None:
    names = policy_names()
    assert {"fifo-ojpp", "afs-l-ojpp", "srtf-ojpp"} <= set(names)
    jobs = _jobs(2)
    checker = OjppChecker({j.id: j for j in jobs})  # checks with TAU/THETA/SPREAD bounds
    result, _, _ = simulate(
        Cluster.uniform(1, 4),
        jobs,
        make_policy("fifo-ojpp(theta_max=0.3)"),
        overheads=NO_OVERHEADS,
        on_plan=checker,
    )
    assert all(r.finish_time is not None for r in result.jobs) and checker.max_sharing >= 2


def test_strict_bounds_keep_workers_alone() -> None:
    """theta_max = 0: any neighbour slows a worker down, so no two jobs share a GPU."""
    jobs = _jobs(3)
    checker = OjppChecker({j.id: j for j in jobs})
    simulate(
        Cluster.uniform(2, 4),
        jobs,
        make_policy("fifo-ojpp(theta_max=0)"),
        overheads=NO_OVERHEADS,
        on_plan=checker,
    )
    assert checker.max_sharing == 1


def test_the_interference_parameter_replaces_the_default_matrix() -> None:
    """theta_max = 0 forbids sharing under the default matrix, not under an all-zero one."""
    jobs = _jobs(3)
    zero = "{a: {a: 0, b: 0}, b: {a: 0, b: 0}}"
    sharing = []

    def hook(view: ClusterView, plan: AllocationPlan) -> None:
        CapacityChecker()(view, plan)
        load: dict[tuple[str, int], int] = {}
        for alloc in plan.allocations.values():
            for gpu in alloc.gpu_set():
                load[gpu] = load.get(gpu, 0) + 1
        sharing.append(max(load.values(), default=0))

    simulate(
        Cluster.uniform(2, 4),
        jobs,
        make_policy(f"fifo-ojpp(theta_max=0,interference={zero})"),
        overheads=NO_OVERHEADS,
        on_plan=hook,
    )
    assert max(sharing) >= 2


@pytest.mark.parametrize(
    ("compute", "policy", "packed"),
    [
        (0.95, "fifo-ojpp(theta_max=1.5,theta_balance=1.5)", False),  # shares exceed one GPU
        (0.5, "fifo-ojpp", False),  # the same-type term 0.2 is above theta_max 0.1
        (0.5, "fifo-ojpp(theta_max=1.5,theta_balance=1.5)", True),
    ],
)
def test_what_packs_two_resnet18_copies_onto_one_gpu(
    compute: float, policy: str, packed: bool
) -> None:
    """The three cases docs/results/gpu.md states for two ResNet-18 copies on one GPU: only
    declared compute shares that fit one GPU and thresholds above the predicted slowdown pack
    them (the second then starts at once instead of after the first)."""
    from gpuplan.executors.engine import Engine
    from gpuplan.executors.simulator.cluster import SimulatedCluster
    from gpuplan.models.cluster import Node

    profile = MemoryProfile(gamma=0.05, delta=0.0, p=0.0, compute=compute)
    jobs = [
        JobSpec(
            id=f"j{i}",
            submit_time=float(i),
            requested_gpus=1,
            duration=100.0,
            model="resnet18",
            memory=profile,
        )
        for i in range(2)
    ]
    cluster = Cluster(nodes=[Node(name="n", gpus=1, gpu_type="v100")])
    engine = Engine(cluster, make_policy(policy), SimulatedCluster(cluster, jobs))
    engine.run()
    second = {r.job_id: r for r in engine.result().jobs}["j1"]
    assert second.first_start == (1.0 if packed else 100.0)
