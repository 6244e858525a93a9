"""The run's seed reaches every policy that makes random choices, and only through ``seed``."""

from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.executors.metrics import summarize
from gpuplan.solver_core.registry import make_policy, policy_names, takes_seed

RANDOMISED = {"afs-p", "afs-s", "afs-p-learning", "themis", "aryl-loaning-random"}


def test_randomised_policies_accept_a_seed_and_deterministic_ones_do_not_need_it() -> None:
    from gpuplan.solver_core import registry

    make_policy("fifo")  # loads every policy module
    seeded = {name for name in policy_names() if takes_seed(registry._REGISTRY[name][0])}
    assert seeded >= RANDOMISED
    for name in policy_names():
        make_policy(name, seed=7)  # every policy can be built with a seed


@pytest.mark.parametrize("policy", ["afs-p", "themis"])
def test_the_scenario_seed_changes_coins_and_repeats_exactly(policy: str) -> None:
    prepared = api.prepare("philly-default")

    def avg_jct(seed: int) -> float:
        spec = prepared.spec.model_copy(update={"seed": seed})
        run = api.run(api.PreparedScenario(spec, prepared.cluster, prepared.jobs), policy)
        return summarize(run).avg_jct_s

    first = avg_jct(0)
    assert avg_jct(0) == first  # same seed, same run
    assert any(avg_jct(s) != first for s in (1, 2, 3))  # the seed reaches the policy's coins
