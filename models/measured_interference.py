"""A measured co-location table and its replay as the simulator's interference model.

Why: the matrix models (``scenarios/ojpp_interference.py``) charge an assumed slowdown; a table
measured on real hardware (e.g. five training jobs sharing one H200, ``scenarios/data/
h200_colocation.json``) says what co-located jobs really suffered. A scenario's
``simulator.interference.measured`` block (or ``table: h200``) hands such a table to the
simulator, which then *replays* it:

* a group of jobs on one GPU whose models were measured together (same multiset of models)
  slows each job by exactly the measured factor (copies of one model in a group get the mean
  of their copies' figures: the simulator cannot tell two copies apart);
* any other group composes the measured *pair* terms ``s[a][b] = slowdown(a next to b) - 1``
  under the block's composition (additive by default; docs/results/interference.md measures
  how well each composition predicts the measured triples).

A slowdown here is a ratio, solo speed / co-located speed (>= 1), the measurement's own unit;
the simulator's factor is its inverse. The table holds the *total* slowdown under time-slicing,
so it suits jobs whose share does not slow them by itself: jobs with a ``memory`` profile whose
compute demand covers their share (OJPP's model, ``placement_rate``). A job co-located on a
plain fractional share is also slowed by that share, on top of the table.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .job import JobSpec
from .ojpp import Composition, compose_slowdown

__all__ = ["MAX_GROUP", "MeasuredGroup", "MeasuredInterference", "MeasuredTable"]

MAX_GROUP = 16
"""Jobs in one measured group (a bound on input size; the H200 table has 2 and 3)."""

MAX_SLOWDOWN = 100.0
"""Largest slowdown accepted (the matrix block's bound on a term, plus one)."""


class MeasuredGroup(BaseModel):
    """Jobs measured together on one GPU: ``slowdowns[i]`` is the slowdown (solo speed /
    co-located speed) of the job of model ``models[i]``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    models: tuple[str, ...] = Field(min_length=2, max_length=MAX_GROUP)
    slowdowns: tuple[float, ...] = Field(min_length=2, max_length=MAX_GROUP)

    @model_validator(mode="after")
    def _check(self) -> MeasuredGroup:
        for name in self.models:
            if not name or len(name) > 200:
                raise ValueError(f"model name {name[:40]!r} is not 1-200 characters")
        if len(self.slowdowns) != len(self.models):
            raise ValueError(
                f"{len(self.models)} models but {len(self.slowdowns)} slowdowns "
                "(one per model, in the same order)"
            )
        for name, value in zip(self.models, self.slowdowns, strict=True):
            if not 1.0 <= value <= MAX_SLOWDOWN:
                raise ValueError(
                    f"slowdown {value!r} of {name!r} is not in [1, {MAX_SLOWDOWN:g}]"
                    " (solo speed / co-located speed; a co-located job is never "
                    "faster than alone: round a measured speed-up to 1)"
                )
        return self

    @property
    def key(self) -> tuple[str, ...]:
        """The multiset of models, sorted: what identifies the group."""
        return tuple(sorted(self.models))

    def by_model(self) -> dict[str, float]:
        """Model -> slowdown, copies of one model averaged."""
        sums: dict[str, list[float]] = {}
        for name, value in zip(self.models, self.slowdowns, strict=True):
            sums.setdefault(name, []).append(value)
        return {name: sum(v) / len(v) for name, v in sums.items()}


class MeasuredTable(BaseModel):
    """Jobs by model name -> solo rate (iterations/s alone on the GPU) and the measured groups.
    Every ordered pair of its models (a model with itself included) must be measured: the pair
    terms are what unmeasured groups are composed from, so a gap would have to be guessed."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    source: str = Field(default="", max_length=2000, description="provenance, free text")
    jobs: dict[str, float] = Field(
        min_length=1, max_length=MAX_GROUP * 8, description="model -> solo iterations/s"
    )
    groups: tuple[MeasuredGroup, ...] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _check(self) -> MeasuredTable:
        for name, rate in self.jobs.items():
            if not name or len(name) > 200:
                raise ValueError(f"jobs: model name {name[:40]!r} is not 1-200 characters")
            if not 0.0 < rate <= 1e9:
                raise ValueError(f"jobs: solo rate {rate!r} of {name!r} is not in (0, 1e9]")
        seen: dict[tuple[str, ...], int] = {}
        for n, group in enumerate(self.groups):
            unknown = sorted(set(group.models) - set(self.jobs))
            if unknown:
                raise ValueError(
                    f"groups[{n}]: model(s) {', '.join(unknown)} have no solo rate in jobs"
                )
            if group.key in seen:
                raise ValueError(
                    f"groups[{n}] measures {' + '.join(group.key)} again (first at "
                    f"groups[{seen[group.key]}]); give each group once"
                )
            seen[group.key] = n
        for a in sorted(self.jobs):
            for b in sorted(self.jobs):
                if tuple(sorted((a, b))) not in seen:
                    raise ValueError(
                        f"the pair {a} + {b} is not measured (every pair of the "
                        "table's models, each with itself included, is needed)"
                    )
        return self

    def pair_terms(self) -> dict[str, dict[str, float]]:
        """``s[a][b]``: slowdown - 1 of a model-``a`` job next to one model-``b`` job."""
        out: dict[str, dict[str, float]] = {a: {} for a in self.jobs}
        for group in self.groups:
            if len(group.models) == 2:
                a, b = group.models
                values = group.by_model()
                out[a][b] = values[a] - 1.0
                out[b][a] = values[b] - 1.0
        return out


class MeasuredInterference:
    """``InterferenceModel`` replaying a :class:`MeasuredTable` (see the module docstring).
    Every job it rates must have a model the table holds (``scenarios/sim_interference.py``
    checks that before a run)."""

    def __init__(self, table: MeasuredTable, composition: Composition = "additive") -> None:
        self.table = table
        self.composition = composition
        self.exact = {g.key: g.by_model() for g in table.groups}
        self.terms = table.pair_terms()

    def slowdown(self, job: JobSpec, others: Sequence[JobSpec]) -> float:
        """Solo speed / co-located speed of ``job`` next to ``others`` (>= 1)."""
        own = job.model or ""
        names = [o.model or "" for o in others]
        measured = self.exact.get(tuple(sorted((own, *names))))
        if measured is not None:
            return measured[own]
        row = self.terms[own]
        return 1.0 + compose_slowdown((row[n] for n in names), self.composition)

    def factor(self, job: JobSpec, others: Sequence[JobSpec]) -> float:
        return 1.0 / self.slowdown(job, others)
