"""EDL-style in-place resizing of SSH-run jobs (stop-free scaling, paper 003 §4.2).

Why: a checkpoint-restart resize costs the job a stop, a process start and a checkpoint read
(seconds on the lab, tens of seconds for a real model). EDL instead tells the *running* job its
new GPU set and lets it switch between two mini-batches. Here the executor sends the job's
sidecar a ``run`` control with ``in_place: true`` and the new GPUs; the sidecar writes
``resize.json``, sends the training process SIGUSR2 and waits for its progress file to report
the new GPU count from the same PID (see :mod:`.agent` and :mod:`gpuplan.executors.standin`).

Scope, deliberately narrow: a **single-rank job whose GPUs change on the same node**. A move
to other nodes or a multi-node job needs new ranks and a new split of the remaining work, so it
is carried out by the usual checkpoint-restart, and the executor logs and counts that
degradation. If the process does not acknowledge in time, the sidecar itself falls back to a
checkpoint-restart on the new GPUs; the measured pause is reported either way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gpuplan.models import Action, JobAllocation

from .launchers import Launcher
from .remote import REMOTE_ERRORS, SidecarNodes
from .state import JobRun, SshSettings


@dataclass(frozen=True)
class InPlaceResult:
    """Outcome of one in-place request: ``mode`` is ``in_place`` (the same process switched),
    ``restart`` (the sidecar fell back to a checkpoint-restart) or ``failed`` (no answer; the
    next poll judges the job). ``pause_s``: request to acknowledgement, wall-clock."""

    mode: str
    pause_s: float
    pid_before: int | None
    pid_after: int | None


def in_place_blocker(
    run: JobRun | None, action: Action, launcher: Launcher, settings: SshSettings
) -> str | None:
    """Why ``action`` cannot be an in-place resize (None: it can)."""
    if not settings.in_place_resize or not launcher.resizes_in_place:
        return "in-place resizing is off"
    if action.kind != "resize" or action.before is None or action.after is None:
        return f"a {action.kind} is not a resize"
    if run is None or run.state != "running" or len(run.ranks) != 1:
        return "not a running single-rank job"
    nodes_before, nodes_after = set(action.before.placement), set(action.after.placement)
    if nodes_before != nodes_after or len(nodes_after) != 1:
        return f"placement moves from {sorted(nodes_before)} to {sorted(nodes_after)}"
    rank = next(iter(run.ranks.values()))
    if not rank.sidecar_alive or rank.node not in nodes_after:
        return "its sidecar is not known alive on that node"
    return None


async def resize_in_place(
    nodes: SidecarNodes, run: JobRun, alloc: JobAllocation, settings: SshSettings
) -> InPlaceResult:
    """Ask the job's only rank to switch to ``alloc``'s GPUs on its node (see the module
    docstring); updates the rank's GPUs when the sidecar acknowledged either way."""
    node, rank = next(iter(run.ranks.items()))
    gpus = tuple(alloc.placement[node])
    control = {
        "action": "run",
        "in_place": True,
        "gen": run.gen,
        "rank": rank.rank,
        "nranks": 1,
        "gpus": list(gpus),
        "devices": nodes.bind(node, gpus),
        "files": dict(rank.files),
    }
    t0 = time.time()
    try:
        res = await nodes.control(
            node, rank, control, settings.stop_wait + settings.command_timeout_s
        )
    except REMOTE_ERRORS:
        return InPlaceResult("failed", time.time() - t0, None, None)
    seq = nodes.seq.get(rank.dir)
    state: dict[str, Any] = res.get("state") or {}
    if not res.get("ok"):
        return InPlaceResult("failed", time.time() - t0, None, state.get("child_pid"))
    rank.gpus = gpus
    rank.sidecar_alive = bool(res.get("alive"))
    record = next((r for r in reversed(state.get("resizes") or []) if r.get("seq") == seq), None)
    if record is not None and record.get("ok"):
        pause = float(record["t_ack"]) - float(record["t_request"])
        return InPlaceResult("in_place", pause, state.get("child_pid"), state.get("child_pid"))
    return InPlaceResult("restart", time.time() - t0, None, state.get("child_pid"))
