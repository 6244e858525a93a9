"""Translators from :class:`~gpuplan.solver_core.mip_model.MipModel` to each exact backend.

One function per backend turns the model into the backend's own objects, applies the
:class:`~gpuplan.solver_core.limits.SolveLimits` (deterministic work/node budgets and the wall-clock
guard, whose clock started before translation) and reads back a :class:`_Raw` result.
``timeout`` versus ``error`` is decided from the backend's own reason for stopping (CP-SAT's
UNKNOWN, pywraplp's NOT_SOLVED, CBC's "Stopped on" log line), never from how much wall-clock time
went by, so a busy machine cannot turn one into the other.

``highspy`` is deliberately never imported: its HiGHS shared library clashes with the one bundled
inside OR-Tools; HiGHS is reached only through ``pywraplp``.
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
from dataclasses import dataclass

from gpuplan.models.plan import SolverStatus

from .limits import SolveLimits
from .mip_model import INTEGRALITY_TOL, MipModel, ModelError

__all__ = ["BACKENDS", "available_backends", "run_backend"]

BACKENDS: tuple[str, ...] = ("cp-sat", "scip", "cbc", "highs", "pulp-cbc")
"""Every backend name :func:`~gpuplan.solver_core.backends.solve` accepts, in preference order."""

_PYWRAPLP_IDS = {"scip": "SCIP", "cbc": "CBC", "highs": "HIGHS"}
_PYWRAPLP_UNKNOWN = 99
"""MPSOLVER_UNKNOWN_STATUS, which pywraplp exposes no constant for; 8x codes are bad
parameters (errors)."""


@dataclass
class _Raw:
    """Backend-specific result before common post-processing."""

    status: SolverStatus
    values: list[float] | None = None
    bound: float | None = None  # without the objective constant
    message: str = ""
    solve_s: float = 0.0  # time inside the solver call proper


# --------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------


def _int_or_none(x: float) -> int | None:
    r = round(x)
    return int(r) if abs(x - r) <= INTEGRALITY_TOL else None


def _limit_reached(limits: SolveLimits, raw_name: str) -> tuple[SolverStatus, str]:
    """The backend said it stopped on a limit, without a solution: a timeout."""
    return "timeout", f"limit reached without a solution ({limits.describe()}; {raw_name})"


def _remaining(deadline: float) -> float:
    """Wall-clock seconds left before ``deadline`` (a ``time.perf_counter`` instant)."""
    return deadline - time.perf_counter()


def _out_of_time(limits: SolveLimits, what: str) -> _Raw:
    return _Raw("timeout", message=f"wall-clock limit {limits.wall_s:g}s used up {what}")


def _solve_cpsat(model: MipModel, limits: SolveLimits, deadline: float, threads: int,
                 seed: int, rel_gap: float) -> _Raw:
    from ortools.sat.python import cp_model

    cp = cp_model.CpModel()
    cp.name = model.name
    cvars = []
    for v in model.vars:
        if v.kind == "num":
            raise ModelError(f"cp-sat: continuous variable {v.name!r} is not supported; "
                             "use a MIP backend (scip, cbc, highs, pulp-cbc) or make it integer")
        if not (math.isfinite(v.lb) and math.isfinite(v.ub)):
            raise ModelError(f"cp-sat: integer variable {v.name!r} needs finite bounds, "
                             f"got [{v.lb}, {v.ub}]")
        cvars.append(cp.new_int_var(int(v.lb), int(v.ub), v.name))

    for con in model.constraints:
        idx, coefs = [], []
        for var, coef in con.terms.items():
            ic = _int_or_none(coef)
            if ic is None:
                raise ModelError(
                    f"cp-sat: constraint {con.name!r} has non-integer coefficient {coef!r} on "
                    f"{var.name!r}; CP-SAT constraints must be integral. Scale the row (e.g. "
                    "express memory in MiB) or use a MIP backend"
                )
            idx.append(cvars[var.index])
            coefs.append(ic)
        # With integral coefficients and variables the row activity is integral, so rounding
        # the sides inward is exact.
        lb = cp_model.INT_MIN if con.lb == -math.inf else math.ceil(con.lb - INTEGRALITY_TOL)
        ub = cp_model.INT_MAX if con.ub == math.inf else math.floor(con.ub + INTEGRALITY_TOL)
        if lb > ub:
            return _Raw("infeasible", message=f"constraint {con.name!r} has an empty integer "
                        f"range [{con.lb}, {con.ub}]")
        cp.add_linear_constraint(cp_model.LinearExpr.weighted_sum(idx, coefs), lb, ub)

    obj = model.objective.terms
    if obj:
        ovars = [cvars[v.index] for v in obj]
        int_coefs = [_int_or_none(c) for c in obj.values()]
        # Integral objective: exact. Fractional: CP-SAT's native floating-point objective.
        ocoefs: list[int] | list[float] = (
            [c for c in int_coefs if c is not None]
            if None not in int_coefs else list(obj.values())
        )
        expr = cp_model.LinearExpr.weighted_sum(ovars, ocoefs)
        if model.sense == "min":
            cp.minimize(expr)
        else:
            cp.maximize(expr)
    for var, value in model.hints.items():
        cp.add_hint(cvars[var.index], round(value))

    left = _remaining(deadline)
    if left <= 0:
        return _out_of_time(limits, "translating the model for cp-sat")
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = left
    if limits.work_s is not None:
        params.max_deterministic_time = limits.work_s
    # A fixed worker count with a fixed seed makes CP-SAT deterministic; one worker by default.
    params.num_workers = threads
    params.random_seed = seed
    params.relative_gap_limit = rel_gap
    params.log_search_progress = False
    t0 = time.perf_counter()
    code = solver.solve(cp)
    solve_s = time.perf_counter() - t0
    name = solver.status_name(code)

    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        values = [float(solver.value(cv)) for cv in cvars]
        bound = solver.best_objective_bound if obj else None
        return _Raw("optimal" if code == cp_model.OPTIMAL else "feasible", values, bound,
                    solve_s=solve_s)
    if code == cp_model.INFEASIBLE:
        return _Raw("infeasible", message="cp-sat proved infeasibility", solve_s=solve_s)
    if code == cp_model.MODEL_INVALID:
        return _Raw("error", message=f"cp-sat MODEL_INVALID: {cp.validate()}", solve_s=solve_s)
    # UNKNOWN: CP-SAT stopped on a limit (time, deterministic time) before any solution.
    status, msg = _limit_reached(limits, name)
    # CP-SAT keeps a valid bound even when it found no solution.
    bound = solver.best_objective_bound if obj else None
    if bound is not None and not math.isfinite(bound):
        bound = None
    return _Raw(status, None, bound, msg, solve_s)


def _solve_pywraplp(model: MipModel, backend: str, limits: SolveLimits, deadline: float,
                    threads: int, seed: int, rel_gap: float) -> _Raw:
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver(_PYWRAPLP_IDS[backend])
    if solver is None:
        return _Raw("error", message=f"{backend} cannot be created in this OR-Tools build; "
                    f"available: {', '.join(available_backends())}")
    solver.SuppressOutput()
    inf = solver.infinity()

    def clip(x: float) -> float:
        return inf if x == math.inf else -inf if x == -math.inf else x

    pvars = []
    for v in model.vars:
        if v.kind == "num":
            pvars.append(solver.NumVar(clip(v.lb), clip(v.ub), v.name))
        else:
            pvars.append(solver.IntVar(clip(v.lb), clip(v.ub), v.name))
    for con in model.constraints:
        row = solver.RowConstraint(clip(con.lb), clip(con.ub), con.name)
        for var, coef in con.terms.items():
            row.SetCoefficient(pvars[var.index], coef)
    objective = solver.Objective()
    for var, coef in model.objective.terms.items():
        objective.SetCoefficient(pvars[var.index], coef)
    if model.sense == "max":
        objective.SetMaximization()
    else:
        objective.SetMinimization()

    left = _remaining(deadline)
    if left <= 0:
        return _out_of_time(limits, f"translating the model for {backend}")
    solver.SetTimeLimit(max(1, round(left * 1000)))
    params = pywraplp.MPSolverParameters()
    # pywraplp's default relative MIP gap is 1e-4: "optimal" would not mean optimal.
    params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, rel_gap)
    if backend == "scip":
        solver.SetNumThreads(threads)
        nodes = f"limits/nodes = {limits.nodes}\n" if limits.nodes is not None else ""
        solver.SetSolverSpecificParametersAsString(
            f"randomization/randomseedshift = {seed}\n{nodes}")
    elif backend == "highs":
        # The OR-Tools HiGHS interface ignores the generic gap parameter and applies this
        # string even though the setter returns False. output_flag must come first, otherwise
        # HiGHS prints its banner on stdout. Threads are pinned to 1: HiGHS fixes its global
        # scheduler on first use and fails later runs that ask for a different count.
        solver.SetSolverSpecificParametersAsString(
            "output_flag=false\nlog_to_console=false\nthreads=1\n"
            f"random_seed={seed}\nmip_rel_gap={rel_gap!r}\n"
            + (f"mip_max_nodes={limits.nodes}\n" if limits.nodes is not None else "")
        )
    # cbc: nothing to set. OR-Tools' CBC is built without threads (asking for more prints
    # "No match for threads" on stdout) and uses a fixed seed; pywraplp passes it no
    # solver-specific parameters, so it has no node limit: only the wall-clock guard applies.

    t0 = time.perf_counter()
    code = solver.Solve(params)
    solve_s = time.perf_counter() - t0

    if code in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        values = [pv.solution_value() for pv in pvars]
        bound: float | None = objective.BestBound() if model.objective.terms else None
        if backend == "highs" and code == pywraplp.Solver.FEASIBLE:
            bound = None  # OR-Tools reports HiGHS's incumbent as its bound: not a real bound
        status: SolverStatus = "optimal" if code == pywraplp.Solver.OPTIMAL else "feasible"
        return _Raw(status, values, bound, solve_s=solve_s)
    if code == pywraplp.Solver.INFEASIBLE:
        return _Raw("infeasible", message=f"{backend} proved infeasibility", solve_s=solve_s)
    if code == pywraplp.Solver.UNBOUNDED:
        return _Raw("error", message=f"{backend}: model is unbounded", solve_s=solve_s)
    if code == pywraplp.Solver.MODEL_INVALID:
        return _Raw("error", message=f"{backend}: MODEL_INVALID", solve_s=solve_s)
    if code == pywraplp.Solver.ABNORMAL:
        return _Raw("error", message=f"{backend}: ABNORMAL termination", solve_s=solve_s)
    # NOT_SOLVED, or codes pywraplp has no constant for (99 = unknown, 8x = bad parameters).
    if code == pywraplp.Solver.NOT_SOLVED or code == _PYWRAPLP_UNKNOWN:
        # NOT_SOLVED: SCIP/CBC stopped on a time or node limit before a solution. 99
        # (MPSOLVER_UNKNOWN_STATUS) is how OR-Tools' HiGHS interface reports the same.
        name = "NOT_SOLVED" if code == pywraplp.Solver.NOT_SOLVED else "UNKNOWN_STATUS"
        status, msg = _limit_reached(limits, name)
        return _Raw(status, message=msg, solve_s=solve_s)
    return _Raw("error", message=f"{backend} stopped with status code {code} (bad "
                "parameters or an unknown state), without a solution", solve_s=solve_s)


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


def _solve_pulp_cbc(model: MipModel, limits: SolveLimits, deadline: float, threads: int,
                    seed: int, rel_gap: float) -> _Raw:
    # PuLP 3.x deprecates direct LpVariable construction and PULP_CBC_CMD ahead of 4.0; both
    # still work and the alternatives do not exist in the PuLP 2.8 we also support.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _solve_pulp_cbc_quiet(model, limits, deadline, threads, seed, rel_gap)


def _solve_pulp_cbc_quiet(model: MipModel, limits: SolveLimits, deadline: float,
                          threads: int, seed: int, rel_gap: float) -> _Raw:
    import pulp

    prob = pulp.LpProblem("gpuplan", pulp.LpMaximize if model.sense == "max" else
                          pulp.LpMinimize)
    cats = {"int": pulp.LpInteger, "bool": pulp.LpBinary, "num": pulp.LpContinuous}
    # Internal names: PuLP mangles or rejects names containing spaces and operators.
    pvars = [
        pulp.LpVariable(f"v{v.index}", None if v.lb == -math.inf else v.lb,
                        None if v.ub == math.inf else v.ub, cats[v.kind])
        for v in model.vars
    ]
    if model.objective.terms:
        prob.setObjective(pulp.LpAffineExpression(
            [(pvars[v.index], c) for v, c in model.objective.terms.items()]))
    for k, con in enumerate(model.constraints):
        expr = [(pvars[v.index], c) for v, c in con.terms.items()]
        if con.lb == con.ub:
            prob.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(expr),
                                                 pulp.LpConstraintEQ, f"c{k}", con.lb))
            continue
        if con.ub != math.inf:
            prob.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(expr),
                                                 pulp.LpConstraintLE, f"c{k}u", con.ub))
        if con.lb != -math.inf:
            prob.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(expr),
                                                 pulp.LpConstraintGE, f"c{k}l", con.lb))

    # CBC's seed value 0 means "time of day"; its defaults are fixed, so keep them for seed 0.
    options = [f"randomCbcSeed {seed}", f"randomSeed {seed}"] if seed else []
    fd, log_path = tempfile.mkstemp(prefix="gpuplan-cbc-", suffix=".log")
    os.close(fd)
    try:
        left = _remaining(deadline)
        if left <= 0:
            return _out_of_time(limits, "translating the model for pulp-cbc")
        # "-threads 1" starts CBC 2.10's threaded code path, which deadlocks on a futex in
        # about 3 % of runs here; without the option CBC runs single-threaded and never did.
        cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=left,
                                threads=threads if threads > 1 else None,
                                gapRel=rel_gap if rel_gap > 0 else None, options=options,
                                logPath=log_path, maxNodes=limits.nodes)
        t0 = time.perf_counter()
        with _cbc_watchdog(left + max(1.0, left)) as killed:
            try:
                prob.solve(cmd)
            except pulp.PulpSolverError as exc:
                if killed:
                    return _out_of_time(limits, "by cbc, which overran its own limit and "
                                        "was killed")
                return _Raw("error", message=f"pulp-cbc failed: {exc}",
                            solve_s=time.perf_counter() - t0)
        solve_s = time.perf_counter() - t0
        if killed:
            return _out_of_time(limits, "by cbc, which overran its own limit and was killed")
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
        return _Raw(status, values, log_bound if model.objective.terms else None,
                    solve_s=solve_s)
    raw_name = f"PuLP status {pulp.LpStatus[prob.status]}"
    # Checked first: PuLP reads "stopped on a limit before any solution" as Infeasible, which
    # would turn a timeout into a false proof.
    if _CBC_STOPPED_RE.search(cbc_log):
        status, msg = _limit_reached(limits, raw_name)
        return _Raw(status, None, log_bound, msg, solve_s)
    if sol == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible:
        if solve_s >= left:
            # CBC 2.10 interrupted by its clock during pre-processing prints "Pre-processing
            # says infeasible" (seen on feasible models with millisecond limits): a claim made
            # after the time ran out is not a proof.
            return _Raw("timeout", message=f"pulp-cbc claimed infeasibility after its "
                        f"{left:.3g}s ran out; not trusted ({limits.describe()})",
                        solve_s=solve_s)
        return _Raw("infeasible", message="pulp-cbc proved infeasibility", solve_s=solve_s)
    if sol == pulp.LpSolutionUnbounded or prob.status == pulp.LpStatusUnbounded:
        return _Raw("error", message="pulp-cbc: model is unbounded", solve_s=solve_s)
    return _Raw("error", message=f"pulp-cbc stopped without a solution or a limit reached "
                f"({raw_name})", solve_s=solve_s)


@functools.cache
def available_backends() -> list[str]:
    """Backends that can actually be created in this environment, in :data:`BACKENDS` order.

    OR-Tools wheels may be built without some MIP solvers, so this asks ``pywraplp`` rather
    than assuming. Cached: the answer cannot change within a process.
    """
    found = []
    try:
        from ortools.sat.python import cp_model  # noqa: F401

        found.append("cp-sat")
    except ImportError:  # pragma: no cover - ortools is a hard dependency
        pass
    try:
        from ortools.linear_solver import pywraplp

        for backend, solver_id in _PYWRAPLP_IDS.items():
            if pywraplp.Solver.CreateSolver(solver_id) is not None:
                found.append(backend)
    except ImportError:  # pragma: no cover
        pass
    try:
        import pulp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            if pulp.PULP_CBC_CMD(msg=False).available():
                found.append("pulp-cbc")
    except ImportError:  # pragma: no cover
        pass
    return [b for b in BACKENDS if b in found]


def run_backend(model: MipModel, backend: str, limits: SolveLimits, deadline: float,
                threads: int, seed: int, rel_gap: float) -> _Raw:
    """Translate and solve ``model`` on ``backend`` within ``limits`` (clock: ``deadline``)."""
    if backend == "cp-sat":
        return _solve_cpsat(model, limits, deadline, threads, seed, rel_gap)
    if backend == "pulp-cbc":
        return _solve_pulp_cbc(model, limits, deadline, threads, seed, rel_gap)
    return _solve_pywraplp(model, backend, limits, deadline, threads, seed, rel_gap)
