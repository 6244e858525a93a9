"""The device state and Placement (Alg. 2) shared by Greedy, Heuristic and the baselines.

A :class:`Packer` holds the devices (GPUs) opened so far with the workers on them, and places
one job at a time with :meth:`Packer.place_job`, the corrected Placement of digest §2.8:

* pass 1 puts every worker of the job on an *active* device (one that already holds a
  worker); if one worker finds none, the job's partial mapping is rolled back;
* pass 2 places the workers again, opening a new device whenever no active one fits; the
  job's own balance is then checked as if one of its workers sat alone (``min(v_i) = 0``,
  Alg. 2 line 11), so the device opened for a worker alone never breaks balance later.

Which constraints are enforced is a :class:`Rules` value, so Table 4's baselines are toggles of
the same code (digest §2.11). Checks are incremental: collision keeps (P0, P1) per device
(O(1) per added worker), slowdowns are recomputed only for the jobs on the touched device.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from gpuplan.models.ojpp import OJPP_TOL, Collision, OjppInstance, counts_slowdown

__all__ = ["Device", "Packer", "Rules"]

_Rest = tuple[float, float, float]
"""What :meth:`Packer._device_rules` returns for a feasible device."""


@dataclass(frozen=True, slots=True)
class Rules:
    """Constraints enforced besides compute and memory, and the device choice."""

    collision: bool = True
    interference: bool = True
    balance: bool = True
    select: Literal["theta", "best-fit"] = "theta"
    """``theta``: the lowest resulting device slowdown ("potential θ_k is the lowest"), ties by
    best fit; ``best-fit``: the least residual capacity (classic BFD)."""
    distinct: bool = False
    """Workers of one job on distinct devices (the policy wrapper's anti-affinity)."""


@dataclass(slots=True)
class Device:
    counts: dict[int, int] = field(default_factory=dict)
    alpha: float = 0.0
    gamma: float = 0.0
    delta: float = 0.0
    coll: Collision = field(default_factory=Collision)

    def copy(self) -> Device:
        return Device(dict(self.counts), self.alpha, self.gamma, self.delta, self.coll)


class Packer:
    """Devices and their workers for one instance; ``max_devices`` caps how many may open."""

    def __init__(self, inst: OjppInstance, rules: Rules, max_devices: int | None = None) -> None:
        self.inst = inst
        self.rules = rules
        self.max_devices = max_devices
        self.jobs = inst.jobs
        self.matrix = inst.matrix()
        self.devices: list[Device] = []
        self.slow: list[dict[int, float]] = [{} for _ in inst.jobs]
        """Per job: device -> slowdown of its workers there."""

    # ------------------------------------------------------------------ evaluation
    def _slowdowns(self, counts: dict[int, int]) -> dict[int, float]:
        comp = self.inst.composition
        return {q: counts_slowdown(q, counts, self.matrix, comp) for q in counts}

    def _after(self, i: int, b: int) -> dict[int, float]:
        """Slowdown of every job's workers on device ``b`` once a worker of job ``i`` joins,
        updated from the current ones in O(jobs on b) (each neighbour term enters once)."""
        counts = self.devices[b].counts
        comp = self.inst.composition
        out: dict[int, float] = {}
        for q in counts:
            s, t = self.slow[q][b], self.matrix[q][i]
            out[q] = (
                s + t
                if comp == "additive"
                else max(s, t)
                if comp == "max"
                else (1.0 + s) * (1.0 + t) - 1.0
            )
        if i not in counts:
            out[i] = counts_slowdown(i, {**counts, i: 1}, self.matrix, comp)
        return out

    def evaluate(self, i: int, b: int, alone_min: bool) -> tuple[float, float] | None:
        """(device slowdown after adding a worker of job ``i`` to device ``b``, residual
        capacity after) when every enforced rule holds, else None."""
        got = self._device_rules(i, b)
        if got is None or not self._own_balance(i, b, got[2], alone_min):
            return None
        return got[0], got[1]

    def _device_rules(self, i: int, b: int) -> tuple[float, float, float] | None:
        """Every enforced rule for a worker of job ``i`` joining device ``b`` except job
        ``i``'s own balance: (device slowdown, residual capacity, job i's slowdown on ``b``)
        after the join, or None. The result changes only when device ``b`` or another
        device of a job on ``b`` (other than ``i``) changes, which lets
        :meth:`place_job` keep it between the workers of one job."""
        job, dev, rules, inst = self.jobs[i], self.devices[b], self.rules, self.inst
        if rules.distinct and i in dev.counts:
            return None
        alpha = dev.alpha + job.alpha
        memory = dev.gamma + job.gamma + max(dev.delta, job.delta)
        if alpha > 1 + OJPP_TOL or memory > 1 + OJPP_TOL:
            return None
        if rules.collision:  # Collision.add inlined: this is the hot path
            c, q = dev.coll, job.p
            if 1.0 - c.p0 * (1.0 - q) - (c.p1 * (1.0 - q) + c.p0 * q) > inst.tau_max + OJPP_TOL:
                return None
        slow = self._after(i, b)
        theta = max(slow.values())
        if rules.interference and theta > inst.theta_max + OJPP_TOL:
            return None
        if rules.balance:
            limit = inst.theta_balance + OJPP_TOL
            for q, s in slow.items():
                if q == i:
                    continue
                lo = hi = s
                for d, v in self.slow[q].items():
                    if d != b:
                        if v < lo:
                            lo = v
                        elif v > hi:
                            hi = v
                if hi - lo > limit:
                    return None
        return theta, (1.0 - alpha) + (1.0 - memory), slow[i]

    def _own_balance(self, i: int, b: int, s: float, alone_min: bool) -> bool:
        """Job ``i``'s spread holds with slowdown ``s`` on device ``b`` (``alone_min``: one
        worker may end up alone at 0, Alg. 2 line 11)."""
        if not self.rules.balance:
            return True
        lo = 0.0 if alone_min else s
        hi = s
        for d, v in self.slow[i].items():
            if d != b:
                if v < lo:
                    lo = v
                elif v > hi:
                    hi = v
        return hi - lo <= self.inst.theta_balance + OJPP_TOL

    # ------------------------------------------------------------------ mutation
    def open_device(self) -> int | None:
        if self.max_devices is not None and len(self.devices) >= self.max_devices:
            return None
        self.devices.append(Device())
        return len(self.devices) - 1

    def add(self, i: int, b: int) -> None:
        job, dev = self.jobs[i], self.devices[b]
        for q, s in self._after(i, b).items():
            self.slow[q][b] = s
        dev.counts[i] = dev.counts.get(i, 0) + 1
        dev.alpha += job.alpha
        dev.gamma += job.gamma
        dev.delta = max(dev.delta, job.delta)
        dev.coll = dev.coll.add(job.p)

    def fits_alone(self, i: int) -> bool:
        job = self.jobs[i]
        return job.alpha <= 1 + OJPP_TOL and job.gamma + job.delta <= 1 + OJPP_TOL

    # ------------------------------------------------------------------ Alg. 2
    def _scan(self, i: int, devices: Iterable[int], feasible: dict[int, _Rest]) -> None:
        """Evaluate the device rules of job ``i`` on ``devices`` into ``feasible`` (a device
        that fails is removed from it); compute and memory are filtered first, since they rule
        out most devices."""
        job, devs = self.jobs[i], self.devices
        a_cap, g_cap = 1 + OJPP_TOL - job.alpha, 1 + OJPP_TOL - job.gamma
        delta = job.delta
        for b in devices:
            d = devs[b]
            got = None
            if d.alpha <= a_cap and d.gamma + (d.delta if d.delta > delta else delta) <= g_cap:
                got = self._device_rules(i, b)
            if got is None:
                feasible.pop(b, None)
            else:
                feasible[b] = got

    def _first_scan(self, i: int) -> dict[int, _Rest]:
        """:meth:`_scan` over every device, the compute/memory filter as one comprehension."""
        job = self.jobs[i]
        a_cap, g_cap = 1 + OJPP_TOL - job.alpha, 1 + OJPP_TOL - job.gamma
        delta = job.delta
        out: dict[int, _Rest] = {}
        for b in [
            b
            for b, d in enumerate(self.devices)
            if d.alpha <= a_cap and d.gamma + (d.delta if d.delta > delta else delta) <= g_cap
        ]:
            got = self._device_rules(i, b)
            if got is not None:
                out[b] = got
        return out

    def _pick(self, i: int, feasible: dict[int, _Rest], alone_min: bool) -> int | None:
        """The device of ``feasible`` where job ``i``'s balance also holds and the key of
        :attr:`Rules.select` is least (the index breaks ties)."""
        best: tuple[float, ...] | None = None
        chosen = None
        theta_first = self.rules.select == "theta"
        mine = self.slow[i]
        check = self.rules.balance
        # job i's spread over the devices it is on, for candidates it is not on yet
        mine_lo = min(mine.values()) if mine else math.inf
        mine_hi = max(mine.values()) if mine else -math.inf
        limit = self.inst.theta_balance + OJPP_TOL
        for b, (theta, residual, s) in feasible.items():
            if check:
                if b in mine:
                    if not self._own_balance(i, b, s, alone_min):
                        continue
                else:
                    lo = 0.0 if alone_min else s
                    if (s if s > mine_hi else mine_hi) - (lo if lo < mine_lo else mine_lo) > limit:
                        continue
            key = (theta, residual, b) if theta_first else (residual, b)
            if best is None or key < best:
                best, chosen = key, b
        return chosen

    def place_job(self, i: int, workers: int | None = None) -> list[int] | None:  # noqa: C901 (a named exception to the complexity gate)
        """Place ``workers`` (default all) workers of job ``i``; the devices used, one per
        worker, or None (nothing changed) when ``max_devices`` left no room.

        Only the first worker scans every device. Adding a worker to device b changes the
        rules' outcome only on b and on the other devices of the jobs on b (their balance), so
        the next worker re-evaluates just those; job ``i``'s own balance, which moves with
        every worker, is re-checked on the (few) feasible devices. Pass 2 starts from pass
        1's first scan, taken on the same state."""
        n = self.jobs[i].workers if workers is None else workers
        if n == 0:
            return []
        if not self.fits_alone(i):
            return None
        first = self._first_scan(i)
        for pass2 in (False, True):
            alone_min = pass2 and self.rules.balance
            saved_devices = len(self.devices)
            saved: dict[int, Device] = {}
            saved_slow: dict[int, dict[int, float]] = {}
            feasible = dict(first)
            placed: list[int] = []
            ok = True
            for w in range(n):
                b = self._pick(i, feasible, alone_min)
                if b is None and pass2:
                    b = self.open_device()
                if b is None:
                    ok = False
                    break
                dev = self.devices[b]
                if b not in saved and b < saved_devices:
                    saved[b] = dev.copy()
                for q in (i, *dev.counts):
                    if q not in saved_slow:
                        saved_slow[q] = dict(self.slow[q])
                self.add(i, b)
                placed.append(b)
                if w + 1 < n:
                    stale = {b}
                    for q in dev.counts:
                        if q != i:
                            stale.update(self.slow[q])
                    self._scan(i, stale, feasible)
            if ok:
                return placed
            del self.devices[saved_devices:]
            for b, dev in saved.items():
                self.devices[b] = dev
            for q, values in saved_slow.items():
                self.slow[q] = values
        return None

    def broken_job(self) -> int | None:
        """A job to evict so the current state meets every enforced rule (None: it does): the
        last-listed job on a device that breaks a device rule, else a job whose slowdown
        spread is too wide. Used to re-check jobs that keep their GPUs, whose final state is
        what counts (balance is not monotone, so worker-by-worker checks would be wrong)."""
        inst, rules = self.inst, self.rules
        for dev in self.devices:
            if not dev.counts:
                continue
            theta = max(self._slowdowns(dev.counts).values())
            if (
                dev.alpha > 1 + OJPP_TOL
                or dev.gamma + dev.delta > 1 + OJPP_TOL
                or (rules.collision and dev.coll.tau > inst.tau_max + OJPP_TOL)
                or (rules.interference and theta > inst.theta_max + OJPP_TOL)
                or (rules.distinct and max(dev.counts.values()) > 1)
            ):
                return max(dev.counts)
        if rules.balance:
            for q, values in enumerate(self.slow):
                if (
                    values
                    and max(values.values()) - min(values.values()) > inst.theta_balance + OJPP_TOL
                ):
                    return q
        return None

    def solution(self, worker_devices: list[list[int]]) -> list[list[str]]:
        """Worker ids per device from ``worker_devices[i]`` (job i's device per worker)."""
        out: list[list[str]] = [[] for _ in self.devices]
        for i, devices in enumerate(worker_devices):
            for j, b in enumerate(devices):
                out[b].append(f"{self.jobs[i].id}#{j}")
        return [g for g in out if g]
