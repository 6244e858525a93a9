"""``pollux-w1{,-rigid,-elastic}-rounds`` are the Pollux workload-1 scenarios with Pollux's 60-s
rounds and nothing else changed, ``gavel-artifact-rounds`` Gavel's artifact scenario with its
360-s rounds (docs/results/fidelity.md quotes their runs beside the event-driven ones, so any
other difference would be a confound). Reads the spec only: the scenario files, not the shared
traces."""

from __future__ import annotations

import pytest

from gpuplan.scenarios.build import resolve_scenario


@pytest.mark.parametrize(
    ("base", "round_s"),
    [
        ("pollux-w1", 60),
        ("pollux-w1-rigid", 60),
        ("pollux-w1-elastic", 60),
        ("gavel-artifact", 360),
    ],
)
def test_the_rounds_twin_differs_only_in_its_engine_block(base: str, round_s: float) -> None:
    spec, _ = resolve_scenario(base)
    rounds, _ = resolve_scenario(f"{base}-rounds")
    assert rounds.engine.round_interval_s == round_s and rounds.engine.decide_only_at_rounds
    assert not spec.engine.decide_only_at_rounds
    same = {"name", "description", "engine"}
    assert rounds.model_dump(exclude=same) == spec.model_dump(exclude=same)
    assert rounds.engine.model_dump(
        exclude={"round_interval_s", "decide_only_at_rounds"}
    ) == spec.engine.model_dump(exclude={"round_interval_s", "decide_only_at_rounds"})
