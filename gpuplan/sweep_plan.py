"""What a sweep file asks for: the file's model (scenarios with overrides, policies, seeds),
and the runs it expands to, each with the fingerprint that lets a killed sweep resume.

Why its own module: this changes with the sweep file's format, not with how runs execute
(in-process, Dask, Slurm workers) or how results are written (:mod:`.sweep`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from gpuplan.models import InputError, ScenarioSpec
from gpuplan.models.bounds import MAX_SEED
from gpuplan.scenarios.build import embedded_scenarios, resolve_scenario
from gpuplan.scenarios.input_files import (
    check_path_text,
    parse_structured,
    read_text,
)
from gpuplan.solver_core.params import PolicyConfig
from gpuplan.solver_core.registry import make_policy

FORMAT = 1
"""Version of the per-run JSON layout (part of the fingerprint)."""


class ScenarioEntry(BaseModel):
    """A scenario with a label of its own and overrides (``{dotted.field: value}``)."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field(min_length=1, description="embedded name or scenario file")
    name: str | None = Field(default=None, min_length=1, max_length=100)
    overrides: dict[str, Any] = Field(default_factory=dict)


class OverrideRule(BaseModel):
    """Scenario fields set for the runs it matches (every run when it names nothing)."""

    model_config = ConfigDict(extra="forbid")

    scenario: str | None = None
    policy: str | None = None
    seed: StrictInt | None = None
    set: dict[str, Any] = Field(min_length=1)


class SweepFile(BaseModel):
    """A sweep: the runs are the product scenarios x policies x seeds."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    scenarios: list[str | ScenarioEntry] = Field(min_length=1, max_length=10_000)
    policies: list[str | dict[str, Any]] = Field(min_length=1, max_length=10_000)
    seeds: list[StrictInt] = Field(default_factory=lambda: [0], min_length=1, max_length=10_000)
    overrides: list[OverrideRule] = Field(default_factory=list)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int]) -> list[int]:
        if any(not 0 <= s <= MAX_SEED for s in seeds):
            raise ValueError(f"seeds must be integers in [0, {MAX_SEED}]")
        if len(set(seeds)) != len(seeds):
            raise ValueError("a seed is listed twice")
        return seeds


def load_sweep(path: Path) -> SweepFile:
    """Parse and validate a sweep file; errors name the file and the field."""
    data = parse_structured(
        read_text(path, "sweep file"), str(path), json_only=path.suffix == ".json"
    )
    if not isinstance(data, dict):
        raise InputError("a sweep file must hold a mapping", source=str(path))
    try:
        return SweepFile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(
            str(x) for x in first["loc"] if not str(x).startswith(("str", "dict", "Scenario"))
        )
        raise InputError(first["msg"], source=str(path), field=loc or None) from None


# --------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class RunTask:
    """One run, fully resolved: what a worker needs and nothing from the client's disk."""

    key: str
    scenario: str
    policy: str
    seed: int
    spec: ScenarioSpec
    base: str | None
    fingerprint: str


def _stem(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)[:80]


def _set_dotted(data: dict[str, Any], dotted: str, value: Any, source: str, field: str) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise InputError(f"{key!r} is not a mapping", source=source, field=field)
        node = child
    node[keys[-1]] = value


def _override(spec: ScenarioSpec, values: dict[str, Any], source: str, where: str) -> ScenarioSpec:
    if not values:
        return spec
    data = spec.model_dump(mode="json", exclude_unset=False)
    for dotted, value in values.items():
        _set_dotted(data, dotted, value, source, f"{where}.{dotted}")
    try:
        return ScenarioSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise InputError(f"{loc}: {first['msg']}", source=source, field=where) from None


def _resolve(text: str, folder: Path, source: str, field: str) -> tuple[ScenarioSpec, Path]:
    """An embedded scenario, or a file relative to the sweep file (then to the cwd)."""
    check_path_text(text, "scenario", field=field, source=source)  # before exists() raises
    if text not in embedded_scenarios() and (folder / text).exists():
        text = str(folder / text)
    try:
        return resolve_scenario(text)
    except InputError as err:
        if err.source is not None:  # an error inside the scenario file names that file
            raise
        raise InputError(err.message, source=source, field=field) from None


def _fingerprint(spec: ScenarioSpec, base: str | None, policy: str, seed: int) -> str:
    blob = json.dumps(
        {
            "format": FORMAT,
            "spec": spec.model_dump(mode="json"),
            "base": base,
            "policy": policy,
            "seed": seed,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _policies(sweep: SweepFile, source: str) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Policy texts in order, and the sweep's named configurations."""
    names: list[str] = []
    configs: dict[str, dict[str, Any]] = {}
    for j, entry in enumerate(sweep.policies):
        if isinstance(entry, str):
            names.append(entry.strip())
            continue
        raw = dict(entry)
        name = raw.pop("name", None)
        if not isinstance(name, str) or not name:
            raise InputError(
                "a policy configuration needs 'name'", source=source, field=f"policies[{j}].name"
            )
        try:
            PolicyConfig.from_mapping(name, raw, where=f"policies[{j}]")
        except InputError as err:
            raise InputError(err.message, source=source, field=err.field) from None
        configs[name] = raw
        names.append(name)
    stems = [_stem(n) for n in names]
    if len(set(stems)) != len(stems):
        raise InputError(
            "two policies are the same or differ only in punctuation (they would "
            "share result files)",
            source=source,
            field="policies",
        )
    return names, configs


def expand_runs(sweep: SweepFile, path: Path) -> list[RunTask]:
    """Every run of ``sweep`` (read from ``path``), in report order: scenario, policy, seed.

    Every policy is built once per scenario here, so a typo fails in one line before any run
    starts; :func:`.sweep.plan_runs` then checks every run against the work budget.
    """
    source = str(path)
    policies, configs = _policies(sweep, source)
    entries = [ScenarioEntry(scenario=e) if isinstance(e, str) else e for e in sweep.scenarios]
    resolved = []
    for i, entry in enumerate(entries):
        spec, folder = _resolve(entry.scenario, path.parent, source, f"scenarios[{i}]")
        spec = _override(spec, entry.overrides, source, f"scenarios[{i}].overrides")
        spec = spec.model_copy(update={"policies": {**spec.policies, **configs}})
        resolved.append((entry.name or spec.name, spec, str(folder.resolve())))
    labels = [label for label, _, _ in resolved]
    if len({_stem(label) for label in labels}) != len(labels):
        raise InputError(
            "two scenarios have the same label; give one a 'name'", source=source, field="scenarios"
        )
    for k, rule in enumerate(sweep.overrides):
        if rule.scenario is not None and rule.scenario not in labels:
            raise InputError(
                f"matches no scenario (labels: {', '.join(labels)})",
                source=source,
                field=f"overrides[{k}].scenario",
            )
        if rule.policy is not None and rule.policy not in policies:
            raise InputError("matches no policy", source=source, field=f"overrides[{k}].policy")
    tasks = []
    for label, spec, base in resolved:
        for j, policy in enumerate(policies):
            for seed in sweep.seeds:
                run_spec = spec.model_copy(update={"seed": seed})
                for k, rule in enumerate(sweep.overrides):
                    if (
                        rule.scenario in (None, label)
                        and rule.policy in (None, policy)
                        and rule.seed in (None, seed)
                    ):
                        run_spec = _override(run_spec, rule.set, source, f"overrides[{k}].set")
                if seed == sweep.seeds[0]:
                    from . import api

                    try:
                        make_policy(policy, seed=seed, configs=api.policy_configs(run_spec))
                    except InputError as err:
                        raise InputError(
                            err.message, source=source, field=f"policies[{j}]"
                        ) from None
                key = f"{_stem(label)}__{_stem(policy)}__seed{seed}"
                tasks.append(
                    RunTask(
                        key,
                        label,
                        policy,
                        seed,
                        run_spec,
                        base,
                        _fingerprint(run_spec, base, policy, seed),
                    )
                )
    return tasks
