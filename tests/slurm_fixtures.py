"""Helpers for the real-Slurm tests (imported by ``tests/slurm/test_slurm.py``; no conftest magic).

* :func:`start_lab` brings the lab up through ``tests.labs.slurm.lab`` and turns a failure
  into ``pytest.fail`` under CI (``CI`` set to a true value, or ``GPUPLAN_REQUIRE_SLURM=1``) and
  ``pytest.skip`` elsewhere: a CI run that silently skips the cluster tests would hide a broken
  set-up step, while a laptop without root or apt should still run the rest of the suite.
* :func:`e2e_workload` is the end-to-end workload for the registered AFS-P policy on
  :data:`E2E_NODES`.
* :func:`assert_progress_conserved` checks "nothing lost, nothing done twice" twice over: from
  the executor's record of every Slurm run (resume point -> checkpoint at exit) and from the
  stand-in's own ``ID.log`` of committed segments.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gpuplan.executors import standin
from gpuplan.executors.engine import Engine
from gpuplan.executors.slurm.executor import (
    CommandBuilder,
    SlurmExecutor,
    cluster_from_slurm,
    file_key,
    standin_command,
)
from gpuplan.models import (
    Checkpointing,
    Cluster,
    Elasticity,
    JobSpec,
    ThroughputProfile,
)
from tests.lab_reaper import stop_stray_controllers
from tests.labs.slurm.lab import LabConfig, LabError, SlurmLab, lock_path, open_lock
from tests.labs.slurm.lab_config import DEFAULT_ROOT

LAB_ROOT = Path(os.environ.get("GPUPLAN_SLURM_LAB", "") or DEFAULT_ROOT)
"""The lab's root: ``GPUPLAN_SLURM_LAB`` or the default. Either way the lab creates it private
or refuses it (one line, the test then fails under CI or skips) when another user owns it or
can write it."""
GPUS_PER_NODE = 4
NODES = 4
UNPRIVILEGED_USER = "gpuuser"
OWNER = "pytest"


def required() -> bool:
    """True when a missing or broken lab must fail the run instead of skipping it."""
    truthy = ("1", "true", "yes", "on")
    return (
        os.environ.get("CI", "").lower() in truthy
        or os.environ.get("GPUPLAN_REQUIRE_SLURM", "").lower() in truthy
    )


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere, with the same reason."""
    if required():
        pytest.fail(f"Slurm lab required (CI) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"Slurm lab unavailable: {reason}")


def lab_session(config: LabConfig | None = None) -> Iterator[SlurmLab]:
    """Generator for a session fixture: lock the lab, bring it up, hand it out, and at the end
    stop it if a test session started it (this one, or an earlier one that died before its
    teardown) — a lab a developer started with the CLI is left running. The lock serialises
    test sessions that share the machine (they would otherwise share one cluster and tear it
    down under each other)."""
    if os.geteuid() != 0:
        unavailable("needs root (slurmd, munged and cgroups run as root)")
    lab = SlurmLab(
        config
        or LabConfig(
            root=LAB_ROOT,
            nodes=NODES,
            gpus_per_node=GPUS_PER_NODE,
            gpu_type="a100",
            job_submit_lua=True,
        )
    )
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(lab.exclusive(timeout_s=600))
        except LabError as err:
            unavailable(str(err))
        _stop_strays(lab, "before")
        start_lab(lab)
        try:
            yield lab
        finally:
            _stop_strays(lab, "after")
            if not lab.reused or lab.owner == OWNER:
                lab.down()


def _stop_strays(lab: SlurmLab, when: str) -> None:
    """A test session holds the lab's partition alone: controllers an earlier (killed) session
    left attached to it, or that a test of this one failed to stop, are stopped (and named)."""
    stopped = stop_stray_controllers(lab.conf_path)
    if stopped:
        print(f"slurm lab {lab.root}: stopped stray controllers {stopped} ({when} the session)")


def lab_locked_here(lab_root: Path = LAB_ROOT) -> bool:
    """True when this very process already holds the lab (``tests/slurm/test_slurm.py``'s session
    fixture ran first): taking the lock again would wait for ourselves until it timed out.
    The lock lives in the lab's private root; it is read only when that root passes the lab's
    own checks (``SlurmLab.env`` verifies it) and opened the lab's safe way."""
    path = lock_path(lab_root)
    try:
        SlurmLab(LabConfig(root=lab_root)).env  # noqa: B018 - the root's check
        with open_lock(path) as fh:
            holder = int(fh.read().strip() or 0)
    except (LabError, ValueError):
        return False
    if holder != os.getpid():
        return False
    with open_lock(path) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def module_lab() -> Iterator[SlurmLab]:
    """Generator for a module fixture: the lab this test session already holds (left to its
    owner to stop), else one of its own through :func:`lab_session` (locked, stopped and
    released when the module is done)."""
    if lab_locked_here():
        yield start_lab(
            SlurmLab(
                LabConfig(
                    root=LAB_ROOT,
                    nodes=NODES,
                    gpus_per_node=GPUS_PER_NODE,
                    gpu_type="a100",
                    job_submit_lua=True,
                )
            )
        )
        return
    session = lab_session()
    yield next(session)
    session.close()


def start_lab(lab: SlurmLab) -> SlurmLab:
    """Bring ``lab`` up; any failure fails (CI) or skips (elsewhere) with its reason."""
    try:
        lab.up(timeout_s=120, owner=OWNER)
    except Exception as err:
        try:
            lab.down()
        finally:
            unavailable(f"{type(err).__name__}: {err}")
    return lab


def shared_job_dir(prefix: str) -> Path:
    """A directory the job owner can write and the controller can read (the stand-in, its
    batch script, state and logs): the "shared file system" of a real site. The controller's
    own state goes in ``state/``, private (0700), never in the users' shared part."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o777)
    shutil.copy(standin.__file__, path / "standin.py")
    (path / "run.sh").write_text('#!/bin/sh\n# a user\'s batch script\nexec "$@"\n')
    (path / "run.sh").chmod(0o755)
    (path / "state").mkdir(mode=0o700)
    return path


def ensure_user(name: str = UNPRIVILEGED_USER) -> pwd.struct_passwd:
    """An unprivileged local account (created with useradd when missing)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(name)


def as_user(
    user: str, argv: Sequence[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``user`` (setpriv execs it directly: no shell, no login session)."""
    entry = pwd.getpwnam(user)
    full = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", *argv]
    return subprocess.run(
        full,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        cwd="/tmp",
        timeout=60,
        check=False,
    )


# ---------------------------------------------------------------------------------------- jobs


def standin_builder(checkpoint_interval_s: float | None = None) -> CommandBuilder:
    """``python -m gpuplan.executors.standin`` with this interpreter (the venv's)."""
    return standin_command(checkpoint_interval_s=checkpoint_interval_s)


def job(job_id: str, submit: float, work: float, requested: int, lo: int, hi: int) -> JobSpec:
    """A stand-in job: ``work`` iterations at 1 iteration/s per A100, elastic in [lo, hi]."""
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=requested,
        total_iterations=work,
        elasticity=Elasticity(min_gpus=lo, max_gpus=hi) if hi > lo else None,
        throughput=ThroughputProfile.linear(1.0, reference_gpu="a100"),
        checkpoint=Checkpointing(on_signal=True),
    )


E2E_NODES = ("node1", "node2", "node3")
"""The end-to-end run uses three of the lab's four nodes (12 GPUs): tight enough that ten jobs
contend, so AFS-P must shrink, grow and preempt."""


def e2e_workload() -> list[JobSpec]:
    """Ten elastic stand-in jobs (1 iteration/s per GPU) for AFS-P on 3 x 4 GPUs.

    Arrivals oversubscribe the 12 GPUs within 9 s: AFS-P shrinks running jobs for newcomers
    (and drops those it cannot keep at their minimum: preemption), and completions let the
    survivors grow again. Designed in the simulator first: over 40 variants with arrivals
    jittered by up to 1 s, start latency 0.5-2 s and checkpoint-restart resizes of 1.5-4 s (with
    the engine dropping grows that do not pay for their restart), every run had >= 4 grows,
    >= 10 shrinks, >= 3 preemptions and a makespan <= 59 s.
    """
    shape = [  # id, submit (s), requested, min, max, seconds at the requested size
        ("j0", 0.0, 4, 2, 4, 6),
        ("j1", 0.0, 2, 1, 4, 5),
        ("j2", 0.5, 2, 1, 2, 4),
        ("j3", 1.0, 1, 1, 2, 3),
        ("j4", 2.0, 2, 2, 4, 4),
        ("j5", 2.5, 1, 1, 1, 2),
        ("j6", 3.0, 3, 2, 4, 4),
        ("j7", 3.5, 1, 1, 2, 3),
        ("j8", 4.0, 2, 1, 2, 3),
        ("j9", 4.5, 4, 2, 4, 3),
    ]
    scale = 2.0
    return [
        job(i, submit * scale, req * seconds * scale, req, lo, hi)
        for i, submit, req, lo, hi, seconds in shape
    ]


# ---------------------------------------------------------------------------------------- runs


def make_executor(
    lab: SlurmLab,
    jobs: list[JobSpec],
    state_dir: Path,
    nodes: Sequence[str] | None = None,
    **kw: object,
) -> tuple[Cluster, SlurmExecutor]:
    cli = lab.cli(timeout=30, unavailable_retry_s=90)
    cluster = cluster_from_slurm(cli, nodes if nodes is not None else lab.node_names)
    kw.setdefault("command", standin_builder())
    executor = SlurmExecutor(cluster, jobs, cli=cli, state_dir=state_dir, **kw)  # type: ignore[arg-type]
    return cluster, executor


def run(cluster: Cluster, executor: SlurmExecutor, policy: object) -> Engine:
    """Run ``policy`` to the end. Without the restart gate: these tests check that the
    executor carries out every change a policy plans (tests/engine/test_restart_gate.py checks the
    gate on the lab)."""
    engine = Engine(
        cluster,
        policy,
        executor,
        sample_interval_s=None,  # type: ignore[arg-type]
        restart_gate=None,
    )
    try:
        engine.run()
    finally:
        executor.cancel_all()
    return engine


def standin_checkpoint(state_dir: Path, job_id: str) -> float | None:
    """The stand-in's last checkpoint (``ID.ckpt``), or None before its first one."""
    try:
        return float(json.loads((state_dir / f"{file_key(job_id)}.ckpt").read_text())["done"])
    except (OSError, ValueError, KeyError):
        return None


def standin_segments(state_dir: Path, job_id: str) -> list[dict[str, object]] | None:
    """The stand-in's own log of committed segments (``ID.log``, one JSON line each)."""
    path = state_dir / f"{file_key(job_id)}.log"
    if not path.exists():
        return None
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_progress_conserved(
    engine: Engine, executor: SlurmExecutor, state_dir: Path, jobs: list[JobSpec]
) -> None:
    """Every job finished and its runs chain: each resumed exactly where the previous one left
    off, and the pieces add up to its work (nothing lost, nothing done twice)."""
    finished = {r.job_id: r for r in engine.records}
    assert sorted(finished) == sorted(j.id for j in jobs), (
        f"unfinished: {sorted({j.id for j in jobs} - set(finished))}"
    )
    assert not executor.failures, executor.failures
    for spec in jobs:
        segs = executor.segments_of(spec.id)
        assert segs, f"{spec.id}: no Slurm run recorded"
        runs = [s for s in segs if s.first_progress is not None or s.end_done != s.start_done]
        assert runs[-1].how == "completed", (spec.id, [(s.how, s.end_done) for s in segs])
        expected = 0.0
        for seg in segs:
            assert seg.start_done == pytest.approx(expected, abs=1e-6), (
                f"{spec.id}: run on Slurm job {seg.slurm_id} resumed at {seg.start_done}, "
                f"previous run left {expected}"
            )
            assert seg.end_done is not None and seg.end_done >= seg.start_done - 1e-9
            expected = seg.end_done
        total = sum((s.end_done or 0.0) - s.start_done for s in segs)
        assert total == pytest.approx(spec.work, rel=1e-9), (spec.id, total, spec.work)
        own = standin_segments(state_dir, spec.id)
        assert own, f"{spec.id}: the stand-in logged no segment"
        # The job's own account: committed segments tile [0, work] exactly, in order.
        assert own[0]["start"] == 0.0, (spec.id, own)
        for a, b in itertools.pairwise(own):
            assert b["start"] == pytest.approx(a["end"], abs=1e-9), (spec.id, own)
        assert own[-1]["end"] == pytest.approx(spec.work) and own[-1]["reason"] == "complete"
        assert sum(float(s["end"]) - float(s["start"]) for s in own) == pytest.approx(spec.work)
        # Each Slurm run's checkpoint at exit is a segment boundary the job itself committed.
        bounds = {round(float(s["end"]), 9) for s in own}
        for seg in segs:
            if seg.end_done and seg.end_done > seg.start_done:
                assert round(seg.end_done, 9) in bounds, (spec.id, seg, own)


def submit_standin(
    lab: SlurmLab,
    user: str,
    shared: Path,
    key: str,
    *,
    work: float,
    gpus: int,
    lo: int,
    hi: int,
    partition: str = "gpuplan",
    name: str | None = None,
    one_node: bool = False,
    gres: bool = False,
    extra_comment: str = "",
    checkpoint_interval_s: float | None = 1.0,
) -> subprocess.CompletedProcess[str]:
    """``sbatch`` of a stand-in job as ``user`` submits one through the hook; returns the
    completed ``sbatch`` (callers check what the hook said). ``key`` names the job's files and
    its stand-in id; ``name`` is the Slurm job name (free text, the user's), ``key`` when None.
    ``one_node`` adds ``--nodes=1`` (how operators submit single-node jobs); ``gres`` asks for
    GPUs as ``--gres=gpu:N`` instead of ``--gpus=N``."""
    shape = [f"--gres=gpu:{gpus}" if gres else f"--gpus={gpus}"]
    if one_node:
        shape.insert(0, "--nodes=1")
    standin_args = [
        "--job-id",
        key,
        "--work",
        f"{work:g}",
        "--rate-per-gpu",
        "1",
        "--state-dir",
        str(shared),
        "--progress-interval",
        "0.5",
    ]
    if checkpoint_interval_s is not None:
        standin_args += ["--checkpoint-interval", f"{checkpoint_interval_s:g}"]
    argv = [
        "sbatch",
        "--parsable",
        f"--partition={partition}",
        *shape,
        f"--comment=gpuplan:{extra_comment}min={lo},max={hi},work={work:g}",
        f"--job-name={key if name is None else name}",
        f"--output={shared}/{key}.out",
        "--open-mode=append",
        str(shared / "run.sh"),
        "/usr/bin/python3",
        str(shared / "standin.py"),
        *standin_args,
    ]
    return as_user(user, argv, lab.env)


def submitted_id(proc: subprocess.CompletedProcess[str]) -> int:
    """The job id ``sbatch --parsable`` printed (the submission must have succeeded)."""
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().split(";")[0])
