"""The run's seed reaches every policy that makes random choices, and only through ``seed``."""

from __future__ import annotations

import pytest

from gpuplan import api
from gpuplan.executors.metrics import summarize
from gpuplan.solver_core.registry import make_policy, policy_names

RANDOMISED = {"afs-p", "afs-s", "afs-p-learning", "themis", "aryl-loaning-random"}


def test_every_policy_is_built_with_the_seed() -> None:
    """The registry hands every policy the run's seed (no signature inspection): each one can
    be built with any seed, and the same seed builds the same decisions."""
    for name in policy_names():
        make_policy(name, seed=7)


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
