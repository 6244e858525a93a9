"""What the controller records of each cycle for others to read: the cycle-time ring in the
journal (:mod:`.cycle_times`) and, with ``--http``, the snapshot the HTTP thread serves
(:mod:`.live_state`).

Why a mixin of its own: this changes with what operators are shown (metrics, the page, the
cycle-time columns), not with how the controller decides or reconciles. It reads the
controller's state and never changes a job.
"""

from __future__ import annotations

import logging
from typing import Any

from .cycle_times import meta_key as cycle_meta_key
from .markers import is_failopen

log = logging.getLogger("gpuplan.executors.control.controller")


class CycleRecordsMixin:
    """Mixed into :class:`.controller.SlurmController` (its attributes: ``times``, ``journal``,
    ``cli``, ``run_id``, ``settings``, ``_live``, ``_engine``, ``_executor``, ``_full``, ...)."""

    _full_reads: int
    _publish_failed: bool
    times: Any
    journal: Any
    cli: Any
    run_id: int
    settings: Any
    _live: Any
    _engine: Any
    _executor: Any
    _full: Any
    _tick: float
    _probe_calls: int

    def _timed(
        self,
        poll_s: float | None,
        decide_s: float | None,
        apply_s: float | None,
        sync_s: float | None,
        jobs: int,
    ) -> None:
        """Record one cycle (:mod:`.cycle_times`); write the ring every ``FLUSH_S``."""
        full, self._full_reads = self._full_reads, 0
        self.times.add(poll_s, decide_s, apply_s, sync_s, jobs, full)
        if self.times.due():
            self._save_times()
        self._publish()

    def _publish(self, force: bool = False) -> None:
        """``--http``: after a cycle, publish what the HTTP thread serves (:mod:`.live_state`,
        at most once a second). A fault here is logged and never fails the cycle."""
        live, engine = self._live, self._engine
        if live is None:
            return
        try:
            live.take_cycles(self.times)
            if not (force or live.due()):
                return
            gate = engine.restart_gate if engine is not None else None
            live.publish(
                engine=engine,
                slurm_jobs=self._full,
                tick=self._tick,
                failopen_jobs=sum(
                    not sj.finished and is_failopen(sj, self.settings.partitions)
                    for sj in self._full.values()
                ),
                gate=gate.summary() if gate is not None else None,
            )
        except Exception:  # logged once until a snapshot succeeds again
            log.log(
                logging.DEBUG if self._publish_failed else logging.WARNING,
                "publishing the live state failed; /metrics shows the previous one",
                exc_info=True,
            )
            self._publish_failed = True
        else:
            self._publish_failed = False

    def _quiet_poll(self, poll_s: float) -> None:
        """A poll that brought no event: a cycle without a decision."""
        self._timed(
            poll_s,
            None,
            None,
            None,
            len(self._engine.running) + len(self._engine.pending)
            if self._engine is not None
            else 0,
        )

    def _save_times(self) -> None:
        if self.journal is not None and self.times.cycles:
            counters = dict(getattr(self.cli, "commands", {}))
            counters["sdiag (arrival probe)"] = self._probe_calls + (
                self._executor.probe_calls if self._executor is not None else 0
            )
            self.journal.set_meta(cycle_meta_key(self.run_id), self.times.to_json(counters))
            self.times.flushed()
