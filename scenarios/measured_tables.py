"""Embedded measured co-location tables (package data) as :class:`MeasuredTable` s.

Why here: ``models`` may not read package files, and a scenario's ``table: h200`` must work
with nothing outside the repository (``make demo``, the tests). The H200 file holds two complete
repetitions (``scenarios/data/h200_colocation.md`` records the provenance); what a scenario
replays is their mean, group by group and job by job, so neither repetition's noise is
preferred. The evaluation (``scenarios/interference_eval.py``) reads the repetitions one by one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from pydantic import ValidationError

from gpuplan.models import InputError
from gpuplan.models.measured_interference import MeasuredGroup, MeasuredTable

__all__ = ["H200_FILE", "MeasuredRun", "h200_runs", "measured_table"]

H200_FILE = "h200_colocation.json"


@dataclass(frozen=True)
class MeasuredRun:
    """One repetition: its table, and per job the GPU utilisation (fraction) and peak memory
    (MiB) of its isolated run."""

    name: str
    table: MeasuredTable
    util: dict[str, float]
    peak_mem_mib: dict[str, float]


@cache
def h200_runs() -> tuple[MeasuredRun, ...]:
    """The H200 table's repetitions, validated like any user table."""
    text = resources.files("gpuplan.scenarios.data").joinpath(H200_FILE).read_text("utf-8")
    data = json.loads(text)
    runs = []
    for run in data["runs"]:
        solo = run["solo"]
        try:
            table = MeasuredTable(
                source=f"{data['source']}, {run['name']}; {data['machine']}; {data['date']}",
                jobs={m: v["it_per_s"] for m, v in solo.items()},
                groups=tuple(MeasuredGroup(**g) for g in run["groups"]),
            )
        except ValidationError as err:  # a broken package file, reported like an input
            raise InputError(
                err.errors()[0]["msg"], source=H200_FILE, field=f"runs.{run['name']}"
            ) from None
        runs.append(
            MeasuredRun(
                run["name"],
                table,
                {m: v["gpu_util_pct"] / 100.0 for m, v in solo.items()},
                {m: v["peak_mem_mib"] for m, v in solo.items()},
            )
        )
    return tuple(runs)


def mean_table(runs: tuple[MeasuredRun, ...]) -> MeasuredTable:
    """The repetitions' mean: solo rates and each group's slowdowns (position by position;
    every repetition must measure the same groups in the same order)."""
    first = runs[0].table
    jobs = {m: sum(r.table.jobs[m] for r in runs) / len(runs) for m in first.jobs}
    groups = []
    for n, group in enumerate(first.groups):
        same = [r.table.groups[n] for r in runs]
        if any(g.models != group.models for g in same):
            raise InputError(
                "the repetitions measure different groups", source=H200_FILE, field=f"groups.{n}"
            )
        groups.append(
            MeasuredGroup(
                models=group.models,
                slowdowns=tuple(
                    sum(g.slowdowns[i] for g in same) / len(same) for i in range(len(group.models))
                ),
            )
        )
    sources = "; ".join(r.table.source for r in runs)
    return MeasuredTable(
        source=f"mean of {len(runs)} repetitions: {sources}"[:2000], jobs=jobs, groups=tuple(groups)
    )


def measured_table(name: str) -> MeasuredTable:
    """The embedded measured table ``name`` (``h200``: the mean of its two repetitions)."""
    if name != "h200":
        raise InputError(f"no embedded measured table {name!r} (tables: h200)")
    return mean_table(h200_runs())
