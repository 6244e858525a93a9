"""What a Slurm job runs and how it is named: the launcher, command builders, keys, comments.

Everything here is fixed at submit time and replayed by Slurm on every requeue: the two-line
launcher script (``exec "$@"``, so nothing is run through a shell), the job's argv (built by a
:data:`CommandBuilder`, by default the stand-in), its file-safe state-file key, its Slurm job name
and the ``--comment`` that marks it as this engine run's. :func:`cluster_from_slurm` builds the
engine's :class:`Cluster` from ``sinfo --json``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from gpuplan.models import Cluster, GpuType, JobSpec, Node
from gpuplan.models.gpu import KNOWN_GPU_TYPES

from .cli import SlurmCli, SlurmError
from .comments import CommentError
from .comments import parse_comment as grammar_parse

STANDIN_MODULE = "gpuplan.executors.standin"
COMMENT_TAG = "gpuplan"

LAUNCHER = """#!/bin/sh
# gpuplan launcher: run the job's argument vector exactly as given. "$@" is expanded without
# word splitting or globbing and nothing is eval'ed, so quotes, $(...), backticks, ';' and
# newlines inside arguments stay plain data.
exec "$@"
"""


@dataclass(frozen=True, slots=True)
class LaunchContext:
    """What a command builder may use to build a job's argv."""

    spec: JobSpec
    key: str
    """File-safe name for the job's state files (engine ids may contain anything)."""
    state_dir: Path
    rate_per_gpu: float
    """Iterations/s per GPU the job should run at (from the job's throughput profile)."""


CommandBuilder = Callable[[LaunchContext], Sequence[str]]


def standin_command(
    python: str = sys.executable,
    module: str | None = STANDIN_MODULE,
    script: str | Path | None = None,
    checkpoint_interval_s: float | None = None,
) -> CommandBuilder:
    """Command builder for the stand-in training job (``python script`` or ``python -m module``).

    The argv is fixed at submit time and Slurm replays it on every requeue, so it carries the
    per-GPU rate; the stand-in multiplies by the GPUs it finds in ``CUDA_VISIBLE_DEVICES``.

    By default the stand-in module is run *by its file path*: it only needs the standard
    library, while ``-m gpuplan.executors.standin`` first imports the whole ``gpuplan`` package
    (~0.4 s of CPU, seconds when several jobs start at once on a small node), which would show
    up as restart latency. The file must be readable on the nodes (a shared install at a site).
    """
    if script is None and module == STANDIN_MODULE:
        spec = importlib.util.find_spec(STANDIN_MODULE)
        if spec is not None and spec.origin:
            script = spec.origin

    def build(ctx: LaunchContext) -> list[str]:
        head = [python, str(script)] if script is not None else [python, "-m", str(module)]
        # "--job-id=X", not "--job-id X": an id starting with "-" is not an option
        argv = [
            *head,
            f"--job-id={ctx.key}",
            "--work",
            repr(float(ctx.spec.work)),
            "--rate-per-gpu",
            repr(float(ctx.rate_per_gpu)),
            "--state-dir",
            str(ctx.state_dir),
        ]
        if checkpoint_interval_s is not None:
            argv += ["--checkpoint-interval", repr(float(checkpoint_interval_s))]
        return argv

    return build


def file_key(job_id: str) -> str:
    """A file-name-safe, collision-free key for an engine job id."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)[:48].lstrip(".") or "job"
    return f"{safe}-{hashlib.sha256(job_id.encode()).hexdigest()[:10]}"


def job_name(job_id: str) -> str:
    """Slurm job name: the engine id with control characters replaced (Slurm's text outputs are
    line-based); quotes, ``$``, backticks and ``;`` are kept verbatim — they are only data."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", job_id)[:200] or "job"


def parse_comment(comment: str) -> dict[str, str]:
    """``gpuplan:run=R;id=ENC;min=1;max=4`` -> fields as text (``id`` percent-decoded), read
    with the hook's grammar (:mod:`.comments`); ``{}`` for any other comment, including one
    outside the grammar (no executor of ours wrote it)."""
    if not comment.startswith(COMMENT_TAG + ":"):
        return {}
    try:
        parsed = grammar_parse(comment)
    except CommentError:
        return {}
    fields = {key: str(value) for key, value in parsed.items()}
    if "id" in fields:
        fields["id"] = unquote(fields["id"])
    return fields


def cluster_from_slurm(cli: SlurmCli, nodes: Iterable[str] | None = None) -> Cluster:
    """The engine's :class:`Cluster` as Slurm describes it (``sinfo --json``): one node per Slurm
    node with GPUs, GPU type from its gres (unknown types are declared with speed 1.0)."""
    wanted = set(nodes) if nodes is not None else None
    found: list[Node] = []
    types: dict[str, GpuType] = {}
    for n in cli.nodes():
        if (wanted is not None and n.name not in wanted) or n.gpus < 1:
            continue
        gtype = n.gpu_type or "gpu"
        if gtype not in KNOWN_GPU_TYPES:
            types[gtype] = GpuType(name=gtype)
        found.append(Node(name=n.name, gpus=n.gpus, gpu_type=gtype))
    if not found:
        raise SlurmError("no Slurm node with GPUs found (sinfo --json)")
    return Cluster(nodes=found, gpu_types=types)
