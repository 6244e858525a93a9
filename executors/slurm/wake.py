"""Wake-ups from Slurm: the controller polls at once when a job has ended or was submitted.

The controller's view of Slurm comes from polling ``squeue`` every ``--interval`` seconds, so a
job's end is seen half an interval late on average, and the GPUs it freed sit idle that long
before the next job is released (measured on the lab: 1.06 s from a job's end to the next
start under the controller against 0.33 s under Slurm's own scheduler, which reacts to the end
event). Slurm can run a program when any job ends (``EpilogSlurmctld``); the shipped
``epilog_wake.sh`` rewrites one file, and :class:`WakeFile` tells the executor's idle loop that
its modification time changed. The poll stays the only source of truth, so a lost, late or
spurious wake-up costs at most what polling alone costs.

Arrivals (issue 24, item 7): a new job was seen only at the next poll, so its first decision
came half an interval after its submission on average (1.1 s median on the lab at the default
2 s). Nothing may do I/O for us inside slurmctld's lock — ``job_submit.lua`` runs under it, so
it must not write a file — so the controller looks instead: :class:`SubmitProbe` asks
slurmctld every ``--arrival-check`` seconds for its count of submitted jobs (``sdiag``'s
"Jobs submitted", a statistics counter: no job list is packed, nothing is written) and wakes
the idle loop when the count moved. :class:`AnyWake` combines it with the wake file.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Protocol

__all__ = ["AnyWake", "SubmitProbe", "Wake", "WakeFile", "epilog_script", "submitted_count"]

log = logging.getLogger(__name__)


class Wake(Protocol):
    """Something the executor's idle loop asks, between polls, whether to poll now."""

    def changed(self) -> bool: ...


SCRIPT_NAME = "epilog_wake.sh"


class WakeFile:
    """Watches one file's modification time (a ``stat`` per check: cheap enough for 10 Hz)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:  # not there (yet): no hook installed, or no job ended so far
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def changed(self) -> bool:
        """True once per change of the file since the last call (or since construction)."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return False
        self._seen = stamp
        return True


def epilog_script(wake_file: str | Path) -> str:
    """The shipped ``epilog_wake.sh`` with its ``WAKE_FILE`` set to ``wake_file``."""
    text = (resources.files("gpuplan.executors.slurm") / SCRIPT_NAME).read_text()
    return re.sub(r"(?m)^WAKE_FILE=.*$", f"WAKE_FILE={wake_file}", text)


_SUBMITTED = re.compile(r"^\s*Jobs submitted:\s*(\d{1,18})\s*$", re.MULTILINE)


def submitted_count(sdiag_text: str) -> int | None:
    """slurmctld's "Jobs submitted" counter from ``sdiag`` output (None when absent)."""
    found = _SUBMITTED.search(sdiag_text)
    return int(found.group(1)) if found else None


class SubmitProbe:
    """Wakes the idle loop when slurmctld's count of submitted jobs changed since the last look.

    ``read`` returns ``sdiag``'s output; it is called at most once per ``every_s`` (the idle
    loop asks ten times a second). Any change is a wake-up — a job submitted to another
    partition, or the counter's reset at midnight, only moves one poll earlier (and the
    executor spaces wake-up polls by ``WAKE_MIN_GAP_S``). The reference is read when the
    probe is made, before the executor's first poll, so every later submission moves it. A
    failing ``read`` (slurmctld down, ``PrivateData=usage`` hiding the statistics from this
    user) wakes nothing; after ``max_failures`` failures in a row the probe warns once and
    looks only every ``rest_s`` until a read works again: arrivals are meanwhile seen at the
    next poll, as without it. ``wakes`` counts the wake-ups it gave.
    """

    def __init__(
        self,
        read: Callable[[], str],
        every_s: float,
        *,
        max_failures: int = 5,
        rest_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_s <= 0:
            raise ValueError("every_s must be positive")
        self._read = read
        self.every_s = every_s
        self._clock = clock
        self._next = clock() + every_s
        self._seen: int | None = None
        self._failures = 0
        self.max_failures = max_failures
        self.rest_s = rest_s
        self.wakes = 0
        self._look()  # the reference

    @property
    def resting(self) -> bool:
        """Failing: looking only every ``rest_s``."""
        return self._failures >= self.max_failures

    def changed(self) -> bool:
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.every_s
        return self._look()

    def _look(self) -> bool:
        """Read the counter once; True when it moved since the last successful read."""
        try:
            count = submitted_count(self._read())
        except Exception as err:  # any failure of the look: the poll still covers arrivals
            count, why = None, f"{type(err).__name__}: {err}"
        else:
            why = "no 'Jobs submitted' line in sdiag's output"
        if count is None:
            self._failures += 1
            if self._failures == self.max_failures:
                log.warning(
                    "arrival probe: %d failed looks in a row (%s); looking every %g s "
                    "until it works, new jobs are seen at the next poll meanwhile",
                    self._failures,
                    why[:300],
                    self.rest_s,
                )
            if self.resting:
                self._next = self._clock() + self.rest_s
            return False
        if self.resting:
            log.info("arrival probe works again")
        self._failures = 0
        seen, self._seen = self._seen, count
        if seen is None or count == seen:
            return False
        self.wakes += 1
        return True


class AnyWake:
    """Several wake-up sources as one: asks every source each time (so each consumes its own
    change) and wakes when any of them changed."""

    def __init__(self, *sources: Wake) -> None:
        self.sources = sources

    def changed(self) -> bool:
        fired = [source.changed() for source in self.sources]
        return any(fired)
