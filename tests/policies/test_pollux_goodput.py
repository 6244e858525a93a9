"""Pollux goodput formulas (models/goodput.py) and the ``pollux`` policy's optimiser.

Hand-computed values from the paper's equations (Qiao et al., OSDI'21; numbering in
docs/algorithms/pollux.md): Eq. 2 statistical efficiency, Eqs. 4-5 iteration time, Eq. 1
goodput, Eq. 6 the batch choice, Eq. 8 the generalised mean; the knapsack against brute force.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gpuplan.models import (
    Cluster,
    ClusterState,
    Elasticity,
    JobAllocation,
    JobSnapshot,
    JobSpec,
    ThroughputProfile,
    placement_rate,
)
from gpuplan.models.goodput import GoodputModel, gain, iteration_time
from gpuplan.solver_core.policies.pollux.pollux import (
    PolluxParams,
    PolluxPolicy,
    fitness_terms,
    knapsack_counts,
)

PERF = (0.1, 0.01, 0.2, 0.02, 0.05, 0.005, 1.0)


def _model(**kw: object) -> GoodputModel:
    base: dict[str, object] = {
        "perf": PERF,
        "init_batch": 32,
        "max_batch": 1024,
        "min_local": 8,
        "max_local": 128,
        "batches": (32, 256),
        "grad_sqr": ((1.0, 1.0), (3.0, 1.0)),
        "grad_var": ((3.0, 9.0), (5.0, 9.0)),
        "epoch_ends": (100.0, 250.0),
    }
    base.update(kw)
    return GoodputModel.model_validate(base)


# ----------------------------------------------------------------- Eq. 2, 5, 1 by hand
def test_gain_eq2_by_hand() -> None:
    # scale 2, var 3, sqr 1: (3 + 1) / (3/2 + 1) = 1.6 steps' worth per step; efficiency 0.8
    assert gain(256, 128, 1.0, 3.0) == pytest.approx(1.6)
    assert gain(256, 128, 1.0, 0.0) == pytest.approx(1.0)  # no noise: a bigger batch gains 0
    assert gain(256, 128, 0.0, 5.0) == pytest.approx(2.0)  # all noise: gain = scale
    assert gain(128, 128, 2.0, 7.0) == pytest.approx(1.0)  # at the initial batch


def test_iteration_time_eq5_by_hand() -> None:
    # one replica: T_grad = 0.1 + 0.01 * 10 = 0.2, no sync
    assert iteration_time(PERF, 1, 1, 10, 0) == pytest.approx(0.2)
    # 4 replicas over 2 nodes, gamma 1: sync = 0.2 + 0.02 * 2 = 0.24; 1 accum step
    assert iteration_time(PERF, 2, 4, 10, 1) == pytest.approx(0.2 + 0.2 + 0.24)
    # one node, 3 replicas: sync = 0.05 + 0.005 * 1
    assert iteration_time(PERF, 1, 3, 10, 0) == pytest.approx(0.2 + 0.055)
    # gamma 2: overlap = sqrt(0.2^2 + 0.24^2)
    perf2 = (*PERF[:6], 2.0)
    assert iteration_time(perf2, 2, 4, 10, 1) == pytest.approx(0.2 + math.sqrt(0.0976))


def test_goodput_eq1_and_interpolated_statistics() -> None:
    m = _model()
    # batch 2 x 16 x 1 = 32 = init batch: gain 1, T_iter (2 replicas, 1 node) = 0.26 + 0.05
    assert m.goodput(1, 2, 16, 0, 0) == pytest.approx(1.0 / (0.1 + 0.16 + 0.05))
    # batch 4 x 36 = 144: halfway between 32 and 256, stats (2, 4) in epoch 0, scale 4.5
    sqr, var = m.grad_stats(144, 0)
    assert (sqr, var) == pytest.approx((2.0, 4.0))
    g = (4.0 + 2.0) / (4.0 / 4.5 + 2.0)
    t = (0.1 + 0.36) + (0.05 + 0.005 * 2)
    assert m.goodput(1, 4, 36, 0, 0) == pytest.approx(g / t)
    assert m.grad_stats(5000, 1) == (1.0, 9.0)  # clamped above the largest batch
    assert m.epoch_at(0.0) == 0 and m.epoch_at(100.0) == 1 and m.epoch_at(1e9) == 1
    assert m.work == 250.0


def test_optimize_eq6_is_the_best_of_pollux_candidates() -> None:
    m = _model()
    sqr, var = 1.0, 20.0
    for nodes, a in ((1, 1), (1, 3), (2, 8)):
        good, atomic, accum = m.optimize(nodes, np.array([a]), sqr, var)
        lo = max(m.init_batch, m.min_local * a)
        best = 0.0
        for batch in np.geomspace(lo, m.max_batch, 50):
            local = batch / a
            s = math.ceil(local / m.max_local - 1e-8) - 1
            if a == 1 and local > m.init_batch + 1e-8:
                s = max(s, 1)
            at = math.ceil(local / (s + 1) - 1e-8)
            if not m.min_local <= at <= m.max_local:
                continue
            total = a * at * (s + 1)
            t = iteration_time(PERF, nodes, a, at, s)
            best = max(best, gain(total, m.init_batch, sqr, var) / t)
        assert good[0] == pytest.approx(best, rel=1e-12)
        assert m.min_local <= atomic[0] <= m.max_local and accum[0] >= 0
    # noisier gradients favour larger batches
    _, at_quiet, _ = m.optimize(1, np.array([4]), 1.0, 0.01)
    _, at_noisy, _ = m.optimize(1, np.array([4]), 1.0, 1000.0)
    assert at_noisy[0] > at_quiet[0]


def test_fixed_batch_is_kept() -> None:
    m = _model(fixed_batch=512)
    _, atomic, accum = m.optimize(1, np.array([1]), 1.0, 1.0)
    assert atomic[0] * (accum[0] + 1) == 512 and accum[0] >= 1


def test_bad_goodput_model_is_refused() -> None:
    with pytest.raises(ValueError, match="epoch_ends"):
        _model(epoch_ends=(100.0, 50.0))
    with pytest.raises(ValueError, match="grad_sqr"):
        _model(grad_sqr=((1.0,),))


# ----------------------------------------------------------------- Eq. 8 and the knapsack
def test_fitness_terms_are_the_generalised_mean() -> None:
    s = np.array([0.0, 1.0, 3.0])
    harmonic = fitness_terms(s, -1.0)
    assert harmonic == pytest.approx([1 / 1e-3, 1 / 1.001, 1 / 3.001])
    assert fitness_terms(s, 0.0) == pytest.approx([-math.log(1e-3), 0.0, -math.log(3.0)])
    assert fitness_terms(s, 1.0) == pytest.approx([-1e-3, -1.001, -3.001])


def test_knapsack_matches_brute_force() -> None:
    rng = np.random.default_rng(7)
    for _ in range(40):
        jobs, budget = int(rng.integers(1, 5)), int(rng.integers(0, 7))
        costs = [rng.random(int(rng.integers(1, 6))) for _ in range(jobs)]
        counts = knapsack_counts(costs, budget)
        assert sum(counts) <= budget
        best = min(
            sum(c[k] for c, k in zip(costs, ks, strict=True))
            for ks in itertools.product(*(range(len(c)) for c in costs))
            if sum(ks) <= budget
        )
        assert sum(c[k] for c, k in zip(costs, counts, strict=True)) == pytest.approx(best)


# ----------------------------------------------------------------- the policy on a snapshot
def _job(job_id: str, model: GoodputModel, submit: float = 0.0) -> JobSpec:
    sqr, var = model.grad_stats(model.init_batch, 0)
    good, _, _ = model.optimize(0, np.arange(1, 9), sqr, var)
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=1,
        elasticity=Elasticity(min_gpus=1, max_gpus=8),
        total_iterations=model.work,
        throughput=ThroughputProfile(points={k: float(g) for k, g in enumerate(good, 1)}),
        goodput=model,
    )


def test_policy_sets_the_true_goodput_of_the_chosen_batch() -> None:
    """Whatever count it picks, the engine's rate (profile x efficiency) equals Eq. 1 at the
    batch the policy chose for that placement and the job's current epoch."""
    model = _model()
    state = ClusterState(
        now=600.0,
        cluster=Cluster.uniform(2, 4),
        jobs=[
            JobSnapshot(spec=_job("a", model), done_iterations=150.0),  # epoch 1
            JobSnapshot(spec=_job("b", model, submit=10.0)),
        ],
    )
    view = state.to_view()
    policy = PolluxPolicy(PolluxParams(explore=False))
    decision = policy.decide(view)
    assert set(decision.placements) == {"a", "b"}
    assert sum(a.gpus for a in decision.placements.values()) <= 8
    for job_id, alloc in decision.placements.items():
        job = view.job(job_id)
        epoch = model.epoch_at(job.done_at(view.now))
        batch = policy._memory[job_id].batch
        assert batch is not None
        k, n = alloc.gpus, len(alloc.placement)
        sqr, var = model.grad_stats(model.init_batch, epoch)
        _, atomic, accum = model.optimize(n, np.array([k]), sqr, var)
        assert batch == k * atomic[0] * (accum[0] + 1)
        want = model.goodput(n, k, int(atomic[0]), int(accum[0]), epoch)
        got = placement_rate(job.spec, view.cluster, alloc)
        assert got == pytest.approx(want, rel=1e-9)
        assert alloc.efficiency != 1.0


def test_exploration_caps_a_new_job_at_one_gpu() -> None:
    model = _model()
    state = ClusterState(
        now=60.0, cluster=Cluster.uniform(2, 4), jobs=[JobSnapshot(spec=_job("a", model))]
    )
    assert PolluxPolicy(PolluxParams()).decide(state.to_view()).shares == {"a": 1}
    free = PolluxPolicy(PolluxParams(explore=False)).decide(state.to_view()).shares
    assert free["a"] > 1


def test_rigid_job_gets_its_request_or_nothing() -> None:
    spec = JobSpec(id="r", submit_time=0, requested_gpus=3, total_iterations=100.0)
    state = ClusterState(now=60.0, cluster=Cluster.uniform(1, 4), jobs=[JobSnapshot(spec=spec)])
    decision = PolluxPolicy(PolluxParams(explore=False)).decide(state.to_view())
    assert decision.shares == {"r": 3}
    assert isinstance(decision.placements["r"], JobAllocation)


def test_an_efficiency_change_alone_is_a_reshare() -> None:
    """A new batch size (same GPUs, new efficiency) re-rates the job without a restart."""
    from gpuplan.solver_core.diff import build_plan
    from gpuplan.solver_core.policy import Decision

    spec = JobSpec(id="a", submit_time=0, requested_gpus=2, total_iterations=100.0)
    alloc = JobAllocation(job_id="a", placement={"node000": (0, 1)})
    state = ClusterState(
        now=60.0,
        cluster=Cluster.uniform(1, 4),
        jobs=[JobSnapshot(spec=spec, allocation=alloc)],
    )
    view = state.to_view()
    same = JobAllocation(job_id="a", placement={"node000": (0, 1)})
    faster = JobAllocation(job_id="a", placement={"node000": (0, 1)}, efficiency=1.5)
    assert build_plan(view, Decision({"a": 2}, {"a": same}), "p").actions == []
    (action,) = build_plan(view, Decision({"a": 2}, {"a": faster}), "p").actions
    assert action.kind == "reshare" and action.after == faster
