"""Port (for reference numbers only) of Gavel's FIFO in ``base`` mode on a static trace.

Semantics read from stanford-futuredata/gavel ``scheduler/policies/fifo.py`` (``FIFOPolicy``,
mode ``base``) and the round-based simulator of ``scheduler/scheduler.py``; the code is our own.

* Jobs are queued in arrival (id) order. At each round boundary, jobs that finished release
  their workers; then, strictly in queue order, the head job picks a worker type uniformly at
  random (``random.Random(seed).randrange``) among the types sorted by name that still have at
  least ``scale_factor`` free workers; the first job for which no type has room stops the walk
  (no backfill). A job keeps its type until it finishes (no preemption, no migration).
* A job runs ``total_steps / throughput(type, scale_factor)`` seconds of wall time from the
  round it was placed in; workers it frees are reused only at the next round boundary
  (``round_s``; 0 reuses them at once).

Not ported: Gavel's lease extensions, per-round checkpoint overheads and the physical cluster's
throughput file (we read ``simulation_throughputs.json``, as the issue's numbers do not say).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GavelJob:
    job_id: int
    arrival: float
    steps: float
    scale: int
    rate: Callable[[str, int], float]  # (worker type, scale) -> steps/s of the whole job


def simulate_fifo(
    jobs: Sequence[GavelJob], workers: dict[str, int], seed: int = 0, round_s: float = 360.0
) -> dict[int, tuple[str, float, float]]:
    """``{job id: (worker type, start, finish)}``."""
    rng = random.Random(seed)
    free = dict(workers)
    queue = sorted(jobs, key=lambda j: (j.arrival, j.job_id))
    running: list[tuple[float, int, str, int]] = []  # (finish, id, type, scale)
    out: dict[int, tuple[str, float, float]] = {}
    now = 0.0
    waiting: list[GavelJob] = []
    while queue or waiting or running:
        while queue and queue[0].arrival <= now + 1e-9:
            waiting.append(queue.pop(0))
        for fin, jid, wtype, scale in [r for r in running if r[0] <= now + 1e-9]:
            running.remove((fin, jid, wtype, scale))
            free[wtype] += scale
        while waiting:
            head = waiting[0]
            types = [t for t in sorted(free) if free[t] >= head.scale]
            if not types:
                break
            wtype = types[rng.randrange(len(types))]
            waiting.pop(0)
            free[wtype] -= head.scale
            finish = now + head.steps / head.rate(wtype, head.scale)
            running.append((finish, head.job_id, wtype, head.scale))
            out[head.job_id] = (wtype, now, finish)
        events = [r[0] for r in running] + ([queue[0].arrival] if queue else [])
        if not events:
            break
        nxt = min(events)
        if round_s > 0:
            nxt = math.ceil(nxt / round_s - 1e-9) * round_s
        now = max(nxt, now + (round_s if round_s > 0 else 0.0))
    return out
