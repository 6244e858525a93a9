"""Slurm benchmark (issue 16): ``gpuplan slurm-controller`` vs Slurm alone on the lab.

``python -m tests.bench.slurm_vs_native [--jobs N] [--quick] [--policies afs-p,afs-l]``. The
seeded workload of the issue, scaled to the lab (4 nodes x 4 GPUs): jobs of 1/2/4 GPUs, 55 %
elastic (half to twice their request, at most one node), 5-30 s of stand-in work at their
requested size, submitted in bursts. Each mode runs the same jobs on an empty lab:

* ``slurm``: plain ``sbatch --gpus=N`` on the ordinary partition (Slurm's own scheduler);
* each policy: the same jobs through the hook (``--comment gpuplan:min=..,max=..,work=..``) and
  ``gpuplan slurm-controller --policy P`` with default settings, SIGKILLed once mid-run and
  restarted (the restart must stop no running job).

Reported per mode: drain time, mean/p95 JCT, split single-node jobs and unusable GPU-seconds
(GPUs on nodes other than the batch host, sampled every second), resize latency (journal
intent -> settled), controller CPU seconds, jobs stopped by the restart; and the simulator's
prediction for the same workload beside it. Goals: drain <= 0.9x and mean JCT <= 0.8x of Slurm
alone; 0 split; 0 unusable GPU-seconds; 0 stopped by a restart. No asserts: this reports.

This module is the live measurement (root, a real slurmctld/slurmd from tests/slurm_fixtures.py)
and records one JSON row per mode (``--out``). What it measures against and what the doc makes of
the rows are product code that docs/results/slurm.md names: the workload and modes
(``gpuplan.slurm_lab``), the simulator's prediction (``gpuplan.slurm_lab_predict``, ``gpuplan
reproduce slurm-prediction``) and the tables from recorded rows (``gpuplan.slurm_lab_report``,
``gpuplan slurm-lab-report FILE --run NAME``); ``--report`` and ``--predict`` here print the same.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.executors.control.journal import Journal
from gpuplan.executors.slurm.cli import SlurmError, SlurmJob
from gpuplan.models.errors import InputError
from gpuplan.slurm_lab import (
    DEFAULT_MODES,
    SEED,
    Item,
    p95,
    startup_mean,
    workload,
)
from gpuplan.slurm_lab_predict import predict, prediction_table
from gpuplan.slurm_lab_report import load_rows, report
from tests import slurm_fixtures as fx
from tests.labs.slurm.lab import SlurmLab
from tests.labs.slurm.lab_config import LabConfig

PYTHON = "/usr/bin/python3"
ENGINE_PARTITION, PLAIN_PARTITION = "gpuplan", "gpu"


# ---------------------------------------------------------------------------------- lab runs
@dataclass
class Run:
    mode: str
    submitted: dict[str, float] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    split: set[str] = field(default_factory=set)
    unusable_gpu_s: float = 0.0
    stopped_by_restart: int = 0
    cpu_s: float = 0.0
    resize_latency_s: list[float] = field(default_factory=list)
    resizes: int = 0
    ends: dict[str, float] = field(default_factory=dict)
    turnover_gaps: list[float] = field(default_factory=list)
    release_to_run_s: list[float] = field(default_factory=list)
    gate: dict[str, dict[str, int]] = field(default_factory=dict)
    load: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    busy_while_queued: float = 0.0


BASELINES = {
    "slurm-nodes1": ("basic", ["--nodes=1", "--gres=gpu:{gpus}"]),
    "slurm-multifactor": ("multifactor", ["--nodes=1", "--gres=gpu:{gpus}"]),
    "slurm-gpus": ("basic", ["--gpus={gpus}"]),
}
"""Slurm alone, three ways: as operators submit single-node GPU jobs (``--nodes=1``), the same
under ``priority/multifactor`` (age and job size, small first), and the older ``--gpus=N`` with
no node count, which Slurm may split over nodes (kept only as an extra row): how each of
``gpuplan.slurm_lab.BASELINES`` is submitted."""


def lab_priority(mode: str) -> str:
    """Which lab a mode runs on: the multifactor baseline on a lab configured so, every other
    mode on the ``priority/basic`` lab (the controller orders its partition itself)."""
    return BASELINES.get(mode, ("basic", []))[0]


def _sbatch(lab: SlurmLab, shared: Path, it: Item, mode: str, startup: str | None) -> int:
    if mode in BASELINES:
        opts = [o.format(gpus=it.gpus) for o in BASELINES[mode][1]]
        opts.append(f"--partition={PLAIN_PARTITION}")
    else:  # managed: submitted like the fair baseline, plus the hook's comment
        opts = [
            "--nodes=1",
            f"--gres=gpu:{it.gpus}",
            f"--partition={ENGINE_PARTITION}",
            f"--comment=gpuplan:min={it.lo},max={it.hi},work={it.work:g}",
        ]
    extra = ["--startup-s", startup, "--startup-seed", str(SEED)] if startup else []
    argv = [
        "sbatch",
        "--parsable",
        *opts,
        f"--job-name={it.name}",
        f"--output={shared}/{it.name}.out",
        "--open-mode=append",
        str(shared / "run.sh"),
        PYTHON,
        str(shared / "standin.py"),
        "--job-id",
        it.name,
        "--work",
        f"{it.work:g}",
        "--rate-per-gpu",
        "1",
        "--state-dir",
        str(shared),
        "--progress-interval",
        "1",
        "--checkpoint-interval",
        "2",
        *extra,
    ]
    proc = fx.as_user(fx.UNPRIVILEGED_USER, argv, lab.env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return int(proc.stdout.strip().split(";")[0])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def run_mode(lab: SlurmLab, items: list[Item], mode: str, startup: str | None = None) -> Run:
    shared, run = fx.shared_job_dir("gpuplan-bench-"), Run(mode)
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    managed = mode not in BASELINES
    proc: subprocess.Popen[bytes] | None = None

    def start() -> subprocess.Popen[bytes]:
        argv = [
            sys.executable,
            "-m",
            "gpuplan",
            "slurm-controller",
            "--policy",
            mode,
            "--state-db",
            str(db),
            "--partition",
            ENGINE_PARTITION,
            "--wake-file",
            str(lab.wake_file),
        ]
        with open(log, "ab") as out:
            return subprocess.Popen(
                argv,
                env={**os.environ, **lab.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    if managed:
        proc = start()
    t0 = time.time()

    def submitter() -> None:
        for it in items:
            delay = t0 + it.at - time.time()
            if delay > 0:
                time.sleep(delay)
            run.ids[it.name] = _sbatch(lab, shared, it, mode, startup)
            run.submitted[it.name] = time.time()

    thread = threading.Thread(target=submitter, daemon=True)
    thread.start()
    try:
        return _drive(lab, items, run, shared, thread, proc, start, t0)
    finally:
        if not os.environ.get("GPUPLAN_KEEP_TEST_DIRS"):
            shutil.rmtree(shared, ignore_errors=True)


def _drive(
    lab: SlurmLab,
    items: list[Item],
    run: Run,
    shared: Path,
    thread: threading.Thread,
    proc: subprocess.Popen[bytes] | None,
    start: Callable[[], subprocess.Popen[bytes]],
    t0: float,
) -> Run:
    """Sample until every job is done; SIGKILL and restart the controller once at 70 s."""
    cli, managed, mode = lab.cli(timeout=30), proc is not None, run.mode
    db = shared / "state" / "controller.db"
    stop = threading.Event()
    killed_at: dict[str, int] = {}
    acts: list = []
    last_seen: dict[int, SlurmJob] = {}
    last = time.time()
    while True:
        now = time.time()
        try:
            jobs = {j.job_id: j for j in cli.jobs(list(dict(run.ids).values()))}
        except SlurmError:  # a transient squeue error while jobs come and go: sample again
            stop.wait(0.5)
            continue
        # Slurm forgets a finished job MinJobAge (600 s) after its end: keep its last record.
        last_seen.update(jobs)
        run.load.append(os.getloadavg()[0])
        dt, last = now - last, now
        for name, sid in list(run.ids.items()):
            sj = jobs.get(sid)
            if sj is None or sj.state != "RUNNING" or len(sj.nodes) < 2:
                continue
            run.split.add(name)
            try:
                per_node = {n: len(g) for n, g in cli.job_gpus(sid).items()}
            except SlurmError:
                continue
            run.unusable_gpu_s += dt * sum(c for n, c in per_node.items() if n != sj.batch_host)
        if managed and proc is not None and not killed_at and now - t0 > 70.0:
            killed_at = {
                n: jobs[s].restart_count
                for n, s in run.ids.items()
                if s in jobs and jobs[s].state == "RUNNING"
            }
            run.cpu_s += _cpu_s(proc.pid)
            proc.kill()
            proc.wait()
            proc = start()
        if (
            not thread.is_alive()
            and len(run.ids) == len(items)
            and all(s in last_seen and last_seen[s].finished for s in run.ids.values())
        ):
            # Every job is over in Slurm; one without its work done failed or was lost.
            run.failed = sorted(n for n in run.ids if not (shared / f"{n}.done").exists())
            break
        if now - t0 > 3600:
            if proc is not None:
                proc.kill()
            raise RuntimeError(f"{mode}: not drained after an hour")
        stop.wait(1.0)
    if proc is not None:
        run.cpu_s += _cpu_s(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        with Journal(db, writer=False) as journal:
            acts = journal.actions()
            run.gate = gate_totals(journal)
        second = [a for a in acts if a.run_id == 2]
        plans = sorted({a.epoch for a in second if a.epoch is not None})
        first = plans[0] if plans else None
        sids = {run.ids[n] for n in killed_at}
        stopped = {
            a.slurm_id
            for a in second
            if a.slurm_id in sids
            and a.kind in ("stop", "preempt", "resize", "migrate")
            and (a.epoch == first or a.detail.startswith("reconcile"))
        }
        run.stopped_by_restart = len(stopped)
        run.resize_latency_s = [
            a.settled_at - a.intended_at
            for a in acts
            if a.kind == "resize" and a.settled_at is not None
        ]
        run.resizes = len(run.resize_latency_s)
    run.busy_while_queued = busy_while_queued(shared, run.submitted)
    run_end = last_seen  # every job's record as last seen, finished (the loop's exit test)
    run.ends = {n: float(run_end[s].raw.get("end_time") or 0) for n, s in run.ids.items()}
    run.turnover_gaps = turnover_gaps(run, run_end)
    if managed:
        starts = {
            s: float(j.raw.get("start_time") or 0)
            for s, j in run_end.items()
            if j.restart_count == 0
        }
        # The last start intent before Slurm's (only) start of a job that never restarted: an
        # earlier intent may have been overtaken by a stop before Slurm started it.
        last_intent: dict[int, float] = {}
        for a in acts:
            if (
                a.kind == "start"
                and a.slurm_id in starts
                and a.intended_at <= starts[a.slurm_id] + 1.0
            ):
                last_intent[a.slurm_id] = max(last_intent.get(a.slurm_id, 0.0), a.intended_at)
        run.release_to_run_s = [starts[s] - t for s, t in last_intent.items()]
    return run


def busy_while_queued(shared: Path, submitted: dict[str, float], step: float = 0.1) -> float:
    """Mean share of the lab's GPUs that were training while at least one job waited (had
    been submitted and not yet started training), from the stand-ins' own segment logs (each
    run's start and end, wall clock): the issue's "GPUs busy while jobs queued"."""
    segments: list[tuple[float, float, int]] = []
    first: dict[str, float] = {}
    for name in submitted:
        path = shared / f"{name}.log"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            seg = json.loads(line)
            segments.append((seg["t_start"], seg["t_end"], int(seg["gpus"])))
            first[name] = min(first.get(name, float("inf")), seg["t_start"])
    if not segments:
        return 0.0
    total = fx.NODES * fx.GPUS_PER_NODE
    t, end, busy = min(submitted.values()), max(e for _, e, _ in segments), []
    while t < end:
        waiting = any(at <= t < first.get(n, float("inf")) for n, at in submitted.items())
        if waiting:
            busy.append(sum(g for s, e, g in segments if s <= t < e) / total)
        t += step
    return statistics.mean(busy) if busy else 0.0


def gate_totals(journal: Journal) -> dict[str, dict[str, int]]:
    """The restart gate's counters summed over the controller's runs (``restart_gate:run:N``
    meta rows): per kind of change, proposed / carried out / skipped."""
    totals: dict[str, dict[str, int]] = {}
    for run_id in range(1, 10):
        text = journal.meta(f"restart_gate:run:{run_id}")
        if not text:
            continue
        for kind, row in json.loads(text).get("changes", {}).items():
            into = totals.setdefault(kind, {"proposed": 0, "done": 0, "skipped": 0})
            for key in into:
                into[key] += int(row.get(key, 0))
    return totals


def turnover_gaps(run: Run, final: dict[int, SlurmJob]) -> list[float]:
    """Per queued job that started once: seconds from the last job end before its start to its
    start — the time freed GPUs sat idle while it waited (Slurm's times have 1-s resolution)."""
    ends = sorted(float(j.raw.get("end_time") or 0) for j in final.values())
    gaps = []
    for name, sid in run.ids.items():
        job = final[sid]
        start = float(job.raw.get("start_time") or 0)
        if job.restart_count or start < run.submitted[name] + 1.0:
            continue  # never queued (started on arrival) or started more than once
        before = [e for e in ends if 0 < e <= start]
        if before:
            gaps.append(start - before[-1])
    return gaps


def summary(run: Run, t_first: float | None = None) -> dict[str, float]:
    ends = run.ends
    first = min(run.submitted.values()) if t_first is None else t_first
    jcts = [ends[n] - run.submitted[n] for n in run.submitted]
    return {"drain": max(ends.values()) - first, "mean": statistics.mean(jcts), "p95": p95(jcts)}


def measure(mode: str, lab: SlurmLab, items: list[Item], startup: str | None) -> dict:
    """One mode on ``lab``: the measured row and the simulator's prediction beside it."""
    t = time.monotonic()
    run = run_mode(lab, items, mode, startup)
    got, sim = summary(run), predict(items, mode, startup_mean(startup))
    row = {
        "mode": mode,
        "startup": startup or "",
        "jobs": len(items),
        "lab": got,
        "sim": sim,
        "split": len(run.split),
        "unusable_gpu_s": round(run.unusable_gpu_s, 1),
        "resizes": run.resizes,
        "resize_latency_s": run.resize_latency_s,
        "cpu_s": round(run.cpu_s, 1),
        "stopped_by_restart": run.stopped_by_restart,
        "failed": run.failed,
        "busy_while_queued": round(run.busy_while_queued, 4),
        "turnover_gaps": run.turnover_gaps,
        "release_to_run_s": run.release_to_run_s,
        "gate": run.gate,
        "load_mean": round(statistics.mean(run.load), 2) if run.load else 0,
        "wall_s": round(time.monotonic() - t, 1),
    }
    print(
        f"  {mode}: done in {row['wall_s']:.0f} s: lab {got}, sim {sim}, split "
        f"{row['split']}, resizes {run.resizes}, cpu {run.cpu_s:.1f} s, stopped by restart "
        f"{run.stopped_by_restart}, failed {run.failed}, gate {run.gate}, "
        f"load {row['load_mean']}",
        flush=True,
    )
    return row


def run_modes(
    modes: list[str], items: list[Item], startup: str | None, out: Path | None
) -> list[dict]:
    """Run ``modes`` in order, each lab (basic / multifactor priority) brought up when first
    needed under ``GPUPLAN_SLURM_LAB`` (``-mf`` appended for the multifactor one); rows are
    appended to ``out`` (JSON lines) as they finish, so a long run keeps what it measured."""
    fx.ensure_user(fx.UNPRIVILEGED_USER)
    rows: list[dict] = []
    for priority in ("basic", "multifactor"):
        mine = [m for m in modes if lab_priority(m) == priority]
        if not mine:
            continue
        root = fx.LAB_ROOT if priority == "basic" else Path(f"{fx.LAB_ROOT}-mf")
        # proctrack/pgid, not cgroups: every lab on a machine shares the cgroup tree
        # (slurm_<node>/uid_<u>), and another lab's teardown removing an empty job directory
        # made a benchmark job fail to start ("Slurmd could not execve job"). The benchmark
        # measures scheduling; both Slurm alone and the controller run on the same lab.
        session = fx.lab_session(
            LabConfig(
                root=root,
                nodes=fx.NODES,
                gpus_per_node=fx.GPUS_PER_NODE,
                gpu_type="a100",
                job_submit_lua=True,
                priority=priority,
                cgroup="off",
            )
        )
        lab = next(session)
        try:
            for mode in mine:
                row = measure(mode, lab, items, startup)
                rows.append(row)
                if out is not None:
                    with out.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
        finally:
            with contextlib.suppress(StopIteration):
                next(session)
    return rows


def _startup_spec(text: str) -> str:
    """``--startup-s``: ``S`` or ``uniform:LO:HI`` seconds, finite, 0 <= LO <= HI <= 600."""
    try:
        parts = [float(x) for x in (text.split(":")[1:] if text.startswith("uniform:") else [text])]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not S or uniform:LO:HI: {text!r}") from None
    ok = len(parts) in (1, 2) and all(0 <= x <= 600 for x in parts) and parts == sorted(parts)
    if not ok or (text.startswith("uniform:") and len(parts) != 2):
        raise argparse.ArgumentTypeError(f"not S or uniform:LO:HI within 0..600 s: {text!r}")
    return text


def _modes(text: str) -> list[str]:
    modes = [m for m in text.split(",") if m]
    known = set(BASELINES) | set(DEFAULT_MODES) | {"srsf", "aryl-sjf"}
    unknown = [m for m in modes if m not in known and not _is_policy(m)]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown mode(s) {unknown or text!r}; baselines: "
            f"{', '.join(BASELINES)}, or a registered policy"
        )
    return modes


def _is_policy(name: str) -> bool:
    from gpuplan.solver_core.registry import policy_names

    return name in policy_names()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.slurm_vs_native",
        description="Slurm alone vs gpuplan slurm-controller on the project's Slurm lab "
        "(needs root; docs/results/slurm.md).",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=200,
        choices=range(1, 2001),
        metavar="N",
        help="jobs in the workload (default 200)",
    )
    parser.add_argument("--quick", action="store_true", help="at most 30 jobs")
    parser.add_argument(
        "--modes",
        type=_modes,
        default=list(DEFAULT_MODES),
        help="comma-separated baselines and policies (default: all)",
    )
    parser.add_argument(
        "--startup-s",
        type=_startup_spec,
        default=None,
        help="the stand-in's start-up per start: S or uniform:LO:HI",
    )
    parser.add_argument(
        "--predict", action="store_true", help="print the simulator's prediction only (no lab)"
    )
    parser.add_argument("--out", type=Path, help="append measured rows (JSON lines) here")
    parser.add_argument(
        "--report",
        nargs="+",
        type=Path,
        metavar="JSONL",
        help="print the tables of earlier runs' rows",
    )
    parser.add_argument(
        "--run",
        metavar="NAME",
        help="with --report: only the rows whose 'run' is NAME (the runs kept "
        "in docs/results/data/slurm-runs.jsonl: A, B, C, S)",
    )
    return parser


def main(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    items = workload(min(args.jobs, 30) if args.quick else args.jobs)
    n = len(items)
    if args.report:  # merge earlier runs' JSON lines and print the tables
        try:
            print(report(load_rows(args.report, args.run), items))
        except InputError as err:
            sys.exit(f"error: {err}")
        return
    modes, startup = args.modes, args.startup_s
    if args.predict:  # the simulator alone: no lab, deterministic
        print(prediction_table(items, modes, startup_mean(startup)))
        return
    print(
        f"{n} jobs, seed {SEED}: {sum(it.lo < it.hi for it in items)} elastic, "
        f"{sum(it.work for it in items):.0f} GPU-s of work, bursts of 25 every 25 s; lab "
        f"{fx.NODES} x {fx.GPUS_PER_NODE} GPUs; stand-in start-up {startup or 'none'}",
        flush=True,
    )
    rows = run_modes(modes, items, startup, args.out)
    print(report(rows, items))
    for r in rows:
        gaps, rel = r["turnover_gaps"], r["release_to_run_s"]
        print(
            f"{r['mode']}: turnover gap (last end -> next start) mean "
            f"{statistics.mean(gaps) if gaps else float('nan'):.2f} s over {len(gaps)} starts"
            + (
                f"; start intent -> running mean {statistics.mean(rel):.2f} s, max {max(rel):.2f} s"
                if rel
                else ""
            )
        )


if __name__ == "__main__":
    main(sys.argv[1:])
