"""The records the journal reads and writes (:mod:`.journal`): one frozen row type per table,
and the functions that build them from SQLite rows.

Why its own module: these change with the schema (journal_schema.py and its migrations), not
with the journal's transactions, locking or pruning.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job as the journal last recorded it."""

    engine_id: str
    slurm_id: int
    fingerprint: str
    submit_time: float
    spec: dict[str, Any] | None
    state: str
    done: float
    gpus: int
    placement: dict[str, int]
    restart_count: int
    first_seen: float
    updated: float
    reason: str
    waiting: str = ""
    """A pending job's reason at the latest decision, JSON ``{"code", "text", "terms"}``
    (schema 3; ``''``: not pending, or none computed yet)."""


@dataclass(frozen=True, slots=True)
class ReasonRow:
    """One entry of a job's reason history (schema 3): ``kind`` ``waiting`` (its waiting
    reason changed) or ``skipped`` (the restart gate skipped a change the policy proposed);
    ``reason`` is the JSON of a :class:`gpuplan.models.reasons.Reason`."""

    id: int
    time: float
    engine_time: float
    engine_id: str
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class ActionIntent:
    """An action about to be carried out. ``before``/``after`` are node -> GPU count (the shape
    Slurm enforces); ``restart_count`` is Slurm's ``restart_cnt`` of the job just before acting,
    which tells a restarted controller whether the job was requeued since."""

    engine_id: str
    slurm_id: int | None
    kind: str
    before: Mapping[str, int]
    after: Mapping[str, int]
    restart_count: int | None


@dataclass(frozen=True, slots=True)
class ActionRow:
    """One journaled action."""

    id: int
    epoch: int | None
    run_id: int
    engine_id: str
    slurm_id: int | None
    kind: str
    before: dict[str, int]
    after: dict[str, int]
    restart_count: int | None
    status: str
    intended_at: float
    settled_at: float | None
    detail: str
    reason: str = ""
    """Why the policy took it, JSON ``{"code", "text", "terms"}`` (schema 3; ``''``: none)."""


@dataclass(frozen=True, slots=True)
class RunRow:
    """One controller process (``ended`` is None for the live one and for killed ones)."""

    run_id: int
    pid: int
    host: str
    policy: str
    started: float
    last_seen: float
    ended: float | None
    exit: str | None
    version: str = ""
    """The gpuplan release that ran it (schema 2; '' for runs of an older release)."""


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """Progress/state of one job for :meth:`Journal.update_jobs`."""

    engine_id: str
    state: str
    done: float
    gpus: int = 0
    placement: Mapping[str, int] | None = None
    restart_count: int | None = None
    reason: str | None = None


def job_row(r: sqlite3.Row) -> JobRow:
    return JobRow(
        engine_id=r["engine_id"],
        slurm_id=int(r["slurm_id"]),
        fingerprint=r["fingerprint"],
        submit_time=float(r["submit_time"]),
        spec=json.loads(r["spec"]) if r["spec"] else None,
        state=r["state"],
        done=float(r["done"]),
        gpus=int(r["gpus"]),
        placement=json.loads(r["placement"] or "{}"),
        restart_count=int(r["restart_count"]),
        first_seen=float(r["first_seen"]),
        updated=float(r["updated"]),
        reason=r["reason"],
        waiting=r["waiting"],
    )


def action_row(r: sqlite3.Row) -> ActionRow:
    return ActionRow(
        id=int(r["id"]),
        epoch=r["epoch"],
        run_id=int(r["run_id"]),
        engine_id=r["engine_id"],
        slurm_id=r["slurm_id"],
        kind=r["kind"],
        before=json.loads(r["before"] or "{}"),
        after=json.loads(r["after"] or "{}"),
        restart_count=r["restart_count"],
        status=r["status"],
        intended_at=float(r["intended_at"]),
        settled_at=r["settled_at"],
        detail=r["detail"],
        reason=r["reason"],
    )
