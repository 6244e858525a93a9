"""Tiresias' discretised Gittins-index policy (``dlas-gpu-gittins``): rank by expected payoff.

Tiresias (Gu et al., NSDI'19, §3.2) offers two priorities for its multi-level queues when job
sizes are unknown but their *distribution* is: 2D-LAS (:mod:`.tiresias`) and the Gittins index.
A job that has attained ``a`` GPU-seconds gets, for a service quantum ``Δ``,

    G(a, Δ) = P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a]

(``S`` the GPU-service of a job drawn from the distribution): the chance that it finishes
within the next quantum per unit of service that quantum is expected to cost. Higher runs
first; inside a queue jobs are ordered by G, across queues by the queue (the same thresholds
as 2D-LAS), so a job is demoted by attained service and ranked by its index.

The upstream simulator (``SymbioticLab/Tiresias``, ``simulator/run_sim.py``:
``parse_job_dist``, ``cal_r_gittins_index``, ``get_gittins_index``; read, not copied) computes
it from ``n`` sorted samples ``s_0 <= ... <= s_{n-1}`` of a YARN cluster's GPU-time history
(``yarn-gput1000.csv``), with ``Δ = 3250`` GPU-seconds. Its estimator, kept here exactly
because the reference numbers come from it (``docs/algorithms/gittins.md``):

* ``i`` = the first sample above ``a`` (``n - i`` jobs still alive); ``j`` = the first sample
  above ``a + Δ``, but ``n - 1`` when ``a + Δ > s_{n-1} - 1`` (so the largest sample never
  counts as finishing);
* ``P = (j - i) / (n - i)`` rounded to 5 decimals;
* ``E = (s_i + ... + s_{j-1} + Δ (n - j)) // (n - i)``: the finishing jobs count with their
  *whole* size, not ``s - a``, and the division is Python 2's integer division;
* index ``= round(P x 10^6 / E, 4)``, 0 above the largest sample; rounding half away from zero
  as Python 2's ``round``.

The index is tabulated once per sample (at ``a = s_k - 1``) and looked up piecewise: a job
with attained ``a`` takes the entry of the first sample above ``a``. The simulator updates
ranks only at its events (arrivals, completions, queue jumps), so this policy runs on
:class:`~.tiresias_upstream.UpstreamMLFQ` with its queue thresholds ``[3250, 7200]``
(``jobs.py``: ``num_queue = 3``).
"""

from __future__ import annotations

import bisect
import csv
import math
import os
import stat
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TextIO

from pydantic import Field

from gpuplan.models import InputError

from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import StagedPolicy
from ...registry import PolicyDef
from .tiresias_upstream import UpstreamMLFQ

__all__ = [
    "BUNDLED_HISTORY",
    "GITTINS_QUANTUM",
    "GITTINS_THRESHOLDS",
    "GittinsIndex",
    "read_history",
    "tiresias_gittins_policy",
]

GITTINS_QUANTUM = 3250.0
"""Upstream ``JOBS.gittins_delta``: the service quantum Δ in GPU-seconds."""
GITTINS_THRESHOLDS: tuple[float, ...] = (3250.0, 7200.0)
"""Upstream ``queue_limit`` with ``num_queue = 3``: three queues."""
BUNDLED_HISTORY = Path(__file__).resolve().parent / "tiresias_yarn_gput1000.csv"
"""Upstream ``simulator/yarn-gput1000.csv`` (Apache-2.0, commit 959f9b0, byte-identical):
1,001 GPU-time samples of the authors' YARN cluster, the file ``parse_job_dist`` reads."""


def _round_half_away(x: float, digits: int) -> float:
    """Python 2's ``round``: the float's exact value rounded, halves away from zero."""
    return float(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


class GittinsIndex:
    """The Tiresias estimator of the Gittins index from samples of job GPU-service."""

    def __init__(self, samples: Sequence[float], quantum: float = GITTINS_QUANTUM) -> None:
        if not samples:
            raise ValueError("the Gittins index needs at least one GPU-service sample")
        if any(not math.isfinite(s) or s < 1 for s in samples):
            raise ValueError("GPU-service samples must be finite and >= 1 GPU-second")
        if not math.isfinite(quantum) or quantum < 1:
            raise ValueError(f"quantum must be >= 1 GPU-second, got {quantum}")
        self.samples = sorted(float(s) for s in samples)
        self.quantum = float(quantum)
        prefix = [0.0]
        for s in self.samples:
            prefix.append(prefix[-1] + s)
        self._prefix = prefix
        self.table = [self.at(math.trunc(s - 1)) for s in self.samples]

    def at(self, attained: float) -> float:
        """The index at ``attained`` GPU-seconds, computed (not looked up)."""
        data, n, delta = self.samples, len(self.samples), self.quantum
        top = data[-1] - 1
        if attained > top:
            return 0.0
        i = bisect.bisect_right(data, attained)
        ahead = attained + delta
        j = n - 1 if ahead > top else bisect.bisect_right(data, ahead)
        alive = n - i
        p = _round_half_away((j - i) / alive, 5)
        e = math.floor((self._prefix[j] - self._prefix[i] + delta * (n - j)) / alive)
        return _round_half_away(p * 1_000_000 / e, 4)

    def __call__(self, attained: float) -> float:
        """The index a job with ``attained`` GPU-seconds is ranked by (the tabulated entry of
        the first sample above it; 0 from the largest sample on)."""
        k = bisect.bisect_right(self.samples, attained)
        return self.table[k] if k < len(self.table) else 0.0


def _open_regular(path: str | Path, src: str, *, trusted: bool = False) -> TextIO:
    """Open ``path`` for reading only if it is a regular file no other user may write.

    Non-blocking open then ``fstat`` on the descriptor: a FIFO or device named as history
    would otherwise hang the build or feed it endless data, and a file another user owns or
    may write (group or others; the controller's rule for its own files) would let that user
    reorder everyone's jobs. ``trusted``: the bundled copy, part of the installed package
    (whoever can write it can write this module), keeps only the regular-file check."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError("the Gittins history must be a regular file", source=src)
        if not trusted and st.st_uid not in (0, os.geteuid()):
            raise InputError(
                f"the Gittins history is owned by uid {st.st_uid}, not by this "
                "user or root: refusing it",
                source=src,
            )
        if not trusted and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise InputError(
                "the Gittins history is writable by group or others: refusing it (chmod go-w)",
                source=src,
            )
        return open(fd, newline="", encoding="utf-8", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def read_history(path: str | Path) -> list[float]:
    """GPU-service samples from a CSV file with a ``duration`` column (GPU-seconds, one job a
    row, as upstream's ``yarn-gput*.csv``). Bad input: an :class:`InputError` naming the file,
    the row and the field."""
    src = str(path)
    try:
        with _open_regular(path, src, trusted=Path(path) == BUNDLED_HISTORY) as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or "duration" not in reader.fieldnames:
                raise InputError("needs a 'duration' column (GPU-seconds per job)", source=src)
            samples: list[float] = []
            for row, rec in enumerate(reader, start=2):
                raw = (rec.get("duration") or "").strip()
                try:
                    value = float(raw)
                except ValueError:
                    value = math.nan
                if not math.isfinite(value) or value < 1:
                    raise InputError(
                        f"expected GPU-seconds >= 1, got {raw!r}",
                        source=src,
                        row=row,
                        field="duration",
                    )
                samples.append(value)
    except OSError as err:
        raise InputError(f"cannot read the Gittins history: {err.strerror}", source=src) from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"not a CSV text file: {err}", source=src) from None
    if not samples:
        raise InputError("no samples", source=src)
    return samples


def tiresias_gittins_policy(
    name: str = "tiresias-gittins",
    thresholds: tuple[float, ...] = GITTINS_THRESHOLDS,
    quantum: float = GITTINS_QUANTUM,
    history: str | Path | None = None,
) -> StagedPolicy:
    """``dlas-gpu-gittins``: the simulator's queues, ranked by the Gittins index inside each."""
    index = GittinsIndex(read_history(history or BUNDLED_HISTORY), quantum)
    stage = UpstreamMLFQ(thresholds, "gpu_time", rank=index)
    return StagedPolicy(name, stage, best_fit_placement, stage.next_wakeup, memory=stage)


class GittinsParams(Params):
    thresholds: tuple[float, ...] = Field(
        GITTINS_THRESHOLDS,
        min_length=1,
        max_length=16,
        description="upper GPU-second limits of Q0..Q(K-2), increasing (upstream: 3 queues)",
    )
    quantum: float = Field(
        GITTINS_QUANTUM, ge=1, le=1e12, description="service quantum Δ of the index, GPU-seconds"
    )
    history: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="CSV with a 'duration' column of GPU-second samples; null: upstream's "
        "yarn-gput1000.csv (bundled)",
    )


def _build(p: GittinsParams, seed: int) -> StagedPolicy:
    try:
        return tiresias_gittins_policy(
            thresholds=p.thresholds, quantum=p.quantum, history=p.history
        )
    except ValueError as err:
        raise InputError(str(err), field="policies.tiresias-gittins") from None


POLICIES = [PolicyDef("tiresias-gittins", _build, GittinsParams)]
