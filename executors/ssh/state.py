"""Settings of the SSH executor and what it records about jobs, ranks and found sidecars.

Also the start-up classification of what the sidecars on the nodes report
(:func:`classify_found`): after an engine restart, each job is found running, completed, or
partial (to be cleaned), and :func:`run_from_found` rebuilds the executor's record of a job found
running.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplan.models import JobSpec

log = logging.getLogger("gpuplan.executors.ssh.executor")


@dataclass(frozen=True)
class SshSettings:
    """Knobs of the SSH executor. Times in seconds."""

    known_hosts: str
    client_keys: tuple[str, ...]
    run_root: str = ".gpuplan/runs"
    """Directory on every node holding the sidecar script, the lease and one dir per job.
    Relative paths are under the login user's home. gpuplan creates it 0700 and refuses one
    that is a symlink, not owned by the login user, open to others, or below a directory
    others may write (unless sticky): see docs/ssh.md, threat model."""
    remote_python: str = "python3"
    """Interpreter on the nodes for the (stdlib-only) sidecar."""
    poll_interval_s: float = 1.0
    connect_timeout_s: float = 5.0
    command_timeout_s: float = 30.0
    lease_s: float = 30.0
    """Sidecars fence themselves (checkpoint-stop) when the engine has not touched their node
    for this long. 0 disables fencing (then a node failure can leave a job running twice)."""
    ckpt_grace_s: float = 30.0
    """How long a job may take to checkpoint and exit after the checkpoint signal."""
    term_grace_s: float = 5.0
    """After that, SIGTERM to the process group; SIGKILL after this much longer."""
    failure_after_s: float | None = None
    """Unreachable this long -> NodeFailure. Default: lease + both graces + 2 polls, the time
    after which every sidecar on the node has fenced itself."""
    max_restarts: int = 3
    restart_estimate_s: float = 2.0
    """Reported restart latency until one has been measured."""
    startup_estimate_s: float = 0.5
    """Assumed time from launch to training progress until measured."""
    checkpoint_signal: str = "SIGUSR1"
    deadline_s: float | None = None
    """Safety net: ``next_events`` ends the run at this engine time."""
    ssh_config: tuple[str, ...] = ()
    inventory_interval_s: float = 10.0
    """How often each node's agent is asked for its NVML inventory (GPU UUIDs and health);
    0 turns it off (bind by index, no health checks)."""
    in_place_resize: bool = False
    """EDL-style stop-free resizing: a single-node job whose GPUs change on the same node is
    resized by its running process (SIGUSR2 + ``resize.json``, see the sidecar) instead of a
    checkpoint-restart, when the launcher supports it. Other resizes still restart (logged)."""

    @property
    def fail_after(self) -> float:
        if self.failure_after_s is not None:
            return self.failure_after_s
        return self.lease_s + self.ckpt_grace_s + self.term_grace_s + 2 * self.poll_interval_s

    @property
    def stop_wait(self) -> float:
        return self.ckpt_grace_s + self.term_grace_s + 5.0


@dataclass
class RankRun:
    """One rank of a running job: its node, GPUs, sidecar directory and work target."""

    node: str
    rank: int
    gpus: tuple[int, ...]
    dir: str
    target: float | None = None
    start_done: float = 0.0
    files: dict[str, str] = field(default_factory=dict)
    sidecar_alive: bool = False
    startup_measured: bool = False


@dataclass
class JobRun:
    """What the executor knows about one job's execution on the nodes."""

    spec: JobSpec
    gen: int = 0
    ranks: dict[str, RankRun] = field(default_factory=dict)
    state: str = "idle"  # running | stopped | completed | completed_unreported | failed
    ckpt: dict[str, float] = field(default_factory=dict)
    restart_t0: float | None = None
    adopted: bool = False


@dataclass
class FoundJob:
    """A job found on the nodes at start-up (engine restart)."""

    job_id: str
    gen: int
    kind: str  # running | completed | partial
    ranks: dict[str, dict[str, Any]]  # node -> status entry, latest generation

    @property
    def placement(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(e["control"]["gpus"]) for n, e in self.ranks.items()}


@dataclass
class Reconciled:
    """What the sidecars on the nodes say at start-up (see :func:`classify_found`)."""

    found: dict[str, FoundJob] = field(default_factory=dict)
    """Jobs whose latest generation is complete on every rank: running or completed."""
    gens: dict[str, int] = field(default_factory=dict)
    """Latest generation per job id (new launches continue from there)."""
    seqs: dict[str, int] = field(default_factory=dict)
    """Highest control sequence number per sidecar directory."""
    stale: list[tuple[str, str]] = field(default_factory=list)
    """(node, dir) of sidecars to kill: older generations, and every rank of a partial job."""
    fenced: set[str] = field(default_factory=set)
    """Jobs a rank of whose latest generation fenced itself (its lease ran out while no engine
    renewed it): they restart from their checkpoints, they cannot be adopted."""


def classify_found(statuses: Mapping[str, Mapping[str, dict[str, Any]]]) -> Reconciled:
    """Group the nodes' sidecar statuses by job; keep each job's latest generation; call it
    completed (every rank completed), running (every rank alive and running) or partial."""
    out = Reconciled()
    by_job: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for node, entries in statuses.items():
        for entry in entries.values():
            job_id = entry["spec"].get("job_id")
            if not isinstance(job_id, str):
                continue
            by_job.setdefault(job_id, []).append((node, entry))
            seq = entry["control"].get("seq") or 0
            out.seqs[entry["dir"]] = max(out.seqs.get(entry["dir"], 0), int(seq))
    for job_id, items in by_job.items():
        gen = max(int(e["control"].get("gen") or 0) for _, e in items)
        out.gens[job_id] = gen
        latest = {n: e for n, e in items if int(e["control"].get("gen") or 0) == gen}
        out.stale += [
            (n, e["dir"])
            for n, e in items
            if int(e["control"].get("gen") or 0) != gen and e["sidecar_alive"]
        ]
        nranks = int(next(iter(latest.values()))["control"].get("nranks") or 1)
        complete = len(latest) == nranks and all(
            e["state"].get("phase") == "completed" and e["files"].get("done", True)
            for e in latest.values()
        )
        running = len(latest) == nranks and all(
            e["sidecar_alive"]
            and e["child_alive"]
            and e["state"].get("phase") == "running"
            and e["control"].get("action") == "run"
            for e in latest.values()
        )
        kind = "completed" if complete else "running" if running else "partial"
        if kind == "partial" and any(e["state"].get("phase") == "fenced" for e in latest.values()):
            out.fenced.add(job_id)
        if kind == "partial":
            out.stale += [
                (n, e["dir"]) for n, e in latest.items() if e["sidecar_alive"] or e["child_alive"]
            ]
        if kind != "partial":
            out.found[job_id] = FoundJob(job_id, gen, kind, latest)
        log.info("reconcile: job %r gen %d on %s: %s", job_id, gen, sorted(latest), kind)
    return out


def run_from_found(found: FoundJob, spec: JobSpec | None) -> JobRun:
    """The executor's record of a job found running (``spec`` None: a placeholder for a job the
    new engine does not know, only to stop it)."""
    run = JobRun(
        spec=spec
        or JobSpec(id=found.job_id, submit_time=0, requested_gpus=1, total_iterations=1.0),
        gen=found.gen,
        state="running",
        adopted=True,
    )
    for node, entry in found.ranks.items():
        ctl = entry["control"]
        ckpt = entry["files"].get("checkpoint")
        run.ranks[node] = RankRun(
            node=node,
            rank=int(ctl.get("rank") or 0),
            gpus=tuple(ctl.get("gpus") or ()),
            dir=entry["dir"],
            target=None,
            start_done=float(ckpt["done"]) if isinstance(ckpt, dict) else 0.0,
            files=dict(ctl.get("files") or {}),
            sidecar_alive=bool(entry["sidecar_alive"]),
        )
    return run
