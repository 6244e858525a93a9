"""Records of a Slurm-executed job: its runs (segments), actions, Slurm shape and tracking state.

:class:`Segment` and :class:`ActionRecord` are what a run leaves for tests and reports;
:class:`JobShape` is an allocation as Slurm sees it (nodes + GPUs per node or per job);
:class:`TrackedJob` is the executor's (and the controller's) state of one engine job.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.models import ActiveJob, JobSpec

from .cli import compress_hostlist


@dataclass(slots=True)
class Segment:
    """One incarnation of a job on Slurm (from a release to the exit of that run).

    ``start_done`` is the checkpoint the run resumed from, ``end_done`` the checkpoint it left.
    Consecutive segments of a job must chain (``start_done == previous end_done``) and the last
    must end at the job's work: that is "nothing lost, nothing done twice".
    """

    job_id: str
    slurm_id: int
    gpus: int
    nodes: tuple[str, ...]
    start_done: float
    released: float
    end_done: float | None = None
    ended: float | None = None
    how: str = ""
    kind: str = "start"
    """Why this run began: ``start`` (first or after a preemption), ``resize``, ``migrate`` or
    ``restart`` (in place, after an unplanned stop)."""
    observed_gpus: int | None = None
    first_progress: float | None = None


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One action as carried out (engine time, kind, GPU counts, wall seconds spent)."""

    time: float
    kind: str
    job_id: str
    slurm_id: int | None
    gpus_before: int
    gpus_after: int
    seconds: float


@dataclass(frozen=True, slots=True)
class JobShape:
    """An allocation as Slurm describes it: node list, GPUs per node (None when the nodes get
    different counts: then a per-job total) and the GPU type (None: untyped)."""

    nodes: tuple[str, ...]
    per_node: int | None
    total: int
    gpu_type: str | None

    def tres(self) -> tuple[str, str]:
        """(TresPerNode, TresPerJob) for ``scontrol update``; exactly one is non-empty."""
        t = f"{self.gpu_type}:" if self.gpu_type else ""
        if self.per_node is not None:
            return f"gres:gpu:{t}{self.per_node}", ""
        return "", f"gres:gpu:{t}{self.total}"

    def sbatch_options(self) -> list[str]:
        """``--nodes``, ``--nodelist`` and the GPU request of ``sbatch``."""
        t = f"{self.gpu_type}:" if self.gpu_type else ""
        gpus = (
            f"--gres=gpu:{t}{self.per_node}"
            if self.per_node is not None
            else f"--gpus={t}{self.total}"
        )
        return [f"--nodes={len(self.nodes)}", f"--nodelist={compress_hostlist(self.nodes)}", gpus]


@dataclass(slots=True)
class TrackedJob:
    """What the Slurm executor knows about one engine job (its Slurm id, shape, run state)."""

    spec: JobSpec
    key: str
    job: ActiveJob | None = None
    slurm_id: int | None = None
    shape: JobShape | None = None
    running: bool = False
    """Released to Slurm and believed running by the engine."""
    stopped_at: float = 0.0
    """Wall time the last incarnation was seen gone (for the credential guard)."""
    requeued: bool = False
    completed: bool = False
    segment: Segment | None = None
    progress_seen: float = 0.0
    last_progress: tuple[float, float] | None = None
    """(done, wall time) of the newest progress record of the current incarnation."""
    rate_probe: tuple[float, float] | None = None
    restart_count: int = 0
    stop_wall: float | None = None


def shape_counts(shape: JobShape | None) -> dict[str, int]:
    """node -> GPUs of a shape (an uneven per-job total is split as evenly as possible)."""
    if shape is None or not shape.nodes:
        return {}
    if shape.per_node is not None:
        return dict.fromkeys(shape.nodes, shape.per_node)
    base, extra = divmod(shape.total, len(shape.nodes))
    return {n: base + (1 if i < extra else 0) for i, n in enumerate(shape.nodes)}
