"""``gpuplan sweep``: every scenario x policy x seed of a sweep file, on Dask, resumable.

Runs are independent simulations, so they are spread over a Dask cluster: a ``LocalCluster`` of
``--workers`` processes (one thread each: a run is CPU-bound Python), an existing cluster
(``--scheduler tcp://host:port``) or Slurm jobs through dask-jobqueue (``--slurm PARTITION``).
With one worker and no cluster named, runs execute in this process: the same function on the
same inputs, so the numbers are the same whatever the worker count. A sweep too small to repay
starting a ``LocalCluster`` (:data:`IN_PROCESS_MAX_JOBS`) also runs in this process, and says
so: more workers are then never slower than one (issue 28).

Each finished run is written at once as ``DIR/runs/<key>.json`` (written to a temporary name and
renamed, so a killed sweep never leaves half a file). A rerun with the same ``--out`` skips every
run whose file exists with the same *fingerprint* (a hash of the run's fully resolved scenario,
policy and seed): editing the sweep file recomputes exactly the runs it changed. Results are
sent back to the client, which alone writes files, so workers need no shared file system.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gpuplan.models import GpuplanError, InputError, RunResult, ScenarioSpec
from gpuplan.models.extras import require_extra
from gpuplan.scenarios.build import build
from gpuplan.scenarios.input_files import (
    MAX_TRACE_BYTES,
    check_path_text,
    read_text,
)

from .out_paths import check_out_dir, check_subdir, write_file_atomic
from .sweep_plan import (
    FORMAT,
    RunTask,
    SweepFile,
    expand_runs,
    load_sweep,
)

if TYPE_CHECKING:
    # The simulator, metrics (numpy) and rich's progress load when a sweep runs, not when
    # the CLI registers this subcommand (issue 28: a fast CLI).
    from gpuplan.executors.metrics import RunSummary

    from . import api

__all__ = [
    "RunRecord",
    "RunTask",
    "SweepFile",
    "SweepOutcome",
    "TIMING_COLUMNS",
    "add_subcommand",
    "execute",
    "load_sweep",
    "plan_runs",
    "run_sweep",
    "slurm_cluster",
]

TIMING_COLUMNS = (
    "wall_s",
    "jobs_per_s",
    "decision_p50_ms",
    "decision_p95_ms",
    "decision_p99_ms",
    "decision_max_ms",
    "solver_p50_ms",
    "solver_p95_ms",
    "solver_p99_ms",
    "elapsed_s",
)
"""results.csv columns measuring this machine, not the schedule: they differ between reruns."""
IN_PROCESS_MAX_JOBS = 20_000
"""A sweep whose pending runs simulate fewer jobs than this in all runs in this process even when
``--workers`` asks for a local Dask cluster. Why: starting the cluster and importing gpuplan in
each worker costs several seconds (issue 28: 12 runs of philly-default took 8.7 s on 2 workers,
7.2 s on 1), about what this process simulates of 20,000 jobs at the simulator's small-run
speed. Counted in jobs (known once :func:`_check_runs` has built every scenario), not
estimated time, so the choice is the same on every machine. ``--scheduler`` and ``--slurm``
name a cluster and are always used."""


# --------------------------------------------------------------------------- sweep file
def plan_runs(sweep: SweepFile, path: Path) -> list[RunTask]:
    """The runs ``sweep`` (read from ``path``) asks for (:func:`.sweep_plan.expand_runs`), each
    checked against the work budget before the first one starts."""
    tasks = expand_runs(sweep, path)
    _check_runs(tasks, str(path))
    return tasks


def _check_runs(tasks: Sequence[RunTask], source: str) -> None:
    """Build every distinct run scenario once (jobs, cluster, loan events, work budget) before
    any run starts. Why: an override such as ``engine.sample_interval_s: 1e-9`` is valid on
    its own and only the built scenario shows it would never end; found inside a worker it
    came after the progress line and the first runs. The refusal names the sweep file, the
    run and the field (and the file and row inside, for a file the scenario names).
    The in-process runs reuse what was built here (``_PREPARED``)."""
    seen: set[str] = set()
    for task in tasks:
        key = json.dumps([task.spec.model_dump(mode="json"), task.base], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            _prepare(task.spec, task.base)
        except InputError as err:
            if err.source is None:
                raise InputError(
                    f"run {task.key}: {err.message}", source=source, row=err.row, field=err.field
                ) from None
            raise InputError(f"run {task.key}: {err}", source=source) from None
        except GpuplanError as err:
            raise InputError(f"run {task.key}: {err}", source=source) from None


# --------------------------------------------------------------------------- execution
_PREPARED: OrderedDict[str, api.PreparedScenario] = OrderedDict()
"""A worker's last few built scenarios: consecutive runs usually share one."""
_JOB_COUNTS: dict[str, int] = {}
"""Jobs of every scenario built in this process (by :func:`_prepare`'s key), for
:func:`_small_sweep`."""


def _prepare(spec: ScenarioSpec, base: str | None) -> api.PreparedScenario:
    from . import api

    key = json.dumps([spec.model_dump(mode="json"), base], sort_keys=True)
    if key in _PREPARED:
        _PREPARED.move_to_end(key)
        return _PREPARED[key]
    built = build(spec, Path(base) if base else None)
    prepared = api.PreparedScenario(
        spec, built.cluster, built.jobs, tuple(built.events), built.load
    )
    _PREPARED[key] = prepared
    _JOB_COUNTS[key] = len(prepared.jobs)
    while len(_PREPARED) > 4:
        _PREPARED.popitem(last=False)
    return prepared


def _small_sweep(tasks: Sequence[RunTask]) -> int | None:
    """The jobs the runs of ``tasks`` simulate in all when that is below
    :data:`IN_PROCESS_MAX_JOBS`, else None (also for a scenario not built in this process)."""
    total = 0
    for task in tasks:
        key = json.dumps([task.spec.model_dump(mode="json"), task.base], sort_keys=True)
        total += _JOB_COUNTS.get(key, IN_PROCESS_MAX_JOBS)
        if total >= IN_PROCESS_MAX_JOBS:
            return None
    return total


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "in-process"


def execute(task: RunTask) -> tuple[str, str | None, str]:
    """Run one task (on a worker): ``(key, error or None, run JSON text)``.

    Bad input found while building the scenario comes back as text, not as an exception, so
    the client can report it as one line naming the run.
    """
    from gpuplan.executors.metrics import summarize

    from . import api

    t0 = time.perf_counter()
    try:
        result = api.run(_prepare(task.spec, task.base), task.policy)
    except GpuplanError as err:
        return task.key, str(err), ""
    payload = {
        "format": FORMAT,
        "key": task.key,
        "fingerprint": task.fingerprint,
        "scenario": task.scenario,
        "policy": task.policy,
        "seed": task.seed,
        "elapsed_s": time.perf_counter() - t0,
        "worker": _worker_name(),
        "summary": summarize(result).model_dump(mode="json"),
        "result": result.model_dump(mode="json"),
    }
    return task.key, None, json.dumps(payload)


@dataclass(frozen=True)
class RunRecord:
    """A finished run as read back from its JSON file (the full result stays on disk)."""

    key: str
    scenario: str
    policy: str
    seed: int
    summary: RunSummary
    elapsed_s: float
    worker: str
    path: Path

    def result(self) -> RunResult:
        """The run's full :class:`RunResult` (jobs, samples), read from its file."""
        data = json.loads(read_text(self.path, "run file", limit=MAX_TRACE_BYTES))
        return RunResult.model_validate(data["result"])


def _read_record(path: Path, fingerprint: str) -> RunRecord | None:
    """The record at ``path`` if it is a finished run of this fingerprint, else None (also
    for anything that is not a regular file: a planted FIFO or device is not read)."""
    from gpuplan.executors.metrics import RunSummary

    try:
        data = json.loads(read_text(path, "run file", limit=MAX_TRACE_BYTES))
        if data.get("fingerprint") != fingerprint or data.get("format") != FORMAT:
            return None
        return RunRecord(
            data["key"],
            data["scenario"],
            data["policy"],
            data["seed"],
            RunSummary.model_validate(data["summary"]),
            data["elapsed_s"],
            data.get("worker", ""),
            path,
        )
    except (InputError, OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def _write_atomic(path: Path, text: str) -> None:
    """A fresh file beside ``path`` (``O_EXCL | O_NOFOLLOW``, unpredictable name) renamed over
    it: a link planted at the name is replaced, never written through."""
    write_file_atomic(path, text, field="out")


def slurm_cluster(
    partition: str,
    *,
    memory: str = "4GB",
    walltime: str = "04:00:00",
    python: str | None = None,
    interface: str | None = None,
    log_directory: str | None = None,
) -> Any:
    """A dask-jobqueue ``SLURMCluster`` whose every Slurm job is one single-threaded worker on
    ``partition`` (scale it with ``cluster.scale(jobs=N)``); nothing is submitted yet.

    ``interface`` (e.g. ``lo``) is the network interface the scheduler listens on and the
    workers bind to: ``lo`` keeps a single-machine cluster (the Slurm lab) on 127.0.0.1 instead
    of the host's public address; None lets Dask pick, as on a real multi-node site.
    ``log_directory`` receives each job's Slurm output file (``run_sweep``: ``OUT/slurm-logs``)
    instead of the submitting process's working directory."""
    from dask_jobqueue import SLURMCluster

    return SLURMCluster(
        queue=partition,
        cores=1,
        processes=1,
        memory=memory,
        walltime=walltime,
        python=python or sys.executable,
        job_name="gpuplan-sweep",
        silence_logs="error",
        interface=interface,
        log_directory=log_directory,
    )


@contextmanager
def _dask_client(
    workers: int, scheduler: str | None, slurm: str | None, slurm_options: dict[str, str | None]
) -> Iterator[Any]:
    import logging
    import warnings

    from distributed import Client, LocalCluster

    cluster: Any = None
    if scheduler:
        client = Client(scheduler, timeout="60s")
    elif slurm:
        cluster = slurm_cluster(slurm, **slurm_options)
        cluster.scale(jobs=workers)
        client = Client(cluster)
    else:
        with warnings.catch_warnings():
            # its HTTP endpoint moves off a busy port 8787 by itself: nothing to warn about
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
        client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _results(
    tasks: Sequence[RunTask],
    workers: int,
    scheduler: str | None,
    slurm: str | None,
    slurm_options: dict[str, str | None],
) -> Iterator[tuple[str, str | None, str]]:
    """Finished runs in completion order, in this process or on a Dask cluster."""
    if workers == 1 and not scheduler and not slurm:
        for task in tasks:
            yield execute(task)
        return
    from distributed import as_completed

    with _dask_client(workers, scheduler, slurm, slurm_options) as client:
        futures = client.map(
            execute,
            list(tasks),
            pure=False,
            key=[f"gpuplan-sweep-{t.key}-{t.fingerprint}" for t in tasks],
        )
        for future in as_completed(futures):
            yield future.result()
            future.release()


# --------------------------------------------------------------------------- progress
def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class _Progress:
    """A rich bar on a terminal; otherwise one plain line per finished run (at most one every
    ``every`` seconds, and always the last), since logs have no cursor to redraw."""

    def __init__(self, total: int, reused: int, stream: TextIO, every: float = 2.0) -> None:
        self.total, self.done, self.reused = total, reused, reused
        self.stream, self.every = stream, every
        self.start = self.last = time.monotonic()
        self.bar: Any = None
        if stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("sweep"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(file=stream),
                transient=True,
            )
            self.task = self.bar.add_task("sweep", total=total, completed=reused)
            self.bar.start()
        else:
            self._line()

    def _line(self) -> None:
        elapsed = time.monotonic() - self.start
        computed, left = self.done - self.reused, self.total - self.done
        eta = _clock(elapsed / computed * left) if computed else "?"
        print(
            f"sweep: {self.done}/{self.total} runs, elapsed {_clock(elapsed)}, ETA {eta}",
            file=self.stream,
            flush=True,
        )

    def advance(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
            return
        now = time.monotonic()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            self._line()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# --------------------------------------------------------------------------- outputs
def _csv_text(records: Sequence[RunRecord]) -> str:
    """results.csv: one row per run, every summary field (loaning flattened)."""
    from gpuplan.executors.metrics import RunSummary

    skip = {"scenario", "policy", "seed", "loaning"}
    fields = [f for f in RunSummary.model_fields if f not in skip]
    loan_fields: list[str] = []
    for r in records:
        if r.summary.loaning is not None:
            loan_fields = list(type(r.summary.loaning).model_fields)
            break
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "scenario",
            "policy",
            "seed",
            "scenario_name",
            *fields,
            *(f"loaning_{f}" for f in loan_fields),
            "elapsed_s",
        ]
    )
    for r in records:
        s = r.summary
        loan = [getattr(s.loaning, f) if s.loaning else None for f in loan_fields]
        row = [
            r.scenario,
            r.policy,
            r.seed,
            s.scenario,
            *(getattr(s, f) for f in fields),
            *loan,
            r.elapsed_s,
        ]
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()


@dataclass(frozen=True)
class SweepOutcome:
    records: list[RunRecord]
    computed: int
    reused: int
    elapsed_s: float
    out: Path


def _check_out(out: Path, slurm: bool = False) -> Path:
    """``--out`` and the folders the sweep writes into (``runs/``, with Slurm
    ``slurm-logs/``): created if missing; a symlink or a non-directory at any of them is
    refused, so a link planted at ``out/runs`` cannot redirect the run files."""
    check_out_dir(str(out))
    check_subdir(out, "runs")
    if slurm:
        check_subdir(out, "slurm-logs")
    return out


def _check_extra(workers: int, scheduler: str | None, slurm: str | None, report: bool) -> None:
    """The 'sweep' extra's packages this sweep will use, checked before any run: Dask unless
    it runs in this process, dask-jobqueue with Slurm, matplotlib for report.html."""
    modules = ["matplotlib"] if report else []
    if workers != 1 or scheduler or slurm:
        modules.append("distributed")
    if slurm:
        modules.append("dask_jobqueue")
    if modules:
        require_extra("sweep", "gpuplan sweep", *modules)


def run_sweep(
    sweep: SweepFile,
    path: Path,
    out: Path,
    *,
    workers: int = 1,
    scheduler: str | None = None,
    slurm: str | None = None,
    slurm_options: dict[str, str | None] | None = None,
    report: bool = True,
    progress: TextIO | None = None,
) -> SweepOutcome:
    """Run every pending run of ``sweep``, then write results.csv and report.html."""
    _check_extra(workers, scheduler, slurm, report)
    t0 = time.perf_counter()
    runs_dir = _check_out(out, slurm=bool(slurm)) / "runs"
    tasks = plan_runs(sweep, path)
    records: dict[str, RunRecord] = {}
    for task in tasks:
        record = _read_record(runs_dir / f"{task.key}.json", task.fingerprint)
        if record is not None:
            records[task.key] = record
    pending = [t for t in tasks if t.key not in records]
    reused = len(records)
    # Submission order groups a scenario's seeds so a worker reuses its built scenario.
    order = {t.scenario: i for i, t in enumerate(tasks)}
    pending.sort(key=lambda t: (order[t.scenario], t.seed))
    by_key = {t.key: t for t in tasks}
    stream = progress or sys.stderr
    if workers > 1 and not scheduler and not slurm and pending:
        jobs = _small_sweep(pending)
        if jobs is not None:
            print(
                f"sweep: {len(pending)} runs of {jobs} jobs in all, too few to repay starting "
                f"{workers} Dask workers (under {IN_PROCESS_MAX_JOBS}): running them in this "
                "process",
                file=stream,
                flush=True,
            )
            workers = 1
    bar = _Progress(len(tasks), reused, stream)
    try:
        options = {"log_directory": str(out / "slurm-logs"), **(slurm_options or {})}
        for key, error, text in _results(pending, workers, scheduler, slurm, options):
            if error is not None:
                raise InputError(error, field=f"run {key}")
            target = runs_dir / f"{key}.json"
            _write_atomic(target, text)
            record = _read_record(target, by_key[key].fingerprint)
            assert record is not None, f"{target} did not read back"
            records[key] = record
            bar.advance()
    finally:
        bar.close()
    ordered = [records[t.key] for t in tasks]
    _write_atomic(out / "results.csv", _csv_text(ordered))
    if report:
        from .report import render_report  # matplotlib loads only when a report is written

        examples: dict[str, dict[str, RunResult]] = {}
        for r in ordered:
            if r.seed == sweep.seeds[0]:
                examples.setdefault(r.scenario, {})[r.policy] = r.result()
        notes = [
            f"{len(tasks)} runs: {len(sweep.scenarios)} scenarios x "
            f"{len(sweep.policies)} policies x {len(sweep.seeds)} seeds; results in "
            "results.csv and runs/*.json beside this page."
        ]
        _write_atomic(
            out / "report.html",
            render_report(sweep.name or f"Sweep {path.name}", ordered, examples, notes),
        )
    return SweepOutcome(ordered, len(tasks) - reused, reused, time.perf_counter() - t0, out)


# --------------------------------------------------------------------------- command line
def _workers_arg(text: str) -> int:
    """ASCII digits only: ``int`` reads other Unicode digits, so ``--workers`` U+0661 U+0662
    silently started a 12-process cluster."""
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 4096:
        raise argparse.ArgumentTypeError(f"must be an integer in [1, 4096], got {text[:30]!r}")
    return int(text)


def cmd_sweep(args: argparse.Namespace) -> int:
    check_path_text(args.file, "sweep file", field="file")
    check_path_text(args.out, "output folder", field="out")
    path = Path(args.file)
    sweep = load_sweep(path)
    if args.scheduler and not args.scheduler.startswith(
        ("tcp://", "tls://", "ucx://", "inproc://")
    ):
        raise InputError("give the scheduler as tcp://host:port", field="scheduler")
    workers = args.workers or (os.cpu_count() or 1)
    outcome = run_sweep(
        sweep,
        path,
        Path(args.out),
        workers=workers,
        scheduler=args.scheduler,
        slurm=args.slurm,
        slurm_options={
            "memory": args.slurm_memory,
            "walltime": args.slurm_walltime,
            "interface": args.slurm_interface,
        },
    )
    print(
        f"{len(outcome.records)} runs ({outcome.computed} computed, {outcome.reused} reused) "
        f"in {outcome.elapsed_s:.1f} s; results: {outcome.out / 'results.csv'}; report: "
        f"{outcome.out / 'report.html'}"
    )
    return 0


def add_subcommand(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``sweep`` on an ``argparse`` subparsers object (Dask loads only when used)."""
    p = subparsers.add_parser(
        "sweep",
        help="run scenarios x policies x seeds (on Dask), "
        "resumable; writes results.csv, per-run JSON and report.html",
    )
    p.add_argument("file", help="sweep file (YAML or JSON): scenarios, policies, seeds")
    p.add_argument("--out", required=True, help="output folder; rerun with it to resume")
    p.add_argument(
        "--workers",
        type=_workers_arg,
        default=None,
        help="worker processes (default: one per CPU; 1 runs in this process); "
        "with --slurm, Slurm jobs",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", help="join an existing Dask cluster (tcp://host:port)")
    where.add_argument(
        "--slurm",
        metavar="PARTITION",
        help="start workers as Slurm jobs on PARTITION (dask-jobqueue)",
    )
    p.add_argument("--slurm-memory", default="4GB", help="memory per Slurm worker job")
    p.add_argument("--slurm-walltime", default="04:00:00", help="walltime per Slurm worker job")
    p.add_argument(
        "--slurm-interface",
        default=None,
        metavar="IFACE",
        help="network interface of the scheduler and the Slurm workers (lo: all on "
        "this machine, 127.0.0.1); default: Dask's choice",
    )
    p.set_defaults(func=cmd_sweep)
    return p
