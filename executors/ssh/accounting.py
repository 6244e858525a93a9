"""Sum-over-ranks progress accounting of SSH-run jobs, from their sidecars' status entries.

A job's progress is the sum of its rank checkpoints (ranks of earlier, wider placements keep
their share) plus what the current ranks report since (see the executor's module docstring).
These functions read one poll's status entries and re-anchor the engine's ``ActiveJob``; the
latencies they measure go to the shared
:class:`~gpuplan.executors.progress_core.ProgressCore`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.models import ActiveJob

from ..progress_core import ProgressCore, extrapolate
from .state import JobRun, RankRun

Statuses = Mapping[str, Mapping[str, dict[str, Any]]]
"""node -> sidecar directory -> status entry (one poll)."""


def rank_state(run: JobRun, rank: RankRun, entry: dict[str, Any] | None) -> str:
    """``running``, ``completed``, ``failed`` or ``lost`` (no sidecar) for one rank."""
    if entry is None:
        return "lost"
    state = entry["state"]
    phase = state.get("phase")
    if state.get("gen") != run.gen:
        return "running" if entry["sidecar_alive"] else "lost"
    if phase == "completed":
        return "completed" if entry["files"].get("done", True) else "failed"
    if phase in ("failed", "fenced", "exited", "stopped"):
        return "failed"
    if not entry["sidecar_alive"]:
        return "lost"
    return "running"  # includes a child that just died and is not reaped yet


def measure_progress(
    run: JobRun,
    job: ActiveJob,
    entries: Mapping[str, dict[str, Any] | None],
    t: float,
    core: ProgressCore,
    wall: float,
) -> None:
    """Re-anchor the job's progress at engine time ``t`` on what its ranks report (read at wall
    time ``wall``); record
    the start latency of each new rank and, once every rank of a restarted job progresses,
    the restart latency."""
    total_gpus = sum(len(r.gpus) for r in run.ranks.values())
    current = {r.files.get("checkpoint") for r in run.ranks.values()}
    total = sum(v for p, v in run.ckpt.items() if p not in current)
    fresh = True
    started = 0.0
    for node, rank in run.ranks.items():
        entry = entries.get(node) or {}
        progress = (entry.get("files") or {}).get("progress")
        state = entry.get("state") or {}
        cap = rank.target if rank.target is not None else run.spec.work
        if (
            isinstance(progress, dict)
            and state.get("phase") == "completed"
            and state.get("gen") == run.gen
        ):
            total += min(float(progress["done"]), cap)  # this rank is done, others not yet
        elif isinstance(progress, dict) and progress.get("pid") == state.get("child_pid"):
            share = job.rate * len(rank.gpus) / total_gpus if total_gpus else 0.0
            done = extrapolate(float(progress["done"]), share, wall - float(progress["time"]))
            total += min(done, cap)
            started = max(started, float(progress.get("started", 0.0)))
            if not rank.startup_measured and state.get("child_started_at"):
                rank.startup_measured = True
                core.record_start_latency(
                    max(0.0, float(progress["started"]) - float(state["child_started_at"]))
                )
        else:
            fresh = False
            total += rank.start_done
    job.settle(max(t, job.anchor_time))
    job.done = min(run.spec.work, total)
    if fresh and run.restart_t0 is not None:
        latency = max(0.0, started - run.restart_t0)
        run.restart_t0 = None
        core.record_restart_latency(latency, run.spec.id)


def reported_progress(run: JobRun, status: Statuses) -> float:
    """Iterations the job's ranks last reported (a lower bound of what they had done):
    the base for lost-work accounting after a crash, free of the model's extrapolation."""
    current = {r.files.get("checkpoint") for r in run.ranks.values()}
    total = sum(v for p, v in run.ckpt.items() if p not in current)
    for node, rank in run.ranks.items():
        entry = status.get(node, {}).get(rank.dir) or {}
        progress = (entry.get("files") or {}).get("progress")
        done = float(progress["done"]) if isinstance(progress, dict) else 0.0
        total += max(done, rank.start_done)
    return total
