"""The configuration ("pattern") side of OJPP: the enumeration is exactly the set of GPU
contents the device rules allow, the pattern model agrees with the count model and proves
the 40-worker benchmark instances, and ``heuristic-pg`` answers pass the checker, never use
more GPUs than ``heuristic-ls`` and stay within 10 % of the optimum on the bench instances."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings

from gpuplan.models.ojpp import OjppInstance, counts_slowdown
from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.policies.ojpp import check_solution, solve
from gpuplan.solver_core.policies.ojpp.exact import solve_exact
from gpuplan.solver_core.policies.ojpp.model import device_violation
from gpuplan.solver_core.policies.ojpp.pattern_greedy import (
    greedy_patterns,
    run_pattern_greedy,
    worker_weights,
)
from gpuplan.solver_core.policies.ojpp.patterns import enumerate_patterns

from ..ojpp_gen import random_instance
from .test_ojpp_solvers import instances

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(instances(max_workers=9))
def test_patterns_are_exactly_the_count_vectors_a_gpu_may_hold(inst: OjppInstance) -> None:
    """Against every count vector, checked plainly with the exact device rules."""
    matrix = inst.matrix()
    expected = set()
    for counts in itertools.product(*(range(job.workers + 1) for job in inst.jobs)):
        vec = {i: c for i, c in enumerate(counts) if c}
        if vec and device_violation(inst, matrix, vec) is None:
            expected.add(tuple(sorted(vec.items())))
    got = enumerate_patterns(inst)
    assert got is not None
    keys = [tuple(sorted(p.items())) for p in got]
    assert len(keys) == len(set(keys))  # no pattern twice
    assert set(keys) == expected


def _plain_patterns(inst: OjppInstance) -> set[tuple[tuple[int, int], ...]]:
    """The enumeration written plainly: depth-first, the exact device check on every
    vector, no running totals."""
    matrix = inst.matrix()
    found: set[tuple[tuple[int, int], ...]] = set()

    def grow(start: int, counts: dict[int, int]) -> None:
        for i in range(start, len(inst.jobs)):
            for c in range(1, inst.jobs[i].workers + 1):
                counts[i] = c
                if device_violation(inst, matrix, counts) is not None:
                    break
                found.add(tuple(sorted(counts.items())))
                grow(i + 1, counts)
            counts.pop(i, None)

    grow(0, {})
    return found


@pytest.mark.parametrize("composition", ["additive", "max"])
def test_enumeration_matches_the_plain_one_on_bench_sizes(composition: str) -> None:
    for seed in range(4):
        inst = random_instance(seed, 40, composition, max_per_job=6)
        got = enumerate_patterns(inst)
        assert got is not None
        assert {tuple(sorted(p.items())) for p in got} == _plain_patterns(inst), seed
        assert len(got) == len(_plain_patterns(inst))


def test_enumeration_gives_up_beyond_its_limit() -> None:
    inst = random_instance(4, 40, "additive", max_per_job=6)
    full = enumerate_patterns(inst)
    assert full is not None and len(full) > 50
    assert enumerate_patterns(inst, limit=50) is None
    assert enumerate_patterns(inst, limit=len(full)) is not None


@pytest.mark.parametrize("composition", ["additive", "max"])
def test_pattern_and_count_models_agree(composition: str) -> None:
    for seed in range(6):
        inst = random_instance(seed, 14, composition, max_per_job=4)
        pat = solve_exact(inst, "cp-sat", SolveLimits.wall(60), shortcut=False)
        cnt = solve_exact(inst, "cp-sat", SolveLimits.wall(60), shortcut=False, use_patterns=False)
        assert pat.stats.status == cnt.stats.status == "optimal", (seed, cnt.stats.message)
        assert pat.stats.objective == cnt.stats.objective == len(pat.gpus or [])
        assert "pattern model" in pat.stats.message
        assert check_solution(inst, pat.gpus or []) == []


BENCH_40 = {0: 20, 1: 16, 2: 34, 3: 30, 4: 17}
"""Optima of the bench's 40-worker instances (proven by the pattern model; 0, 1 and 4 were
open or slow for the count model within 10 s)."""


def test_the_40_worker_bench_instances_are_proven_within_a_deterministic_budget() -> None:
    for seed, optimum in BENCH_40.items():
        inst = random_instance(seed, 40, "additive", max_per_job=6)
        ex = solve_exact(inst, "cp-sat", SolveLimits.deterministic_budget(10.0), shortcut=False)
        assert ex.stats.status == "optimal", (seed, ex.stats.message)
        assert ex.stats.objective == ex.stats.bound == optimum
        assert ex.stats.deterministic
        assert check_solution(inst, ex.gpus or []) == []


def test_a_greedy_run_gets_stuck_and_the_repairs_finish_it() -> None:
    """30 workers seed 0 (theta_balance 0.1): the plain heaviest-first run leaves workers of
    jobs that no pattern can still take; pinning them to slowdowns near 0 finishes."""
    inst = random_instance(0, 30, "additive", max_per_job=6)
    patterns = enumerate_patterns(inst)
    assert patterns is not None
    matrix = inst.matrix()
    slow = [{i: counts_slowdown(i, p, matrix, inst.composition) for i in p} for p in patterns]
    weight = worker_weights(inst)[0]
    got, stuck = greedy_patterns(inst, patterns, slow, weight, set())
    assert got == [] and stuck
    everyone = set(range(len(inst.jobs)))
    assert greedy_patterns(inst, patterns, slow, weight, everyone)[1] == []
    best = run_pattern_greedy(inst)
    assert best is not None
    assert sorted(sum(p.get(i, 0) for p in best) for i in everyone) == sorted(
        job.workers for job in inst.jobs
    )


@FAST
@given(instances(max_workers=10))
def test_with_every_job_pinned_a_run_never_gets_stuck(inst: OjppInstance) -> None:
    """The termination argument of repair (b): a pinned job always fits a lone worker."""
    patterns = enumerate_patterns(inst)
    assert patterns is not None
    if not all(any(i in p for p in patterns) for i in range(len(inst.jobs))):
        return  # a worker fits no GPU: infeasible, handled before the greedy
    matrix = inst.matrix()
    slow = [{i: counts_slowdown(i, p, matrix, inst.composition) for i in p} for p in patterns]
    for weight in worker_weights(inst):
        got, stuck = greedy_patterns(inst, patterns, slow, weight, set(range(len(inst.jobs))))
        assert stuck == []
        gpus = [
            [f"{inst.jobs[i].id}#{k}" for i, c in patterns[t].items() for k in range(c)]
            for t in got
        ]
        assert check_solution(inst, _renumber(inst, gpus)) == []


def _renumber(inst: OjppInstance, gpus: list[list[str]]) -> list[list[str]]:
    nxt = {job.id: 0 for job in inst.jobs}
    out = []
    for gpu in gpus:
        row = []
        for w in gpu:
            job = w.rpartition("#")[0]
            row.append(f"{job}#{nxt[job]}")
            nxt[job] += 1
        out.append(row)
    return out


def test_heuristic_pg_is_within_ten_percent_on_the_bench_instances() -> None:
    """Sizes 10-40, seeds 0-4 of the bench: never more GPUs than heuristic-ls, every answer
    checked, and within 10 % of the exact optimum on all 20 (heuristic-ls: 15/20)."""
    within = 0
    for workers in (10, 20, 30, 40):
        for seed in range(5):
            inst = random_instance(seed, workers, "additive", max_per_job=6)
            pg, ls = solve(inst, "heuristic-pg"), solve(inst, "heuristic-ls")
            assert check_solution(inst, pg.gpus or []) == []
            assert pg.stats.objective is not None and ls.stats.objective is not None
            assert pg.stats.objective <= ls.stats.objective
            ex = solve_exact(inst, "cp-sat", SolveLimits.deterministic_budget(10.0), shortcut=False)
            assert ex.stats.status == "optimal"
            assert ex.stats.objective is not None
            within += pg.stats.objective <= 1.1 * ex.stats.objective + 1e-9
    assert within == 20


def test_the_emptying_pass_after_the_greedy_saves_gpus_and_keeps_every_rule() -> None:
    """60 workers seed 4 of the bench: the greedy's best is 25 GPUs and the pass of
    heuristic-ls empties one of them (24; heuristic-ls alone 26, the optimum 23)."""
    inst = random_instance(4, 60, "additive", max_per_job=6)
    got = run_pattern_greedy(inst)
    assert got is not None and len(got) == 25
    answer = solve(inst, "heuristic-pg")
    assert check_solution(inst, answer.gpus or []) == []
    assert answer.stats.objective == 24.0
    assert (solve(inst, "heuristic-ls").stats.objective or 0) > 24.0
