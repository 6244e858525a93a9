"""What a Slurm job means to the controller: the hook's marker, comment options, its JobSpec.

The site's ``job_submit.lua`` marks engine-managed jobs (``AdminComment=gpuplan:held;gpus=N;
min=A;max=B``); users state work and speed in ``--comment gpuplan:work=...,rate=...``. This module
reads both — the comment with the hook's own grammar (:mod:`..slurm.comments`), the marker with
the partition's bounds, so a hostile value is refused, never trusted — tells which jobs the
controller manages, and turns one into the engine's :class:`JobSpec`. Pure functions of
``squeue --json`` rows: no Slurm command is run here.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable

from gpuplan.models import (
    Checkpointing,
    Cluster,
    Elasticity,
    InputError,
    JobAllocation,
    JobSpec,
    NodeShape,
    ThroughputProfile,
)

from ..slurm.cli import SlurmJob, gpus_in_tres
from ..slurm.comments import MAX_DURATION_S as MAX_DURATION_S  # re-exported (controller.py)
from ..slurm.comments import MAX_RATE as MAX_RATE
from ..slurm.comments import MAX_WORK as MAX_WORK
from ..slurm.comments import CommentError, Value, parse_comment

MARK = "gpuplan:"
"""Prefix of the hook's ``AdminComment`` marker (``gpuplan:<state>;gpus=N;min=A;max=B``)."""
FAILOPEN = "failopen"
REJECTED = "rejected"
"""Marker state of a job the controller released to Slurm's own scheduler because its spec no
longer fits the cluster (read from the journal, the partition shrank): not managed, not taken
back."""
REFUSED = "refused"
"""Marker state of a job the controller cannot read (a comment outside the grammar, marker
values outside the partition, a fault while adopting it): it stays HELD — never released to
Slurm's own scheduler, which would let whoever wrote it skip the engine's queue — and the
marker's ``why=`` tells its owner (``scontrol show job``) what to fix before resubmitting."""
NO_LIMIT = 0xFFFFFFFE
STOP_KINDS = frozenset({"resize", "migrate", "preempt", "evict", "stop"})
RUNNING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "SUSPENDED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)


def marker(admin_comment: str) -> tuple[str, dict[str, str]] | None:
    """``gpuplan:held;gpus=2;min=1;max=4`` -> ("held", {"gpus": "2", ...}); None if unmarked."""
    if not admin_comment.startswith(MARK):
        return None
    head, _, rest = admin_comment[len(MARK) :].partition(";")
    return head, dict(re.findall(r"([A-Za-z_]+)=([^,;]*)", rest))


def with_marker_state(admin_comment: str, state: str) -> str:
    """The same marker with another state word (``held`` <-> ``failopen``)."""
    found = marker(admin_comment)
    if found is None:
        return admin_comment
    _, _, rest = admin_comment[len(MARK) :].partition(";")
    return f"{MARK}{state};{rest}" if rest else f"{MARK}{state}"


def comment_options(comment: str) -> dict[str, Value]:
    """The job's ``--comment gpuplan:min=1,max=8,work=5000`` fields, typed, read with the hook's
    grammar (:func:`..slurm.comments.parse_comment`; ``{}`` for a comment that is not gpuplan's).
    Raises :class:`CommentError` for a gpuplan comment outside the grammar."""
    return parse_comment(comment)


def refused_marker(admin_comment: str, reason: str) -> str:
    """The marker of a refused job: state ``refused`` and, last, ``why=`` with the reason made
    safe for a marker field and for Slurm's line-based output (printable ASCII, no ``,``/``;``
    that would split it, at most 200 characters)."""
    why = re.sub(r"[^ -~]", "?", reason).replace(", ", " ").replace(",", " ").replace(";", " ")
    base = (
        with_marker_state(admin_comment, REFUSED)
        if marker(admin_comment) is not None
        else f"{MARK}{REFUSED}"
    )
    base = re.sub(r";why=.*$", "", base)
    return f"{base};why={why[:200]}"


def _executor_job(comment: str) -> bool:
    """Submitted by a library-driven SlurmExecutor (``run=``): that engine's, not ours. A
    comment outside the grammar is nobody's executor job: the controller refuses it."""
    try:
        return "run" in parse_comment(comment)
    except CommentError:
        return False


def engine_id(slurm_id: int) -> str:
    """The engine's id for a Slurm job (stable across controller restarts)."""
    return f"slurm-{slurm_id}"


def fingerprint(sj: SlurmJob) -> str:
    """What a Slurm job *is* (owner, name, comment, command, directory, output): stable across
    requeues — unlike its submit time, which Slurm resets at every requeue — so a journal row
    can tell its job from a later one that got the same id after slurmctld lost its state."""
    raw = sj.raw
    text = "\0".join(
        str(x)
        for x in (
            sj.user_id,
            sj.name,
            sj.comment,
            raw.get("command"),
            raw.get("current_working_directory"),
            raw.get("standard_output"),
        )
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _partitions(sj: SlurmJob) -> set[str]:
    return {p for p in sj.partition.split(",") if p}


def is_managed(sj: SlurmJob, partitions: Iterable[str] = ()) -> bool:
    """Marked by the hook, not released by fail-open, in one of ``partitions`` (all if empty),
    and not submitted by a library-driven :class:`SlurmExecutor` (comment ``gpuplan:run=...``:
    that engine owns it)."""
    found = marker(sj.admin_comment)
    if found is None or found[0] in (FAILOPEN, REJECTED, REFUSED) or _executor_job(sj.comment):
        return False
    wanted = set(partitions)
    return not wanted or bool(_partitions(sj) & wanted)


def is_failopen(sj: SlurmJob, partitions: Iterable[str] = ()) -> bool:
    """Released to Slurm's own scheduler by the fail-open watchdog (and in ``partitions``)."""
    found = marker(sj.admin_comment)
    wanted = set(partitions)
    return (
        found is not None
        and found[0] == FAILOPEN
        and (not wanted or bool(_partitions(sj) & wanted))
    )


def requested_type(sj: SlurmJob) -> str | None:
    """The GPU type the job asked for (``--gpus=a100:2``), None when untyped."""
    for spec in (sj.tres_per_node, sj.tres_per_job):
        match = re.search(r"gpu:([^:=,(]+):\d+", spec or "")
        if match:
            return match.group(1)
    return None


def requested_gpus(sj: SlurmJob) -> int:
    """GPUs the job asks for: the hook's ``gpus=`` field, else its TRES."""
    found = marker(sj.admin_comment)
    if found is not None and found[1].get("gpus", "").isdigit():
        return int(found[1]["gpus"])
    per_node = gpus_in_tres(sj.tres_per_node)
    if per_node:
        return per_node * max(1, int(sj.raw.get("node_count") or 1))
    return gpus_in_tres(sj.tres_per_job)


def spec_from_slurm(
    sj: SlurmJob, *, origin: float, cluster: Cluster, default_duration_s: float
) -> JobSpec:
    """The engine's view of a hook-marked Slurm job.

    * GPU range: the hook's marker (``min``/``max``; rigid when equal);
    * work: ``--comment gpuplan:...,work=ITERATIONS[,rate=ITER_PER_S_PER_GPU]`` or
      ``duration=SECONDS`` (at the requested size); else the job's time limit; else
      ``default_duration_s`` — length-aware policies (SRTF, AFS-L) need *some* estimate, and the
      time limit is the one every Slurm user already gives;
    * GPU type: only when the job asked for one (``--gpus=a100:2``);
    * node shape: :func:`node_shape` (single node unless the job starts its own ranks).
    """
    found = marker(sj.admin_comment)
    fields = found[1] if found else {}
    try:
        opts = comment_options(sj.comment)
    except CommentError as err:
        raise InputError(f"Slurm job {sj.job_id}: comment: {err}", field="comment") from None
    requested = requested_gpus(sj)
    capacity = cluster.total_gpus
    if not 1 <= requested <= capacity:
        raise InputError(
            f"Slurm job {sj.job_id} requests {requested} GPUs; the managed "
            f"partition has {capacity}",
            field="gpus",
        )
    lo = bounded_int(fields.get("min"), requested, 1, capacity, sj.job_id, "min")
    hi = bounded_int(fields.get("max"), requested, 1, capacity, sj.job_id, "max")
    if not lo <= requested <= hi:
        raise InputError(
            f"Slurm job {sj.job_id}: GPU request {requested} is outside its range "
            f"min={lo} max={hi}",
            field="min",
        )
    shape = node_shape(sj, fields, opts, requested, cluster)
    if shape.max_nodes == 1:
        # A single-node job can never use more GPUs than the largest node has.
        hi = min(hi, max(n.gpus for n in cluster.nodes))
    gtype = requested_type(sj)
    types = {n.gpu_type for n in cluster.nodes}
    ref = gtype if gtype in types else sorted(types)[0]
    # The grammar has bounded and typed every comment value already.
    throughput = ThroughputProfile.linear(float(opts.get("rate", 1.0)), reference_gpu=ref)
    work: dict[str, float] = {}
    if "work" in opts:
        work["total_iterations"] = float(opts["work"])
    elif "duration" in opts:
        work["duration"] = float(opts["duration"])
    else:
        limit = sj.raw.get("time_limit")
        minutes = int(limit) if isinstance(limit, int | float) else 0
        work["duration"] = minutes * 60.0 if 0 < minutes < NO_LIMIT else default_duration_s
    submit = sj.raw.get("submit_time")
    submit_wall = float(submit) if isinstance(submit, int | float) else time.time()
    user = str(sj.raw.get("user_name") or sj.user_id or "")
    return JobSpec(
        id=engine_id(sj.job_id),
        user=user,
        submit_time=max(0.0, submit_wall - origin),
        requested_gpus=requested,
        elasticity=Elasticity(min_gpus=lo, max_gpus=hi) if hi > lo else None,
        node_shape=shape,
        throughput=throughput,
        gpu_type=gtype,
        checkpoint=Checkpointing(on_signal=True),
        model=str(opts["model"]) if "model" in opts else None,
        **work,
    )


def starts_ranks(fields: dict[str, str], opts: dict[str, Value]) -> bool:
    """The job launches its own ranks on every node: the hook's ``ranks=1`` (from
    ``--ntasks-per-node`` or the comment), or ``ranks`` / ``ranks=1`` in the comment itself (a
    marker written by an older hook)."""
    return fields.get("ranks") == "1" or opts.get("ranks") == 1


def node_shape(
    sj: SlurmJob, fields: dict[str, str], opts: dict[str, Value], requested: int, cluster: Cluster
) -> NodeShape:
    """How the job's GPUs may spread over nodes, from the hook's ``nodes=``/``gpn=``/``ranks=``.

    A batch script that does not start its own ranks sees only its first node's GPUs, so it is
    a single-node job (``max_nodes=1``) — unless its request cannot fit one node, in which case
    it keeps exactly the hook's N x G. A job that starts ranks may span nodes; with a multi-node
    per-node request (``--nodes=N --gpus-per-node=G``) every node it uses holds G GPUs.
    """
    gpn = fields.get("gpn", "")
    per_node = (
        int(gpn)
        if gpn.isdigit() and 0 < int(gpn) <= 64
        else (gpus_in_tres(sj.tres_per_node) or None)
    )  # a marker from an older hook: the TRES
    nodes_text = fields.get("nodes", "") or str(sj.raw.get("node_count") or "")
    nodes = int(nodes_text) if nodes_text.isdigit() and 0 < int(nodes_text) <= 4096 else 1
    if starts_ranks(fields, opts):
        even = (
            per_node if nodes > 1 and per_node is not None and requested % per_node == 0 else None
        )
        return NodeShape(starts_ranks=True, gpus_per_node=even)
    if requested <= max(n.gpus for n in cluster.nodes):
        return NodeShape(max_nodes=1)
    if per_node is not None and per_node * nodes == requested:
        return NodeShape(max_nodes=nodes, gpus_per_node=per_node)
    return NodeShape()  # an uneven multi-node request: Slurm picks the split, so may we


def bounded_int(text: str | None, default: int, lo: int, hi: int, job_id: int, field: str) -> int:
    """A hook-supplied integer in ``[lo, hi]`` (``default`` when absent); else InputError."""
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 9 or not lo <= int(text) <= hi:
        raise InputError(
            f"Slurm job {job_id}: {field}={text[:20]!r} must be an integer in [{lo}, {hi}]",
            field=field,
        )
    return int(text)


def allocation_counts(alloc: JobAllocation | None) -> dict[str, int]:
    """node -> GPUs of an engine allocation (empty for none)."""
    return {n: len(g) for n, g in alloc.placement.items()} if alloc is not None else {}


def slurm_shape(sj: SlurmJob) -> dict[str, int]:
    """node -> GPUs of a running job (per-node TRES; an uneven per-job count is split evenly,
    which is all ``squeue`` tells without ``scontrol show job -d``)."""
    nodes = list(sj.nodes)
    if not nodes:
        return {}
    per_node = gpus_in_tres(sj.tres_per_node)
    if per_node:
        return dict.fromkeys(nodes, per_node)
    total = gpus_in_tres(sj.tres_per_job)
    base, extra = divmod(total, len(nodes))
    return {n: base + (1 if i < extra else 0) for i, n in enumerate(nodes)}
