"""Reclaim at scale (issue 15 item 4): the ``exact`` reclaim at its 1-second deterministic
budget on generated 1,000-server instances, against the best known answer
(``python -m tests.bench.reclaim_scale [--quick] [--curve]``, in ``make bench``).

Per seed: Aryl's heuristic (the reference, measured in the same run), the previous default
(swap annealing + CP-SAT steps alone for the whole 1 det-s, ``search only``), and ``exact``
(tight-model LP bound, a 0.3 det-s search, then the RINS sub-MIP): preemptions, gap to the
best known, the reported lower bound, wall ms as a ratio against Aryl's and absolute. The best
known is HiGHS on the plain model with a 120 s wall limit, solved here unless ``--quick``
(then the values recorded in :data:`RECORDED_BEST`, all proven optimal). ``--curve`` adds the
deterministic-time-to-quality curve of ``exact`` (0.25-4 det-s).
"""

from __future__ import annotations

import statistics
import sys
import time

from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.policies.aryl.reclaim_exact import select_exact
from gpuplan.solver_core.policies.aryl.reclaim_greedy import select_aryl
from gpuplan.solver_core.policies.aryl.reclaim_lns import improve
from gpuplan.solver_core.policies.aryl.reclaim_model import evaluate
from gpuplan.solver_core.problems import reclaim
from gpuplan.solver_core.problems.generate import generate

SIZE = 1000
SEEDS = tuple(range(10))
RECORDED_BEST = {0: 99, 1: 96, 2: 89, 3: 83, 4: 99, 5: 82, 6: 100, 7: 92, 8: 93, 9: 85}
"""HiGHS on ``gpuplan solve reclaim --generate --size 1000 --seed S --solvers highs``, proven
optimal in 15-60 s on this machine (load 9-20 on 2 cores, 2026-11-26)."""
CURVE = (0.25, 0.5, 1.0, 2.0, 4.0)


def _pct(got: int, best: int) -> float:
    return (got - best) / best * 100.0


def _best(rf: reclaim.ReclaimFile, seed: int, quick: bool) -> tuple[int, str]:
    if quick:
        return RECORDED_BEST[seed], "recorded"
    out = reclaim.run(rf, "highs", SolveLimits.wall(120.0))
    if out.objective is None:
        return RECORDED_BEST[seed], "recorded"
    return min(int(out.objective), RECORDED_BEST[seed]), f"highs {out.status}"


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    curve = "--curve" in argv
    print(
        f"reclaim, {SIZE} loaned servers, demand {SIZE // 4}; exact at 1 det-s "
        f"(deterministic); gaps to the best known"
    )
    print(
        f"{'seed':>4} {'best':>10} {'aryl':>10} {'search only':>16} {'exact':>16} "
        f"{'bound':>5} {'aryl ms':>8} {'exact ms':>9} {'x aryl':>7}"
    )
    gaps = []
    for seed in SEEDS:
        rf = reclaim.load(generate("reclaim", SIZE, seed), f"reclaim-{SIZE}-{seed}")
        inst, n = rf.inst, rf.demand
        best, how = _best(rf, seed, quick)
        t0 = time.perf_counter()
        start = select_aryl(inst, n)
        aryl_ms = (time.perf_counter() - t0) * 1000.0
        aryl = len(evaluate(inst, start).preempted)
        search = improve(inst, start, SolveLimits.deterministic_budget(1.0)).preempted
        t0 = time.perf_counter()
        chosen, st = select_exact(inst, n)
        exact_ms = (time.perf_counter() - t0) * 1000.0
        got = reclaim.check(rf, {"servers": chosen, "preempted": evaluate(inst, chosen).preempted})
        best = min(best, got)
        gaps.append(_pct(got, best))
        bound = "-" if st.bound is None else f"{st.bound:.0f}"
        print(
            f"{seed:>4} {best:>4} ({how[:6]}) {aryl:>4} +{_pct(aryl, best):4.1f}% "
            f"{search:>9} +{_pct(search, best):4.1f}% {got:>9} +{_pct(got, best):4.1f}% "
            f"{bound:>5} {aryl_ms:>8.0f} {exact_ms:>9.0f} {exact_ms / aryl_ms:>7.0f}",
            flush=True,
        )
        if curve:
            for work in CURVE:
                t0 = time.perf_counter()
                c, s = select_exact(inst, n, limits=SolveLimits.deterministic_budget(work))
                ms = (time.perf_counter() - t0) * 1000.0
                k = len(evaluate(inst, c).preempted)
                print(
                    f"       curve {work:>4g} det-s: {k} (+{_pct(k, best):.1f} %), "
                    f"bound {s.bound}, {ms:.0f} ms",
                    flush=True,
                )
    print(
        f"exact at 1 det-s: mean gap {statistics.mean(gaps):.1f} %, worst {max(gaps):.1f} % "
        f"(goal: <= 5 % on every seed: {'met' if max(gaps) <= 5.0 else 'MISSED'})"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
