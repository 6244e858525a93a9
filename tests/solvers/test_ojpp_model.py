"""OJPP instance validation and the model's arithmetic (collision Eq. 4, slowdown compositions)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models import InputError
from gpuplan.models.ojpp import (
    Collision,
    OjppInstance,
    collision_probability,
    compose_slowdown,
    counts_slowdown,
    load_ojpp,
)


def _direct(ps: list[float]) -> float:
    """Eq. (4) as printed: 1 - prod(1-p) - sum_i p_i prod_{j != i}(1-p_j)."""
    none = math.prod(1 - p for p in ps)
    one = sum(p * math.prod(1 - q for j, q in enumerate(ps) if j != i) for i, p in enumerate(ps))
    return 1 - none - one


def test_digest_worked_examples() -> None:
    assert collision_probability([0.2, 0.1, 0.3]) == pytest.approx(0.098)
    assert collision_probability([0.2, 0.2]) == pytest.approx(0.04)
    assert collision_probability([0.2, 0.2, 0.2]) == pytest.approx(0.104)
    assert collision_probability([0.35, 0.35]) == pytest.approx(0.1225)
    assert collision_probability([0.35, 0.1]) == pytest.approx(0.035)  # LeNet + CNN
    assert collision_probability([0.7]) == 0.0 and collision_probability([]) == 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), max_size=12), st.floats(0, 1))
def test_incremental_update_equals_direct_formula(ps: list[float], extra: float) -> None:
    state = Collision()
    for p in ps:
        state = state.add(p)
    assert state.tau == pytest.approx(_direct(ps), abs=1e-12)
    assert state.add(extra).tau == pytest.approx(_direct([*ps, extra]), abs=1e-12)
    # monotone (digest §2.3): adding a worker never lowers the collision probability
    assert state.add(extra).tau >= state.tau - 1e-12
    # pair form tau({a,b}) = p_a p_b
    assert Collision().add(extra).add(0.3).tau == pytest.approx(0.3 * extra, abs=1e-12)


def test_slowdown_compositions() -> None:
    assert compose_slowdown([0.1, 0.2], "additive") == pytest.approx(0.3)
    assert compose_slowdown([0.1, 0.2], "max") == pytest.approx(0.2)
    assert compose_slowdown([0.1, 0.2], "multiplicative") == pytest.approx(1.1 * 1.2 - 1)
    assert compose_slowdown([], "max") == 0.0
    matrix = [[0.3, 0.5], [0.1, 0.2]]
    # job 0 with 2 workers and one worker of job 1: a worker of 0 sees one peer and one of 1
    assert counts_slowdown(0, {0: 2, 1: 1}, matrix, "additive") == pytest.approx(0.8)
    assert counts_slowdown(1, {0: 2, 1: 1}, matrix, "additive") == pytest.approx(0.2)
    assert counts_slowdown(0, {0: 1}, matrix, "max") == 0.0
    assert counts_slowdown(0, {0: 3}, matrix, "multiplicative") == pytest.approx(1.3**2 - 1)


GOOD = {
    "tau_max": 0.1,
    "theta_max": 0.2,
    "theta_balance": 0.2,
    "composition": "additive",
    "jobs": [
        {
            "id": "a",
            "workers": 2,
            "alpha": 0.3,
            "gamma": 0.3,
            "delta": 0.62,
            "p": 0.2,
            "type": "resnet",
        },
        {
            "id": "b",
            "workers": 1,
            "alpha": 0.2,
            "gamma": 0.1,
            "delta": 0.2,
            "p": 0.1,
            "type": "lenet",
        },
    ],
    "interference": {
        "resnet": {"resnet": 0.3, "lenet": 0.5},
        "lenet": {"resnet": 0.1, "lenet": 0.2},
    },
}


def _with(path: str, value: object) -> dict:
    import copy

    data = copy.deepcopy(GOOD)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


def test_the_readme_example_loads() -> None:
    inst = load_ojpp(GOOD, "x.json")
    assert isinstance(inst, OjppInstance) and inst.total_workers == 3
    assert inst.matrix() == [[0.3, 0.5], [0.1, 0.2]]


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("interference.lenet.lenet", KeyError, "interference"),
        ("jobs.1.p", 1.5, "jobs.1.p"),
        ("jobs.0.p", -0.1, "jobs.0.p"),
        ("jobs.0.gamma", -0.2, "jobs.0.gamma"),
        ("jobs.0.alpha", 1.2, "jobs.0.alpha"),
        ("jobs.0.workers", 0, "jobs.0.workers"),
        ("jobs.0.delta", float("nan"), "jobs.0.delta"),
        ("tau_max", float("inf"), "tau_max"),
        ("interference.lenet.resnet", float("nan"), "interference.lenet.resnet"),
        ("interference.lenet.resnet", -1.0, "interference"),
        ("composition", "sum", "composition"),
        ("jobs.1.id", "a", "jobs"),
    ],
)
def test_bad_instances_name_the_field(path: str, value: object, field: str) -> None:
    with pytest.raises(InputError) as err:
        load_ojpp(_with(path, value), "bad.json")
    assert err.value.field == field and err.value.source == "bad.json"
    assert "\n" not in str(err.value)
