"""OJPAP (Alg. 4): the EWMA trigger ignores transient spikes and fires on persistent ones;
adjustment relieves the worst GPUs, keeps every rule on the targets and respects the budget."""

from __future__ import annotations

import itertools
import json
import math

from gpuplan.models.ojpp import OjppInstance
from gpuplan.solver_core.policies.ojpp.check import check_solution
from gpuplan.solver_core.policies.ojpp.online import (
    GpuEwma,
    OnlineState,
    adjust,
    device_slowdowns,
    observe,
)

THETA = 0.1


def _run(series: list[list[float]], a: float = 0.9, hold: int = 2) -> list[bool]:
    state = OnlineState(hold=hold)
    fired = []
    for row in series:
        state = observe(state, row, THETA, a)
        fired.append(state.triggered)
    return fired


def test_ewma_is_eq_18() -> None:
    state = observe(OnlineState(), [0.05, 0.2], THETA, a=0.8)
    assert state.ewma == (0.05, 0.2)  # first observation starts the average
    state = observe(state, [0.3, 0.0], THETA, a=0.8)
    assert abs(state.ewma[0] - (0.8 * 0.05 + 0.2 * 0.3)) < 1e-12
    assert abs(state.ewma[1] - 0.16) < 1e-12


def test_transient_spike_does_not_trigger() -> None:
    calm = [0.05, 0.05]
    # a start-up spike to 0.6 for one round on GPU 0, then calm again (Fig. 10, t_2)
    series = [calm] * 5 + [[0.6, 0.05]] + [calm] * 10
    fired = _run(series)
    assert not any(fired)
    # ... even though the raw observation broke the bound six-fold
    assert max(r[0] for r in series) > 5 * THETA


def test_persistent_rise_triggers_after_the_hold() -> None:
    series = [[0.05, 0.05]] * 5 + [[0.05, 0.3]] * 10
    fired = _run(series)
    first = fired.index(True)
    assert first > 5  # not on the first bad round: the EWMA has to climb and stay above
    # EWMA after r bad rounds: 0.3 - 0.25 * 0.9**r ; above 0.1 from r = 3, fired at r = 4
    assert first == 5 + 3
    # the same spike for one round only (the transient test) stays a non-event
    assert not any(_run([[0.05, 0.05]] * 5 + [[0.05, 0.3]] + [[0.05, 0.05]] * 5))


def test_hold_one_and_a_zero_is_the_raw_rule() -> None:
    assert _run([[0.05], [0.11]], a=0.0, hold=1) == [False, True]


def _inst(budget_jobs: int = 3) -> OjppInstance:
    jobs = [
        {
            "id": f"r{n}",
            "workers": 1,
            "alpha": 0.3,
            "gamma": 0.2,
            "delta": 0.2,
            "p": 0.05,
            "type": "victim",
        }
        for n in range(budget_jobs)
    ]
    jobs += [
        {
            "id": f"v{n}",
            "workers": 1,
            "alpha": 0.3,
            "gamma": 0.2,
            "delta": 0.2,
            "p": 0.05,
            "type": "bully",
        }
        for n in range(budget_jobs)
    ]
    jobs += [
        {
            "id": f"q{n}",
            "workers": 1,
            "alpha": 0.2,
            "gamma": 0.1,
            "delta": 0.1,
            "p": 0.05,
            "type": "quiet",
        }
        for n in range(budget_jobs)
    ]
    types = ["victim", "bully", "quiet"]
    m = {
        "victim": {"victim": 0.05, "bully": 0.8, "quiet": 0.02},
        "bully": {"victim": 0.05, "bully": 0.05, "quiet": 0.02},
        "quiet": {t: 0.02 for t in types},
    }
    return OjppInstance.model_validate(
        {"tau_max": 0.1, "theta_max": 0.1, "theta_balance": 0.2, "jobs": jobs, "interference": m}
    )


def test_adjustment_relieves_victims_within_budget() -> None:
    inst = _inst()
    # victims share GPUs with bullies (as an interference-blind placement would); quiet GPUs
    # have room
    gpus = [["r0#0", "v0#0"], ["r1#0", "v1#0"], ["r2#0", "v2#0"], ["q0#0"], ["q1#0"], ["q2#0"]]
    theta = device_slowdowns(inst, gpus)
    assert theta[:3] == [0.8, 0.8, 0.8]
    cost = {j.id: 1.0 for j in inst.jobs}
    new, moves = adjust(inst, gpus, theta, cost, budget=2.0)
    assert len(moves) == 2 and sum(m.cost for m in moves) <= 2.0  # budget binds: 2 of 3
    after = device_slowdowns(inst, new)
    # ties in cost go to the most slowed-down worker: the victims leave, the bullies stay alone
    assert sorted(after[:3]) == [0.0, 0.0, 0.8]
    assert sorted(m.worker for m in moves) == ["r0#0", "r1#0"]
    for m in moves:  # each target ends within the bound (victim next to a quiet job: 0.02)
        assert m.target >= 3 and after[m.target] == 0.02
    assert sorted(itertools.chain(*new)) == sorted(itertools.chain(*gpus))
    new3, moves3 = adjust(inst, gpus, theta, cost, budget=10.0)
    assert len(moves3) == 3 and max(device_slowdowns(inst, new3)) <= 0.1
    assert check_solution(inst, new3) == []


def test_cheapest_worker_moves_and_zero_budget_moves_nothing() -> None:
    inst = _inst(1)
    gpus = [["r0#0", "v0#0"], ["q0#0"]]
    theta = device_slowdowns(inst, gpus)
    cost = {"r0": 5.0, "v0": 1.0, "q0": 1.0}
    new, moves = adjust(inst, gpus, theta, cost, budget=10.0)
    assert [m.worker for m in moves] == ["v0#0"]  # the bully is cheaper to move
    assert device_slowdowns(inst, new) == [0.0, 0.02]
    assert adjust(inst, gpus, theta, cost, budget=0.5) == (gpus, [])


def test_no_target_no_move_unless_new_gpus_allowed() -> None:
    inst = _inst(1)
    gpus = [["r0#0", "v0#0", "q0#0"]]
    theta = device_slowdowns(inst, gpus)
    cost = {j.id: 1.0 for j in inst.jobs}
    assert adjust(inst, gpus, theta, cost, budget=5.0) == (gpus, [])
    new, moves = adjust(inst, gpus, theta, cost, budget=5.0, allow_new=True)
    assert len(new) == 2 and len(moves) == 1 and moves[0].target == 1
    assert max(device_slowdowns(inst, new)) < max(theta)


def test_distinct_never_puts_two_workers_of_a_job_on_one_gpu() -> None:
    inst = _inst(1)
    # the victim's only relief would be the GPU its own other worker holds
    two = inst.model_copy(
        update={"jobs": (inst.jobs[0].model_copy(update={"workers": 2}), *inst.jobs[1:])}
    )
    gpus = [["r0#0", "v0#0"], ["r0#1"]]
    theta = device_slowdowns(two, gpus)
    cost = {"r0": 1.0, "v0": 5.0, "q0": 5.0}
    _, moves = adjust(two, gpus, theta, cost, budget=5.0)
    assert [(m.worker, m.target) for m in moves] == [("r0#0", 1)]  # the unrestricted answer
    assert adjust(two, gpus, theta, cost, budget=5.0, distinct=True) == (gpus, [])
    _, moves = adjust(two, gpus, theta, cost, budget=5.0, distinct=True, allow_new=True)
    assert [(m.worker, m.target) for m in moves] == [("r0#0", 2)]


def test_margin_raises_the_relief_threshold() -> None:
    inst = _inst(1)
    gpus = [["r0#0", "v0#0"], ["q0#0"]]
    cost = {j.id: 1.0 for j in inst.jobs}
    ewma = [0.15, 0.0]
    assert len(adjust(inst, gpus, ewma, cost, budget=5.0)[1]) == 1
    assert adjust(inst, gpus, ewma, cost, budget=5.0, margin=0.1)[1] == []


def test_inf_cost_never_moves() -> None:
    inst = _inst(1)
    gpus = [["r0#0", "v0#0"], ["q0#0"]]
    theta = device_slowdowns(inst, gpus)
    cost = {"r0": math.inf, "v0": math.inf, "q0": 1.0}
    assert adjust(inst, gpus, theta, cost, budget=1e9) == (gpus, [])


def test_gpu_ewma_starts_at_zero_holds_and_forgets() -> None:
    g0, g1 = ("n", 0), ("n", 1)
    ewma = GpuEwma(a=0.7, hold=3)
    fired = [ewma.observe({g0: 0.6, g1: 0.0}, THETA) for _ in range(3)]
    # e_0 = 0: 0.18, 0.306, 0.3942 -- above from the first round, fires at the third
    assert fired == [False, False, True]
    assert abs(ewma.ewma[g0] - 0.3942) < 1e-12 and ewma.above == {g0: 3, g1: 0}
    # a round-trip through JSON keeps everything
    again = GpuEwma(a=0.7, hold=3)
    again.restore(json.loads(json.dumps(ewma.snapshot())))
    assert (again.ewma, again.above) == (ewma.ewma, ewma.above)
    ewma.forget([g0])
    assert g0 not in ewma.ewma and not ewma.observe({g0: 0.6}, THETA)
    # a GPU missing from a round is forgotten
    assert g1 not in ewma.ewma


def test_gpu_ewma_ignores_a_one_round_spike() -> None:
    g = ("n", 0)
    ewma = GpuEwma(a=0.7, hold=3)
    rows = [0.0] * 3 + [0.6] + [0.0] * 6
    assert not any(ewma.observe({g: x}, THETA) for x in rows)
    # the same level for three rounds fires (the test above can fail)
    ewma = GpuEwma(a=0.7, hold=3)
    assert any(ewma.observe({g: x}, THETA) for x in [0.0] * 3 + [0.6] * 3)


def test_max_new_bounds_the_gpus_opened() -> None:
    inst = _inst(1)
    gpus = [["r0#0", "v0#0", "q0#0"]]
    theta = device_slowdowns(inst, gpus)
    cost = {j.id: 1.0 for j in inst.jobs}
    assert adjust(inst, gpus, theta, cost, budget=5.0, allow_new=True, max_new=0) == (gpus, [])
    assert len(adjust(inst, gpus, theta, cost, budget=5.0, allow_new=True, max_new=1)[1]) == 1
