"""Per-cycle wall times of the controller, kept as data (issue 24, item 6).

Why: "how long does one control cycle take at the size of a real partition" is the question an
operator asks before deploying, and log lines cannot answer it cheaply. Each cycle of
:class:`~.controller.SlurmController` (one batch of events: a poll, a timer, an arrival) records

* ``poll_s``: the Slurm reads of the poll that produced the batch (``sinfo``, ``squeue``) and
  the discovery that goes with them (adopting new jobs, journaling them); 0 for a batch without
  a poll;
* ``decide_s``: the engine's handling of the batch (events, policy, plan check, bookkeeping),
  i.e. ``Engine.handle`` less the executor's ``apply``;
* ``apply_s``: carrying the plan out (journaled intents, ``scontrol``/``scancel`` calls);
* ``sync_s``: journaling every live job's state after the decision;
* ``jobs``: the managed jobs the controller tracked (pending + running) after the cycle;
* ``full_reads``: full ``squeue --json`` reads the cycle's poll made (0: only the narrow read,
  :mod:`gpuplan.executors.slurm.job_states`; 1: a new job appeared, or the minute was up).

A poll that brings no event is a cycle too, with ``decide_s``/``apply_s``/``sync_s`` None
(JSON ``null``); a batch that came without a poll (a timer) has ``poll_s`` None.

The rows stay in a bounded ring in memory (:data:`RING`, the newest kept) with running totals
that are never dropped, and :meth:`CycleTimes.to_json` is written to the journal's ``meta``
table under ``cycle_times:<run>`` at most every :data:`FLUSH_S` seconds and when the run ends.
A reader (``tests/bench/slurm_scale.py``, an operator with ``sqlite3``) opens the journal
read-only: SQLite's WAL gives it a consistent snapshot while the controller writes, so there is
no race and nothing to lock. Appending a row costs a tuple in a deque; nothing is formatted or
written per cycle.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from dataclasses import dataclass, field

RING = 4096
"""Cycles kept in memory (and in the journal): the most recent ones."""
FLUSH_S = 10.0
"""Least time between two writes of the ring to the journal."""
COLUMNS = ("t", "poll_s", "decide_s", "apply_s", "sync_s", "jobs", "full_reads")


def meta_key(run_id: int) -> str:
    """The journal ``meta`` key holding run ``run_id``'s cycle times."""
    return f"cycle_times:{run_id}"


@dataclass(slots=True)
class CycleTimes:
    """A bounded ring of per-cycle timings plus totals over the whole run."""

    ring: int = RING
    rows: deque[tuple[float, float | None, float | None, float | None, float | None, int, int]] = (
        field(init=False)
    )
    cycles: int = 0
    """Cycles recorded since the run began (the ring holds at most ``ring`` of them)."""
    totals: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("poll_s", "decide_s", "apply_s", "sync_s"), 0.0)
    )
    maxima: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("poll_s", "decide_s", "apply_s", "sync_s"), 0.0)
    )
    _flushed: float = 0.0

    def __post_init__(self) -> None:
        self.rows = deque(maxlen=self.ring)

    def add(
        self,
        poll_s: float | None,
        decide_s: float | None,
        apply_s: float | None,
        sync_s: float | None,
        jobs: int,
        full_reads: int = 0,
    ) -> None:
        """Record one cycle (wall seconds; None for a part the cycle did not have: no poll,
        or a poll that brought no event and so no decision)."""
        self.rows.append((time.time(), poll_s, decide_s, apply_s, sync_s, jobs, full_reads))
        self.cycles += 1
        for key, value in (
            ("poll_s", poll_s),
            ("decide_s", decide_s),
            ("apply_s", apply_s),
            ("sync_s", sync_s),
        ):
            if value is None:
                continue
            self.totals[key] += value
            if value > self.maxima[key]:
                self.maxima[key] = value

    def due(self, now: float | None = None) -> bool:
        """True when the ring should be written again (:data:`FLUSH_S` since the last write)."""
        now = time.monotonic() if now is None else now
        return now - self._flushed >= FLUSH_S

    def flushed(self, now: float | None = None) -> None:
        self._flushed = time.monotonic() if now is None else now

    def to_json(self, counters: dict[str, int] | None = None) -> str:
        """The ring and totals as one JSON document (rounded to microseconds); ``counters``
        (e.g. Slurm commands run, by verb) are written beside them."""
        return json.dumps(
            {
                "counters": dict(sorted((counters or {}).items())),
                "columns": list(COLUMNS),
                "rows": [
                    [round(t, 3), *(None if v is None else round(v, 6) for v in r), n, f]
                    for t, *r, n, f in self.rows
                ],
                "cycles": self.cycles,
                "totals": {k: round(v, 6) for k, v in self.totals.items()},
                "max": {k: round(v, 6) for k, v in self.maxima.items()},
            },
            separators=(",", ":"),
        )


def load(text: str | None) -> list[dict[str, float | None]]:
    """The cycles of a journal's ``cycle_times`` document, one dict per cycle (column ->
    value, None where the cycle had no such part); empty for None."""
    if not text:
        return []
    doc = json.loads(text)
    cols = doc.get("columns") or list(COLUMNS)
    return [
        {
            name: None if value is None else float(value)
            for name, value in zip(cols, row, strict=False)
        }
        for row in doc.get("rows") or []
    ]


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
