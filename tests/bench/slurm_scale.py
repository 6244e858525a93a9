"""The controller at the size of a real partition (issue 24, item 6): 256 GPUs, 1,000 jobs.

``sudo .venv/bin/python -m tests.bench.slurm_scale [--nodes 32 --gpus-per-node 8 --jobs 1000]
[--policies afs-p,srtf] [--quick]``. Starts its own lab (the project's lab code, ``NODES x
GPUS`` fake GPUs, the shipped hook and wake-up epilog) under a fresh private root (``mkdtemp``:
never a predictable shared path; ports follow the root), runs the same seeded jobs

* ``slurm``: Slurm alone, submitted the way operators submit single-node GPU jobs
  (``sbatch --nodes=1 --gres=gpu:N`` on the plain partition: the fair baseline of issue 24);
* each policy: the same submissions to the engine partition with the hook's comment
  (``--comment gpuplan:min=..,max=..,work=..``), scheduled by ``gpuplan slurm-controller
  --policy P`` with default settings (``--interval 2``, ``--arrival-check 0.25``, the wake file),

and stops the lab. The workload is the 16-GPU benchmark's (``tests/bench/slurm_vs_native.py``):
1/2/4 GPUs weighted 1:2:1, 55 % elastic from half to twice their request (at most one node),
5-30 s of stand-in work at their requested size, with bursts scaled to the cluster (25 jobs
every 25 s per 16 GPUs: the same offered load per GPU, so a queue of hundreds forms).

Reported per mode: drain (first submission to last end), mean and p95 JCT (Slurm's end time
minus the submission), jobs spread over two nodes; for the controller its per-cycle times from
the journal (``cycle_times:<run>``, :mod:`gpuplan.executors.control.cycle_times`): poll,
decision, poll + decision and apply, p50/p99 ms, and its CPU (the process and the Slurm client
commands it ran, as % of one core over the run); the machine's load average. Goal (issue 24):
p99 poll + decision <= 250 ms and controller CPU <= 10 % at 256 GPUs / 1,000 queued jobs.
No asserts: this reports (a table, then one JSON line).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.executors.control.cycle_times import load as load_cycles
from gpuplan.executors.control.cycle_times import meta_key, percentile
from gpuplan.executors.control.journal import Journal
from gpuplan.executors.slurm.cli import SlurmError, SlurmJob
from tests import slurm_fixtures as fx
from tests.bench.slurm_vs_native import Item
from tests.labs.slurm.lab import LabConfig, SlurmLab

SEED = 16
PYTHON = "/usr/bin/python3"
ENGINE_PARTITION, PLAIN_PARTITION = "gpuplan", "gpu"
BURST_PER_16_GPUS, GAP_S = 25, 25.0
"""The 16-GPU benchmark's arrivals: 25 jobs every 25 s; here scaled by GPUs / 16."""
SUBMITTERS = 4
"""Concurrent ``sbatch`` calls while a burst is submitted (one at a time, a burst of 400
would take longer than the gap between bursts on a 2-core machine)."""
SAMPLE_S = 5.0
"""How often the driver reads the jobs' records: rarely, so the benchmark's own reads cost
little next to the controller's."""


def workload(n: int, gpus_per_node: int, total_gpus: int, seed: int = SEED) -> list[Item]:
    """The benchmark's job mix (same draws as ``slurm_vs_native.workload``), elastic maxima
    capped at one node and bursts scaled so that the offered load per GPU is the same."""
    rng = random.Random(seed)
    burst = max(1, round(BURST_PER_16_GPUS * total_gpus / 16))
    items = []
    for i in range(n):
        gpus = rng.choice((1, 2, 2, 4))
        seconds = rng.uniform(5.0, 30.0)
        lo, hi = (
            (max(1, gpus // 2), min(gpus_per_node, 2 * gpus))
            if rng.random() < 0.55
            else (gpus, gpus)
        )
        items.append(
            Item(f"j{i:04d}", gpus, lo, hi, round(seconds * gpus, 1), (i // burst) * GAP_S)
        )
    return items


def node_prefix(root: Path) -> str:
    """Node names of their own for a lab under ``root``: a MULTIPLE_SLURMD lab's cgroups are
    named after its nodes (``slurm_<node>/uid_<uid>/job_<id>``), so two labs on one machine
    with the same node names and job ids kill each other's jobs (seen: another lab's teardown
    SIGKILLed three jobs here)."""
    return "sc" + "".join(c for c in root.name.rsplit("-", 1)[-1].lower() if c.isalpha())[:4] + "n"


def _cpu_s(pid: int) -> tuple[float, float]:
    """(utime + stime of ``pid`` itself, of the children it reaped: its Slurm client
    commands), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


def _load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass
class Run:
    mode: str
    submitted: dict[str, float] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    final: dict[int, SlurmJob] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)
    cpu_s: float = math.nan
    child_cpu_s: float = math.nan
    wall_s: float = math.nan
    rss_mb: float = math.nan
    cycles: list[dict[str, float | None]] = field(default_factory=list)
    cpu_samples: list[tuple[float, float]] = field(default_factory=list)
    """(wall time, controller CPU seconds so far), every ``SAMPLE_S``."""
    cycle_count: int = 0
    commands: dict[str, int] = field(default_factory=dict)
    """Slurm commands the controller ran, by verb (from its journal)."""


def _sbatch(lab: SlurmLab, shared: Path, it: Item, managed: bool) -> int:
    opts = (
        [
            f"--partition={ENGINE_PARTITION}",
            f"--comment=gpuplan:min={it.lo},max={it.hi},work={it.work:g}",
        ]
        if managed
        else [f"--partition={PLAIN_PARTITION}"]
    )
    argv = [
        "sbatch",
        "--parsable",
        "--nodes=1",
        f"--gres=gpu:{it.gpus}",
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
        "2",
        "--checkpoint-interval",
        "2",
    ]
    for attempt in range(5):
        proc = fx.as_user(fx.UNPRIVILEGED_USER, argv, lab.env)
        if proc.returncode == 0:
            return int(proc.stdout.strip().split(";")[0])
        # a busy slurmctld may time a submission out; resubmit only when it surely failed
        if "Socket timed out" not in proc.stderr and "try again" not in proc.stderr.lower():
            break
        time.sleep(1.0 + attempt)
    raise RuntimeError(f"sbatch {it.name}: {proc.stderr.strip()}")


def run_mode(  # noqa: C901 (a named exception to the complexity gate)
    lab: SlurmLab, items: list[Item], mode: str, timeout_s: float, profile: Path | None = None
) -> Run:
    shared, run = fx.shared_job_dir("gpuplan-scale-"), Run(mode)
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    managed = mode != "slurm"
    proc: subprocess.Popen[bytes] | None = None
    if managed:
        prof = ["-m", "cProfile", "-o", str(profile / f"{mode}.prof")] if profile else []
        argv = [
            sys.executable,
            *prof,
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
            proc = subprocess.Popen(
                argv,
                env={**os.environ, **lab.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        heartbeat = db.with_name(db.name + ".heartbeat")
        t_up = time.monotonic()
        while not heartbeat.exists():  # its first cycle done: measure from here
            if proc.poll() is not None or time.monotonic() - t_up > 300:
                raise RuntimeError(f"controller did not come up: {log.read_text()[-2000:]}")
            time.sleep(0.2)
    cpu0 = _cpu_s(proc.pid) if proc is not None else (0.0, 0.0)
    t0 = time.time()
    errors: list[BaseException] = []

    def submit(it: Item) -> None:
        try:
            run.ids[it.name] = _sbatch(lab, shared, it, managed)
            run.submitted[it.name] = time.time()
        except BaseException as err:  # reported by the driver
            errors.append(err)

    def submitter() -> None:
        with ThreadPoolExecutor(SUBMITTERS) as pool:
            for at in sorted({it.at for it in items}):
                delay = t0 + at - time.time()
                if delay > 0:
                    time.sleep(delay)
                list(pool.map(submit, [it for it in items if it.at == at]))

    thread = threading.Thread(target=submitter, daemon=True)
    thread.start()
    cli = lab.cli(timeout=60)
    sampled = time.time()
    try:
        while True:
            time.sleep(SAMPLE_S)
            run.loads.append(_load1())
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(OSError):
                    run.cpu_samples.append((time.time(), sum(_cpu_s(proc.pid)) - sum(cpu0)))
            if errors:
                raise RuntimeError(f"{mode}: submission failed: {errors[0]}")
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(
                    f"{mode}: controller exited {proc.returncode}: {log.read_text()[-2000:]}"
                )
            if time.time() - t0 > timeout_s:
                raise RuntimeError(f"{mode}: not drained after {timeout_s:.0f} s")
            if time.time() - sampled > 60.0:
                # Slurm forgets a finished job MinJobAge (600 s) after its end: keep its record
                with contextlib.suppress(SlurmError):
                    run.final.update({j.job_id: j for j in cli.jobs(list(dict(run.ids).values()))})
                sampled = time.time()
            if thread.is_alive() or len(run.ids) < len(items):
                continue
            if sum((shared / f"{n}.done").exists() for n in run.ids) < len(run.ids) - 10:
                continue  # most still working: no need to ask Slurm yet
            try:
                jobs = {j.job_id: j for j in cli.jobs(list(run.ids.values()))}
            except SlurmError:
                continue
            run.final.update(jobs)
            # Drained when Slurm says every job ended (a failed one is counted, not waited for)
            if all(s in run.final and run.final[s].finished for s in run.ids.values()):
                break
        if proc is not None:
            own, children = _cpu_s(proc.pid)
            run.cpu_s, run.child_cpu_s = own - cpu0[0] + children - cpu0[1], children - cpu0[1]
            run.wall_s = time.time() - t0
            run.rss_mb = _rss_mb(proc.pid)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc is not None:
        with Journal(db, writer=False) as journal:
            text = journal.meta(meta_key(1))
        run.cycles = load_cycles(text)
        doc = json.loads(text) if text else {}
        run.cycle_count = doc.get("cycles", 0)
        run.commands = doc.get("counters", {})
    if os.environ.get("GPUPLAN_KEEP_TEST_DIRS"):
        print(f"  {mode}: kept {shared}", flush=True)
    else:
        shutil.rmtree(shared, ignore_errors=True)
    return run


def summary(run: Run) -> dict[str, float]:
    """Drain, JCTs, splits, load, and for a controller run its cycle times and CPU."""
    ends = {n: float(run.final[s].raw.get("end_time") or 0) for n, s in run.ids.items()}
    first = min(run.submitted.values())
    jcts = [ends[n] - run.submitted[n] for n in run.submitted]
    out: dict[str, float] = {
        "drain_s": max(ends.values()) - first,
        "mean_jct_s": statistics.mean(jcts),
        "p95_jct_s": percentile(jcts, 0.95),
        "split": float(sum(len(run.final[s].nodes) > 1 for s in run.ids.values())),
        "failed": float(sum(run.final[s].state != "COMPLETED" for s in run.ids.values())),
        "load_mean": statistics.mean(run.loads) if run.loads else math.nan,
        "load_max": max(run.loads) if run.loads else math.nan,
    }
    if run.mode == "slurm":
        return out
    rows = run.cycles
    polls: list[float] = [r["poll_s"] for r in rows if r["poll_s"] is not None]  # type: ignore[misc]
    decided = [r for r in rows if r["decide_s"] is not None]
    both = [(r["poll_s"] or 0.0) + (r["decide_s"] or 0.0) for r in rows]
    applies: list[float] = [r["apply_s"] for r in rows if r["apply_s"] is not None]  # type: ignore[misc]
    jobs = [r["jobs"] for r in rows if r["jobs"] is not None]
    for name, values in (
        ("poll", polls),
        ("decision", [r["decide_s"] for r in decided]),
        ("poll_decision", both),
        ("apply", applies),
    ):
        out[f"{name}_p50_ms"] = 1000 * percentile(values, 0.5)  # type: ignore[arg-type]
        out[f"{name}_p99_ms"] = 1000 * percentile(values, 0.99)  # type: ignore[arg-type]
    # Polls that found no new job read only the narrow view; a new job costs a full --json read
    narrow = [r for r in rows if r["poll_s"] is not None and not r.get("full_reads")]
    full = [r for r in rows if r["poll_s"] is not None and r.get("full_reads")]
    out["cycles_full_read"] = float(len(full))
    for name, part in (("narrow", narrow), ("full", full)):
        out[f"poll_{name}_p50_ms"] = 1000 * percentile([r["poll_s"] or 0.0 for r in part], 0.5)
        out[f"poll_decision_{name}_p99_ms"] = 1000 * percentile(
            [(r["poll_s"] or 0.0) + (r["decide_s"] or 0.0) for r in part], 0.99
        )
    # The queue phase: cycles while the engine held at least half of all the jobs (hundreds
    # queued behind the running ones) -- the goal's "at 1,000 queued jobs".
    half = 0.5 * len(run.ids)
    busy = [r for r in rows if (r["jobs"] or 0) >= half]
    out["queue_phase_cycles"] = float(len(busy))
    out["queue_phase_poll_decision_p99_ms"] = 1000 * percentile(
        [(r["poll_s"] or 0.0) + (r["decide_s"] or 0.0) for r in busy], 0.99
    )
    out["queue_phase_poll_p50_ms"] = 1000 * percentile(
        [r["poll_s"] for r in busy if r["poll_s"] is not None], 0.5
    )  # type: ignore[misc]
    out["queue_phase_cpu_pct"] = math.nan
    if busy and run.cpu_samples:
        t_a, t_b = busy[0]["t"] or 0.0, busy[-1]["t"] or 0.0
        inside = [(t, c) for t, c in run.cpu_samples if t_a <= t <= t_b]
        if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
            out["queue_phase_cpu_pct"] = (
                100.0 * (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
            )
        out["queue_phase_s"] = t_b - t_a
    out.update(
        {
            "cycles": float(run.cycle_count),
            "cycles_kept": float(len(rows)),
            "max_jobs_tracked": float(max(jobs)) if jobs else math.nan,
            "cpu_s": run.cpu_s,
            "wall_s": run.wall_s,
            "cpu_pct": 100.0 * run.cpu_s / run.wall_s,
            "slurm_commands_cpu_pct": 100.0 * run.child_cpu_s / run.wall_s,
            "poll_total_s": sum(polls),
            "apply_total_s": sum(applies),
            "slurm_commands_per_s": sum(run.commands.values()) / run.wall_s,
            "rss_mb": run.rss_mb,
        }
    )
    return out


def _fmt(value: float, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def table(rows: list[tuple[str, dict[str, float]]]) -> str:
    base = rows[0][1]
    head = (
        "| mode | drain s | x Slurm | mean JCT s | x Slurm | p95 JCT s | split | failed | "
        "poll p50/p99 ms | decision p50/p99 ms | poll+decision p99 ms: all / narrow read "
        "only / with a full read | apply p50/p99 ms | "
        "cycles | controller CPU % (of it Slurm commands) | queue phase: poll+decision p99 "
        "ms, CPU % | load avg mean/max |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for mode, s in rows:

        def pair(name: str, s: dict[str, float] = s) -> str:
            return (
                f"{_fmt(s.get(f'{name}_p50_ms', math.nan))} / "
                f"{_fmt(s.get(f'{name}_p99_ms', math.nan))}"
            )

        lines.append(
            f"| {mode} | {_fmt(s['drain_s'])} | {s['drain_s'] / base['drain_s']:.2f} | "
            f"{_fmt(s['mean_jct_s'])} | {s['mean_jct_s'] / base['mean_jct_s']:.2f} | "
            f"{_fmt(s['p95_jct_s'])} | {int(s['split'])} | {int(s['failed'])} | "
            f"{pair('poll') if mode != 'slurm' else '-'} | "
            f"{pair('decision') if mode != 'slurm' else '-'} | "
            f"{_fmt(s.get('poll_decision_p99_ms', math.nan))} / "
            f"{_fmt(s.get('poll_decision_narrow_p99_ms', math.nan))} / "
            f"{_fmt(s.get('poll_decision_full_p99_ms', math.nan))} | "
            f"{pair('apply') if mode != 'slurm' else '-'} | "
            f"{int(s['cycles']) if 'cycles' in s else '-'} | {_fmt(s.get('cpu_pct', math.nan))} "
            f"({_fmt(s.get('slurm_commands_cpu_pct', math.nan))}) | "
            f"{_fmt(s.get('queue_phase_poll_decision_p99_ms', math.nan))}, "
            f"{_fmt(s.get('queue_phase_cpu_pct', math.nan))} | "
            f"{_fmt(s['load_mean'])} / {_fmt(s['load_max'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.slurm_scale", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--policies", default="afs-p")
    parser.add_argument(
        "--quick", action="store_true", help="8 nodes x 8 GPUs, 100 jobs (what make bench runs)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run each controller under cProfile, writing DIR/POLICY.prof",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        metavar="S",
        help="give up on a mode that has not drained after S seconds",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.gpus_per_node, args.jobs = 8, 8, 100
    if os.geteuid() != 0:
        print("slurm_scale: needs root (it starts its own Slurm lab)", file=sys.stderr)
        return 2
    total = args.nodes * args.gpus_per_node
    items = workload(args.jobs, args.gpus_per_node, total)
    policies = [p for p in args.policies.split(",") if p]
    print(
        f"{len(items)} jobs, seed {SEED}: {sum(it.lo < it.hi for it in items)} elastic, "
        f"{sum(it.work for it in items):.0f} GPU-s of work (lower bound "
        f"{sum(it.work for it in items) / total:.0f} s), bursts of "
        f"{sum(it.at == 0 for it in items)} every {GAP_S:g} s; lab {args.nodes} x "
        f"{args.gpus_per_node} GPUs; load average {_load1():.2f}",
        flush=True,
    )
    fx.ensure_user(fx.UNPRIVILEGED_USER)
    root = Path(tempfile.mkdtemp(prefix="gpuplan-slurmscale-", dir="/tmp"))
    lab = SlurmLab(
        LabConfig(
            root=root,
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            gpu_type="a100",
            job_submit_lua=True,
            node_prefix=node_prefix(root),
        )
    )
    rows: list[tuple[str, dict[str, float]]] = []
    # SIGTERM (a timeout, an operator) must still stop the lab: run the finally below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with lab.exclusive(timeout_s=60):
            took = lab.up(timeout_s=120 + 10 * args.nodes, owner="slurm_scale")
            print(
                f"lab {args.nodes} x {args.gpus_per_node} up in {took:.0f} s ({root})", flush=True
            )
            for mode in ["slurm", *policies]:
                t = time.monotonic()
                run = run_mode(lab, items, mode, args.timeout, args.profile)
                got = summary(run)
                rows.append((mode, got))
                print(
                    f"  {mode}: done in {time.monotonic() - t:.0f} s: "
                    + ", ".join(f"{k} {_fmt(v, 2)}" for k, v in got.items()),
                    flush=True,
                )
                if run.commands:
                    print(f"  {mode}: Slurm commands {run.commands}", flush=True)
    finally:
        lab.down()
        shutil.rmtree(root, ignore_errors=True)
    print(table(rows))
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "gpus_per_node": args.gpus_per_node,
                "jobs": len(items),
                "modes": dict(rows),
            },
            default=lambda v: None,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
