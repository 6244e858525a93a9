"""The AFS paper's baselines: Tiresias-L, Max-Min, Optimus, Themis, SRTF-E/SRSF-E, max-GPU variants.

Hand-computed small cases for each decision procedure, exact simulated times for the timer-driven
ones (Tiresias demotion/promotion, Themis leases), invariants on random states, determinism, and
an end-to-end run of every policy on an AFS-mapped elastic workload.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

import pytest

from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterState,
    ClusterView,
    Elasticity,
    JobAllocation,
    JobRecord,
    JobSnapshot,
    JobSpec,
    ThroughputProfile,
)
from gpuplan.scenarios.mapping import map_afs
from gpuplan.scenarios.synthetic import synthetic_jobs
from gpuplan.scenarios.zoo import load_afs_zoo
from gpuplan.solver_core.diff import check_plan
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policies.baselines.altruistic import AltruisticShortestFirst
from gpuplan.solver_core.policies.baselines.max_gpus import (
    Ladders,
    MaxGpusShortestFirst,
    max_useful_gpus,
    useful_ladder,
)
from gpuplan.solver_core.policies.baselines.maxmin import MaxMinShares
from gpuplan.solver_core.policies.baselines.optimus import OptimusShares, marginal_gain
from gpuplan.solver_core.policies.baselines.themis import Themis, themis_policy, tiebreak_key
from gpuplan.solver_core.policies.baselines.tiresias import (
    SizedQueue,
    TiresiasL,
    rigid_walk,
    tiresias_l_policy,
)
from gpuplan.solver_core.policy import Policy
from gpuplan.solver_core.registry import make_policy, policy_names
from tests.conftest import NO_OVERHEADS, rigid

BASELINES = [
    "tiresias-l",
    "max-min",
    "optimus",
    "themis",
    "srtf-e",
    "srsf-e",
    "srtf-max",
    "srsf-max",
    "tiresias-l-max",
]
RIGID_AT_REQUEST = {"tiresias-l"}
RIGID_AT_MAX = {"srtf-max", "srsf-max", "tiresias-l-max"}


def peak_profile(peak: int) -> ThroughputProfile:
    """Linear up to ``peak`` GPUs (rate = count), flat after: max useful = peak."""
    points = {1: 1.0} if peak == 1 else {1: 1.0, peak: float(peak)}
    return ThroughputProfile(points=points, extrapolation="flat")


def elastic(
    job_id: str,
    submit: float,
    requested: int,
    work: float,
    profile: ThroughputProfile,
    max_gpus: int = 64,
    allowed: tuple[int, ...] = (),
) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=requested,
        total_iterations=work,
        throughput=profile,
        elasticity=Elasticity(min_gpus=1, max_gpus=max_gpus, allowed=allowed),
    )


def make_view(now: float, cluster: Cluster, jobs: list[tuple[JobSpec, float, int]]) -> ClusterView:
    """(spec, done iterations, GPUs held now) -> a view; held GPUs are taken in node order."""
    free = [(node.name, g) for node in cluster.nodes for g in range(node.gpus)]
    snaps = []
    for spec, done, gpus in jobs:
        allocation = None
        if gpus:
            taken, free = free[:gpus], free[gpus:]
            placement: dict[str, list[int]] = defaultdict(list)
            for node, g in taken:
                placement[node].append(g)
            allocation = JobAllocation(
                job_id=spec.id, placement={n: tuple(g) for n, g in placement.items()}
            )
        snaps.append(JobSnapshot(spec=spec, done_iterations=done, allocation=allocation))
    return ClusterState(now=now, cluster=cluster, jobs=snaps).to_view()


# --------------------------------------------------------------------------- registry
def test_registered_fresh_policies_with_public_shares_stages() -> None:
    names = policy_names()
    expected_stage = {
        "tiresias-l": TiresiasL,
        "tiresias-l-max": TiresiasL,
        "max-min": MaxMinShares,
        "optimus": OptimusShares,
        "themis": Themis,
        "srtf-e": AltruisticShortestFirst,
        "srsf-e": AltruisticShortestFirst,
        "srtf-max": MaxGpusShortestFirst,
        "srsf-max": MaxGpusShortestFirst,
    }
    for name in BASELINES:
        assert names.get(name)
        a, b = make_policy(name), make_policy(name)
        assert a.name == name
        assert a is not b and a.allocation is not b.allocation  # stateful stages are never shared
        assert isinstance(a.allocation, expected_stage[name])
        assert a.placement is best_fit_placement
    # the timer-driven ones wire their wakeup in
    assert make_policy("tiresias-l").wakeup is not None
    assert make_policy("themis").wakeup is not None


# --------------------------------------------------------------------------- max useful GPUs
def test_useful_ladder_and_max_useful_gpus() -> None:
    zoo = load_afs_zoo()
    vgg = zoo["VGG16"].profile  # Table 4: peaks at 8 GPUs
    spec = elastic("v", 0, 1, 100, vgg, max_gpus=64)
    assert useful_ladder(spec, 64) == tuple(range(1, 9))
    assert max_useful_gpus(spec, 64) == 8
    assert useful_ladder(spec, 6) == tuple(range(1, 7))  # capped by the cluster
    pow2 = elastic("p", 0, 1, 100, vgg, max_gpus=16, allowed=(1, 2, 4, 8, 16))
    assert useful_ladder(pow2, 64) == (1, 2, 4, 8)
    capped = elastic("c", 0, 1, 100, vgg, max_gpus=5)
    assert max_useful_gpus(capped, 64) == 5
    plateau = ThroughputProfile(points={1: 1.0, 2: 1.5, 3: 1.5, 4: 2.0}, extrapolation="flat")
    spec_p = elastic("q", 0, 1, 100, plateau, max_gpus=8)
    assert useful_ladder(spec_p, 64) == (1, 2, 4)  # 3 buys nothing over 2
    assert useful_ladder(spec_p, 3) == (1, 2)
    assert useful_ladder(rigid("r", 0, 4, 10), 64) == (4,)
    assert useful_ladder(rigid("r", 0, 4, 10), 2) == ()
    # throughput learning replaces the spec object: the cache must notice
    job = make_view(0, Cluster.uniform(1, 8), [(spec, 0, 0)]).pending["v"]
    cache = Ladders()
    assert cache(job, 8) == tuple(range(1, 9))
    job.spec = spec.model_copy(update={"throughput": peak_profile(3)})
    assert cache(job, 8) == (1, 2, 3)


# --------------------------------------------------------------------------- Max-Min
def test_maxmin_water_filling_exact_shares() -> None:
    # caps 2, 3, 10 on 12 GPUs: level 7 -> (2, 3, 7)
    jobs = [
        elastic(n, i, 1, 1e6, peak_profile(c))
        for i, (n, c) in enumerate([("a", 2), ("b", 3), ("c", 10)])
    ]
    view = make_view(100, Cluster.uniform(3, 4), [(j, 0, 0) for j in jobs])
    assert MaxMinShares()(view, []) == {"a": 2, "b": 3, "c": 7}
    # caps 1, 4, 8 on 8 GPUs: level 3 (1+3+3 = 7), the spare GPU goes to the older of b, c
    jobs = [
        elastic(n, i, 1, 1e6, peak_profile(c))
        for i, (n, c) in enumerate([("a", 1), ("b", 4), ("c", 8)])
    ]
    view = make_view(100, Cluster.uniform(2, 4), [(j, 0, 0) for j in jobs])
    assert MaxMinShares()(view, []) == {"a": 1, "b": 4, "c": 3}
    # three uncapped jobs on 8 GPUs: level 2, the 2 spare GPUs to the two oldest
    jobs = [elastic(n, i, 1, 1e6, peak_profile(8)) for i, n in enumerate("abc")]
    view = make_view(100, Cluster.uniform(2, 4), [(j, 0, 0) for j in jobs])
    assert MaxMinShares()(view, []) == {"a": 3, "b": 3, "c": 2}


def test_maxmin_more_jobs_than_gpus_is_fifo_by_arrival() -> None:
    # listed newest first: the queue order must not matter, only submit time
    jobs = [elastic(f"j{i}", float(i), 1, 1e6, peak_profile(8)) for i in range(6)][::-1]
    view = make_view(100, Cluster.uniform(1, 4), [(j, 0, 0) for j in jobs])
    assert MaxMinShares()(view, []) == {"j0": 1, "j1": 1, "j2": 1, "j3": 1}
    # running jobs are not privileged: j5 holds 4 GPUs but is the newest
    jobs = [elastic(f"j{i}", float(i), 1, 1e6, peak_profile(8)) for i in range(6)]
    view = make_view(100, Cluster.uniform(1, 4), [(j, 0, 4 if j.id == "j5" else 0) for j in jobs])
    assert MaxMinShares()(view, []) == {"j0": 1, "j1": 1, "j2": 1, "j3": 1}


def test_maxmin_respects_allowed_counts() -> None:
    pow2 = elastic("p", 0, 1, 1e6, peak_profile(16), allowed=(1, 2, 4, 8))
    lin = elastic("l", 1, 1, 1e6, peak_profile(16))
    view = make_view(0, Cluster.uniform(2, 4), [(pow2, 0, 0), (lin, 0, 0)])
    # fill: p1 l1 | p->2, l->2 | p->4 (2 GPUs), l->3 ... p at 4 wants 8 (+4 > free)
    assert MaxMinShares()(view, []) == {"p": 4, "l": 4}


# --------------------------------------------------------------------------- Optimus
def test_optimus_gives_the_next_gpu_to_the_largest_marginal_gain() -> None:
    cluster = Cluster.uniform(1, 3)
    a = elastic("a", 0, 1, 100, peak_profile(2))  # 100/1 - 100/2 = 50 s saved
    b = elastic("b", 1, 1, 300, ThroughputProfile(points={1: 1.0, 2: 1.5}, extrapolation="flat"))
    view = make_view(0, cluster, [(a, 0, 0), (b, 0, 0)])
    assert marginal_gain(view.pending["a"], 1, 2, 0) == pytest.approx(50.0)
    assert marginal_gain(view.pending["b"], 1, 2, 0) == pytest.approx(100.0)
    assert OptimusShares()(view, []) == {"a": 1, "b": 2}
    # make b's second GPU worth less (300 - 300/1.1 = 27.3 s): a wins it
    b2 = b.model_copy(
        update={"throughput": ThroughputProfile(points={1: 1.0, 2: 1.1}, extrapolation="flat")}
    )
    view = make_view(0, cluster, [(a, 0, 0), (b2, 0, 0)])
    assert OptimusShares()(view, []) == {"a": 2, "b": 1}
    # the estimate is the *remaining* work: with a 90 % done, a's gain is 5 s and b wins again
    view = make_view(0, cluster, [(a, 90, 0), (b2, 0, 0)])
    assert OptimusShares()(view, []) == {"a": 1, "b": 2}


def test_optimus_never_grows_past_the_peak() -> None:
    a = elastic("a", 0, 1, 1e6, peak_profile(3))
    view = make_view(0, Cluster.uniform(2, 4), [(a, 0, 0)])
    assert OptimusShares()(view, []) == {"a": 3}  # 5 GPUs idle: no gain past the peak


# --------------------------------------------------------------------------- SRTF-E / SRSF-E
def test_srtf_e_selection_then_leftovers_by_throughput_gain() -> None:
    a = elastic(
        "a", 0, 2, 1000, ThroughputProfile(points={1: 1.0, 2: 1.9, 3: 2.7}, extrapolation="flat")
    )
    b = elastic("b", 1, 1, 5000, ThroughputProfile(points={1: 1.0, 8: 6.0}, extrapolation="flat"))
    c = rigid("c", 2, 4, 1e5)  # longest: no room for its 4 GPUs after a and b
    view = make_view(0, Cluster.uniform(2, 4), [(a, 0, 0), (b, 0, 0), (c, 0, 0)])
    # rigid SRTF order a (526 s), b (5000 s), c (25000 s): 2 + 1 + 4 = 7 of 8 GPUs
    shares = make_policy("srtf-e").allocation(view, [])
    # leftover 1 GPU: a 2->3 gains 0.8/GPU, b 1->2 gains 5/7 = 0.714/GPU -> a
    assert shares == {"a": 3, "b": 1, "c": 4}
    view = make_view(0, Cluster.uniform(2, 4), [(a, 0, 0), (b, 0, 0)])
    # leftover 5: a -> 3 (its max useful), then b takes the other 4
    assert make_policy("srtf-e").allocation(view, []) == {"a": 3, "b": 5}
    assert make_policy("srsf-e").allocation(view, []) == {"a": 3, "b": 5}
    # the leftover goes by gain, not by age: b (newer) gains 1.0/GPU, a only 0.2
    a = elastic("a", 0, 1, 1000, ThroughputProfile(points={1: 1.0, 2: 1.2}, extrapolation="flat"))
    b = elastic("b", 1, 1, 1000, peak_profile(8))
    view = make_view(0, Cluster.uniform(1, 3), [(a, 0, 0), (b, 0, 0)])
    assert make_policy("srtf-e").allocation(view, []) == {"a": 1, "b": 2}


def test_srtf_e_never_exceeds_max_useful_gpus() -> None:
    zoo = load_afs_zoo()
    models = sorted(zoo)
    rng = random.Random(11)
    for trial in range(30):
        cluster = Cluster.uniform(4, 4)
        jobs = []
        for i in range(rng.randint(1, 8)):
            model = zoo[models[rng.randrange(len(models))]]
            top = min(model.max_gpus, 16)
            jobs.append(
                (
                    elastic(
                        f"t{trial}-{i}",
                        rng.uniform(0, 50),
                        rng.randint(1, top),
                        rng.uniform(1e3, 1e6),
                        model.profile,
                        max_gpus=top,
                    ),
                    0,
                    0,
                )
            )
        view = make_view(100, cluster, jobs)
        for name in ("srtf-e", "srsf-e"):
            shares = make_policy(name).allocation(view, [])
            for job_id, n in shares.items():
                spec = view.pending[job_id].spec
                assert spec.requested_gpus <= n <= max_useful_gpus(spec, 16)
            assert sum(shares.values()) <= 16


# --------------------------------------------------------------------------- rigid walk
def test_sized_queue_walk_equals_the_plain_walk() -> None:
    """The bucketed k-way walk grants exactly what a walk over every job would."""
    rng = random.Random(5)
    cluster = Cluster.uniform(4, 4)
    for trial in range(200):
        capacity = rng.randint(1, 16)
        specs = [
            rigid(f"t{trial}-{i}", float(i), rng.choice([1, 2, 3, 4, 8, 16]), 10)
            for i in range(rng.randint(0, 40))
        ]
        view = make_view(0, cluster, [(spec, 0, 0) for spec in specs])
        keys = {spec.id: rng.random() for spec in specs}
        queue = SizedQueue(
            lambda job, now, keys=keys: (keys[job.spec.id], job.spec.id),
            lambda job, cap: job.spec.requested_gpus,
        )
        queue.sync(view)
        running = [((rng.random(), f"r{k}"), rng.choice([0, 1, 2, 5, 40])) for k in range(5)]
        order = sorted([*running, *(((keys[s.id], s.id), s.requested_gpus) for s in specs)])
        expected = rigid_walk(((e[-1], size) for e, size in order), capacity)
        assert queue.walk(running, capacity) == expected
        # leavers and newcomers keep the buckets in step
        for spec in specs[::3]:
            del view.pending[spec.id]
        queue.sync(view)
        order = [(e, n) for e, n in order if e[-1] in view.pending or e[-1].startswith("r")]
        assert queue.walk(running, capacity) == rigid_walk(((e[-1], n) for e, n in order), capacity)


# --------------------------------------------------------------------------- Tiresias-L
def _run(
    cluster: Cluster, jobs: list[JobSpec], policy: Policy
) -> tuple[dict[str, JobRecord], SimulatedCluster]:
    result, _, executor = simulate(
        cluster, jobs, policy, overheads=NO_OVERHEADS, record_segments=True, sample_interval_s=None
    )
    return {r.job_id: r for r in result.jobs}, executor


def test_tiresias_demotes_at_the_exact_threshold_crossing(run_sim) -> None:
    # 1 GPU: A runs from 0; B arrives at 1000 into Q0 but A (Q0, running) keeps the GPU.
    # A's attained service reaches 3600 GPU-s at t = 3600 -> demoted -> B preempts it then.
    jobs = [rigid("A", 0, 1, 10_000), rigid("B", 1000, 1, 100)]
    result, _, executor = run_sim(Cluster.uniform(1, 1), jobs, "tiresias-l")
    r = {x.job_id: x for x in result.jobs}
    first_a = min((s for s in executor.segments if s.job_id == "A"), key=lambda s: s.start)
    assert first_a.end == 3600.0
    assert r["B"].first_start == 3600.0 and r["B"].finish_time == 3700.0
    assert r["A"].preemptions == 1 and r["A"].finish_time == 10_100.0


def test_tiresias_service_is_gpus_times_time(run_sim) -> None:
    # A holds 2 GPUs: 3600 GPU-s after 1800 s. B (1 GPU) then preempts it; A resumes after B.
    jobs = [rigid("A", 0, 2, 10_000), rigid("B", 10, 1, 100)]
    result, _, _ = run_sim(Cluster.uniform(1, 2), jobs, "tiresias-l")
    r = {x.job_id: x for x in result.jobs}
    assert r["B"].first_start == 1800.0
    assert r["A"].finish_time == 1900.0 + (10_000 - 1800)


def test_tiresias_promotion_knob() -> None:
    # 1 GPU. A demoted at 3600 (C takes over); C demoted at 7200 but, running first in Q1,
    # keeps the GPU. With PROMOTEKNOB 8, A waits until C ends at 13600. With knob 1, A is
    # promoted after waiting 3600 s (= its executed time) at t = 7200 and preempts C.
    jobs = [rigid("A", 0, 1, 5000), rigid("C", 1, 1, 10_000)]
    default, _ = _run(Cluster.uniform(1, 1), jobs, make_policy("tiresias-l"))
    assert default["C"].finish_time == 13_600.0 and default["A"].finish_time == 15_000.0
    knob1, _ = _run(Cluster.uniform(1, 1), jobs, tiresias_l_policy(promote_knob=1.0))
    assert knob1["A"].finish_time == 8600.0 and knob1["A"].preemptions == 1
    assert knob1["C"].finish_time == 15_000.0 and knob1["C"].preemptions == 1
    # Knob 2: both sit in Q1 from t = 7200 (C running first). Nothing happens at t = 10800
    # except A's promotion timer (3600 + 2 x 3600): A must preempt C exactly then.
    jobs = [rigid("A", 0, 1, 5000), rigid("C", 1, 1, 20_000)]
    knob2, executor = _run(Cluster.uniform(1, 1), jobs, tiresias_l_policy(promote_knob=2.0))
    first_c = min((s for s in executor.segments if s.job_id == "C"), key=lambda s: s.start)
    assert first_c.start == 3600.0 and first_c.end == 10_800.0
    assert knob2["A"].finish_time == 10_800.0 + 1400
    assert knob2["C"].finish_time == 12_200.0 + (20_000 - 7200)


def test_tiresias_queue_state_and_wakeup() -> None:
    stage = TiresiasL()
    a = rigid("a", 0, 2, 10_000)
    view = make_view(1000, Cluster.uniform(1, 4), [(a, 0, 2)])
    assert stage(view, []) == {"a": 2}
    assert stage.queue_of("a") == 0
    # restored with 2000 GPU-s of service at t=1000 -> crossing at 1000 + 1600/2
    view.running["a"].attained_service = 2000.0
    assert stage.next_wakeup(view) == pytest.approx(1800.0)
    view.running["a"].attained_service = 3600.0
    stage(view, [])
    assert stage.queue_of("a") == 1
    assert stage.next_wakeup(view) is None  # last queue, nobody waiting


def test_tiresias_max_runs_jobs_at_max_useful_gpus() -> None:
    a = elastic("a", 0, 1, 1e6, peak_profile(6))
    b = elastic("b", 1, 2, 1e6, peak_profile(3))
    view = make_view(0, Cluster.uniform(2, 4), [(a, 0, 0), (b, 0, 0)])
    assert make_policy("tiresias-l-max").allocation(view, []) == {"a": 6}  # b's 3 no longer fits
    assert make_policy("tiresias-l").allocation(view, []) == {"a": 1, "b": 2}
    assert make_policy("srtf-max").allocation(view, []) == {"a": 6}
    c = elastic("c", 2, 1, 1e4, peak_profile(3))  # short: first in SRTF-max
    view = make_view(0, Cluster.uniform(2, 4), [(a, 0, 0), (c, 0, 0)])
    assert make_policy("srtf-max").allocation(view, []) == {"c": 3}
    # SRSF-max ranks by time x GPUs: c 3333 x 3 < a 166667 x 6
    assert make_policy("srsf-max").allocation(view, []) == {"c": 3}


# --------------------------------------------------------------------------- Themis
def _themis_pair(done_a: float, done_b: float) -> ClusterView:
    a = elastic("A", 0, 2, 10_000, peak_profile(8))
    b = elastic("B", 0, 2, 10_000, peak_profile(8))
    return make_view(1000, Cluster.uniform(1, 8), [(a, done_a, 2), (b, done_b, 2)])


def test_themis_worst_rho_bids_first() -> None:
    # Same work and history; A has more left, so T_shared(A) = 1000 + 9000/2 > B's 1000 + 5000/2
    view = _themis_pair(1000, 5000)
    stage = Themis()
    assert stage.rho(view.running["A"], 2, view) > stage.rho(view.running["B"], 2, view)
    # 2 candidates -> max(floor(0.2 x 2), 1) = 1 bidder: A takes all 4 free GPUs it can use.
    assert stage(view, []) == {"A": 6, "B": 2}
    assert Themis()(_themis_pair(5000, 1000), []) == {"A": 2, "B": 6}


def test_themis_rho_definition() -> None:
    # A: m = 8 GPUs (sub-linear: P(c) = 1 + 5 (c - 1) / 7, P(8) = 6), 3000 of 10000 done.
    sub = ThroughputProfile(points={1: 1.0, 8: 6.0}, extrapolation="flat")
    a = elastic("A", 0, 2, 10_000, sub)
    b = elastic("B", 0, 2, 10_000, peak_profile(8))
    view = make_view(1000, Cluster.uniform(1, 8), [(a, 3000, 2), (b, 3000, 2)])
    t_shared = 1000 + 7000 / (1 + 5 / 7)
    stage = Themis()
    stage(view, [])  # records the contention history: 2 jobs since t = 1000
    job = view.running["A"]
    # n = 2: target speedup m / n = 4 over one GPU -> ideal rate 4 (below P(8) = 6)
    assert stage.rho(job, 2, view) == pytest.approx(t_shared / (10_000 / 4.0))
    assert stage.rho(job, 0, view) == math.inf
    # Themis' own wording: alone on 8 / 2 = 4 GPUs -> ideal rate P(4) = 1 + 15/7
    cluster_share = Themis(ideal="cluster-share")
    cluster_share(view, [])
    assert cluster_share.rho(job, 2, view) == pytest.approx(t_shared / (10_000 / (1 + 15 / 7)))


def test_themis_partial_allocation_hidden_payment() -> None:
    # f = 0: both bid. Greedy NSW splits the 4 free GPUs 2/2 (symmetric jobs, A first on ties).
    # A's hidden payment: without A, B would take all 4 -> c_A = T_sh_B(8) / T_sh_B(4).
    view = _themis_pair(3000, 3000)
    stage = Themis(fairness_knob=0.0)
    bidders = [(view.running[j], stage.ladders(view.running[j], 8)) for j in ("A", "B")]
    start = {"A": 2, "B": 2}
    won = stage._auction(bidders, start, 4, view.now)
    assert won == {"A": 4, "B": 4}
    final, left = stage._partial_allocation(bidders, start, 4, view.now)

    def t_sh(count: int) -> float:
        return 1000 + 7000 / count

    c = t_sh(6) / t_sh(4)
    assert final["A"] == 2 + math.floor(c * 2) and final["B"] == 2 + math.floor(c * 2)
    assert left == 4 - (final["A"] - 2) - (final["B"] - 2)
    # leftovers are spread again, so the stage still uses every GPU
    assert sum(stage(view, []).values()) == 8


def test_themis_zero_gpu_jobs_bid_before_growth_and_leases_hold() -> None:
    cluster = Cluster.uniform(1, 4)
    r = elastic("R", 0, 2, 1e6, peak_profile(4))
    waiting = [rigid(f"P{i}", 10 + i, 1, 100) for i in range(3)]
    view = make_view(500, cluster, [(r, 0, 2)] + [(p, 0, 0) for p in waiting])
    shares = Themis()(view, [])
    assert shares["R"] >= 2  # leased GPUs are never taken away before expiry
    assert sum(shares.values()) == 4
    # 4 candidates -> 1 bidder: the waiting job with the lowest tie-break key gets a GPU
    first = min(waiting, key=lambda p: tiebreak_key(0, p.id))
    assert shares[first.id] == 1


def test_themis_lease_expiry_reallocates_exactly_then() -> None:
    # B arrives at 100 while A holds both GPUs under a 1200 s lease: B waits until the lease
    # ends, wins the auction (lower tie-break key; both have rho = inf), A is preempted (its 2
    # GPUs no longer fit) and resumes when B is done.
    b_id = next(f"B{i}" for i in range(100) if tiebreak_key(0, f"B{i}") < tiebreak_key(0, "A"))
    jobs = [rigid("A", 0, 2, 5000), rigid(b_id, 100, 1, 50)]
    r, _ = _run(Cluster.uniform(1, 2), jobs, themis_policy(lease_s=1200.0))
    assert r[b_id].first_start == 1200.0 and r[b_id].finish_time == 1250.0
    assert r["A"].preemptions == 1 and r["A"].finish_time == 1250.0 + (5000 - 1200)


# --------------------------------------------------------------------------- invariants
def _random_state(rng: random.Random, tag: str) -> ClusterView:
    zoo = load_afs_zoo()
    models = sorted(zoo)
    cluster = Cluster.uniform(rng.randint(1, 4), 4)
    total = cluster.total_gpus
    jobs, used = [], 0
    for i in range(rng.randint(1, 14)):
        model = zoo[models[rng.randrange(len(models))]]
        top = min(model.max_gpus, total)
        kind = rng.random()
        if kind < 0.2:
            spec = JobSpec(
                id=f"{tag}{i}",
                submit_time=rng.uniform(0, 900),
                requested_gpus=rng.randint(1, top),
                total_iterations=rng.uniform(1e2, 1e6),
                throughput=model.profile,
            )
        else:
            allowed = tuple(c for c in (1, 2, 4, 8, 16) if c <= top) if kind < 0.4 else ()
            req = rng.choice(allowed) if allowed else rng.randint(1, top)
            spec = elastic(
                f"{tag}{i}",
                rng.uniform(0, 900),
                req,
                rng.uniform(1e2, 1e6),
                model.profile,
                max_gpus=top,
                allowed=allowed,
            )
        held = 0
        if rng.random() < 0.4:
            fits = [c for c in spec.allowed_counts() if used + c <= total]
            held = rng.choice(fits) if fits else 0
        used += held
        jobs.append((spec, rng.uniform(0, 0.9) * spec.work, held))
    return make_view(1000.0, cluster, jobs)


@pytest.mark.parametrize("name", BASELINES)
def test_shares_invariants_on_random_states(name: str) -> None:
    rng = random.Random(sum(map(ord, name)))
    for trial in range(40):
        view = _random_state(rng, f"s{trial}-")
        policy = make_policy(name)
        shares = policy.allocation(view, [])
        again = make_policy(name).allocation(view, [])
        assert shares == again, "deterministic"
        assert sum(shares.values()) <= view.capacity
        for job_id, n in shares.items():
            spec = view.job(job_id).spec
            assert n > 0 and n in spec.allowed_counts()
            top = max_useful_gpus(spec, view.capacity)
            if name in RIGID_AT_REQUEST:
                assert n == spec.requested_gpus
            elif name in RIGID_AT_MAX:
                assert n == top
            elif name in ("srtf-e", "srsf-e"):
                assert spec.requested_gpus <= n <= max(top, spec.requested_gpus)
            else:
                assert n <= top
        if name == "max-min":
            # max-min fairness among jobs with unit ladders (1..cap): nobody is two or more
            # GPUs below another unless it is at its own cap
            unit = {j.id: useful_ladder(j.spec, view.capacity) for j in view.active()}
            unit = {k: v for k, v in unit.items() if v and v == tuple(range(1, v[-1] + 1))}
            for i, ladder_i in unit.items():
                for j in unit:
                    if shares.get(j, 0) >= shares.get(i, 0) + 2:
                        assert shares.get(i, 0) == ladder_i[-1], (i, j, shares)
        if name in ("max-min", "optimus", "srtf-e", "srsf-e", "themis"):
            # elastic baselines leave no GPU idle that some active job could still use
            free = view.capacity - sum(shares.values())
            for job in view.active():
                ladder = useful_ladder(job.spec, view.capacity)
                cur = shares.get(job.id, 0)
                nxt = [c for c in ladder if c > cur]
                if name in ("srtf-e", "srsf-e") and cur == 0:
                    continue  # rigid selection: a skipped job gets no leftovers
                assert not nxt or nxt[0] - cur > free, (name, job.id, cur, free)


# --------------------------------------------------------------------------- end to end
def _afs_workload(n: int, seed: int, gpus: int) -> list[JobSpec]:
    zoo = load_afs_zoo()
    rows = synthetic_jobs(n, 30.0, {1: 0.5, 2: 0.2, 4: 0.2, 8: 0.1}, 1800.0, seed=seed, zoo=zoo)
    return map_afs(rows, zoo, seed=seed, cluster_gpus=gpus)


class _Checker:
    """Plan hook: capacity, GPU exclusivity and allowed counts at every plan."""

    def __init__(self) -> None:
        self.plans = 0

    def __call__(self, view: ClusterView, plan: AllocationPlan) -> None:
        check_plan(view, plan)
        assert plan.gpus_used <= view.capacity
        for job_id, alloc in plan.allocations.items():
            assert alloc.gpus in view.job(job_id).spec.allowed_counts()
        self.plans += 1


@pytest.mark.parametrize("name", BASELINES)
def test_end_to_end_afs_workload_every_job_finishes(name: str) -> None:
    cluster = Cluster.uniform(4, 4)
    jobs = _afs_workload(80, seed=3, gpus=cluster.total_gpus)
    assert any(j.elastic for j in jobs)
    runs = []
    for _ in range(2):
        checker = _Checker()
        result, _, _ = simulate(
            cluster,
            jobs,
            make_policy(name),
            overheads=NO_OVERHEADS,
            on_plan=checker,
            sample_interval_s=None,
        )
        assert checker.plans > 0
        assert len(result.jobs) == len(jobs)
        assert all(r.finish_time is not None for r in result.jobs), "every job finishes"
        assert result.gpu_seconds_allocated <= result.gpu_seconds_capacity + 1e-6
        by_id = {j.id: j for j in jobs}
        for rec in result.jobs:
            assert rec.done_iterations == pytest.approx(by_id[rec.job_id].work)
        runs.append([r.model_dump() for r in result.jobs])
    assert runs[0] == runs[1], "same inputs, same records"
