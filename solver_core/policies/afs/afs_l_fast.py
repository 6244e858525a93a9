"""The fast AFS-L: Algorithm 1's shares, identical to the literal loop, without its O(M·n) cost.

The literal Algorithm 1 (:mod:`.afs_reference`) costs O(M·n) Python comparisons, ~15 s for
5,000 jobs on 8,192 GPUs. :func:`afs_l_shares` returns identical shares (property-tested) by
three exact shortcuts, each used only when its precondition holds:

1. **Stage one as a sort.** While every job that holds GPUs gains less than 2x from its next
   step (``H < 1``), a job with no GPUs beats every job that has some, so the scan returns the
   shortest job without GPUs (ties: the one scanned last). Stage one is then a sort.
2. **Rounds of Condorcet winners.** A job that beats every other job whichever of the two is
   scanned first is the scan's result in *any* order. In steady state the shortest jobs of the
   most efficient class win one after another; a vectorised check (prefix maxima over jobs in
   length order) certifies a whole run of such winners at once.
3. **Incremental scan.** Otherwise one exact step is taken by maintaining the scan's *chain* of
   incumbents: a step changes only the winner, so the chain before it is still valid and only
   its tail is recomputed, with numpy "first job after position q that beats x" queries.

Jobs come in scan order, as :class:`~.afs_job.AfsJob` (:func:`afs_l_shares`), as columns,
remaining work and ladder per job (:func:`afs_l_columns`), or as the arrays the AFS stages keep
across decisions (:func:`afs_l_solve`, what they call: remaining work, each job's index into
the distinct ladders, those ladders flattened; :mod:`.afs_columns`), with ladders cut by the
saturation guard (:func:`~.ladders.build_ladder`, ``plateau="stop"``); :func:`_check_ladders`
and :func:`~.afs_columns.check_ladder` reject others.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from itertools import chain

import numpy as np

from ...helpers.ladders import Ladder
from .afs_job import AfsJob

__all__ = ["afs_l_columns", "afs_l_shares", "afs_l_solve"]

INF = math.inf
_BATCH_MIN = 8  # a round shorter than this backs batching off (it cost more than it saved)
_BACKOFF_MAX = 256
_WINDOW = 32  # positions an exact-step query looks at before scanning the whole suffix


def _distinct_ladders(ladders: Sequence[Ladder]) -> tuple[list[Ladder], np.ndarray]:
    """One representative per distinct ladder object, and each job's representative index.

    Ladders are compared by identity (the stages intern them, so jobs of one model on one
    cluster share a ladder): flattening 5,000 ladders of ~25 counts would otherwise cost more
    than the whole AFS-L computation. Jobs built with equal but separate tuples still work,
    just without the saving.
    """
    n = len(ladders)
    rid = np.fromiter((id(lad[1]) for lad in ladders), np.int64, n)
    cid = np.fromiter((id(lad[0]) for lad in ladders), np.int64, n)
    _, first, which = np.unique(rid, return_index=True, return_inverse=True)
    if (cid != cid[first][which]).any():  # same rates object, different counts: no sharing
        return list(ladders), np.arange(n)
    return [ladders[int(i)] for i in first], which.reshape(-1)


def _check_ladders(r: np.ndarray, c: np.ndarray, off: np.ndarray, nlev: np.ndarray) -> None:
    """Reject ladders that break the guard: the fast paths rely on ``0 < G <= H``."""
    if len(r) == 0:
        return
    inner = np.ones(len(r), bool)
    inner[off[:-1][nlev > 0]] = False  # the first entry of a ladder has no predecessor
    dr = np.diff(r, prepend=0.0)
    dc = np.diff(c, prepend=0)
    if (r <= 0).any() or (c <= 0).any() or (dr[inner] <= 0).any() or (dc[inner] <= 0).any():
        raise ValueError("AfsJob ladders must have positive, strictly increasing counts and rates")


class _AfsLSolver:
    """State of one AFS-L computation: jobs in scan order, as flat numpy arrays.

    Per job ``i``: ``lvl`` (ladder index held, -1 = no GPUs), ``cnt`` (GPUs), and the
    comparison values of its *next* step: ``Z`` (holds no GPUs), ``L`` (length now, or at its
    first count if ``Z``), ``G = (p'-p)/p'``, ``H = (p'-p)/p`` (1 and inf when ``Z``),
    ``step`` (GPUs the next step takes) and ``has_next``. With these, "scanned job ``j``
    replaces incumbent ``x``" in Algorithm 1 (lines 5-12) is exactly::

        G[j] > H[x]  or  (key[j] <= key[x] and H[j] >= G[x]),    key = (Z, L)

    because ``G <= H`` for every job (see :meth:`_beats`). Every value is computed with the
    same IEEE operations as the literal version, so comparisons agree bit for bit.

    Invariant (eligibility): between grants, while ``m > 0``, ``has_next[i]`` is True exactly
    when job ``i`` is eligible in the literal loop: it has a next count *and* ``step[i] <= m``
    (one-GPU steps are never expired; at ``m = 0`` the loop is over anyway); disabled
    jobs carry ``G = H = -inf``. The scan queries (:meth:`_first_beater`, :meth:`_eligible`)
    rely on it instead of re-testing ``step <= m``, so every method that lowers ``m``
    (:meth:`_climb_many`, :meth:`_climb_one`) ends with :meth:`_expire`.
    """

    def __init__(self, remaining: Sequence[float], ladders: Sequence[Ladder], total: int) -> None:
        distinct, which, flat = _flatten(ladders)
        self._setup(np.fromiter(remaining, float, len(ladders)), distinct, which, flat, total)

    @classmethod
    def from_arrays(
        cls,
        rem: np.ndarray,
        distinct: Sequence[Ladder],
        which: np.ndarray,
        flat: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        total: int,
    ) -> _AfsLSolver:
        """The solver on prepared columns (what the kept columns of the stages hold)."""
        self = cls.__new__(cls)
        self._setup(rem, distinct, which, flat, total)
        return self

    def _setup(
        self,
        rem: np.ndarray,
        distinct: Sequence[Ladder],
        which: np.ndarray,
        flat: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        total: int,
    ) -> None:
        """``rem``: remaining iterations per job (scan order); ``distinct``: the distinct
        ladders and ``which`` each job's index into them; ``flat``: ``(cflat, rflat, doff,
        dlev)``, those ladders' counts and rates flattened with one padding slot (count 0,
        rate 1) and each one's offset and length. Ladders must already be checked."""
        n = len(rem)
        self.n = n
        self.m = int(total)
        self.distinct = distinct
        self.which = which
        cflat, rflat, doff, dlev = flat
        size = len(cflat) - 1
        # Ladders are stored once per distinct ladder (jobs of one model share theirs), plus
        # one padding slot so gathers for jobs with an empty ladder stay in bounds.
        self.rflat = rflat
        self.cflat = cflat
        self.nlev = dlev[which]
        self.off = doff[which]
        self.rem = rem
        self.lvl = np.full(n, -1, np.int64)
        self.cnt = np.zeros(n, np.int64)
        self.has_next = self.nlev > 0
        first = np.minimum(self.off, size)
        self.step = self.cflat[first].copy()
        self.Z = np.ones(n, bool)
        self.L = self.rem / self.rflat[first]
        self.G = np.ones(n)
        self.H = np.full(n, INF)
        empty = ~self.has_next  # empty ladders: never eligible (see _disable)
        self.Z[empty] = False
        self.G[empty] = -INF
        self.H[empty] = -INF
        self.zeros = int(self.Z.sum())  # jobs with Z set
        self.chain: list[int] | None = None
        # Jobs whose next step is larger than one GPU, as (-step, job): when the GPUs left drop
        # below a step, that job can never climb again and is disabled (see _expire).
        big = np.flatnonzero(self.has_next & (self.step > 1))
        self._big: list[tuple[int, int]] = list(
            zip((-self.step[big]).tolist(), big.tolist(), strict=True)
        )
        heapq.heapify(self._big)
        self._expire()

    # ------------------------------------------------------------------ state updates
    def _disable(self, i: int) -> None:
        """Take job ``i`` out of every later scan: it can never be eligible again.

        Its comparison values become ``G = H = -inf``, with which it can never replace an
        incumbent, so the scan queries need no separate eligibility mask.
        """
        self.has_next[i] = False
        self.G[i] = -INF
        self.H[i] = -INF
        if self.Z[i]:
            self.Z[i] = False
            self.zeros -= 1

    def _expire(self) -> list[int]:
        """Disable jobs whose next step no longer fits in the GPUs left; return them."""
        big = self._big
        m = self.m
        gone = []
        while big and -big[0][0] > m:
            neg, i = heapq.heappop(big)
            if self.has_next[i] and int(self.step[i]) == -neg:
                self._disable(i)
                gone.append(i)
        return gone

    def _climb_many(self, idx: np.ndarray) -> None:
        """Give every job in ``idx`` its next step and refresh its comparison values."""
        if len(idx) == 0:
            return
        self.m -= int(self.step[idx].sum())
        self.cnt[idx] += self.step[idx]
        self.lvl[idx] += 1
        zeros_before = int(self.Z[idx].sum())
        lvl = self.lvl[idx]
        base = self.off[idx]
        nl = self.nlev[idx]
        hn = lvl + 1 < nl
        p = self.rflat[base + lvl]
        nxt = base + np.minimum(lvl + 1, nl - 1)
        pn = self.rflat[nxt]
        self.has_next[idx] = hn
        self.Z[idx] = False
        self.zeros -= zeros_before
        self.L[idx] = self.rem[idx] / p
        d = pn - p
        with np.errstate(divide="ignore", invalid="ignore"):
            self.G[idx] = d / pn
            self.H[idx] = d / p
        self.step[idx] = self.cflat[nxt] - self.cnt[idx]
        done = idx[~hn]
        self.G[done] = -INF
        self.H[done] = -INF
        big = idx[hn & (self.step[idx] > 1)]
        for i, st in zip(big.tolist(), self.step[big].tolist(), strict=True):
            heapq.heappush(self._big, (-st, i))
        self._expire()

    def _climb_one(self, i: int) -> list[int]:
        """Scalar :meth:`_climb_many` (numpy fancy indexing costs ~10x more for one job).

        Like :meth:`_climb_many` it ends with :meth:`_expire`, so the eligibility invariant
        holds again on return; it returns the jobs that expired (possibly ``i`` itself).
        """
        counts, rates = self.distinct[self.which.item(i)]
        lvl = int(self.lvl[i]) + 1
        self.m -= int(self.step[i])
        cnt = counts[lvl]
        self.cnt[i] = cnt
        self.lvl[i] = lvl
        if self.Z[i]:
            self.Z[i] = False
            self.zeros -= 1
        p = rates[lvl]
        self.L[i] = self.rem.item(i) / p
        if lvl + 1 < len(counts):
            pn = rates[lvl + 1]
            self.G[i] = (pn - p) / pn
            self.H[i] = (pn - p) / p
            step = counts[lvl + 1] - cnt
            self.step[i] = step
            if step > 1:
                heapq.heappush(self._big, (-step, i))
        else:
            self._disable(i)
        return self._expire()

    def _eligible(self, i: int) -> bool:
        return bool(self.has_next[i])  # _expire disables jobs whose step no longer fits

    def _beats(self, j: int, x: int) -> bool:
        """Does scanned job ``j`` replace incumbent ``x`` (Algorithm 1, lines 5-12)?

        Both jobs without GPUs: the one with the smaller ``len(1)`` wins, ties to ``j``.
        Otherwise ``a`` is the shorter job (``j`` on equal lengths, by the ``>=`` swap) and
        ``b`` wins iff ``G[b] > H[a]``. Since ``G <= H`` for each job, "``j`` longer and
        ``G[j] > H[x]``" and "``j`` shorter-or-equal and ``H[j] >= G[x]``" merge into the
        one-line test below (a job without GPUs counts as longer than any job with some, and
        has ``G = 1``, ``H = inf``, which also reproduces the both-zero rule).
        """
        if self.G.item(j) > self.H.item(x):
            return True
        zj, zx = bool(self.Z[j]), bool(self.Z[x])
        shorter = zj < zx or (zj == zx and self.L.item(j) <= self.L.item(x))
        return shorter and self.H.item(j) >= self.G.item(x)

    # ------------------------------------------------------------------ stage one
    def stage_one(self) -> None:
        """Give first steps in order of ``len(first count)`` while that is provably the scan.

        Valid while no job holding GPUs has ``H >= 1`` (next step at least doubles its
        throughput): then any job without GPUs beats any job with some (``G = 1 > H``), and
        among jobs without GPUs the scan keeps the shortest, ties going to the later one. A
        job with ``H >= 1`` that could still climb breaks the premise; we stop right after
        granting it and let the general machinery continue.
        """
        m = self.m
        cand = np.flatnonzero(self.has_next & (self.step <= m))
        if len(cand) == 0:
            return
        order = cand[np.lexsort((-cand, self.L[cand]))]
        first = self.off[order]
        steps = self.step[order]
        two = self.nlev[order] >= 2
        second = np.minimum(first + 1, len(self.rflat) - 1)
        r0 = self.rflat[first]
        r1 = self.rflat[second]
        with np.errstate(divide="ignore", invalid="ignore"):
            breaker = two & ((r1 - r0) / r0 >= 1.0)
        step2 = self.cflat[second] - self.cflat[first]
        cum = np.cumsum(steps)
        fits = int(np.searchsorted(cum, m, side="right"))  # prefix granted without skipping
        granted = order[:fits]
        m_after = m - cum[:fits]
        brk = np.flatnonzero(breaker[:fits] & (step2[:fits] <= m_after))
        if len(brk):
            self._climb_many(order[: int(brk[0]) + 1])
            return
        self._climb_many(granted)
        # Past the first misfit, later (smaller) first steps may still fit: finish in Python.
        # Each grant here lowers m under other jobs' steps (skipped first steps, next steps of
        # jobs granted above); _climb_one disables those, as the later phases require.
        for k in range(fits, len(order)):
            if self.m <= 0:
                break
            i = int(order[k])
            if int(steps[k]) > self.m:
                continue
            self._climb_one(i)
            if breaker[k] and int(step2[k]) <= self.m:
                return

    # ------------------------------------------------------------------ rounds
    def batch(self) -> int:
        """Certify and apply a run of Condorcet winners; return how many steps were taken.

        Among eligible jobs sorted by length, the *members* are those with ``H >= max G``
        (no job's interval lies strictly above theirs). The t-th member ``u`` is the scan's
        result after members 1..t-1 climbed once if, in that state, (b) every other job at most
        as long as ``u`` has ``H < G[u]`` and (c) its step fits. Then ``u`` beats every job
        (shorter ones by ``G[u] > H``, longer ones by ``H[u] >= max G >= G``) and none beats
        it (``G <= max G <= H[u]`` for jobs that did not climb; climbed members are shorter
        than ``u`` and have ``G <= H < G[u]``), so the scan order cannot matter. Ties in
        length fail (b) by construction. Jobs made ineligible meanwhile stay in the checks,
        which only makes them stricter. Runs only when every eligible job holds GPUs.
        """
        m = self.m
        e = np.flatnonzero(self.has_next & (self.step <= m))
        if len(e) == 0:
            return 0
        if self.zeros and self.Z[e].any():
            return 0
        le = self.L[e]
        o = np.argsort(le, kind="stable")
        e = e[o]
        le = le[o]
        he = self.H[e]
        memb = he >= self.G[e].max()
        u = e[memb]
        lu = le[memb]
        gu = self.G[u]
        k = len(u)
        # (b) against jobs that are not members: prefix maximum of H in length order
        nm = ~memb
        l_nm = le[nm]
        if len(l_nm):
            hpm = np.maximum.accumulate(he[nm])
            pos = np.searchsorted(l_nm, lu, side="right")
            h_short = np.where(pos > 0, hpm[np.maximum(pos - 1, 0)], -INF)
        else:
            h_short = np.full(k, -INF)
        # (b) against members that already climbed: their H one level up
        lvl1 = self.lvl[u] + 1
        base = self.off[u]
        nl = self.nlev[u]
        p1 = self.rflat[base + lvl1]
        p2 = self.rflat[base + np.minimum(lvl1 + 1, nl - 1)]
        with np.errstate(divide="ignore", invalid="ignore"):
            h1 = np.where(lvl1 + 1 < nl, (p2 - p1) / p1, -INF)
        h1_before = np.maximum.accumulate(np.concatenate((np.full(1, -INF), h1[:-1])))
        ok = (h_short < gu) & (h1_before < gu)
        ok[:-1] &= lu[:-1] < lu[1:]  # (b) against the next member: a tie
        ok &= np.cumsum(self.step[u]) <= m  # (c)
        t = k if ok.all() else int(np.argmin(ok))
        if t:
            self._climb_many(u[:t])
            self.chain = None
        return t

    # ------------------------------------------------------------------ exact steps
    def _first_beater(self, x: int, q: int) -> int:
        """First eligible job after position ``q`` that would replace incumbent ``x``, or -1.

        Disabled jobs have ``G = H = -inf`` and can never match, so no eligibility mask. Half
        the queries find a job within a few positions, so a short window is tried first.
        """
        n = self.n
        lo = q + 1
        if lo >= n:
            return -1
        gx = self.G.item(x)
        hx = self.H.item(x)
        lx = self.L.item(x)
        zx = bool(self.Z[x]) if self.zeros else False
        hi = n if n - lo <= 2 * _WINDOW else lo + _WINDOW
        while True:
            mask = self.G[lo:hi] > hx
            part = self.L[lo:hi] <= lx
            if self.zeros:
                zs = self.Z[lo:hi]
                part = (~zs | part) if zx else (~zs & part)
            part &= self.H[lo:hi] >= gx
            mask |= part
            k = int(mask.argmax())
            if mask[k]:
                return lo + k
            if hi >= n:
                return -1
            lo, hi = hi, n

    def _extend(self) -> None:
        ch = self.chain
        assert ch is not None
        while True:
            b = self._first_beater(ch[-1], ch[-1])
            if b < 0:
                return
            ch.append(b)

    def exact_step(self) -> bool:
        """One GPU step by the incremental scan; False when no job is eligible.

        The chain ``c_0 < c_1 < ... < c_k`` lists the scan's incumbents: ``c_0`` is the first
        eligible job and ``c_{i+1}`` the first later job that beats ``c_i``; ``c_k`` wins.
        Granting ``c_k`` a step changes no other job, so ``c_0..c_{k-1}`` stay valid and only
        the part from ``c_k``'s position on is recomputed.
        """
        if self.chain is None:
            mask = self.has_next & (self.step <= self.m)
            f = int(mask.argmax())
            if not mask[f]:
                return False
            self.chain = [f]
            self._extend()
        ch = self.chain
        w = ch.pop()
        gone = self._climb_one(w)
        if gone:
            # Chain members the smaller m made ineligible drop out, with everything after them.
            cut = [ch.index(c) for c in gone if c in ch]
            if cut:
                del ch[min(cut) :]
                if ch:
                    self._extend()
                else:
                    self.chain = None
                return True
        if not ch:
            if self._eligible(w):
                ch.append(w)
                self._extend()
            else:
                self.chain = None
            return True
        x = ch[-1]
        if self._beats(w, x):  # a disabled w has G = H = -inf and never beats
            ch.append(w)
        else:
            b = self._first_beater(x, w)
            if b < 0:
                return True
            ch.append(b)
        self._extend()
        return True

    def run(self) -> list[int]:
        """Stage one, then rounds while they certify well, else exact steps.

        A round attempt costs a sort of all eligible jobs, so after an attempt that certifies
        fewer than ``_BATCH_MIN`` steps the next one waits for exponentially more exact steps
        (up to ``_BACKOFF_MAX``): cycles of (3) can last long, and then rounds only cost.
        """
        self.stage_one()
        backoff = 4
        cooldown = 0
        while self.m > 0:
            if cooldown <= 0:
                took = self.batch()
                if took >= _BATCH_MIN:
                    backoff = 4
                    continue
                backoff = min(2 * backoff, _BACKOFF_MAX)
                cooldown = backoff
                if took:
                    continue
            cooldown -= 1
            if not self.exact_step():
                break
        return self.cnt.tolist()

    def run_array(self) -> np.ndarray:
        """:meth:`run`, the counts as the solver's own array (no list built)."""
        self.run()
        return self.cnt


def _flatten(ladders: Sequence[Ladder]) -> tuple[list[Ladder], np.ndarray, tuple]:
    """Distinct ladders, each job's index into them and their flat arrays (checked)."""
    distinct, which = _distinct_ladders(ladders)
    dlev = np.fromiter((len(lad[0]) for lad in distinct), np.int64, len(distinct))
    doff = np.zeros(len(distinct) + 1, np.int64)
    np.cumsum(dlev, out=doff[1:])
    size = int(doff[-1])
    rflat = np.ones(size + 1)
    rflat[:size] = np.fromiter(chain.from_iterable(lad[1] for lad in distinct), float, size)
    cflat = np.zeros(size + 1, np.int64)
    cflat[:size] = np.fromiter(chain.from_iterable(lad[0] for lad in distinct), np.int64, size)
    _check_ladders(rflat[:size], cflat[:size], doff, dlev)
    return distinct, which, (cflat, rflat, doff[:-1], dlev)


def afs_l_shares(jobs: Sequence[AfsJob], total: int) -> list[int]:
    """AFS-L (Algorithm 1 + saturation guard): GPU counts aligned with ``jobs``.

    ``jobs`` must be in scan order. Identical to
    :func:`~gpuplan.solver_core.policies.afs.afs_reference.afs_l_reference`, only faster.
    """
    return afs_l_columns([j.remaining for j in jobs], [(j.counts, j.rates) for j in jobs], total)


def afs_l_columns(remaining: Sequence[float], ladders: Sequence[Ladder], total: int) -> list[int]:
    """:func:`afs_l_shares` on columns: each job's remaining iterations and its ladder
    ``(counts, rates)``, in scan order. What the AFS-L stage calls: it builds no
    :class:`AfsJob` per job and per decision, and passes the interned ladders as they are."""
    if total <= 0 or not ladders:
        return [0] * len(ladders)
    return _AfsLSolver(remaining, ladders, total).run()


def afs_l_solve(
    rem: np.ndarray,
    distinct: Sequence[Ladder],
    which: np.ndarray,
    flat: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    total: int,
) -> np.ndarray:
    """:func:`afs_l_columns` on prepared arrays (the kept columns of
    :class:`~.afs_columns.AfsColumns`): remaining work per job, the distinct ladders, each
    job's ladder index and the flattened ladders. Counts per job, as an array."""
    if total <= 0 or len(rem) == 0:
        return np.zeros(len(rem), np.int64)
    return _AfsLSolver.from_arrays(rem, distinct, which, flat, total).run_array()
