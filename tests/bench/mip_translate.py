"""MIP layer translation cost: ``MipModel`` -> MathOpt (``python -m tests.bench.mip_translate``).

``to_model_proto`` writes MathOpt's ``ModelProto`` in bulk; the reference, measured in the same
run, builds the same model element by element through ``mathopt.Model`` (the obvious way, and
what the layer did first). Printed: median microseconds per model for both and their ratio, on a
policy-sized model (12 variables, 4 rows) and a larger one (400 variables, 100 rows).
"""

from __future__ import annotations

import random
import statistics
import sys
import time

from gpuplan.solver_core.backends import MipModel, lin_sum
from gpuplan.solver_core.mip_backends import to_model_proto


def knapsack(n: int, seed: int) -> MipModel:
    """A knapsack with one cardinality row per four items (MCKP-like)."""
    rng = random.Random(seed)
    m = MipModel("bench")
    xs = [m.bool_var(f"x{i}") for i in range(n)]
    w = [rng.randint(5, 60) for _ in range(n)]
    m.add(lin_sum(wi * x for wi, x in zip(w, xs, strict=True)) <= sum(w) // 2)
    for k in range(0, n, 4):
        m.add(lin_sum(xs[k : k + 4]) <= 2)
    m.maximize(lin_sum(rng.randint(5, 60) * x for x in xs))
    return m


def element_by_element(model: MipModel) -> object:
    """The reference: the same model through ``mathopt.Model``'s add_* calls."""
    from ortools.math_opt.python import mathopt

    mo = mathopt.Model(name=model.name)
    xs = [
        mo.add_variable(lb=v.lb, ub=v.ub, is_integer=v.kind != "num", name=v.name)
        for v in model.vars
    ]
    for con in model.constraints:
        mo.add_linear_constraint(
            lb=con.lb,
            ub=con.ub,
            expr=mathopt.LinearSum(c * xs[v.index] for v, c in con.terms.items()),
        )
    mo.set_objective(
        mathopt.LinearSum(c * xs[v.index] for v, c in model.objective.terms.items()),
        is_maximize=model.sense == "max",
    )
    return mo.export_model()  # type: ignore[no-any-return]


def _median_us(fn: object, model: MipModel, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(model)  # type: ignore[operator]
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main(argv: list[str]) -> None:
    reps = 30 if "--quick" in argv else 200
    to_model_proto(knapsack(4, 0))
    element_by_element(knapsack(4, 0))  # imports outside the timing
    print("model | to_model_proto us | element-by-element us | ratio")
    for n in (12, 400):
        m = knapsack(n, 1)
        ref_proto = element_by_element(m)
        ref_proto.linear_constraints.ClearField("names")  # unnamed rows stored as ""
        assert to_model_proto(m) == ref_proto, "the two translations differ"
        fast = _median_us(to_model_proto, m, reps)
        ref = _median_us(element_by_element, m, reps)
        print(f"{n} vars, {len(m.constraints)} rows | {fast:.0f} | {ref:.0f} | {fast / ref:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
