"""Themis' per-decision shortcuts equal the from-scratch values at every decision.

The stage keeps lease books (total GPUs, earliest expiry) and per-job facts (ladder, rates, the
contention integral up to the submit time) across decisions, ranks candidates by an inlined
rho and caches auction gains across the hidden-payment reruns. A simulated run with short
leases (so expiries, regrowth and reconciliation happen often) checks at every decision that
the books equal their lease lists, that every ranked candidate's rho equals the formula
evaluated from scratch (``ActiveJob.remaining``, the profile, :meth:`Themis.mean_contention`),
bit for bit, and that the next wake-up is the earliest live lease of a running job.
"""

from __future__ import annotations

import math

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import ActiveJob, Cluster, ClusterView, SolverStats
from gpuplan.solver_core.helpers.ladders import useful_ladder
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policies.baselines.themis import Themis
from gpuplan.solver_core.policy import Shares, StagedPolicy
from tests.bench.afs_scale import workload


def _rho_from_scratch(stage: Themis, job: ActiveJob, count: int, view: ClusterView) -> float:
    """The AFS-ideal rho exactly as the module docstring defines it, nothing cached."""
    now, spec = view.now, job.spec
    rate = spec.throughput.rate
    t_shared = (now - spec.submit_time) + job.remaining(now) / rate(count)
    peak = useful_ladder(spec, view.capacity)[-1]
    contention = stage.mean_contention(spec.submit_time, now)
    ideal_rate = min(peak / contention * rate(1), rate(peak))
    return t_shared / (spec.work / ideal_rate)


class _Checked(Themis):
    """Themis that checks its cached state against a recomputation at every decision."""

    def __init__(self) -> None:
        super().__init__(lease_s=4 * 3600.0, fairness_knob=0.5)
        self.decisions = 0
        self.ranked = 0
        self.view: ClusterView | None = None

    def _ranked_by_rho(self, finite, held, now):  # type: ignore[no-untyped-def]
        out = super()._ranked_by_rho(finite, held, now)
        assert self.view is not None
        for neg_rho, _, job, _, _ in out:
            assert -neg_rho == _rho_from_scratch(self, job, held[job.spec.id], self.view)
            self.ranked += 1
        return out

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        self.view = view
        shares = super().__call__(view, stats)
        for job_id, book in self._leases.items():
            assert book.total == sum(lease.gpus for lease in book.leases)
            assert book.first == min(lease.expires for lease in book.leases)
            assert shares.get(job_id, 0) == book.total  # every granted GPU is leased
        live = [
            lease.expires
            for job_id in view.running
            for lease in self.leases_of(job_id)
            if lease.expires > view.now + 1e-9
        ]
        assert self.next_wakeup(view) == (min(live) if live else None)
        self.decisions += 1
        return shares


def test_themis_caches_equal_the_from_scratch_values_at_every_decision() -> None:
    stage = _Checked()
    jobs = workload(10, 30, seed=7)
    policy = StagedPolicy("themis", stage, best_fit_placement, stage.next_wakeup, memory=stage)
    result, _, _ = simulate(Cluster.uniform(2, 8), jobs, policy, sample_interval_s=None)
    assert all(r.jct is not None for r in result.jobs)
    assert stage.decisions >= 200
    assert stage.ranked >= 200  # the inlined rho ran, not only the first-decision fallback


def test_public_rho_matches_the_formula_and_is_infinite_without_gpus() -> None:
    stage = _Checked()
    jobs = workload(4, 6, seed=2)
    policy = StagedPolicy("themis", stage, best_fit_placement, stage.next_wakeup, memory=stage)
    simulate(Cluster.uniform(2, 8), jobs, policy, sample_interval_s=None)
    view = stage.view
    assert view is not None
    for job in list(view.running.values()) + list(view.pending.values()):
        assert stage.rho(job, 0, view) == math.inf
        if useful_ladder(job.spec, view.capacity):
            assert stage.rho(job, 1, view) == _rho_from_scratch(stage, job, 1, view)


class _CheckedResume(Themis):
    """Every hidden-payment rerun resumed from the full run's log equals the rerun from
    scratch (the same counts for every bidder)."""

    def __init__(self) -> None:
        super().__init__(lease_s=1800.0, fairness_knob=0.5, seed=4)
        self.reruns = 0
        self.resumed_pops = 0

    def _greedy(self, bidders, start, free, now, gains, skip, log=None):  # type: ignore[no-untyped-def]
        got = super()._greedy(bidders, start, free, now, gains, skip, log)
        if skip >= 0 and log is not None:
            assert got == super()._greedy(bidders, start, free, now, gains, skip, None)
            self.reruns += 1
            self.resumed_pops += next(
                (n for n, (r, _, step) in enumerate(log) if r == skip and step), 0
            )
        return got


def test_resumed_hidden_payment_reruns_equal_reruns_from_scratch() -> None:
    stage = _CheckedResume()
    policy = StagedPolicy("themis", stage, best_fit_placement, stage.next_wakeup, memory=stage)
    simulate(Cluster.uniform(4, 8), workload(40, 80, seed=9), policy, sample_interval_s=None)
    assert stage.reruns >= 50
    assert stage.resumed_pops >= 50  # reruns that really skipped a prefix of the full run


def test_a_wrong_resume_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resuming without taking the prefix's steps off the free GPUs must fail the check."""

    def forgetful(bidders, counts, free, gains, skip, log, heap):  # type: ignore[no-untyped-def]
        resume(bidders, counts, free, gains, skip, log, heap)
        return free

    resume = Themis._resume
    monkeypatch.setattr(Themis, "_resume", staticmethod(forgetful))
    stage = _CheckedResume()
    policy = StagedPolicy("themis", stage, best_fit_placement, stage.next_wakeup, memory=stage)
    with pytest.raises(AssertionError):
        simulate(Cluster.uniform(4, 8), workload(40, 80, seed=9), policy, sample_interval_s=None)
