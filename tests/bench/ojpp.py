"""OJPP benchmark: exact solve time vs size, heuristic time at 200 workers, heuristic vs exact.

``python -m tests.bench.ojpp [--quick] [--large]``. Instances come from ``tests/ojpp_gen.py``
(seeded, values on a 0.01 grid, jobs of 1-6 workers, mixed bounds). Goals (OJPP issue): 40 workers
proven optimal by CP-SAT within 10 s; the heuristic (Alg. 3) <= 5 ms for 200 workers and
within 10 % of the exact GPU count where exact finishes (reported for Alg. 3, for
``heuristic-ls`` and for ``heuristic-pg``).

The exact solver runs with a *deterministic* budget of 10 CP-SAT seconds (one worker; the
wall guard of :meth:`SolveLimits.deterministic_budget` only catches pathologies); each row
prints the CP-SAT deterministic time it used beside the wall time. At 40 workers the count
model (``use_patterns=False``, the solver before the pattern model) runs on the same
instances under the same budget, as the same-run reference. Ratios are against the exact
answer measured in the same run; absolute times are printed beside them. No asserts: this
reports.
"""

from __future__ import annotations

import statistics
import sys
import time

from gpuplan.models.ojpp import OjppInstance
from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.policies.ojpp import solve
from gpuplan.solver_core.policies.ojpp.exact import OjppAnswer, solve_exact
from gpuplan.solver_core.policies.ojpp.patterns import enumerate_patterns
from tests.ojpp_gen import random_instance

SIZES = (10, 20, 30, 40, 60, 80)
LARGE = (120, 160, 200)
"""With ``--large``: where the pattern model stops proving within the budget."""
REFERENCE_SIZE = 40
GOAL_EXACT_S = 10.0
GOAL_HEURISTIC_MS = 5.0
GOAL_RATIO = 1.10
HEURISTICS = ("heuristic", "heuristic-ls", "heuristic-pg")


_DET: list[float] = []
"""CP-SAT deterministic seconds of every solve since the last reset (see :func:`_record`)."""


def _record() -> None:
    """Wrap ``CpSolver.solve`` so the bench can read each solve's deterministic time: the
    project's backend layer does not report it, and the bench must not change that layer."""
    from ortools.sat.python import cp_model

    plain = cp_model.CpSolver.solve

    def solve(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = plain(self, *args, **kwargs)
        _DET.append(self.deterministic_time)
        return out

    cp_model.CpSolver.solve = solve  # type: ignore[method-assign]


def _exact_row(inst: OjppInstance, use_patterns: bool) -> tuple[OjppAnswer, float, float]:
    """The answer, its wall seconds and its CP-SAT deterministic seconds (all rounds)."""
    _DET.clear()
    t0 = time.perf_counter()
    ex = solve_exact(
        inst,
        "cp-sat",
        SolveLimits.deterministic_budget(GOAL_EXACT_S),
        shortcut=False,
        use_patterns=use_patterns,
    )
    return ex, time.perf_counter() - t0, sum(_DET)


def _exact_table(seeds: int, sizes: tuple[int, ...]) -> None:
    print(
        f"{'workers':>7} {'seed':>4} {'pats':>5} {'status':>8} {'exact':>5} {'bound':>5} "
        + " ".join(f"{h[-4:]:>5}" for h in HEURISTICS)
        + f" {'greedy':>6} "
        + " ".join(f"{h[-4:] + '/ex':>7}" for h in HEURISTICS)
        + f" {'det s':>6} {'wall s':>7}  count model (same budget)"
    )
    ratios: dict[str, list[float]] = {h: [] for h in HEURISTICS}
    for workers in sizes:
        proven = ref_proven = 0
        walls: list[float] = []
        dets: list[float] = []
        for seed in range(seeds):
            inst = random_instance(seed, workers, "additive", max_per_job=6)
            patterns = enumerate_patterns(inst)
            ex, secs, det = _exact_row(inst, True)
            walls.append(secs)
            dets.append(det)
            got = {h: solve(inst, h).stats.objective or 0.0 for h in HEURISTICS}
            greedy = solve(inst, "greedy").stats.objective or 0.0
            obj = ex.stats.objective or 0.0
            rs = {h: got[h] / obj if obj else float("nan") for h in HEURISTICS}
            if ex.stats.status == "optimal":
                proven += 1
                for h in HEURISTICS:
                    ratios[h].append(rs[h])
            ref = ""
            if workers == REFERENCE_SIZE:
                cm, cm_s, cm_det = _exact_row(inst, False)
                ref_proven += cm.stats.status == "optimal"
                ref = (
                    f"  {cm.stats.status} {cm.stats.objective or 0:.0f} bound "
                    f"{cm.stats.bound or 0:.0f} in {cm_det:.2f} det s, {cm_s:.2f} s"
                )
            print(
                f"{workers:>7} {seed:>4} {len(patterns or []):>5} {ex.stats.status:>8} "
                f"{obj:>5.0f} {ex.stats.bound or 0:>5.0f} "
                + " ".join(f"{got[h]:>5.0f}" for h in HEURISTICS)
                + f" {greedy:>6.0f} "
                + " ".join(f"{rs[h]:>7.3f}" for h in HEURISTICS)
                + f" {det:>6.2f} {secs:>7.2f}{ref}"
            )
        print(
            f"  {workers} workers: {proven}/{seeds} proven optimal (deterministic budget "
            f"{GOAL_EXACT_S:g} s), deterministic max {max(dets):.2f} s, wall max "
            f"{max(walls):.2f} s, median {statistics.median(walls):.2f} s"
            + (f"; count model {ref_proven}/{seeds}" if workers == REFERENCE_SIZE else "")
        )
    for name, rs_ in ratios.items():
        if rs_:
            print(
                f"{name} / exact GPUs where proven: mean {statistics.mean(rs_):.3f}, "
                f"max {max(rs_):.3f} (goal <= {GOAL_RATIO}); within goal: "
                f"{sum(r <= GOAL_RATIO + 1e-9 for r in rs_)}/{len(rs_)}"
            )


def _heuristic_time(repeats: int) -> None:
    """The solver's own time (``stats.wall_ms``: the placement, what the goal is about) and
    the time of the whole ``solve`` call, which adds the lower bound reported as ``bound``."""
    runs = [("heuristic", w) for w in (50, 100, 200)] + [
        ("heuristic-ls", 200),
        ("heuristic-pg", 40),
        ("heuristic-pg", 200),
    ]
    for solver, workers in runs:
        inst = random_instance(1, workers, "additive", max_per_job=8)
        own, total = [], []
        for _ in range(repeats if solver != "heuristic-pg" else max(3, repeats // 4)):
            t0 = time.perf_counter()
            got = solve(inst, solver)
            total.append((time.perf_counter() - t0) * 1000.0)
            own.append(got.stats.wall_ms or 0.0)
        best = min(own)
        print(
            f"{solver}, {workers} workers ({len(inst.jobs)} jobs): best {best:.2f} ms, "
            f"median {statistics.median(own):.2f} ms, {got.stats.objective:.0f} GPUs, bound "
            f"{got.stats.bound:.0f}; with the bound: median {statistics.median(total):.2f} "
            f"ms (goal <= {GOAL_HEURISTIC_MS:g} ms at 200 for Alg. 3: ratio "
            f"{best / GOAL_HEURISTIC_MS:.2f})"
        )


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    _record()
    _heuristic_time(5 if quick else 20)
    _exact_table(2 if quick else 5, (*SIZES, *LARGE) if "--large" in argv else SIZES)


if __name__ == "__main__":
    main(sys.argv[1:])
