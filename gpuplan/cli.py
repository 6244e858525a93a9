"""The ``gpuplan`` command line: simulate, compare, plan, scenarios, policies.

Bad input never produces a traceback: every :class:`GpuplanError` is printed as one line
naming the file/row/field, and the exit status is 2.

Start-up matters (issue 28: ``gpuplan scenarios`` in 0.3 s, a small ``simulate`` in 0.5 s), so
the top level imports only what parsing the arguments needs; each command imports its
machinery (the simulator, metrics and numpy, rich's progress bar) when it runs.
tests/cli/test_cli_imports.py checks that the light commands load no solver backend.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import select
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpuplan.executors.control import command as slurm_controller
from gpuplan.executors.control.command import OneLineParser, seed_arg
from gpuplan.models.bounds import MAX_SEED
from gpuplan.models.errors import GpuplanError, InputError
from gpuplan.models.extras import require_extra

from . import __version__
from .out_paths import check_out_dir
from .term import console, print_table

if TYPE_CHECKING:
    from gpuplan.executors.metrics import RunSummary
    from gpuplan.models import RunResult
    from gpuplan.models.reasons import DecisionRecord

    from . import api

PROGRESS_MIN_JOBS = 2000
"""Show a progress bar for runs with at least this many jobs."""


def _console(err: bool = False) -> Console:
    """A console (:func:`gpuplan.term.console`: 160 columns when not a terminal, a closed
    pipe raised as ``BrokenPipeError`` for :func:`main`)."""
    return console(err)


def _run_with_progress(
    prepared: api.PreparedScenario,
    policy: str,
    quiet: bool,
    reasons: Callable[[DecisionRecord], None] | None = None,
) -> RunResult:
    from . import api

    total = len(prepared.jobs)
    show = not quiet and total >= PROGRESS_MIN_JOBS and sys.stderr.isatty()
    if not show:
        return api.run(prepared, policy, reasons=reasons)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn(f"{policy:>14}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(err=True),
        transient=True,
    ) as progress:
        task = progress.add_task(policy, total=total)
        step = max(1, total // 200)
        last = [0]

        def hook(done: int, now: float) -> None:
            if done - last[0] >= step:
                progress.update(task, completed=done)
                last[0] = done

        return api.run(prepared, policy, hook, reasons)


def _check_out(text: str | None) -> Path | None:
    """``--out``, checked before anything runs (a run must not end in an error it could have
    had at the start): a directory, created if missing; an existing non-directory or a
    symlink is refused (a planted link would redirect every file we write)."""
    if text is None:
        return None
    from gpuplan.scenarios.input_files import check_path_text

    check_path_text(text, "output folder", field="out")  # '' is refused, not read as "."
    return check_out_dir(text)


def _check_plots(args: argparse.Namespace) -> None:
    """``--out`` draws PNG plots (matplotlib, the 'plots' extra): without it, one line naming
    the extra before anything runs, not an error after the simulation."""
    if args.out is not None:
        require_extra("plots", f"gpuplan {args.command} --out")


def _check_scenario(text: str) -> str:
    """``--scenario``: a name or a path; text no file can have (5,000 characters, a NUL byte)
    is refused here, before the lookup's ``exists()`` raises on it."""
    from gpuplan.scenarios.input_files import check_path_text

    check_path_text(text, "scenario", field="scenario")
    return text


def _write_mean(
    out: Path,
    summaries: list[tuple[str, RunSummary]],
    per_policy: dict[str, list[RunSummary]],
    seeds: list[int | None],
) -> None:
    """``summary.json`` in ``out``: the mean over seeds, with every seed's numbers (written by
    rename, like every other output)."""
    from gpuplan.executors.metrics import compare_json

    rows = compare_json(summaries)
    for row in rows:
        row["seeds"] = seeds
        row["per_seed"] = [s.model_dump() for s in per_policy[row["policy"]]]
    fd, tmp = tempfile.mkstemp(prefix=".gpuplan-", dir=out)
    with os.fdopen(fd, "w") as fh:
        json.dump(rows, fh, indent=2)
    os.replace(tmp, out / "summary.json")


def _write_outputs(out: Path, results: list[RunResult]) -> list[Path]:
    """Every file is written in a private temporary directory inside ``out`` and renamed into
    place: a rename replaces a symlink planted at the name instead of following it, and a
    reader never sees half a file."""
    from gpuplan.executors.metrics import compare_json, summarize, write_job_csv, write_samples_csv

    from .plots import plot_jct_cdf, plot_timeseries

    staging = Path(tempfile.mkdtemp(prefix=".gpuplan-", dir=out))
    names: list[str] = []
    try:
        for r in results:
            stem = _file_stem(r.policy)
            write_job_csv(r, staging / f"{stem}-jobs.csv")
            write_samples_csv(r, staging / f"{stem}-samples.csv")
            names += [f"{stem}-jobs.csv", f"{stem}-samples.csv"]
        summaries = [(r.policy, summarize(r)) for r in results]
        (staging / "summary.json").write_text(json.dumps(compare_json(summaries), indent=2))
        by_policy = {r.policy: r for r in results}
        plot_jct_cdf(by_policy, staging / "jct_cdf.png")
        plot_timeseries(by_policy, staging / "timeseries.png")
        names += ["summary.json", "jct_cdf.png", "timeseries.png"]
        for name in names:
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / name for name in names]


def _print_tables(summaries: list[tuple[str, RunSummary]], caption: str | None = None) -> None:
    """The comparison table, then the capacity-loaning table when the scenario lends."""
    from gpuplan.executors.metrics import bounds_table, compare_table, loaning_table

    console = _console()
    table = compare_table(summaries)
    table.caption = caption
    print_table(console, table)
    loans = loaning_table(summaries)
    if loans is not None:
        loans.caption = caption
        print_table(console, loans)
    bounds = bounds_table(summaries)  # offline-optimal's proven bound and gap
    if bounds is not None:
        bounds.caption = caption
        print_table(console, bounds)


def _warn(prepared: api.PreparedScenario) -> None:
    for note in prepared.notes:
        _console(err=True).print(
            f"[yellow]warning:[/yellow] {escape(note)}",
            markup=True,
            highlight=False,
            soft_wrap=True,
        )


def cmd_simulate(args: argparse.Namespace) -> int:
    from gpuplan.executors.metrics import compare_json, summarize

    from . import api

    _check_plots(args)
    out = _check_out(args.out)
    prepared = api.prepare(_check_scenario(args.scenario), seed=args.seed)
    _warn(prepared)
    prepared.make_policy(args.policy)  # a bad name or parameter fails before the run
    if out is None:
        result = _run_with_progress(prepared, args.policy, args.json)
    else:
        from .inspect_cmds import decisions_file

        with decisions_file(out) as sink:  # decisions.jsonl: one record per decision
            result = _run_with_progress(prepared, args.policy, args.json, sink)
    summary = summarize(result)
    if out is not None:
        _write_outputs(out, [result])
    if args.json:
        print(json.dumps(compare_json([(result.policy, summary)])[0], indent=2))
    else:
        _print_tables([(result.policy, summary)])
    return 0


def _parse_seeds(text: str | None) -> list[int | None]:
    if not text:
        return [None]
    seeds = [s.strip() for s in text.split(",")]
    # ASCII digits only: str.isdigit() also holds for '²', which int() refuses
    if not all(s.isascii() and s.isdigit() and len(s) <= 10 and int(s) <= MAX_SEED for s in seeds):
        raise InputError(
            f"--seeds must be comma-separated integers in [0, {MAX_SEED}], got {text[:60]!r}",
            field="seeds",
        )
    return [int(s) for s in seeds]


def cmd_compare(args: argparse.Namespace) -> int:
    from gpuplan.executors.metrics import compare_json, mean_summary, summarize
    from gpuplan.solver_core.params import _split_top as split_top
    from gpuplan.solver_core.params import split_policy_list

    from . import api

    if any(not p.strip() for p in split_top(args.policies)):  # 'fifo,,srtf': a lost name?
        raise InputError(
            f"an empty entry in {args.policies[:80]!r}; give comma-separated policy names",
            field="policies",
        )
    policies = split_policy_list(args.policies)
    if not policies:
        raise InputError("--policies needs at least one policy name", field="policies")
    if len(set(policies)) != len(policies):
        raise InputError("a policy is named twice", field="policies")
    seeds = [args.seed] if args.seeds is None else _parse_seeds(args.seeds)
    _check_plots(args)
    out = _check_out(args.out)
    per_policy: dict[str, list[RunSummary]] = {p: [] for p in policies}
    for i, seed in enumerate(seeds):
        prepared = api.prepare(_check_scenario(args.scenario), seed=seed)
        if i == 0:
            _warn(prepared)
            for policy in policies:  # fail fast on a typo, before minutes of simulation
                prepared.make_policy(policy)
        results = [_run_with_progress(prepared, p, args.json) for p in policies]
        for result in results:
            per_policy[result.policy].append(summarize(result))
        if out is not None:  # one folder per seed when there are several
            where = out if len(seeds) == 1 else _check_out(str(out / f"seed-{prepared.spec.seed}"))
            _write_outputs(where, results)  # type: ignore[arg-type]
    summaries = [(p, mean_summary(s)) for p, s in per_policy.items()]
    if out is not None and len(seeds) > 1:
        _write_mean(out, summaries, per_policy, seeds)
    if args.json:
        rows = compare_json(summaries)
        if len(seeds) > 1:
            for row in rows:
                row["seeds"] = seeds
                row["per_seed"] = [s.model_dump() for s in per_policy[row["policy"]]]
        print(json.dumps(rows, indent=2))
    else:
        caption = f"mean over seeds {', '.join(str(s) for s in seeds)}" if len(seeds) > 1 else None
        _print_tables(summaries, caption)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from gpuplan.models import ClusterState
    from gpuplan.scenarios.input_files import (
        check_path_text,
        parse_structured,
        read_stdin,
        read_text,
    )

    from . import api

    if args.state != "-":
        check_path_text(args.state, "state file", field="state")
    path = Path(args.state)
    text = read_stdin("state") if args.state == "-" else read_text(path, "state file")
    data = parse_structured(text, str(path), json_only=True)
    try:
        state = ClusterState.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        raise InputError(
            first["msg"], source=str(path), field=".".join(str(x) for x in first["loc"])
        ) from None
    try:
        state.check_snapshot()
        plan = api.plan(state, args.policy, seed=args.seed)
    except ValueError as err:
        raise InputError(str(err), source=str(path)) from None
    except InputError as err:
        if err.source is not None:
            raise
        raise InputError(err.message, source=str(path), row=err.row, field=err.field) from None
    print(plan.model_dump_json(indent=2))
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from gpuplan.scenarios.listing import listing  # a static index: no YAML, no pydantic

    table = Table(title="Embedded scenarios")
    for col in ("name", "cluster", "workload", "description"):
        table.add_column(col)
    for row in listing():
        table.add_row(*(escape(cell) for cell in row))
    print_table(_console(), table)
    return 0


def cmd_policies(args: argparse.Namespace) -> int:
    from gpuplan.solver_core.registry import policy_names, wrapper_names

    if args.name:
        return _show_policy(args.name)
    table = Table(title="Policies")
    table.add_column("name")
    table.add_column("what it does")
    for name, desc in policy_names().items():
        table.add_row(escape(name), escape(desc))  # text, not rich markup
    print_table(_console(), table)
    wrappers = Table(title="Wrappers (wrappers: [...] in a configuration)")
    wrappers.add_column("name")
    wrappers.add_column("what it does")
    for name, desc in wrapper_names().items():
        wrappers.add_row(escape(name), escape(desc))
    print_table(_console(), wrappers)
    return 0


def _show_policy(name: str) -> int:
    """One policy (or wrapper): what it is and its parameters."""
    from gpuplan.solver_core.params import describe_params
    from gpuplan.solver_core.registry import policy_def, wrapper_def, wrapper_names

    if name in wrapper_names():
        w = wrapper_def(name)
        title, models, notes = f"wrapper {name}: {w.description}", [w.params], []
    else:
        d = policy_def(name)
        chain = [d]
        while chain[-1].base is not None:
            chain.append(policy_def(chain[-1].base))
        base = chain[-1]
        wrappers = [wrapper_def(w) for c in chain for w in c.wrappers]
        title = f"{name}: {d.description}"
        models = [base.params, *(w.params for w in wrappers)]
        notes = []
        if d.base is not None:
            values = {k: v for c in reversed(chain) for k, v in c.values.items()}
            notes.append(
                f"preset of {base.name}"
                + (f" with wrappers {', '.join(w.name for w in wrappers)}" if wrappers else "")
                + (f" and {', '.join(f'{k}={v!r}' for k, v in values.items())}" if values else "")
            )
    table = Table(title=escape(title))
    for col in ("parameter", "type", "default", "help"):
        table.add_column(col)
    for model in models:
        for row in describe_params(model):
            table.add_row(*(escape(c) for c in row))
    console = _console()
    print_table(console, table)
    for note in notes:
        console.print(escape(note))
    if not table.rows:
        console.print("no parameters")
    return 0


def _file_stem(policy: str) -> str:
    """A file name for a policy (inline configurations hold brackets, commas, quotes)."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in policy)[:120]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``gpuplan`` parser; with ``command``, the slow-to-import commands other than that
    one are registered by name only (:data:`LAZY_COMMANDS`)."""
    parser = OneLineParser(
        prog="gpuplan", description="Allocation engine for DL training jobs on GPU clusters."
    )
    # The release, also what `slurm-controller --check` compares the installed hook's
    # GPUPLAN_HOOK_VERSION line against.
    parser.add_argument("--version", action="version", version=f"gpuplan {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="simulate one policy on a scenario")
    sim.add_argument("--scenario", required=True, help="embedded scenario name or file path")
    sim.add_argument(
        "--policy",
        required=True,
        help="a policy name, a configuration of the scenario's policies: block, or "
        "inline base(key=value,...)",
    )
    sim.add_argument("--seed", type=seed_arg, default=None, help="override the scenario's seed")
    sim.add_argument("--out", help="folder for per-job CSV, samples, summary and plots")
    sim.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sim.set_defaults(func=cmd_simulate)

    cmp_ = sub.add_parser("compare", help="compare policies on one scenario")
    cmp_.add_argument("--scenario", required=True, help="embedded scenario name or file path")
    cmp_.add_argument(
        "--policies",
        required=True,
        help="comma-separated policies or configurations; the first is the base "
        "of the ratio column",
    )
    cmp_.add_argument("--seed", type=seed_arg, default=None, help="override the scenario's seed")
    cmp_.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds; the table shows means over them, --out "
        "writes seed-N/ folders plus the mean's summary.json",
    )
    cmp_.add_argument("--out", help="folder for per-job CSV, samples, summary and plots")
    cmp_.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cmp_.set_defaults(func=cmd_compare)

    pl = sub.add_parser("plan", help="one decision for a cluster state file; plan JSON on stdout")
    pl.add_argument("--state", required=True, help="ClusterState JSON file, or - for stdin")
    pl.add_argument("--policy", required=True, help="a policy name or inline base(key=value,...)")
    pl.add_argument("--seed", type=seed_arg, default=0, help="seed of the policy's random choices")
    pl.set_defaults(func=cmd_plan)

    sc = sub.add_parser("scenarios", help="list embedded scenarios")
    sc.set_defaults(func=cmd_scenarios)
    po = sub.add_parser("policies", help="list policies and wrappers, or show one's parameters")
    po.add_argument("name", nargs="?", help="a policy or wrapper: show its parameters")
    po.set_defaults(func=cmd_policies)
    # The controller's options live beside it (executors/control/command.py); registering
    # them loads no Slurm code.
    slurm_controller.add_subcommand(sub)
    # Commands whose modules are slow to import register only when they are the one that
    # runs (or when every command must show: --help, no command, a misspelt one); otherwise
    # their names alone are there, which parsing another command never reaches.
    for module, (register, names) in LAZY_COMMANDS.items():
        if command is None or command in names:
            getattr(importlib.import_module(module), register)(sub)
        else:
            for name in names:
                sub.add_parser(name, add_help=False)
    return parser


LAZY_COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpuplan.sweep": ("add_subcommand", ("sweep",)),
    "gpuplan.inspect_cmds": ("add_subcommands", ("status", "explain")),
    "gpuplan.server_cmds": ("add_subcommands", ("server", "submit", "cancel")),
    "gpuplan.solve": ("add_subcommand", ("solve",)),
    "gpuplan.interference_cmd": ("add_subcommand", ("interference-eval",)),
    "gpuplan.reproduce_cmd": ("add_subcommand", ("reproduce",)),
    "gpuplan.slurm_lab_cmd": ("add_subcommand", ("slurm-lab-report",)),
}
"""module -> (its registering function, the commands it registers), in ``--help``'s order."""


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names when it is one that :data:`LAZY_COMMANDS` may leave out or
    one of the others; ``None`` (register everything) when it names none or an unknown one."""
    first = next((a for a in argv if not a.startswith("-")), None)
    lazy = {n for _, names in LAZY_COMMANDS.values() for n in names}
    return first if first in lazy or first in _OWN_COMMANDS else None


_OWN_COMMANDS = frozenset(
    {"simulate", "compare", "plan", "scenarios", "policies", "slurm-controller"}
)
"""Commands registered by :func:`build_parser` whatever runs (cheap to register)."""


STATUS_CLOSED_PIPE = 141
"""Exit status when the reader of stdout went away (``gpuplan plan ... | head``): 128 + SIGPIPE,
what ``cat`` or ``seq`` give there, so ``set -o pipefail`` scripts see the same; nothing is
printed (docs/cli.md)."""


def _stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone: poll reports an error."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _quiet_after_closed_stdout() -> int:
    """Point stdout at /dev/null so the interpreter's final flush of what is still buffered
    cannot raise again ("Exception ignored ... BrokenPipeError"), and exit quietly."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return STATUS_CLOSED_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_command(argv)).parse_args(argv)
    try:
        status = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers, not at exit
        return status
    except GpuplanError as err:
        # soft_wrap: one line however long the path in the message (no hard wrap at 160);
        # escape: a message quoting "[/x]" from user input must not be read as rich markup
        _console(err=True).print(
            f"[red]error:[/red] {escape(str(err))}", markup=True, highlight=False, soft_wrap=True
        )
        return 2
    except KeyboardInterrupt:
        return 130
    except (RecursionError, MemoryError) as err:
        # Input shaped to exhaust the interpreter (deep nesting, a huge expansion) that got
        # past the readers' own checks: still one line, still bad input.
        _console(err=True).print(
            f"[red]error:[/red] input too large or too deeply nested ({type(err).__name__})",
            markup=True,
            highlight=False,
            soft_wrap=True,
        )
        return 2
    except Exception as err:
        if isinstance(err, BrokenPipeError) and _stdout_closed():
            return _quiet_after_closed_stdout()  # the reader of our output went away
        if os.environ.get("GPUPLAN_DEBUG"):
            raise
        _console(err=True).print(
            f"[red]internal error:[/red] {escape(type(err).__name__)}: "
            f"{escape(' '.join(str(err).split())[:300])} (a gpuplan bug: please report it; "
            "GPUPLAN_DEBUG=1 shows the traceback)",
            markup=True,
            highlight=False,
            soft_wrap=True,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
