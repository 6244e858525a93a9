"""``gpuplan solve PROBLEM --instance FILE``: one decision problem, every solver, side by side.

The instance formats and the ``--json`` output are specified in shared/problems/README.md;
every answer is checked against the problem's full constraints (:mod:`.solve_check`): one that
breaks a rule has status ``infeasible`` and its row adds ``violations`` (and ``ignores``, the
rules a relaxed baseline leaves out by design).
Problems live in :data:`PROBLEMS`, a small table: each is one :class:`Problem` entry (a loader
that validates the file and a runner per solver); mckp, reclaim, placement and packing come from
:mod:`gpuplan.solver_core.problems`, whose formats docs/solvers.md gives.
Bad input raises :class:`~gpuplan.models.InputError` (one line naming
file and field, exit 2, printed by the CLI's ``main``).

``--generate`` draws a seeded instance from :mod:`gpuplan.solver_core.problems.generate`
instead of reading one: with ``--instance FILE`` it is written there (nothing solved), else it
is solved at once (and saved as ``instance.json`` beside the report when ``--out`` is given).
Every instance passes through the same loader as a file does.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from gpuplan.executors.control.command import seed_arg
from gpuplan.models import InputError
from gpuplan.models.bounds import MAX_SEED, MAX_TIME_S
from gpuplan.models.extras import require_extra
from gpuplan.models.ojpp import load_ojpp
from gpuplan.scenarios.input_files import check_path_text, parse_structured, read_text
from gpuplan.solver_core.limits import DEFAULT_TIME_LIMIT_S, SolveLimits
from gpuplan.solver_core.problems.common import Outcome

from . import term
from .out_paths import check_file_target, check_out_dir, write_file_atomic

__all__ = [
    "PROBLEMS",
    "Problem",
    "add_subcommand",
    "cmd_solve",
    "public",
    "run_problem",
    "solve_data",
]

Runner = Callable[[Any, str, SolveLimits], Outcome]


@dataclass(frozen=True)
class Problem:
    """One decision problem: how to read its file and how to run each of its solvers."""

    description: str
    load: Callable[[Any, str], Any]
    """(parsed JSON, source name) -> validated instance; raises InputError."""
    solvers: Callable[[], tuple[str, ...]]
    """Every solver name, in table order."""
    default_solvers: Callable[[], tuple[str, ...]]
    """The solvers run when ``--solvers`` is not given (those available here)."""
    run: Runner


def _ojpp_solvers() -> tuple[str, ...]:
    from gpuplan.solver_core.policies.ojpp import SOLVERS

    return SOLVERS


def _ojpp_defaults() -> tuple[str, ...]:
    from gpuplan.solver_core.mip_backends import available_backends
    from gpuplan.solver_core.policies.ojpp import EXACT_SOLVERS, HEURISTIC_SOLVERS

    have = set(available_backends())
    return (*(s for s in EXACT_SOLVERS if s in have), *HEURISTIC_SOLVERS)


def _ojpp_run(inst: Any, solver: str, limits: SolveLimits) -> Outcome:
    from gpuplan.solver_core.policies.ojpp import solve

    answer = solve(inst, solver, limits)
    st = answer.stats
    return Outcome(
        st.status,
        st.objective,
        st.bound,
        st.gap,
        {"gpus": answer.gpus},
        None,
        st.wall_ms,
        st.message,
    )


def _module_problem(name: str, description: str) -> Problem:
    """A problem whose module in :mod:`gpuplan.solver_core.problems` has load/run/SOLVERS,
    imported when the problem is first used: the modules load the solvers (CP-SAT,
    scipy.optimize), and registering ``gpuplan solve`` must not cost every command that
    (issue 28: a fast CLI)."""

    def mod() -> Any:
        return importlib.import_module(f"gpuplan.solver_core.problems.{name}")

    return Problem(
        description,
        lambda data, source: mod().load(data, source),
        lambda: mod().SOLVERS,
        lambda: mod().default_solvers(),
        lambda inst, solver, limits: mod().run(inst, solver, limits),
    )


PROBLEMS: dict[str, Problem] = {
    "mckp": _module_problem("mckp", "multiple-choice knapsack: flexible GPU demand (Aryl phase 2)"),
    "reclaim": _module_problem(
        "reclaim", "which loaned servers go back, fewest preemptions (Aryl)"
    ),
    "placement": _module_problem(
        "placement", "reuse-maximising placement: fewest migrations (AFS/CoDDL 4.4)"
    ),
    "packing": _module_problem(
        "packing", "network-packing regulation of shares to legal sizes (AFS/CoDDL App. E)"
    ),
    "ojpp": Problem(
        "opportunistic job placement: co-located workers on the fewest GPUs (paper 002)",
        load_ojpp,
        _ojpp_solvers,
        _ojpp_defaults,
        _ojpp_run,
    ),
}


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def run_problem(
    problem: str, instance_path: Path, solvers: list[str] | None, limits: SolveLimits
) -> list[dict[str, Any]]:
    """The README's JSON list: one object per solver, in the order asked."""
    chosen = _chosen(problem, solvers)
    source = str(instance_path)
    check_path_text(source, f"{problem} instance", field="instance")
    data = parse_structured(read_text(instance_path, f"{problem} instance"), source, json_only=True)
    return _solve(problem, data, source, chosen, limits)


def solve_data(
    problem: str, data: Any, source: str, solvers: list[str] | None, limits: SolveLimits
) -> list[dict[str, Any]]:
    """:func:`run_problem` on parsed JSON (a generated instance); ``source`` names it."""
    return _solve(problem, data, source, _chosen(problem, solvers), limits)


def _chosen(problem: str, solvers: list[str] | None) -> list[str]:
    """The solvers to run, checked before any file is read."""
    if problem not in PROBLEMS:
        raise InputError(
            f"unknown problem {problem!r}; choose one of {', '.join(PROBLEMS)}", field="problem"
        )
    spec = PROBLEMS[problem]
    known = spec.solvers()
    chosen = solvers if solvers else list(spec.default_solvers())
    for s in chosen:
        if s not in known:
            raise InputError(
                f"unknown solver {s!r} for {problem}; choose from {', '.join(known)}",
                field="solvers",
            )
    return chosen


def _solve(
    problem: str, data: Any, source: str, chosen: list[str], limits: SolveLimits
) -> list[dict[str, Any]]:
    from .solve_check import ignored_rules, verify

    spec = PROBLEMS[problem]
    inst = spec.load(data, source)
    rows = []
    for s in chosen:
        out, violations = verify(problem, inst, spec.run(inst, s, limits))
        row = _row(s, out)
        ignores = ignored_rules(problem, s)
        if ignores or violations:  # keys only where there is something to say
            row["ignores"], row["violations"] = ignores, violations
        rows.append(row)
    return rows


def _generated(args: argparse.Namespace) -> tuple[Any, str] | None:
    """``--generate``: the instance's JSON and its name, written to ``--instance`` if given
    (then None: nothing to solve). ``--size``/``--seed`` without ``--generate`` are errors."""
    if not args.generate:
        for flag in ("size", "seed"):
            if getattr(args, flag) is not None:
                raise InputError("only with --generate", field=flag)
        return None
    from gpuplan.solver_core.problems.generate import (
        DEFAULT_SIZES,
        MAX_SIZES,
        generate,
        instance_text,
    )

    if args.problem not in PROBLEMS:
        raise InputError(
            f"unknown problem {args.problem!r}; choose one of {', '.join(PROBLEMS)}",
            field="problem",
        )
    top = MAX_SIZES[args.problem]
    if args.size is not None and not 1 <= args.size <= top:
        raise InputError(
            f"must be an integer in [1, {top}] for {args.problem}, got {args.size}", field="size"
        )
    target = None if args.instance is None else _instance_target(args.instance)
    seed = 0 if args.seed is None else args.seed
    data = generate(args.problem, args.size, seed)
    name = f"generated {args.problem} size={args.size or DEFAULT_SIZES[args.problem]} seed={seed}"
    if target is None:
        return data, name
    write_file_atomic(target, instance_text(data), field="instance")
    return data, str(target)


def _instance_target(text: str) -> Path:
    """``--generate --instance FILE``'s FILE, checked before generating: a new or regular file
    (a symlink, a directory or a device such as /dev/null is refused)."""
    check_path_text(text, "instance file", field="instance")
    return check_file_target(text, "instance")


def _solver_list(text: str | None) -> list[str] | None:
    """``--solvers a,b``; an empty entry (``a,,b``) is refused, not dropped."""
    if not text:
        return None
    names = [s.strip() for s in text.split(",")]
    if not all(names):
        raise InputError(
            f"an empty entry in {text[:80]!r}; give comma-separated solver names", field="solvers"
        )
    return names


def _row(solver: str, out: Outcome) -> dict[str, Any]:
    """The README's object; build/solve split kept under private keys for the table/CSV."""
    wall = out.solve_ms + (out.build_ms or 0.0)
    return {
        "solver": solver,
        "status": out.status,
        "objective": _finite(out.objective),
        "bound": _finite(out.bound),
        "gap": _finite(out.gap),
        "wall_ms": round(wall, 3),
        "solution": out.solution,
        "_build_ms": None if out.build_ms is None else round(out.build_ms, 3),
        "_solve_ms": round(out.solve_ms, 3),
    }


def public(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with only the README's keys (``--json``)."""
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def cmd_solve(args: argparse.Namespace) -> int:  # noqa: C901 (a named exception to the complexity gate)
    console = term.console()
    if args.list:
        table = Table(title="gpuplan solve: problems and solvers")
        table.add_column("problem")
        table.add_column("solvers")
        table.add_column("description")
        for name, spec in PROBLEMS.items():
            table.add_row(name, ", ".join(spec.solvers()), escape(spec.description))
        term.print_table(console, table)
        return 0
    if not args.problem or not (args.instance or args.generate):
        raise InputError(
            "give PROBLEM and --instance FILE or --generate (or --list)", field="instance"
        )
    solvers = _solver_list(args.solvers)
    # --out before anything runs: a bad folder must not cost the solvers' time first
    out = None
    if args.out is not None and not (args.generate and args.instance is not None):
        check_path_text(args.out, "output folder", field="out")
        require_extra("plots", "gpuplan solve --out")  # solve.png
        out = check_out_dir(args.out)
    generated = _generated(args)
    if generated is not None and args.instance is not None:
        print(f"wrote {generated[1]}")
        return 0
    if args.time_limit is not None and not (
        math.isfinite(args.time_limit) and 0 < args.time_limit <= MAX_TIME_S
    ):
        raise InputError(
            f"must be a number of seconds in (0, {MAX_TIME_S:.0f}] (20 years), "
            f"got {args.time_limit:g}",
            field="time-limit",
        )
    limits = SolveLimits.wall(args.time_limit if args.time_limit else DEFAULT_TIME_LIMIT_S)
    if generated is None:
        name = args.instance
        rows = run_problem(args.problem, Path(args.instance), solvers, limits)
    else:
        data, name = generated
        rows = solve_data(args.problem, data, name, solvers, limits)
    if out is not None:
        from .solve_report import write_report

        title = Path(args.instance).name if generated is None else name
        write_report(rows, out, f"{args.problem}: {title}")
        if generated is not None:
            from gpuplan.solver_core.problems.generate import instance_text

            write_file_atomic(out / "instance.json", instance_text(data), field="out")
    if args.json:
        print(json.dumps(public(rows)))
        return 0
    table = Table(title=f"{escape(args.problem)}: {escape(name)}")
    for col in ("solver", "status", "objective", "bound", "gap", "build ms", "solve ms", "wall ms"):
        table.add_column(col, justify="left" if col in ("solver", "status") else "right")
    for r in rows:
        table.add_row(
            escape(r["solver"]),
            r["status"],
            _fmt(r["objective"]),
            _fmt(r["bound"]),
            _fmt(r["gap"]),
            _fmt(r["_build_ms"]),
            f"{r['_solve_ms']:.1f}",
            f"{r['wall_ms']:.1f}",
        )
    term.print_table(console, table)
    for r in rows:  # what a relaxed baseline leaves out, and what any answer broke
        if r.get("ignores") or r.get("violations"):
            what = ", ".join(r.get("ignores", [])) or "nothing by design"
            console.print(
                f"{escape(r['solver'])}: ignores {escape(what)}; "
                f"{len(r.get('violations', []))} violation(s) of the full model"
                + (f", e.g. {escape(r['violations'][0])}" if r.get("violations") else ""),
                highlight=False,
                soft_wrap=True,
            )
    if args.out:
        extra = " and instance.json" if generated is not None else ""
        console.print(f"wrote {escape(args.out)}/solve.csv, solve.png{extra}")
    return 0


def _size_arg(text: str) -> int:
    """``--size``: ASCII digits (``int()`` also takes '²'-like digits and '1_000'); the bound
    per problem is checked once the problem is known."""
    body = text.strip()
    if not (body.isascii() and body.lstrip("-").isdigit()) or len(body) > 12:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text[:30]!r}")
    return int(body)


def add_subcommand(sub: Any) -> None:
    """Register ``gpuplan solve`` on the CLI's sub-parsers."""
    p = sub.add_parser(
        "solve",
        help="solve one decision problem from an instance file with "
        "every solver (mckp, reclaim, placement, packing, ojpp)",
    )
    p.add_argument("problem", nargs="?", help=f"one of {', '.join(PROBLEMS)}")
    p.add_argument("--instance", help="instance JSON file (shared/problems/README.md format)")
    p.add_argument("--solvers", help="comma-separated solver names (default: all available)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help=f"wall-clock seconds per exact solver (default {DEFAULT_TIME_LIMIT_S:g})",
    )
    p.add_argument("--json", action="store_true", help="print the JSON list")
    p.add_argument(
        "--out", help="directory for solve.csv and solve.png (objective and time per solver)"
    )
    p.add_argument("--list", action="store_true", help="list problems and their solvers")
    p.add_argument(
        "--generate",
        action="store_true",
        help="a seeded random instance instead of a file: written to --instance "
        "FILE if given (not solved), else solved at once (kept as instance.json "
        "in --out)",
    )
    p.add_argument(
        "--size",
        type=_size_arg,
        default=None,
        help="with --generate: groups (mckp), loaned servers (reclaim), nodes "
        "(placement), jobs (packing, ojpp); bounded per problem (docs/cli.md)",
    )
    p.add_argument(
        "--seed",
        type=seed_arg,
        default=None,
        help=f"with --generate: an integer in [0, {MAX_SEED}] (default 0)",
    )
    p.set_defaults(func=cmd_solve)
