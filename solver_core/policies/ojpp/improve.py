"""A local improvement pass after Alg. 3 (solver ``heuristic-ls``): empty GPUs.

Alg. 3 places job by job and never revisits a choice; Placement's pass 2 in particular opens
GPUs for single workers whose balance could not be met among the active ones at that moment.
Two moves, each kept only when it empties a GPU, else rolled back exactly:

* empty a GPU (least loaded first): lift all its workers and put each back on another *used*
  GPU (best fit: the least residual capacity after the move);
* move a job: lift every worker of a job that sits alone on some GPU and put them all back
  on used GPUs. This is the move that undoes pass 2's lone workers: moved one at a time they
  would break their job's balance against the siblings left behind;
* merge two jobs that are alone on all their devices: workers of one onto the devices of
  the other, all at once, kept when the whole state still meets every rule.

Passes repeat while a GPU was emptied (at most ``MAX_PASSES``).

Why every answer stays feasible: the state after Alg. 3 meets every rule; lifting workers
off GPUs never breaks a device rule (all are monotone) and only narrows each job's spread;
each worker is put back through :meth:`.packer.Packer.evaluate` (compute, memory, collision,
slowdown, and the balance of every job on the target against its other GPUs), and a move only
changes the target. So every rule holds after every move, and the GPU count never grows.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuplan.models.ojpp import OJPP_TOL, counts_slowdown

from .model import device_violation
from .packer import Device, Packer

__all__ = ["MAX_PASSES", "empty_devices", "packer_solution"]

MAX_PASSES = 4
"""Passes over the GPUs; a pass that empties none ends the search earlier."""


def _load(dev: Device) -> tuple[float, int]:
    return dev.alpha + dev.gamma + dev.delta, sum(dev.counts.values())


def _used(packer: Packer) -> int:
    return sum(1 for dev in packer.devices if dev.counts)


class _Undo:
    """Exact rollback of a tentative move: each device and each job's per-device slowdowns as
    they were before the move first touched them (device state is monotone, not invertible,
    so a move is undone by restoring, never by removing workers)."""

    def __init__(self, packer: Packer) -> None:
        self.packer = packer
        self.devices: dict[int, Device] = {}
        self.slow: dict[int, dict[int, float]] = {}

    def device(self, d: int, state: Device | None = None) -> None:
        """Remember device ``d`` (``state``: the object to put back, when the caller is about
        to replace it rather than change it)."""
        if d not in self.devices:
            self.devices[d] = state if state is not None else self.packer.devices[d].copy()

    def jobs(self, jobs: Iterable[int]) -> None:
        for j in jobs:
            if j not in self.slow:
                self.slow[j] = dict(self.packer.slow[j])

    def restore(self) -> None:
        for d, dev in self.devices.items():
            self.packer.devices[d] = dev
        for j, values in self.slow.items():
            self.packer.slow[j] = values


def _try_empty(packer: Packer, b: int) -> bool:
    """Move every worker of device ``b`` to other used devices; roll back if one fails."""
    devices, slow, jobs = packer.devices, packer.slow, packer.jobs
    source = devices[b]
    undo = _Undo(packer)
    undo.device(b, source)
    undo.jobs(source.counts)
    for q in source.counts:
        del slow[q][b]
    devices[b] = Device()
    # hardest workers first: most compute, then most peak memory, then job index
    moving = sorted(
        source.counts.items(),
        key=lambda qc: (-jobs[qc[0]].alpha, -(jobs[qc[0]].gamma + jobs[qc[0]].delta), qc[0]),
    )
    for q, count in moving:
        for _ in range(count):
            d = _best_fit(packer, q)
            if d is None:
                undo.restore()
                return False
            undo.device(d)
            undo.jobs((q, *devices[d].counts))
            packer.add(q, d)
    return True


def _best_fit(packer: Packer, q: int) -> int | None:
    """The used device where a worker of job ``q`` fits every rule with the least residual
    capacity after (the index breaks ties)."""
    job = packer.jobs[q]
    a_cap, g_cap = 1 + OJPP_TOL - job.alpha, 1 + OJPP_TOL - job.gamma
    best: tuple[float, int] | None = None
    for d, dev in enumerate(packer.devices):
        if not dev.counts or dev.alpha > a_cap or dev.gamma + max(dev.delta, job.delta) > g_cap:
            continue
        got = packer.evaluate(q, d, alone_min=False)
        if got is not None and (best is None or (got[1], d) < best):
            best = (got[1], d)
    return None if best is None else best[1]


def _try_move_job(packer: Packer, q: int) -> bool:
    """Lift every worker of job ``q`` and put them back on used devices; keep the result
    only if it uses fewer devices (else roll back exactly). Moving a whole job lifts the
    balance bound that pins its workers: one worker moved alone would sit beside its
    siblings' old slowdowns, which is why :func:`_try_empty` cannot move such jobs."""
    devices, slow, jobs = packer.devices, packer.slow, packer.jobs
    homes = sorted(slow[q])
    used_before = _used(packer)
    undo = _Undo(packer)

    def save(d: int) -> None:
        undo.device(d)
        undo.jobs(devices[d].counts)

    for b in homes:  # rebuild each home without q (device state is monotone, not invertible)
        save(b)
        rest = {j: c for j, c in devices[b].counts.items() if j != q}
        for j in devices[b].counts:
            del slow[j][b]
        devices[b] = Device()
        for j, c in rest.items():
            for _ in range(c):
                packer.add(j, b)
    for _ in range(jobs[q].workers):
        d = _best_fit(packer, q)
        if d is None:
            break
        save(d)
        packer.add(q, d)
    else:
        if _used(packer) < used_before:
            return True
    undo.restore()
    return False


def _lonely(packer: Packer) -> list[int]:
    """Jobs every device of which holds that job only."""
    out = []
    for q, homes in enumerate(packer.slow):
        if homes and all(len(packer.devices[b].counts) == 1 for b in homes):
            out.append(q)
    return out


def _try_merge(packer: Packer, q: int, r: int) -> bool:
    """Jobs ``q`` and ``r`` each alone on their devices: move workers of ``r`` (lone ones
    first), one per device of ``q``, all at once; keep it if the whole state still meets every
    rule (:meth:`.packer.Packer.broken_job`). The move every pair of lone jobs needs when a
    single shared device would break their balance but sharing all of them does not (every
    worker of both then has the same slowdown)."""
    devices, slow = packer.devices, packer.slow
    targets = sorted(slow[q])
    sources = sorted(slow[r], key=lambda b: (devices[b].counts[r], b))
    moves: list[int] = []
    for b in sources:
        moves.extend([b] * devices[b].counts[r])
    moves = moves[: len(targets)]
    undo = _Undo(packer)
    for b in {*targets, *moves}:
        undo.device(b)
    undo.jobs((q, r))
    used_before = _used(packer)
    for b in set(moves):  # rebuild the sources without the moved workers
        keep = devices[b].counts[r] - moves.count(b)
        del slow[r][b]
        devices[b] = Device()
        for _ in range(keep):
            packer.add(r, b)
    for d in targets[: len(moves)]:
        packer.add(r, d)
    if packer.broken_job() is None and _used(packer) < used_before:
        return True
    undo.restore()
    return False


def _merge_lonely(packer: Packer) -> None:
    """:func:`_try_merge` over pairs of lone jobs, the pairs saving most devices first."""
    done: set[int] = set()
    lonely = _lonely(packer)
    pairs = sorted(
        ((q, r) for q in lonely for r in lonely if q != r),
        key=lambda qr: (-min(len(packer.slow[qr[0]]), packer.jobs[qr[1]].workers), qr),
    )
    inst, matrix, comp = packer.inst, packer.matrix, packer.inst.composition
    limit = inst.theta_balance + OJPP_TOL
    for q, r in pairs:
        if q in done or r in done or device_violation(inst, matrix, {q: 1, r: 1}):
            continue
        # a job left partly alone needs its shared slowdown within the balance bound
        homes, workers = len(packer.slow[q]), packer.jobs[r].workers
        if (workers < homes and counts_slowdown(q, {q: 1, r: 1}, matrix, comp) > limit) or (
            workers > homes and counts_slowdown(r, {q: 1, r: 1}, matrix, comp) > limit
        ):
            continue
        if _try_merge(packer, q, r):
            done.update((q, r))


def empty_devices(packer: Packer, passes: int = MAX_PASSES) -> int:
    """Empty as many used devices as the moves allow; how many. A pass tries every used
    device, least loaded first (:func:`_try_empty`), then every job that sits alone on some
    device, most such devices first (:func:`_try_move_job`), then pairs of jobs alone on all
    their devices (:func:`_try_merge`)."""
    start = _used(packer)
    for _ in range(passes):
        before = _used(packer)
        order = sorted(
            (b for b, dev in enumerate(packer.devices) if dev.counts),
            key=lambda b: (*_load(packer.devices[b]), b),
        )
        for b in order:
            if packer.devices[b].counts:
                _try_empty(packer, b)
        alone = [0] * len(packer.jobs)
        for dev in packer.devices:
            if len(dev.counts) == 1:
                alone[next(iter(dev.counts))] += 1
        for q in sorted((q for q in range(len(alone)) if alone[q]), key=lambda q: (-alone[q], q)):
            _try_move_job(packer, q)
        _merge_lonely(packer)
        if _used(packer) == before:
            break
    return start - _used(packer)


def packer_solution(packer: Packer) -> list[list[str]]:
    """Worker ids per used device, read from the devices' counts (numbered per job in device
    order)."""
    nxt = [0] * len(packer.jobs)
    out: list[list[str]] = []
    for dev in packer.devices:
        if not dev.counts:
            continue
        gpu = []
        for q in sorted(dev.counts):
            for _ in range(dev.counts[q]):
                gpu.append(f"{packer.jobs[q].id}#{nxt[q]}")
                nxt[q] += 1
        out.append(gpu)
    return out
