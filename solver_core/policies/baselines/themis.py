"""Themis: finish-time fair GPU auctions with leases (AFS paper baseline, elastic).

Themis (Mahajan et al., NSDI'20) measures each job's *finish-time fairness*
``rho = T_shared / T_ideal``: the finish time it is on course for under sharing, over the time it
would take alone on a 1/N slice of the cluster (N = the average number of jobs it has contended
with). The AFS paper (000 digest §2.13) keeps the features that matter for JCT: a **partial
auction** among the worst-off jobs that uses elastic sharing, **leftover GPUs distributed
randomly**, and a **static lease** on assigned GPUs. Decision procedure implemented here:

1. **Leases.** GPUs a job wins are leased for ``lease_s``; a job keeps leased GPUs (no
   preemption) until the lease expires. Expired GPUs return to the free pool (rounded down to an
   allowed count). :meth:`Themis.next_wakeup` returns the next expiry, so rounds happen exactly
   when leases end, as well as at every arrival and completion.
2. **Who bids.** Candidates are active jobs below their max useful GPUs ``m``. ``rho`` uses the
   current (leased) count: ``T_sh = (now - submit) + remaining / P(held)``, infinite with no
   GPUs. ``T_id = work / ideal rate`` with the digest's characterisation of Themis: it "assigns
   GPUs to [a job] until it achieves at least m/n times throughput speedup", ``n`` the average
   number of jobs it ran alongside (itself included), so ideal rate ``= (m / n) P(1)``, at most
   ``P(m)`` (``ideal="cluster-share"`` uses Themis' own wording instead: ``P(min(M / n, m))``,
   the job alone on 1/n of the M-GPU cluster). The worst ``max(floor((1 - f) x candidates), 1)``
   bid (``f`` = fairness knob). Ties in rho (all jobs without GPUs tie at infinity) are broken
   by a seeded per-job pseudo-random key, as Themis' simulator shuffles ties with a fixed seed.
3. **Partial-allocation auction** over the free GPUs. A bidder without GPUs first gets its
   smallest allowed count (infinite value), in tie-break order; then GPUs go one ladder step at a
   time to the largest drop of ``log rho`` per GPU: greedy maximisation of the product of the
   bidders' ``rho_old / rho_new`` (Nash social welfare; on the AFS zoo's curves the log-rho gain
   of each extra GPU shrinks with the count, so the greedy is optimal). Each bidder ``i`` keeps a
   fraction ``c_i = prod_{j != i} rho_j(w_-i) / rho_j(w)`` of what it won in this greedy phase
   (``w_-i``: the auction rerun without ``i``) — the PA mechanism's hidden payment.
4. **Leftovers** (GPUs no bidder wants plus hidden payments) go to the non-bidders in the
   per-job pseudo-random order, one ladder step each per pass; whatever they cannot use then
   goes to the bidders in the same order (work conservation).

Defaults (``docs/algorithms/baselines.md``): ``f = 0.8`` (the worst 20 % bid) and a 20-minute
lease, from the Themis authors' code: the YARN integration's default knob is the bidding
fraction 0.2 (lease default 5 min there) and the trace-driven simulator's experiment scripts use
a 20-minute lease. The AFS paper gives neither value. Remaining work is the true one, as the AFS
evaluation assumes for Optimus' estimates.

Cost per decision: leases and rho are evaluated only for running jobs (at most M); jobs without
GPUs are read lazily from a queue kept sorted by their static tie-break key, and only until the
free GPUs are gone. The auction is O(F log M) for F free GPUs, and the hidden payments rerun it
once per bidder that grew (at most F times), reusing each (bidder, step) gain of the decision;
each rerun resumes where the full run first gave that bidder a step (until then both runs pop
the same entries), rebuilt from the full run's pop log (:meth:`Themis._resume`). The engine's
fast path gets a :class:`~gpuplan.solver_core.policy.Delta` naming only the jobs a decision may
have changed (:mod:`.themis_delta`), so best fit places those alone.
Lease expiries make decisions frequent (up to ~100 per job on the AFS Philly VCs), so the
running jobs' lease totals and per-job constants (ladder, rates, the contention integral up to
the submit time) are kept across decisions (:mod:`.themis_state`): a job whose leases neither
lapsed nor disagree with what it holds is settled by three comparisons, and rho is computed
from the cached constants with the same float operations as :meth:`Themis.rho`.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
import operator
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, SolverStats
from gpuplan.models.bounds import MAX_TIME_S

from ...helpers.ladders import Ladders
from ...helpers.ranked_queue import RankedQueue
from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import Decision, Delta, PlacementStage, Shares, StagedPolicy
from ...registry import PolicyDef
from .themis_delta import shares_delta
from .themis_rho import _EPS, RhoMixin
from .themis_state import JobFacts, Lease, LeaseBook

__all__ = ["Lease", "Themis", "ThemisParams", "themis_policy", "themis_shares", "tiebreak_key"]

THEMIS_FAIRNESS_KNOB = 0.8
"""f: the worst (1 - f) fraction of jobs bids in each auction."""
THEMIS_LEASE_S = 20 * 60.0
"""Lease on auctioned GPUs, seconds (scale it with the trace like AFS-P's unit time)."""

Ideal = Literal["afs", "cluster-share"]
"""How T_ideal is defined: "afs" — the AFS paper's reading of Themis (speedup m/n over one GPU,
m = max useful GPUs, n = average number of jobs it ran alongside, at most P(m)); "cluster-share"
— Themis' own wording (the job alone on 1/n of the cluster, at most m GPUs)."""


def tiebreak_key(seed: int, job_id: str) -> float:
    """Deterministic pseudo-random number in [0, 1) for ``job_id`` (independent of hash seeds
    and of the order jobs are seen)."""
    digest = hashlib.blake2b(f"{seed}:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _trim(leases: list[Lease], excess: int, newest_first: bool) -> None:
    """Remove ``excess`` GPUs from ``leases`` in place."""
    order = sorted(range(len(leases)), key=lambda i: leases[i].expires, reverse=newest_first)
    for i in order:
        if excess <= 0:
            break
        cut = min(excess, leases[i].gpus)
        leases[i].gpus -= cut
        excess -= cut
    leases[:] = [lease for lease in leases if lease.gpus > 0]


_RHO_KEY = operator.itemgetter(0, 1)
"""Sort key of the ranked candidates: (-rho, tie-break key)."""


def _gain_table(bidders: list[tuple[ActiveJob, tuple[int, ...]]]) -> list[list[float | None]]:
    """An empty per-(bidder, ladder step) cache of log-rho gains for one decision's auctions."""
    return [[None] * max(len(ladder) - 1, 0) for _, ladder in bidders]


def _floor_count(ladder: tuple[int, ...], count: int) -> int:
    """Largest ladder count <= ``count`` (0 if none)."""
    i = bisect.bisect_right(ladder, count)
    return ladder[i - 1] if i else 0


class Themis(RhoMixin):
    """Themis shares stage: leases, rho, partial auction, random leftovers."""

    def __init__(
        self,
        fairness_knob: float = THEMIS_FAIRNESS_KNOB,
        lease_s: float = THEMIS_LEASE_S,
        seed: int = 0,
        ideal: Ideal = "afs",
    ) -> None:
        if not 0 <= fairness_knob < 1:
            raise ValueError(f"fairness_knob must be in [0, 1), got {fairness_knob}")
        if not lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s}")
        if ideal not in ("afs", "cluster-share"):
            raise ValueError(f"ideal must be 'afs' or 'cluster-share', got {ideal!r}")
        self.ideal = ideal
        self.fairness_knob = fairness_knob
        self.lease_s = float(lease_s)
        self.seed = seed
        self.ladders = Ladders()
        self._keys: dict[str, float] = {}
        self._queue = RankedQueue(self._key)
        self._leases: dict[str, LeaseBook] = {}
        self._times: list[float] = []
        self._areas: list[float] = []
        self._active = 0
        self._lts: dict[tuple[str, int, float], float] = {}
        self._facts: dict[str, JobFacts] = {}
        self._touched: list[str] = []
        """Jobs the last decision may have given another count (settled the long way, bid,
        or grown by the leftover spread): what :meth:`delta` compares (duplicates allowed)."""
        self._no_delta = False
        """The last decision saw a running job without GPUs or allocation: answer in full."""

    def snapshot(self) -> dict[str, Any]:
        """Leases and the contention integral (``N_avg``); queue order is static (seeded keys)."""
        return {
            "leases": {
                j: [[lease.gpus, lease.expires] for lease in book.leases]
                for j, book in self._leases.items()
            },
            "times": list(self._times),
            "areas": list(self._areas),
            "active": self._active,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self._leases = {
            str(j): LeaseBook.of([Lease(int(g), float(e)) for g, e in ls])
            for j, ls in state.get("leases", {}).items()
        }
        self._times = [float(t) for t in state.get("times", [])]
        self._areas = [float(a) for a in state.get("areas", [])]
        self._active = int(state.get("active", 0))
        self._facts.clear()  # cached contention integrals belong to the old time points

    def leases_of(self, job_id: str) -> list[Lease]:
        """``job_id``'s current leases (empty when it holds none); read-only."""
        book = self._leases.get(job_id)
        return book.leases if book is not None else []

    def _job_facts(self, job: ActiveJob, capacity: int) -> JobFacts:
        """``job``'s constants under ``capacity`` (rebuilt for a new spec object or capacity)."""
        spec = job.spec
        facts = self._facts.get(spec.id)
        if facts is None or facts.spec is not spec or facts.capacity != capacity:
            counts, rates = self.ladders.ladder(job, capacity)
            rate = spec.throughput.rate
            peak = counts[-1] if counts else 0
            facts = self._facts[spec.id] = JobFacts(
                spec,
                capacity,
                counts,
                self._key(job),
                spec.submit_time,
                spec.work,
                rate,
                dict(zip(counts, rates, strict=True)),
                peak,
                rates[-1] if counts else 0.0,
            )
        return facts

    def _prune_facts(self, view: ClusterView) -> None:
        """Forget finished jobs' facts once they outnumber the active jobs (amortised O(1))."""
        facts = self._facts
        active = len(view.running) + len(view.pending)
        if len(facts) > 2 * active + 1024:
            running, pending = view.running, view.pending
            self._facts = {j: f for j, f in facts.items() if j in running or j in pending}

    # ------------------------------------------------------------------ helpers
    def _key(self, job: ActiveJob, now: float = 0.0) -> float:
        job_id = job.spec.id
        key = self._keys.get(job_id)
        if key is None:
            key = self._keys[job_id] = tiebreak_key(self.seed, job_id)
        return key

    def _settle_leases(
        self, view: ClusterView
    ) -> tuple[
        dict[str, int],
        list[tuple[float, float, ActiveJob, tuple[int, ...], JobFacts]],
        list[ActiveJob],
        int,
    ]:
        """Drop expired leases and reconcile with what the jobs really hold.

        Returns the held counts, the jobs that hold GPUs and can grow (``(0.0, key, job,
        ladder, facts)``, running order), the running jobs holding no leased GPU (running
        order) and how many of those have a ladder. A job whose leases all outlive ``now``,
        sum to the GPUs it holds and sit on its ladder is settled by three comparisons (the
        lease list would be copied unchanged).
        """
        now, running, capacity = view.now, view.running, view.capacity
        books = self._leases
        for job_id in [j for j in books if j not in running]:
            del books[job_id]
        held: dict[str, int] = {}
        finite: list[tuple[float, float, ActiveJob, tuple[int, ...], JobFacts]] = []
        idle: list[ActiveJob] = []
        zero_running = 0
        now_eps = now + _EPS
        facts_of = self._facts
        for job_id, job in running.items():
            facts = facts_of.get(job_id)
            if facts is None or facts.spec is not job.spec or facts.capacity != capacity:
                facts = self._job_facts(job, capacity)
            gpus = job.gpus
            book = books.get(job_id)
            # gpus in rate_at: gpus is a ladder count, i.e. _floor_count(ladder, gpus) == gpus
            if (
                book is not None
                and gpus > 0
                and book.total == gpus
                and book.first > now_eps
                and gpus in facts.rate_at
            ):
                held[job_id] = gpus
                if gpus < facts.peak:
                    finite.append((0.0, facts.key, job, facts.ladder, facts))
                continue
            ladder = facts.ladder
            self._touched.append(job_id)
            if gpus <= 0 or job.allocation is None:
                self._no_delta = True
            count = self._settle_one(job_id, job, ladder, book, now, now_eps, held)
            if count == 0:
                idle.append(job)
                if ladder:
                    zero_running += 1
            elif count < facts.peak:
                finite.append((0.0, facts.key, job, ladder, facts))
        return held, finite, idle, zero_running

    def _settle_one(
        self,
        job_id: str,
        job: ActiveJob,
        ladder: tuple[int, ...],
        book: LeaseBook | None,
        now: float,
        now_eps: float,
        held: dict[str, int],
    ) -> int:
        """The general case of :meth:`_settle_leases` for one job; returns its held count."""
        leases = book.leases if book is not None else []
        total = sum(lease.gpus for lease in leases)
        if total > job.gpus:  # growth the placement could not carry out
            _trim(leases, total - job.gpus, newest_first=True)
        elif total < job.gpus:  # a job we did not place (e.g. restored from a state file)
            leases.append(Lease(job.gpus - total, now + self.lease_s))
        live = [lease for lease in leases if lease.expires > now_eps]
        count = sum(lease.gpus for lease in live)
        keep = _floor_count(ladder, count)
        if keep < count:
            _trim(live, count - keep, newest_first=False)
        if live:
            self._leases[job_id] = LeaseBook.of(live)
            held[job_id] = keep
            return keep
        self._leases.pop(job_id, None)
        return 0

    def _auction(
        self,
        bidders: list[tuple[ActiveJob, tuple[int, ...]]],
        start: dict[str, int],
        free: int,
        now: float,
    ) -> dict[str, int]:
        """Greedy Nash-welfare phase: one ladder step at a time to the largest log-rho drop/GPU."""
        return self._greedy(bidders, start, free, now, _gain_table(bidders), -1)

    def _greedy(
        self,
        bidders: list[tuple[ActiveJob, tuple[int, ...]]],
        start: dict[str, int],
        free: int,
        now: float,
        gains: list[list[float | None]],
        skip: int,
        log: list[tuple[int, int, int]] | None = None,
    ) -> dict[str, int]:
        """:meth:`_auction` without bidder number ``skip`` (-1: none). ``gains[rank][i]`` caches
        the log-rho drop per GPU of bidder ``rank``'s step ``i -> i + 1`` across the hidden-
        payment reruns of one decision. Heap entries are ``(-gain, rank, i)`` with the rank in
        the full bidder list: dropping one bidder keeps the others' relative order, so ties
        break as they would with the bidder list renumbered.

        ``log``: with ``skip == -1``, filled with every pop as ``(rank, i, step taken or 0)``;
        with ``skip >= 0``, the full run's log, from which the rerun resumes (:meth:`_resume`)."""
        counts = dict(start)
        heap: list[tuple[float, int, int]] = []
        if skip >= 0 and log is not None:
            free = self._resume(bidders, counts, free, gains, skip, log, heap)
        else:
            for rank, (job, ladder) in enumerate(bidders):
                if rank == skip:
                    continue
                i = bisect.bisect_left(ladder, counts[job.spec.id])
                if i + 1 < len(ladder):
                    gain = self._step_gain(gains, rank, job, ladder, i, now)
                    if gain > 0:
                        heap.append((-gain, rank, i))
        heapq.heapify(heap)  # (gain, rank) is unique: pops come in one order however built
        record = log.append if skip < 0 and log is not None else None
        while free > 0 and heap:
            _, rank, i = heapq.heappop(heap)
            job, ladder = bidders[rank]
            step = ladder[i + 1] - ladder[i]
            if step > free:
                if record is not None:
                    record((rank, i, 0))
                continue
            if record is not None:
                record((rank, i, step))
            i += 1
            counts[job.spec.id] = ladder[i]
            free -= step
            if i + 1 < len(ladder):
                gain = self._step_gain(gains, rank, job, ladder, i, now)
                if gain > 0:
                    heapq.heappush(heap, (-gain, rank, i))
        return counts

    def _step_gain(
        self,
        gains: list[list[float | None]],
        rank: int,
        job: ActiveJob,
        ladder: tuple[int, ...],
        i: int,
        now: float,
    ) -> float:
        """The log-rho drop per GPU of bidder ``rank``'s step ``ladder[i] -> ladder[i + 1]``,
        computed once per decision and kept in ``gains[rank][i]`` for the reruns."""
        gain = gains[rank][i]
        if gain is None:
            lts = self._log_t_shared
            c, nxt = ladder[i], ladder[i + 1]
            gain = gains[rank][i] = (lts(job, c, now) - lts(job, nxt, now)) / (nxt - c)
        return gain

    @staticmethod
    def _resume(
        bidders: list[tuple[ActiveJob, tuple[int, ...]]],
        counts: dict[str, int],
        free: int,
        gains: list[list[float | None]],
        skip: int,
        log: list[tuple[int, int, int]],
        heap: list[tuple[float, int, int]],
    ) -> int:
        """Fast-forward the rerun without ``skip`` to the full run's first step taken by
        ``skip``: until then the two runs pop the other bidders' entries in the same order
        with the same GPUs left (``skip``'s refused pops changed nothing), so the rerun's
        counts, free GPUs and heap there follow from the full run's ``log``. Fills ``counts``
        and ``heap`` (each other bidder's live entry, unordered); returns the free GPUs.
        Every gain read here was computed by the full run."""
        at: dict[int, int] = {}  # rank -> ladder index reached (bidders that took a step)
        dead: set[int] = set()  # ranks whose entry was popped and refused
        for rank, i, step in log:
            if rank == skip:
                if step:
                    break
                continue
            if step:
                at[rank] = i + 1
                free -= step
            else:
                dead.add(rank)
        for rank, (job, ladder) in enumerate(bidders):
            if rank == skip or rank in dead:
                continue
            i = at.get(rank)
            if i is None:
                i = bisect.bisect_left(ladder, counts[job.spec.id])
            else:
                counts[job.spec.id] = ladder[i]
            if i + 1 < len(ladder):
                gain = gains[rank][i]
                if gain is not None and gain > 0:
                    heap.append((-gain, rank, i))
        return free

    # ------------------------------------------------------------------ the stage
    def delta(self, view: ClusterView, placement: PlacementStage) -> Delta | Decision:
        """The engine's fast path: the same shares, answered as the jobs whose count changed
        (:func:`~.themis_delta.shares_delta`; in full where a delta cannot stand for them)."""
        stats: list[SolverStats] = []
        shares = self(view, stats)
        return shares_delta(view, shares, self._touched, placement, stats, self._no_delta)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        self._lts.clear()
        self._touched = []
        self._no_delta = False
        self._advance(view)
        self._prune_facts(view)
        now, capacity, pending = view.now, view.capacity, view.pending
        held, finite, idle, zero_running = self._settle_leases(view)
        shares: Shares = dict(held)
        free = capacity - sum(held.values())
        if free <= 0:
            return shares

        # ---- candidates: finite rho (holding GPUs, can grow) and zero-GPU jobs (rho = inf)
        n_zero = len(pending) + zero_running
        n_candidates = n_zero + len(finite)
        if n_candidates == 0:
            return shares
        bidders_wanted = max(int((1 - self.fairness_knob) * n_candidates + 1e-9), 1)
        zero_bidders = min(bidders_wanted, n_zero)
        if bidders_wanted > zero_bidders:  # some jobs holding GPUs bid: rank them by rho
            finite = self._ranked_by_rho(finite, held, now)
        finite.sort(key=_RHO_KEY)  # worst rho first, then tie-break key
        finite_bidders = finite[: bidders_wanted - zero_bidders]
        finite_rest = finite[bidders_wanted - zero_bidders :]
        zero_iter = self._zero_held(view, idle)

        # ---- auction, phase A: a bidder without GPUs first gets its smallest count
        counts: dict[str, int] = {}
        bidders: list[tuple[ActiveJob, tuple[int, ...]]] = []
        unserved: list[ActiveJob] = []  # bidders whose smallest count did not fit
        taken = 0
        while taken < zero_bidders and free > 0:
            job = next(zero_iter, None)
            if job is None:
                break
            taken += 1
            ladder = self.ladders(job, capacity)
            if ladder and ladder[0] <= free:
                counts[job.spec.id] = ladder[0]
                free -= ladder[0]
                bidders.append((job, ladder))
            elif ladder:
                unserved.append(job)
        if free > 0:
            for _, _, job, ladder, _ in finite_bidders:
                counts[job.spec.id] = held[job.spec.id]
                bidders.append((job, ladder))
            counts, free = self._partial_allocation(bidders, counts, free, now)
        shares.update(counts)
        self._touched.extend(counts)

        # ---- leftovers: non-bidders in tie-break order, then bidders (work conservation)
        if free > 0:
            rest = sorted(((k, job) for _, k, job, _, _ in finite_rest), key=lambda t: t[0])
            merged = heapq.merge(
                rest,
                ((self._key(job), job) for job in zero_iter),
                key=lambda t: t[0],
            )
            free = self._spread(view, shares, (job for _, job in merged), free)
            if free > 0:  # hidden payments may now fit a bidder that got nothing
                ordered = sorted([job for job, _ in bidders] + unserved, key=self._key)
                self._spread(view, shares, iter(ordered), free)

        expires = now + self.lease_s
        books = self._leases
        for job_id, count in shares.items():
            extra = count - held.get(job_id, 0)
            if extra > 0:
                book = books.get(job_id)
                if book is None:
                    book = books[job_id] = LeaseBook()
                book.add(extra, expires)
        return shares

    def _zero_held(self, view: ClusterView, idle: list[ActiveJob]) -> Iterator[ActiveJob]:
        """Active jobs holding no leased GPU in tie-break order: the pending queue (kept sorted
        across decisions) merged with ``idle``, the running jobs without leases. Lazy, so a
        decision that never reads it does not sync the queue."""
        order = self._queue.pending_entries(view)
        pending = view.pending
        if not idle:
            for _, _, job_id in order:
                yield pending[job_id]
            return
        running = view.running
        entries = sorted((self._key(job), job.spec.submit_time, job.spec.id) for job in idle)
        for _, _, job_id in heapq.merge(entries, order):
            yield running.get(job_id) or pending[job_id]

    def _partial_allocation(
        self,
        bidders: list[tuple[ActiveJob, tuple[int, ...]]],
        start: dict[str, int],
        free: int,
        now: float,
    ) -> tuple[dict[str, int], int]:
        """Auction phase B plus hidden payments; returns final counts and GPUs left over."""
        gains = _gain_table(bidders)
        log: list[tuple[int, int, int]] = []
        won = self._greedy(bidders, start, free, now, gains, -1, log)
        final = dict(won)
        lts = self._log_t_shared
        won_log: list[float | None] = [None] * len(bidders)  # log T_shared at the won count
        for rank, (job, ladder) in enumerate(bidders):
            job_id = job.spec.id
            gained = won[job_id] - start[job_id]
            if gained <= 0:
                continue
            without = self._greedy(bidders, start, free, now, gains, rank, log)
            terms = []
            for r, (j, _) in enumerate(bidders):
                jid = j.spec.id
                if r != rank and without[jid] != won[jid]:
                    at_won = won_log[r]
                    if at_won is None:
                        at_won = won_log[r] = lts(j, won[jid], now)
                    terms.append(lts(j, without[jid], now) - at_won)
            log_c = sum(terms)  # same terms, same order as summing the generator
            fraction = min(1.0, math.exp(log_c))
            keep = start[job_id] + math.floor(fraction * gained + 1e-9)
            final[job_id] = max(_floor_count(ladder, keep), start[job_id])
        used = sum(final[j] - start[j] for j in final)
        return final, free - used

    def _spread(
        self, view: ClusterView, shares: Shares, order: Iterator[ActiveJob], free: int
    ) -> int:
        """One ladder step per job of ``order`` per pass while GPUs last; returns GPUs left."""
        capacity = view.capacity
        growing: list[tuple[ActiveJob, tuple[int, ...]]] = []
        for job in order:
            if free == 0:
                return 0
            ladder = self.ladders(job, capacity)
            current = shares.get(job.spec.id, 0)
            i = bisect.bisect_right(ladder, current)
            if i < len(ladder) and ladder[i] - current <= free:
                free -= ladder[i] - current
                shares[job.spec.id] = ladder[i]
                growing.append((job, ladder))
                self._touched.append(job.spec.id)
        progress = True
        while free > 0 and progress:
            progress = False
            for job, ladder in growing:
                current = shares[job.spec.id]
                i = bisect.bisect_right(ladder, current)
                if i < len(ladder) and ladder[i] - current <= free:
                    free -= ladder[i] - current
                    shares[job.spec.id] = ladder[i]
                    progress = True
        return free

    def next_wakeup(self, view: ClusterView) -> float | None:
        """The next lease expiry of a running job (GPUs then return to the auction)."""
        now_eps = view.now + _EPS
        running = view.running
        best: float | None = None
        for job_id, book in self._leases.items():
            if job_id not in running:
                continue
            first = book.first
            if first <= now_eps:  # a lapsed lease not yet settled: the next live one counts
                due = [lease.expires for lease in book.leases if lease.expires > now_eps]
                if not due:
                    continue
                first = min(due)
            if best is None or first < best:
                best = first
        return best


def themis_shares(
    fairness_knob: float = THEMIS_FAIRNESS_KNOB,
    lease_s: float = THEMIS_LEASE_S,
    seed: int = 0,
    ideal: Ideal = "afs",
) -> Themis:
    """A fresh Themis shares stage."""
    return Themis(fairness_knob, lease_s, seed, ideal)


def themis_policy(name: str = "themis", seed: int = 0, **kwargs: object) -> StagedPolicy:
    """Themis with best-fit placement and its lease timers wired in."""
    stage = themis_shares(seed=seed, **kwargs)  # type: ignore[arg-type]
    return StagedPolicy(name, stage, best_fit_placement, stage.next_wakeup, memory=stage)


class ThemisParams(Params):
    fairness_knob: float = Field(
        THEMIS_FAIRNESS_KNOB,
        ge=0,
        lt=1,
        description="auction among the worst (1 - knob) of jobs by rho",
    )
    lease_s: float = Field(
        THEMIS_LEASE_S, gt=0, le=MAX_TIME_S, description="GPU lease length, seconds"
    )
    ideal: Ideal = Field("afs", description="rho's ideal: afs (AFS paper) or cluster-share")


def _build(p: ThemisParams, seed: int) -> StagedPolicy:
    return themis_policy(seed=seed, fairness_knob=p.fairness_knob, lease_s=p.lease_s, ideal=p.ideal)


POLICIES = [PolicyDef("themis", _build, ThemisParams)]
