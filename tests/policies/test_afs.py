"""AFS-L / AFS-P / AFS-S share policies (000 digest §2.1-2.8, §7.1).

The literal Algorithm 1 (``afs_reference``) is the oracle: the fast production AFS-L must give
identical shares, and the paper's worked cases pin down the literal semantics themselves.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    ActiveJob,
    Cluster,
    ClusterState,
    Elasticity,
    JobSnapshot,
    JobSpec,
    ThroughputProfile,
)
from gpuplan.scenarios.zoo import load_afs_zoo
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policies.afs import afs_l_fast as fast_mod
from gpuplan.solver_core.policies.afs.afs import (
    AfsJob,
    AfsL,
    AfsP,
    AfsS,
    afs_l_shares,
    afs_p_loop,
    build_ladder,
    maxmin_shares,
)
from gpuplan.solver_core.policies.afs.afs_reference import (
    afs_l_reference,
    afs_p_reference,
    inequality3,
)
from gpuplan.solver_core.policy import StagedPolicy
from gpuplan.solver_core.registry import make_policy, policy_names
from tests.conftest import NO_OVERHEADS, CapacityChecker

ZOO = load_afs_zoo()


def ratio_job(job_id: str, remaining: float, f: float) -> AfsJob:
    """A job whose second GPU multiplies its throughput by ``f`` (and whose third does not)."""
    return AfsJob(job_id, remaining, (1, 2), (1.0, f))


def zoo_spec(
    job_id: str,
    model: str,
    duration: float,
    submit: float = 0.0,
    requested: int = 1,
    **elastic: int,
) -> JobSpec:
    z = ZOO[model]
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=requested,
        duration=duration,
        elasticity=Elasticity(
            min_gpus=elastic.get("min_gpus", 1), max_gpus=elastic.get("max_gpus", z.max_gpus)
        ),
        throughput=z.profile,
        model=model,
    )


def view_of(specs: list[JobSpec], gpus: int, now: float = 0.0):
    cluster = Cluster.uniform(1, gpus)
    return ClusterState(
        now=now, cluster=cluster, jobs=[JobSnapshot(spec=s) for s in specs]
    ).to_view()


def zoo_instance(n: int, total: int, seed: int) -> list[AfsJob]:
    """Elastic zoo jobs with log-uniform lengths; ladders shared per model (as the stages do)."""
    rng = random.Random(seed)
    models = sorted(ZOO)
    ladders: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {}
    jobs = []
    for i in range(n):
        name = models[rng.randrange(len(models))]
        if name not in ladders:
            ladders[name] = build_ladder(zoo_spec("x", name, 1.0), total)
        counts, rates = ladders[name]
        seconds = math.exp(rng.uniform(math.log(60.0), math.log(1e6)))
        jobs.append(AfsJob(f"j{i}", seconds * rates[0], counts, rates))
    return jobs


# --------------------------------------------------------------------------- inequality (3)
def test_inequality3_two_job_cases_of_section_3_2() -> None:
    # (3) <=> f_a + 1/f_b < 2 with f = p'/p (digest §2.3 compact form).
    # Equal gains: the shorter job always wins (f + 1/f >= 2).
    assert not inequality3(2.0, 3.0, 2.0, 3.0)
    # The longer job wins only if f_b > 1/(2 - f_a): f_a = 1.2 needs f_b > 1.25.
    assert inequality3(1.0, 1.2, 1.0, 1.3)
    assert not inequality3(1.0, 1.2, 1.0, 1.24)
    # f_a >= 1.5 and f_b <= 2: the shorter job always wins (boundary f_a=1.5, f_b=2 included).
    assert not inequality3(2.0, 3.0, 1.0, 2.0)
    assert not inequality3(1.0, 1.9, 1.0, 2.0)
    # A job with no GPUs (p_b = 0) has left side 1: it beats any sub-linear next GPU (f_a < 2).
    assert inequality3(1.0, 1.99, 0.0, 0.5)
    assert not inequality3(1.0, 2.0, 0.0, 0.5)


def _avg_jct_differences(wa, wb, pa1, pa1n, pb1, pb1n, pa2n, pb2n) -> tuple[float, float]:
    """(1) = avg JCT(a) - avg JCT(b1) and (2) = avg JCT(a) - avg JCT(b2), digest §2.2."""
    jct_a = wa / pa1n + 0.5 * (wb - pb1 * wa / pa1n) / pb2n
    jct_b1 = wa / pa1 + 0.5 * (wb - pb1n * wa / pa1) / pb2n
    jct_b2 = wb / pb1n + 0.5 * (wa - pa1 * wb / pb1n) / pa2n
    return jct_a - jct_b1, jct_a - jct_b2


def test_inequality3_is_the_two_job_analysis_under_the_afs_assumption() -> None:
    # Under AFS p'_{a,2} = p_{a,1} and p'_{b,2} = p'_{b,1}; then (1) > 0 <=> (2) > 0 <=> (3),
    # i.e. giving the GPU to the longer job b lowers the two jobs' average JCT exactly when (3)
    # says so. Random instances with w_a/p_a < w_b/p_b (a is the shorter job).
    rng = random.Random(3)
    checked = agree = 0
    for _ in range(3000):
        pa1, pb1 = rng.uniform(0.5, 4), rng.uniform(0.5, 4)
        pa1n, pb1n = pa1 * rng.uniform(1.01, 2.0), pb1 * rng.uniform(1.01, 2.0)
        wa = rng.uniform(1, 100)
        wb = wa / pa1 * pb1 * rng.uniform(1.01, 10)
        d1, d2 = _avg_jct_differences(wa, wb, pa1, pa1n, pb1, pb1n, pa1, pb1n)
        if min(abs(d1), abs(d2)) < 1e-9 * (wa + wb):
            continue
        checked += 1
        expected = inequality3(pa1, pa1n, pb1, pb1n)
        agree += (d1 > 0) == expected and (d2 > 0) == expected
    assert checked > 2900
    assert agree == checked


def test_worked_example_of_appendix_a_depends_on_the_tie_rule() -> None:
    # App. A: 2 GPUs; A and B take 2 h on 1 GPU; on 2 GPUs A takes 1 h, B 1.5 h. Equal
    # len(1): line 6's strict "<" hands the first GPU to the job scanned later.
    a = AfsJob("A", 1.0, (1, 2), (0.5, 1.0))
    b = AfsJob("B", 1.0, (1, 2), (0.5, 1.0 / 1.5))
    # B gets the first GPU; then A (no GPUs, G = 1) beats B (H = 1/3): the equal split.
    assert afs_l_reference([a, b], 2) == afs_l_shares([a, b], 2) == [1, 1]
    # A first: A's second GPU doubles its rate (H = 1 is not < G_B = 1), so A keeps both:
    # SRTF's choice (average JCT 1.75 h, not the paper's 1.25 h, digest §7.2 item 6).
    assert afs_l_reference([b, a], 2) == afs_l_shares([b, a], 2) == [0, 2]


# --------------------------------------------------------------------------- AFS-L semantics
def test_stage_one_gives_the_m_shortest_jobs_one_gpu_each() -> None:
    specs = [
        zoo_spec(f"j{i}", model, 600.0 * (i + 1))
        for i, model in enumerate(itertools.islice(itertools.cycle(sorted(ZOO)), 12))
    ]
    random.Random(5).shuffle(specs)  # scan order must not matter in stage one
    view = view_of(specs, 5)
    shares = AfsL()(view, [])
    by_len = sorted(specs, key=lambda s: s.work / s.throughput.rate(1))
    assert shares == {s.id: 1 for s in by_len[:5]}
    # n <= M: everyone gets at least one GPU, and every GPU is used by someone.
    shares = AfsL()(view_of(specs, 40), [])
    assert set(shares) == {s.id for s in specs}
    assert sum(shares.values()) == 40


def test_non_transitive_cycle_makes_the_scan_order_matter() -> None:
    # §7.1: lengths a < b < c with next-GPU gains f = (1.46, 1.80, 1.95): a beats b, b beats
    # c, c beats a. Stage one gives each one GPU; the 4th GPU goes to the scan's result.
    a, b, c = ratio_job("a", 1.0, 1.46), ratio_job("b", 2.0, 1.80), ratio_job("c", 3.0, 1.95)
    assert not inequality3(1.0, 1.46, 1.0, 1.80)  # a (shorter) keeps priority over b
    assert not inequality3(1.0, 1.80, 1.0, 1.95)  # b keeps priority over c
    assert inequality3(1.0, 1.46, 1.0, 1.95)  # but c takes it from a
    expected_winner = {"abc": "c", "acb": "b", "bac": "c", "bca": "a", "cab": "b", "cba": "a"}
    for order, winner in expected_winner.items():
        jobs = [{"a": a, "b": b, "c": c}[k] for k in order]
        want = [2 if j.id == winner else 1 for j in jobs]
        assert afs_l_reference(jobs, 4) == want, order
        assert afs_l_shares(jobs, 4) == want, order
    assert len(set(expected_winner.values())) == 3


def test_saturation_guard_and_allowed_counts() -> None:
    vgg = zoo_spec("vgg", "VGG16", 3600.0, max_gpus=64)  # raw peak at 8 GPUs
    counts, rates = build_ladder(vgg, 64)
    assert counts == tuple(range(1, 9))
    assert all(r2 > r1 for r1, r2 in itertools.pairwise(rates))
    assert vgg.throughput.rate(9) <= vgg.throughput.rate(8)
    # Alone on 64 GPUs it gets 8; the other 56 stay idle rather than not helping.
    assert AfsL()(view_of([vgg], 64), []) == {"vgg": 8}
    # max_gpus caps the ladder; allowed counts are the only sizes handed out.
    capped = zoo_spec("cap", "Transformer", 3600.0, max_gpus=6)
    pow2 = JobSpec(
        id="pow2",
        submit_time=0,
        requested_gpus=1,
        duration=3600.0,
        elasticity=Elasticity(min_gpus=1, max_gpus=16, allowed=(1, 2, 4, 16)),
        throughput=ZOO["Transformer"].profile,
    )
    shares = AfsL()(view_of([capped, pow2], 64), [])
    assert shares == {"cap": 6, "pow2": 16}
    # min_gpus that cannot be met gets nothing; a job whose min fits still runs.
    big = zoo_spec("big", "Transformer", 60.0, requested=4, min_gpus=4, max_gpus=8)
    small = zoo_spec("small", "Chatbot", 7200.0)
    assert AfsL()(view_of([big, small], 3), []) == {"small": 3}
    assert AfsL()(view_of([big, small], 5), []) == {"big": 4, "small": 1}
    # a job whose next step would not raise throughput is never given it
    flat = AfsJob(
        "flat",
        10.0,
        *build_ladder(
            JobSpec(
                id="flat",
                submit_time=0,
                requested_gpus=1,
                total_iterations=10.0,
                elasticity=Elasticity(min_gpus=1, max_gpus=8),
                throughput=ThroughputProfile(points={1: 1.0, 2: 1.5, 3: 1.5, 4: 3.0}),
            ),
            8,
        ),
    )
    assert flat.counts == (1, 2)
    assert afs_l_shares([flat], 8) == afs_l_reference([flat], 8) == [2]


def test_fast_paths_keep_the_literal_tie_and_convexity_rules() -> None:
    # Identical jobs tie on every comparison: the literal scan hands the odd GPU to the job
    # scanned last (equal lengths swap j_a to the scanned job), in stage one and stage two.
    same = [AfsJob(f"s{i}", 10.0, (1, 2, 3), (1.0, 1.5, 1.8)) for i in range(3)]
    assert afs_l_reference(same, 2) == afs_l_shares(same, 2) == [0, 1, 1]
    assert afs_l_reference(same, 4) == afs_l_shares(same, 4) == [1, 1, 2]
    # A convex ladder: after its second GPU, A's third would multiply its rate by 2.5, so A
    # (shorter) keeps winning although B was the next job in a "round" by length.
    a = AfsJob("A", 1.0, (1, 2, 3), (1.0, 1.05, 2.625))
    b = AfsJob("B", 100.0, (1, 2), (1.0, 1.052))
    assert afs_l_reference([a, b], 4) == afs_l_shares([a, b], 4) == [3, 1]


def test_fast_paths_on_equal_lengths_and_stage_one_misfits() -> None:
    # u and j are equally long; j's next GPU overlaps u's class (H_j >= G_u), k is strictly
    # above j (G_k > H_j). Scanned u, j, k: j displaces u (equal length, H_j >= G_u), then k
    # displaces j. u is *not* a safe winner although it is the shortest top-class job.
    u = AfsJob("u", 5.0, (1, 2), (1.0, 1.0 / 0.7))
    j = AfsJob("j", 5.0, (1, 2), (1.0, 1.35))
    k = AfsJob("k", 50.0, (1, 2), (1.0, 1.6))
    assert afs_l_reference([u, j, k], 4) == afs_l_shares([u, j, k], 4) == [1, 1, 2]
    # Stage one past a misfit: A takes 2, B's 3 no longer fits, C's first GPU is followed by
    # a doubling one (H = 1), which then beats D's first GPU (G = 1 is not > H = 1).
    jobs = [
        AfsJob("A", 1.0, (2,), (2.0,)),
        AfsJob("B", 3.0, (3,), (3.0,)),
        AfsJob("C", 4.0, (1, 2), (1.0, 2.0)),
        AfsJob("D", 9.0, (1,), (1.0,)),
    ]
    assert afs_l_reference(jobs, 4) == afs_l_shares(jobs, 4) == [2, 0, 2, 0]
    # Jobs sharing one rates tuple but with different counts must not share a ladder.
    rates = (1.0, 1.5)
    mixed = [AfsJob("p", 1.0, (1, 2), rates), AfsJob("q", 2.0, (1, 3), rates)]
    assert afs_l_reference(mixed, 5) == afs_l_shares(mixed, 5) == [2, 3]


def test_stage_matches_reference_and_shares_ladders_per_model() -> None:
    specs = [
        zoo_spec(f"j{i}", model, 900.0 * (i + 1), submit=float(20 - i))
        for i, model in enumerate(["ResNet-50", "VGG16", "ResNet-50", "Chatbot"] * 3)
    ]
    view = view_of(specs, 40, now=0.0)
    stage = AfsL()
    items = stage.items(view)
    assert [j.id for j in items] == [s.id for s in sorted(specs, key=lambda s: s.submit_time)]
    resnet = [
        j
        for j, s in zip(items, sorted(specs, key=lambda s: s.submit_time), strict=True)
        if s.model == "ResNet-50"
    ]
    assert all(j.counts is resnet[0].counts and j.rates is resnet[0].rates for j in resnet)
    want = dict(zip([j.id for j in items], afs_l_reference(items, 40), strict=True))
    assert stage(view, []) == {k: v for k, v in want.items() if v > 0}


def test_ladders_that_break_the_guard_are_rejected() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        afs_l_shares([AfsJob("x", 1.0, (1, 2), (2.0, 2.0))], 4)


# ----------------------------------------------------------------------- production == reference
class _CheckedSolver(fast_mod._AfsLSolver):
    """The production solver, asserting its eligibility invariant around every phase.

    While GPUs are left, a job the fast paths still treat as eligible (``has_next``) must have a
    step that fits (``step <= m``): the scan queries rely on it instead of re-testing the fit,
    so a job left enabled after ``m`` dropped below its step can win (or redirect) a scan the
    literal loop would not even let it enter. ``m`` never goes negative.
    """

    def _check(self, where: str) -> None:
        assert self.m >= 0, f"{where}: m = {self.m} < 0 (over-allocation)"
        if self.m > 0:
            stale = np.flatnonzero(self.has_next & (self.step > self.m))
            assert len(stale) == 0, f"{where}: jobs {stale.tolist()} enabled, step > m = {self.m}"

    def stage_one(self) -> None:
        self._check("before stage one")
        super().stage_one()
        self._check("after stage one")

    def batch(self) -> int:
        took = super().batch()
        self._check("after a round")
        return took

    def exact_step(self) -> bool:
        stepped = super().exact_step()
        self._check("after an exact step")
        return stepped


def assert_production_matches(jobs: list[AfsJob], total: int) -> list[int]:
    """Production == literal Algorithm 1, never above ``total``, invariant kept; the shares."""
    shares = afs_l_shares(jobs, total)
    assert sum(shares) <= total, f"production hands out {sum(shares)} GPUs of {total}"
    assert shares == afs_l_reference(jobs, total)
    if jobs and total > 0:
        assert (
            _CheckedSolver(
                [j.remaining for j in jobs], [(j.counts, j.rates) for j in jobs], total
            ).run()
            == shares
        )
    return shares


# Stale multi-GPU steps: stage one's tail (past a first step that did not fit) granted single
# steps without disabling jobs whose step no longer fitted, so a later exact step could let such
# a job win the scan (over-allocation) or steer its chain of incumbents (divergence). Each case
# was found by the property test or a differential fuzz; the expected shares are the literal
# loop's, which the test also checks.
STALE_STEP_CASES = {
    # zero remaining (every length ties at 0): j0's second GPU doubles it (H = 1) and ends the
    # sort; j7's 2-GPU first step fitted at the start but not in the 1 GPU left, yet won.
    "zero-gpu-job-2-gpu-first-step": (
        3,
        [
            AfsJob("j0", 0.0, (1, 2), (0.5, 1.0)),
            AfsJob("j3", 0.0, (3,), (0.5,)),
            AfsJob("j5", 0.0, (1, 2), (0.5, 0.75)),
            AfsJob("j7", 1.0, (2,), (0.5,)),
        ],
        [1, 0, 2, 0],
    ),
    # a job holding GPUs whose next step (1 -> 3) stopped fitting wins the scan: 4 GPUs of 3
    "holder-multi-gpu-step-wins": (
        3,
        [
            AfsJob("j0", 2.0, (1, 2), (1.0, 2.0)),
            AfsJob("j1", 3.0, (1, 2), (0.5, 1.0)),
            AfsJob("j2", 0.0, (1, 3), (0.5, 0.75)),
            AfsJob("j3", 1.0, (3,), (0.5,)),
        ],
        [2, 0, 1, 0],
    ),
    # the stale holder j1 (1 -> 3) only steers the chain: it displaces j0 (shorter, and
    # H = G = 0.5 keeps the shorter job), then zero-GPU j2 (G = 1 > 0.5) displaces it; the
    # literal scan, without j1, keeps j0 (H = 1). No over-allocation, but the wrong shares.
    "holder-steers-the-chain": (
        3,
        [
            AfsJob("j0", 3.0, (1, 2), (1.0, 2.0)),
            AfsJob("j1", 2.0, (1, 3), (1.0, 1.5)),
            AfsJob("j2", 2.0, (1, 2), (0.5, 1.0)),
            AfsJob("j3", 3.0, (3,), (1.0,)),
            AfsJob("j4", 3.0, (1,), (0.5,)),
        ],
        [2, 1, 0, 0, 0],
    ),
    # stage one's tail ran to its end (no doubling step ended it early): j4's 1 -> 3 step
    # stayed enabled with 1 GPU left; the round certified nothing (j1, j2 tie at length 0),
    # and j4 won the exact step
    "tail-ran-to-its-end": (
        5,
        [
            AfsJob("j0", 2.0, (3, 4, 5), (1.0, 1.5, 4.5)),
            AfsJob("j1", 0.0, (1, 2), (0.5, 0.6)),
            AfsJob("j2", 0.0, (2, 3), (1.0, 1.2)),
            AfsJob("j3", 1.0, (3,), (0.5,)),
            AfsJob("j4", 3.0, (1, 3), (0.5, 0.75)),
        ],
        [0, 1, 3, 0, 1],
    ),
    # same with a zero-GPU job whose 2-GPU first step fitted only early (ties on lengths)
    "tail-ran-to-its-end-zero-gpu-job": (
        6,
        [
            AfsJob("j0", 1.0, (3, 4), (1.0, 1.2)),
            AfsJob("j1", 1.0, (2, 3), (1.0, 1.2)),
            AfsJob("j2", 2.0, (1, 4, 6), (1.0, 1.2, 1.44)),
            AfsJob("j3", 1.0, (1, 2, 3), (1.0, 1.2, 3.6)),
            AfsJob("j4", 0.0, (1,), (0.5,)),
            AfsJob("j5", 3.0, (2, 3), (0.5, 1.0)),
        ],
        [0, 2, 1, 2, 1, 0],
    ),
}


@pytest.mark.parametrize("case", list(STALE_STEP_CASES), ids=list(STALE_STEP_CASES))
def test_steps_that_no_longer_fit_are_never_granted(case: str) -> None:
    total, jobs, want = STALE_STEP_CASES[case]
    assert afs_l_reference(jobs, total) == want
    assert assert_production_matches(jobs, total) == want


@st.composite
def ladder(draw, cap: int = 40) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """A ladder cut at ``cap``; often multi-GPU steps (first counts 2-4, jumps of 2-4)."""
    counts = [draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]))]
    for _ in range(draw(st.integers(0, 7))):
        counts.append(counts[-1] + draw(st.sampled_from([1, 1, 1, 2, 3, 4])))
    counts = [c for c in counts if c <= cap]
    rates = [draw(st.sampled_from([0.5, 1.0, 2.0]))]
    for _ in counts[1:]:
        # 2.0 makes H = 1 exactly (the stage-one boundary), 2.5 a super-linear step
        rates.append(rates[-1] * draw(st.sampled_from([1.05, 1.2, 1.5, 1.8, 2.0, 2.5])))
    return tuple(counts), tuple(rates[: len(counts)])


# Zero or small remaining work makes many lengths tie
remainings = st.sampled_from([0.0, 0.0, 1.0, 2.0, 10.0, 100.0]) | st.floats(0.0, 1e4)


def _jobs(picks: list[tuple[int, float]], pool: list, total: int) -> list[AfsJob]:
    """Jobs on ladders ``pool[k]`` cut at ``total``; jobs of one pool entry share one tuple
    pair (as one model's jobs do in the stages), which also makes ties."""
    cut = []
    for counts, rates in pool:
        k = sum(1 for c in counts if c <= total)
        cut.append((counts[:k], rates[:k]))
    return [AfsJob(f"j{i}", rem, *cut[k]) for i, (k, rem) in enumerate(picks)]


@st.composite
def ladder_jobs(draw, cap: int) -> list[AfsJob]:
    """Up to 12 jobs on ``cap`` GPUs, ladders from a small shared pool, lengths often tied."""
    pool = draw(st.lists(ladder(), min_size=1, max_size=5))
    picks = draw(
        st.lists(st.tuples(st.integers(0, len(pool) - 1), remainings), min_size=1, max_size=12)
    )
    return _jobs(picks, pool, cap)


def _tight_totals(picks: list[tuple[int, float]], pool: list) -> list[int]:
    """Totals for which stage one leaves GPUs that fit only early to multi-GPU steps.

    Stage one hands out first steps in increasing ``len(first count)`` (ties: the later job),
    skipping those that no longer fit. A total is returned if, at the end, a few GPUs are left
    but fewer than a multi-GPU step (a skipped first step, or a granted job's next step) that
    still fitted when stage one first had to skip a job. Steps above are only the paper's
    stage one, ignoring that a doubling next step ends it early, so this is a bias, not a
    promise: the exact checks are the oracle's.
    """

    def first_len(i: int) -> tuple[float, int]:
        (_, rates), remaining = pool[picks[i][0]], picks[i][1]
        return remaining / rates[0], -i

    ladders = [pool[picks[i][0]][0] for i in sorted(range(len(picks)), key=first_len)]
    out = []
    for total in range(1, sum(counts[0] for counts in ladders) + 1):
        m = total
        steps = []
        at_skip = None
        for counts in ladders:
            if counts[0] <= m:
                m -= counts[0]
                if len(counts) > 1:
                    steps.append(counts[1] - counts[0])
            else:
                if at_skip is None:
                    at_skip = m
                steps.append(counts[0])
        if m > 0 and at_skip is not None and any(m < step <= at_skip for step in steps):
            out.append(total)
    return out


@st.composite
def afs_cases(draw) -> tuple[int, list[AfsJob]]:
    """``(total, jobs)`` with capacities that are often *tight*.

    A third of the totals are free (1-40), a third within 4 GPUs of the sum of first steps,
    and a third (on 3-10 jobs with a ladder each, for varied first steps) leave stage one with
    fewer GPUs than a multi-GPU step that fitted earlier (:func:`_tight_totals`), the class
    of the stale-step bug; when there is no such total, within 4 GPUs as well.
    """
    mode = draw(st.sampled_from(["free", "near", "tight"]))
    if mode == "tight":
        n = draw(st.integers(3, 10))
        pool = [draw(ladder()) for _ in range(n)]
        picks = [(i, draw(remainings)) for i in range(n)]
    else:
        pool = draw(st.lists(ladder(), min_size=1, max_size=5))
        picks = draw(
            st.lists(st.tuples(st.integers(0, len(pool) - 1), remainings), min_size=1, max_size=12)
        )
    first = sum(pool[k][0][0] for k, _ in picks)
    tight = _tight_totals(picks, pool) if mode == "tight" else []
    if tight:
        total = draw(st.sampled_from(tight))
    elif mode == "free":
        total = draw(st.integers(1, 40))
    else:
        total = draw(st.integers(max(1, first - 4), first + 4))
    return total, _jobs(picks, pool, total)


@settings(max_examples=600, deadline=None)
@given(afs_cases())
def test_production_equals_reference(case: tuple[int, list[AfsJob]]) -> None:
    total, jobs = case
    assert_production_matches(jobs, total)


def test_production_equals_reference_on_zoo_workloads_through_every_fast_path(monkeypatch) -> None:
    """Sizes where rounds of Condorcet winners and exact incremental steps both occur."""
    taken = {"batch": 0, "exact": 0}
    batch, exact = fast_mod._AfsLSolver.batch, fast_mod._AfsLSolver.exact_step

    def counting_batch(self):
        k = batch(self)
        taken["batch"] += k
        return k

    def counting_exact(self):
        taken["exact"] += 1
        return exact(self)

    monkeypatch.setattr(fast_mod._AfsLSolver, "batch", counting_batch)
    monkeypatch.setattr(fast_mod._AfsLSolver, "exact_step", counting_exact)
    for n, total, seed in [(60, 400, 1), (40, 700, 2), (150, 100, 3), (80, 240, 4)]:
        jobs = zoo_instance(n, total, seed)
        shares = afs_l_shares(jobs, total)
        assert sum(shares) <= total, (n, total, seed)
        assert shares == afs_l_reference(jobs, total), (n, total, seed)
    assert taken["batch"] >= fast_mod._BATCH_MIN
    assert taken["exact"] > 50


# --------------------------------------------------------------------------- AFS-P
@settings(max_examples=300, deadline=None)
@given(st.floats(0.0, 10.0), st.floats(1e-3, 10.0), st.floats(0.0, 10.0), st.floats(1e-3, 10.0))
def test_afs_p_never_prefers_both_jobs_of_a_pair(pa, da, pb, db) -> None:
    a_wins_as_long = pb > 0 and inequality3(pb, pb + db, pa, pa + da)
    b_wins_as_long = pa > 0 and inequality3(pa, pa + da, pb, pb + db)
    assert not (a_wins_as_long and b_wins_as_long)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 30).flatmap(lambda m: st.tuples(st.just(m), ladder_jobs(m))),
    st.integers(0, 10**6),
)
def test_afs_p_loop_matches_its_literal_version(case, seed) -> None:
    total, jobs = case
    shares = afs_p_loop(jobs, total, random.Random(seed))
    assert sum(shares) <= total
    assert shares == afs_p_reference(jobs, total, seed)


def _identical_specs(k: int) -> list[JobSpec]:
    return [zoo_spec(f"j{i}", "ResNet-50", 3600.0) for i in range(k)]


def test_afs_p_is_deterministic_under_a_seed_and_ignores_lengths(monkeypatch) -> None:
    # Ten identical jobs: every pairwise test is a tie, so only the seeded coin decides.
    specs = _identical_specs(10)
    view = view_of(specs, 24, now=10.0)
    first = AfsP(seed=7)(view, [])
    assert first == AfsP(seed=7)(view, [])
    assert sum(first.values()) == 24 and len(first) == 10
    others = [AfsP(seed=s)(view, []) for s in range(8)]
    assert any(o != first for o in others)

    # AFS-P must never look at remaining work.
    def forbidden(self, now):
        raise AssertionError("AFS-P read a job length")

    monkeypatch.setattr(ActiveJob, "remaining", forbidden)
    monkeypatch.setattr(ActiveJob, "done_at", forbidden)
    assert AfsP(seed=7)(view, []) == first
    # AFS-S neither: max-min gives 2 each, the 4 GPUs left go to the first four in scan order
    assert AfsS()(view, []) == {s.id: 3 for s in specs[:4]} | {s.id: 2 for s in specs[4:]}


def test_afs_s_is_capped_max_min() -> None:
    specs = [
        zoo_spec("chat", "Chatbot", 100.0),
        zoo_spec("vgg", "VGG16", 100.0),
        zoo_spec("tr", "Transformer", 100.0),
    ]
    # Chatbot peaks at 4, VGG16 at 8: max-min fills them up to their peaks, the rest to tr.
    assert AfsS()(view_of(specs, 30), []) == {"chat": 4, "vgg": 8, "tr": 18}
    assert AfsS()(view_of(specs, 9), []) == {"chat": 3, "vgg": 3, "tr": 3}
    jobs = [AfsJob("a", math.nan, (2, 4, 8), (1.0, 1.5, 2.0)), AfsJob("b", math.nan, (1,), (1.0,))]
    assert maxmin_shares(jobs, 7) == [4, 1]  # the step 4 -> 8 does not fit in the 2 left


def _rigid(job_id: str, submit: float, duration: float) -> JobSpec:
    return JobSpec(id=job_id, submit_time=submit, requested_gpus=1, duration=duration)


def _run_afs_p(jobs: list[JobSpec], gpus: int, **kw: object):
    stage = AfsP(unit_time=100.0, **kw)
    policy = StagedPolicy("afs-p", stage, best_fit_placement, stage.next_wakeup, memory=stage)
    checker = CapacityChecker()
    result, _, executor = simulate(
        Cluster.uniform(1, gpus),
        jobs,
        policy,
        overheads=NO_OVERHEADS,
        on_plan=checker,
        record_segments=True,
    )
    return {r.job_id: r for r in result.jobs}, executor, stage


def test_afs_p_counters_rotate_jobs_by_unit_time_without_arrivals() -> None:
    # 4 one-GPU jobs of 1000 s on 2 GPUs, unit 100 s: j0, j1 run [0, 100), then j2, j3, ...
    # Only the policy's wakeups can cause these switches (no arrival after t=0).
    jobs = [_rigid(f"j{i}", 0.0, 1000.0) for i in range(4)]
    rec, executor, _ = _run_afs_p(jobs, 2)
    assert [rec[f"j{i}"].first_start for i in range(4)] == [0.0, 0.0, 100.0, 100.0]
    assert rec["j0"].finish_time == pytest.approx(1900.0)
    assert rec["j1"].finish_time == pytest.approx(1900.0)
    assert rec["j2"].finish_time == pytest.approx(2000.0)
    assert rec["j3"].finish_time == pytest.approx(2000.0)
    assert all(s.end - s.start <= 100.0 + 1e-6 for s in executor.segments if s.gpus)
    assert rec["j0"].preemptions == 9


@pytest.mark.parametrize(("preemptive", "start"), [(False, 200.0), (True, 130.0)])
def test_afs_p_non_preemptive_stage_one(preemptive: bool, start: float) -> None:
    # j0, j1 run [0,100); j2 and j0 (lower counter / earlier) run from 100. j3 arrives at 130
    # with counter 0: non-preemptive, it waits for the next unit boundary (200); preemptive,
    # it displaces j0 (1 unit) at once, tying j2 on counter 0.
    jobs = [
        _rigid("j0", 0.0, 1000.0),
        _rigid("j1", 0.0, 1000.0),
        _rigid("j2", 0.0, 1000.0),
        _rigid("j3", 130.0, 1000.0),
    ]
    rec, _, _ = _run_afs_p(jobs, 2, preemptive=preemptive)
    assert rec["j2"].first_start == 100.0
    assert rec["j3"].first_start == start


def test_afs_p_wakes_only_while_time_slicing() -> None:
    stage = AfsP(unit_time=100.0)
    view = view_of(_identical_specs(3), 4)
    stage(view, [])
    assert not stage.time_slicing
    assert stage.next_wakeup(view) is None
    stage(view_of(_identical_specs(4), 4), [])  # n = M: the (3) loop, one GPU each
    assert not stage.time_slicing
    stage(view_of(_identical_specs(5), 4), [])
    assert stage.time_slicing


# --------------------------------------------------------------------------- registry + simulation
def test_registered_policies_are_fresh_objects() -> None:
    names = policy_names()
    for name in ("afs-l", "afs-p", "afs-s"):
        assert name in names
        p1, p2 = make_policy(name), make_policy(name)
        assert p1.name == name and p1 is not p2 and p1.allocation is not p2.allocation
    assert make_policy("afs-p").wakeup is not None


def test_afs_l_beats_srtf_on_a_small_elastic_workload(run_sim) -> None:
    # Twelve zoo jobs (6 models) on 8 GPUs, one every 15 min, each asking for 1-2 GPUs but
    # elastic up to its model's peak. Rigid SRTF leaves GPUs idle whenever few jobs are
    # present and runs each job at its requested size; AFS-L hands every GPU to whichever job
    # turns it into the most JCT reduction, so its mean JCT must be clearly lower (it is about
    # 0.79x SRTF's on this instance; we ask for < 0.9x).
    rng = random.Random(0)
    models = ["ResNet-50", "Transformer", "VGG16", "DCGAN", "Chatbot", "GoogLeNet"]
    jobs = [
        zoo_spec(
            f"j{i:02d}",
            models[i % 6],
            rng.choice([1800.0, 3600.0, 7200.0, 14400.0]),
            submit=900.0 * i,
            requested=rng.choice([1, 2]),
        )
        for i in range(12)
    ]
    mean = {}
    for policy in ("srtf", "afs-l", "afs-p", "afs-s"):
        result, _, _ = run_sim(Cluster.uniform(2, 4), jobs, policy)
        assert all(r.finish_time is not None for r in result.jobs)
        mean[policy] = sum(r.jct for r in result.jobs) / len(result.jobs)
    assert mean["afs-l"] < 0.9 * mean["srtf"]
    # the length-unaware variants cannot beat the length-aware one here
    assert mean["afs-l"] <= mean["afs-p"] and mean["afs-l"] <= mean["afs-s"]
