"""``pulp-cbc``: PuLP's CBC executable, fed from the MathOpt model of
:func:`~gpuplan.solver_core.mip_backends.to_model_proto`.

Where PuLP earns its place: MathOpt has no CBC, and ``pywraplp``'s in-process CBC takes no
solver-specific parameters, so this is the one CBC route with a node limit (``maxNodes``, a
deterministic budget). It also runs CBC in a separate process, which a watchdog can kill when
CBC overruns its own time limit. PuLP only reads the MathOpt model's rows; it is not a second
modelling layer.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator

from gpuplan.models.plan import SolverStatus

from .limits import SolveLimits
from .mip_backends import Raw, limit_reached, out_of_time, remaining, to_model_proto
from .mip_model import MipModel

__all__ = ["pulp_available", "solve_pulp_cbc"]


@functools.cache
def pulp_available() -> bool:
    """PuLP imports and finds its CBC executable."""
    try:
        import pulp
    except ImportError:  # pragma: no cover
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(pulp.PULP_CBC_CMD(msg=False).available())


_CBC_BOUND_RE = re.compile(r"^(?:Lower|Upper) bound:\s*(\S+)", re.MULTILINE)
_CBC_STOPPED_RE = re.compile(r"Stopped on (?:time|nodes|iterations|ctrl-c)", re.IGNORECASE)
"""CBC's result line when a limit ended the search ("Result - Stopped on time limit")."""


@contextlib.contextmanager
def _cbc_watchdog(after_s: float) -> Iterator[list[int]]:
    """Kill this process's ``cbc`` children still running ``after_s`` seconds from now.

    CBC 2.10 now and then overruns ``-sec`` by seconds (a 0.05 s limit took 10 s in about one
    run of 30 here), and PuLP waits for it with no timeout of its own. The yielded list gets
    the killed PIDs, so the caller reports a timeout instead of whatever PuLP reads back.
    """
    killed: list[int] = []
    done = threading.Event()

    def reap() -> None:
        if done.wait(after_s):
            return
        me = str(os.getpid())
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry.name}/comm", encoding="ascii", errors="replace") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if fields[1] == me and comm.startswith("cbc"):
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))

    watcher = threading.Thread(target=reap, name="cbc-watchdog", daemon=True)
    watcher.start()
    try:
        yield killed
    finally:
        done.set()
        watcher.join()


def solve_pulp_cbc(
    model: MipModel, limits: SolveLimits, deadline: float, threads: int, seed: int, rel_gap: float
) -> Raw:
    """Solve ``model`` with PuLP's CBC within ``limits`` (clock: ``deadline``)."""
    # PuLP 3.x deprecates direct LpVariable construction and PULP_CBC_CMD ahead of 4.0; both
    # still work and the alternatives do not exist in the PuLP 2.8 we also support.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _solve_quiet(model, limits, deadline, threads, seed, rel_gap)


def _problem(model: MipModel) -> tuple[object, list[object]]:
    """The PuLP problem read from the MathOpt model, and its variables in model order."""
    import pulp

    proto = to_model_proto(model)
    prob = pulp.LpProblem(
        "gpuplan", pulp.LpMaximize if proto.objective.maximize else pulp.LpMinimize
    )
    var = proto.variables
    # Internal names: PuLP mangles or rejects names containing spaces and operators. An
    # integer variable on [0, 1] is binary, as MipModel.bool_var states it.
    pvars = [
        pulp.LpVariable(
            f"v{k}",
            None if lb == -math.inf else lb,
            None if ub == math.inf else ub,
            (
                pulp.LpBinary
                if integer and lb == 0 and ub == 1
                else pulp.LpInteger
                if integer
                else pulp.LpContinuous
            ),
        )
        for k, (lb, ub, integer) in enumerate(
            zip(var.lower_bounds, var.upper_bounds, var.integers, strict=True)
        )
    ]
    lin = proto.objective.linear_coefficients
    if lin.ids:
        prob.setObjective(
            pulp.LpAffineExpression(
                [(pvars[c], coef) for c, coef in zip(lin.ids, lin.values, strict=True)]
            )
        )
    rows: list[list[tuple[object, float]]] = [[] for _ in proto.linear_constraints.ids]
    mat = proto.linear_constraint_matrix
    for r, c, coef in zip(mat.row_ids, mat.column_ids, mat.coefficients, strict=True):
        rows[r].append((pvars[c], coef))
    cons = proto.linear_constraints
    for k, (expr, lb, ub) in enumerate(
        zip(rows, cons.lower_bounds, cons.upper_bounds, strict=True)
    ):
        if lb == ub:
            prob.addConstraint(
                pulp.LpConstraint(pulp.LpAffineExpression(expr), pulp.LpConstraintEQ, f"c{k}", lb)
            )
            continue
        if ub != math.inf:
            prob.addConstraint(
                pulp.LpConstraint(pulp.LpAffineExpression(expr), pulp.LpConstraintLE, f"c{k}u", ub)
            )
        if lb != -math.inf:
            prob.addConstraint(
                pulp.LpConstraint(pulp.LpAffineExpression(expr), pulp.LpConstraintGE, f"c{k}l", lb)
            )
    return prob, pvars


def _solve_quiet(
    model: MipModel, limits: SolveLimits, deadline: float, threads: int, seed: int, rel_gap: float
) -> Raw:
    import pulp

    prob, pvars = _problem(model)
    # CBC's seed value 0 means "time of day"; its defaults are fixed, so keep them for seed 0.
    options = [f"randomCbcSeed {seed}", f"randomSeed {seed}"] if seed else []
    fd, log_path = tempfile.mkstemp(prefix="gpuplan-cbc-", suffix=".log")
    os.close(fd)
    try:
        left = remaining(deadline)
        if left <= 0:
            return out_of_time(limits, "translating the model for pulp-cbc")
        # "-threads 1" starts CBC 2.10's threaded code path, which deadlocks on a futex in
        # about 3 % of runs here; without the option CBC runs single-threaded and never did.
        cmd = pulp.PULP_CBC_CMD(
            msg=False,
            timeLimit=left,
            threads=threads if threads > 1 else None,
            gapRel=rel_gap if rel_gap > 0 else None,
            options=options,
            logPath=log_path,
            maxNodes=limits.nodes,
        )
        t0 = time.perf_counter()
        with _cbc_watchdog(left + max(1.0, left)) as killed:
            try:
                prob.solve(cmd)  # type: ignore[attr-defined]
            except pulp.PulpSolverError as exc:
                if killed:
                    return out_of_time(limits, "by cbc, which overran its own limit and was killed")
                return Raw(
                    "error", message=f"pulp-cbc failed: {exc}", solve_s=time.perf_counter() - t0
                )
        solve_s = time.perf_counter() - t0
        if killed:
            return out_of_time(limits, "by cbc, which overran its own limit and was killed")
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            cbc_log = fh.read()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(log_path)
    match = _CBC_BOUND_RE.search(cbc_log)
    log_bound = float(match.group(1)) if match else None
    if log_bound is not None and not math.isfinite(log_bound):
        log_bound = None

    sol = prob.sol_status
    if sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        values = [float(pv.varValue) if pv.varValue is not None else 0.0 for pv in pvars]
        status: SolverStatus = "optimal" if sol == pulp.LpSolutionOptimal else "feasible"
        if status == "optimal":
            log_bound = None  # filled with the objective in post-processing
        return Raw(status, values, log_bound if model.objective.terms else None, solve_s=solve_s)
    raw_name = f"PuLP status {pulp.LpStatus[prob.status]}"
    # Checked first: PuLP reads "stopped on a limit before any solution" as Infeasible, which
    # would turn a timeout into a false proof.
    if _CBC_STOPPED_RE.search(cbc_log):
        status, msg = limit_reached(limits, raw_name)
        return Raw(status, None, log_bound, msg, solve_s)
    if sol == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible:
        if solve_s >= left:
            # CBC 2.10 interrupted by its clock during pre-processing prints "Pre-processing
            # says infeasible" (seen on feasible models with millisecond limits): a claim made
            # after the time ran out is not a proof.
            return Raw(
                "timeout",
                message=f"pulp-cbc claimed infeasibility after its "
                f"{left:.3g}s ran out; not trusted ({limits.describe()})",
                solve_s=solve_s,
            )
        return Raw("infeasible", message="pulp-cbc proved infeasibility", solve_s=solve_s)
    if sol == pulp.LpSolutionUnbounded or prob.status == pulp.LpStatusUnbounded:
        return Raw("error", message="pulp-cbc: model is unbounded", solve_s=solve_s)
    return Raw(
        "error",
        message=f"pulp-cbc stopped without a solution or a limit reached ({raw_name})",
        solve_s=solve_s,
    )
