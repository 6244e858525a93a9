"""The controller's side of decision reasons: journal them, log them, show them to users.

The engine hands one :class:`~gpuplan.models.reasons.DecisionRecord` per decision to
:meth:`ReasonPublisher.take` (its ``reasons`` recorder, :mod:`gpuplan.executors.reasons`),
inside the decision; :meth:`ReasonPublisher.publish`, called when the controller journals the
cycle, then

* logs each action the plan carried out at INFO, one line with its reason (a skipped one
  too, saying the restart gate skipped it);
* journals them (schema 3, :mod:`.journal_schema`): each action's reason onto its row of the
  ``actions`` table, each waiting job's current reason in ``jobs.waiting`` (rewritten when
  its text changes), and a row of the ``reasons`` table each time the *kind* (``code``) of a
  job's waiting reason changes or a change is skipped (not for every "behind N" count);
* shows each waiting job's reason to its owner, who cannot read the journal, in the job's
  admin comment: the hook's marker gets a last field ``wait=<reason>`` (``scontrol show job``,
  ``squeue -O AdminComment``). The text is made safe for the marker and Slurm's line-based
  output (:func:`wait_field`), and rewritten only when it changed, at most
  :data:`COMMENT_UPDATES_PER_CYCLE` jobs per cycle in the queue's order (each is one
  ``scontrol update``; the rest follow in later cycles).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpuplan.models.reasons import DecisionRecord, Reason

from ..slurm.cli import SlurmError
from .markers import MARK, marker

if TYPE_CHECKING:
    from ..slurm.cli import SlurmCli
    from ..slurm.cli_parsing import SlurmJob
    from .journal import Journal

log = logging.getLogger("gpuplan.controller")

COMMENT_UPDATES_PER_CYCLE = 20
"""Admin-comment rewrites per cycle (each one ``scontrol update``)."""
WAIT_CHARS = 160
"""The longest ``wait=`` text (Slurm keeps the whole comment; people read one line)."""


def wait_field(text: str) -> str:
    """``text`` as a marker field value: printable ASCII only, none of the marker's separators
    (``;`` ``,`` ``=``) that would split it or forge a field, at most :data:`WAIT_CHARS`."""
    clean = re.sub(r"[^ -~]", "?", text).replace(";", " ").replace(",", " ").replace("=", ":")
    clean = " ".join(clean.split())
    return clean if len(clean) <= WAIT_CHARS else clean[: WAIT_CHARS - 3] + "..."


def with_wait(admin_comment: str, text: str) -> str:
    """The marker with its ``wait=`` field (last) set to ``text`` ('' removes it); an unmarked
    comment is returned unchanged."""
    if marker(admin_comment) is None:
        return admin_comment
    base = re.sub(r";wait=[^;]*", "", admin_comment)
    return f"{base};wait={wait_field(text)}" if text else base


def current_wait(admin_comment: str) -> str:
    found = marker(admin_comment)
    return found[1].get("wait", "") if found is not None else ""


def reason_json(reason: Reason) -> str:
    return reason.model_dump_json()


class ReasonPublisher:
    """Journals, logs and shows the reasons of each decision (see the module docstring)."""

    def __init__(self, journal: Journal, cli: SlurmCli, *, comments: bool = True) -> None:
        self.journal = journal
        self.cli = cli
        self.comments = comments
        self._records: list[DecisionRecord] = []
        self._waiting: dict[str, str] = {}
        """engine id -> waiting reason text last journaled."""
        self._codes: dict[str, str] = {}
        """engine id -> code of the waiting reason last written to the history."""
        self._seen: dict[str, tuple[int, str]] = {}
        """engine id -> (Slurm id, admin comment) of each managed pending job, last poll."""

    def take(self, record: DecisionRecord) -> None:
        """The engine's sink: keep the record until :meth:`publish`."""
        self._records.append(record)

    def saw(self, jobs: Iterable[SlurmJob]) -> None:
        """The latest poll's managed pending jobs (their admin comments, to update)."""
        seen = {}
        for sj in jobs:
            if sj.state == "PENDING" and sj.admin_comment.startswith(MARK):
                seen[f"slurm-{sj.job_id}"] = (sj.job_id, sj.admin_comment)
        self._seen = seen

    def publish(self, epoch: int | None, pending: Iterable[str]) -> None:
        """Log, journal and show the records taken since the last call. ``epoch``: the
        journal epoch of the latest plan carried out; ``pending``: the engine's waiting jobs
        now (a job that left the queue loses its waiting reason)."""
        records, self._records = self._records, []
        actions: dict[str, str] = {}
        history: list[tuple[float, str, str, str]] = []
        latest: dict[str, Reason] | None = None
        for rec in records:
            for a in rec.actions:
                if a.carried:
                    log.info(
                        "%s %s (%d -> %d GPUs): %s",
                        a.kind,
                        a.job_id,
                        a.gpus_before,
                        a.gpus_after,
                        a.reason.text,
                    )
                    actions[a.job_id] = reason_json(a.reason)
                else:
                    log.info("skipped %s %s: %s", a.kind, a.job_id, a.reason.text)
                    history.append((rec.time, a.job_id, "skipped", reason_json(a.reason)))
            latest = rec.pending
        waiting: dict[str, str] = {}
        live = set(pending)
        if latest is not None:
            for eid, reason in latest.items():
                before = self._waiting.get(eid)
                if before != reason.text:
                    self._waiting[eid] = reason.text
                    self._codes.setdefault(eid, "")
                    text = reason_json(reason)
                    waiting[eid] = text
                    # History only when the kind of reason changes: "behind N jobs" moves
                    # with the queue, and a row per waiting job per start would grow the
                    # journal with the queue's length (jobs.waiting has the current text).
                    if self._codes[eid] != reason.code:
                        self._codes[eid] = reason.code
                        history.append((records[-1].time, eid, "waiting", text))
        for eid in [e for e in self._waiting if e not in live]:
            del self._waiting[eid]
            self._codes.pop(eid, None)
            waiting[eid] = ""
        try:
            self.journal.record_reasons(epoch if actions else None, actions, waiting, history)
        except Exception as err:  # reasons must never stop the controller
            log.warning("reasons not journaled: %s", err)
        if self.comments and latest is not None:
            self._show(latest)

    def _show(self, latest: dict[str, Reason]) -> None:
        budget = COMMENT_UPDATES_PER_CYCLE
        for eid, reason in latest.items():
            if budget <= 0:
                break
            seen = self._seen.get(eid)
            if seen is None:
                continue
            slurm_id, comment = seen
            want = wait_field(reason.text)
            if current_wait(comment) == want:
                continue
            budget -= 1
            new = with_wait(comment, reason.text)
            try:
                self.cli.update_job(slurm_id, AdminComment=new)
            except SlurmError as err:
                log.info("admin comment of %s not updated: %s", eid, err)
                continue
            self._seen[eid] = (slurm_id, new)
