"""Policy names -> policies, assembled at run time from registered stages, wrappers and values.

A policy module declares ``POLICIES = [PolicyDef(...), ...]`` (and may declare
``WRAPPERS = [WrapperDef(...), ...]``); the registry imports every module of
``gpuplan.solver_core.policies`` and registers what it finds, so adding a policy, a placement
stage or a wrapper is one new file there (docs/architecture.md, "Adding a policy").
A :class:`PolicyDef` is either

* a **base**: ``build(params, seed) -> Policy`` with its parameter model, or
* a **preset**: another policy plus wrappers and values (``afs-l-packed`` is ``afs-l`` with
  the ``network-packing`` wrapper) — the same thing a scenario's ``policies:`` block writes.

Wrappers (:mod:`.wrappers`) turn a :class:`~.policy.StagedPolicy` into another. Every policy
is built with the run's seed, which reaches every random choice it makes (AFS-P's coin,
Themis' leftover order, Aryl's random reclaim); policies that make none ignore it.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuplan.models import InputError

from .params import NoParams, Params, PolicyConfig, parse_inline, validate_params
from .policy import Policy, StagedPolicy

__all__ = [
    "PolicyDef",
    "WrapperDef",
    "make_policy",
    "parameterless",
    "policy_def",
    "policy_names",
    "register",
    "resolve_config",
    "wrapper_def",
    "wrapper_names",
]

MAX_CONFIG_DEPTH = 8
"""Configurations may build on each other; deeper chains (or cycles) are refused."""


@dataclass(frozen=True)
class PolicyDef:
    """A registered policy: a base (``build``) or a preset (``base`` + ``wrappers`` + values)."""

    name: str
    description: str
    build: Callable[[Any, int], Policy] | None = None
    params: type[Params] = NoParams
    base: str | None = None
    wrappers: tuple[str, ...] = ()
    values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.build is None) == (self.base is None):
            raise ValueError(f"policy {self.name}: give exactly one of build and base")


@dataclass(frozen=True)
class WrapperDef:
    """A registered wrapper: ``apply(policy, params, seed) -> policy``."""

    name: str
    description: str
    apply: Callable[[StagedPolicy, Any, int], StagedPolicy]
    params: type[Params] = NoParams


_POLICIES: dict[str, PolicyDef] = {}
_WRAPPERS: dict[str, WrapperDef] = {}
_discovered = False


def _builtin() -> list[PolicyDef]:
    from .placement.best_fit import best_fit_placement
    from .policies.fifo import fifo_backfill, fifo_strict
    from .policies.shortest_first import srsf_shares, srtf_shares

    def staged(name: str, make_stage: Callable[[], Any]) -> Callable[[Any, int], Policy]:
        return lambda _params, _seed: StagedPolicy(name, make_stage(), best_fit_placement)

    return [
        PolicyDef("fifo", "rigid gang FIFO, no backfill (head-of-line blocking)",
                  staged("fifo", lambda: fifo_strict)),
        PolicyDef("fifo-backfill", "rigid gang FIFO; later jobs that fit start early",
                  staged("fifo-backfill", lambda: fifo_backfill)),
        PolicyDef("srtf", "preemptive shortest remaining time first (rigid)",
                  staged("srtf", srtf_shares)),
        PolicyDef("srsf", "preemptive shortest remaining service (time x GPUs) first (rigid)",
                  staged("srsf", srsf_shares)),
    ]


def _defs(declared: object) -> Iterable[PolicyDef]:
    items = declared.values() if isinstance(declared, Mapping) else declared
    for d in items:  # type: ignore[attr-defined]
        if not isinstance(d, PolicyDef):
            raise TypeError(f"POLICIES entries must be PolicyDef, got {d!r}")
        yield d


def parameterless(name: str, description: str, make: Callable[[], Policy]) -> PolicyDef:
    """A base policy with no parameters and no random choices."""
    return PolicyDef(name, description, lambda _params, _seed: make())


def _discover() -> None:
    """Register the built-ins and every ``POLICIES`` of ``gpuplan.solver_core.policies``."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for d in _builtin():
        _POLICIES.setdefault(d.name, d)
    from . import policies
    from .wrappers import WRAPPERS

    for w in WRAPPERS.values():
        _WRAPPERS.setdefault(w.name, w)
    for info in sorted(pkgutil.iter_modules(policies.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{policies.__name__}.{info.name}")
        for d in _defs(getattr(module, "POLICIES", ())):
            _POLICIES.setdefault(d.name, d)
        for w in getattr(module, "WRAPPERS", ()):
            if not isinstance(w, WrapperDef):
                raise TypeError(f"WRAPPERS entries must be WrapperDef, got {w!r}")
            _WRAPPERS.setdefault(w.name, w)


def register(definition: PolicyDef) -> None:
    """Add (or replace) a policy from outside the policies package."""
    _discover()
    _POLICIES[definition.name] = definition


def policy_names() -> dict[str, str]:
    """Every registered policy name and its one-line description."""
    _discover()
    return {name: d.description for name, d in _POLICIES.items()}


def _unknown_policy(name: str, where: str) -> InputError:
    close = difflib.get_close_matches(name, list(_POLICIES), n=3, cutoff=0.6)
    hint = (f"did you mean {' or '.join(repr(c) for c in close)}? " if close else "")
    return InputError(f"unknown policy {name!r}; {hint}`gpuplan policies` lists all "
                      f"{len(_POLICIES)} (or write base(key=value, ...))", field=where)


def policy_def(name: str) -> PolicyDef:
    _discover()
    try:
        return _POLICIES[name]
    except KeyError:
        raise _unknown_policy(name, "policy") from None


def wrapper_names() -> dict[str, str]:
    """Every registered wrapper name and its one-line description."""
    _discover()
    return {name: w.description for name, w in _WRAPPERS.items()}


def wrapper_def(name: str, where: str = "wrappers") -> WrapperDef:
    _discover()
    try:
        return _WRAPPERS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_WRAPPERS), n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise InputError(f"unknown wrapper {name!r}; {hint}choose one of "
                         f"{', '.join(_WRAPPERS)}", field=where) from None


def resolve_config(name: str, configs: Mapping[str, PolicyConfig] | None = None
                   ) -> PolicyConfig:
    """The configuration ``name`` stands for: a scenario's named configuration, an inline
    ``base(key=value, ...)``, or a registered policy (a preset expands to its parts)."""
    _discover()
    if configs and name in configs:
        return configs[name]
    inline = parse_inline(name)
    if inline is not None:
        return inline
    if name not in _POLICIES:
        raise _unknown_policy(name, "policy")
    return PolicyConfig(name=name, base=name)


def _flatten(cfg: PolicyConfig, configs: Mapping[str, PolicyConfig] | None
             ) -> tuple[PolicyDef, tuple[str, ...], dict[str, Any]]:
    """(base definition with a build, wrappers in order, values) after expanding presets and
    configurations that build on other configurations."""
    wrappers: tuple[str, ...] = cfg.wrappers
    values: dict[str, Any] = dict(cfg.values)
    base = cfg.base
    seen = {cfg.name}
    for _ in range(MAX_CONFIG_DEPTH):
        if configs and base in configs and base not in seen:
            inner = configs[base]
            seen.add(base)
            wrappers, values, base = inner.wrappers + wrappers, {**inner.values, **values}, \
                inner.base
            continue
        if base not in _POLICIES:
            raise _unknown_policy(base, f"policies.{cfg.name}.base")
        d = _POLICIES[base]
        if d.base is None:
            return d, wrappers, values
        wrappers, values, base = d.wrappers + wrappers, {**d.values, **values}, d.base
    raise InputError(f"configuration chain deeper than {MAX_CONFIG_DEPTH} (a cycle?)",
                     field=f"policies.{cfg.name}.base")


def _build(cfg: PolicyConfig, seed: int, configs: Mapping[str, PolicyConfig] | None) -> Policy:
    where = f"policies.{cfg.name}"
    base, wrapper_names_, values = _flatten(cfg, configs)
    wrappers = [wrapper_def(w, f"{where}.wrappers") for w in wrapper_names_]
    models = [base.params, *(w.params for w in wrappers)]
    split: list[dict[str, Any]] = [{} for _ in models]
    for key, value in values.items():
        targets = [i for i, m in enumerate(models) if key in m.model_fields]
        if not targets:
            known = sorted({k for m in models for k in m.model_fields})
            raise InputError(f"unknown parameter for {base.name}"
                             f"{' + ' + ' + '.join(wrapper_names_) if wrapper_names_ else ''}; "
                             f"known: {', '.join(known) or 'none'}", field=f"{where}.{key}")
        for i in targets:
            split[i][key] = value
    params = [validate_params(m, v, where) for m, v in zip(models, split, strict=True)]
    assert base.build is not None
    policy = base.build(params[0], seed)
    for w, p in zip(wrappers, params[1:], strict=True):
        if not isinstance(policy, StagedPolicy):
            raise InputError(f"{base.name} is not a staged policy; wrapper {w.name} needs one",
                             field=f"{where}.wrappers")
        policy = w.apply(policy, p, seed)
    if isinstance(policy, StagedPolicy) and policy.name != cfg.name:
        policy = policy.renamed(cfg.name)
    return policy


def make_policy(name: str, seed: int = 0,
                configs: Mapping[str, PolicyConfig] | None = None) -> Policy:
    """A fresh policy object (policies may hold state, so never share one between runs).

    ``name`` is a registered policy, a configuration of ``configs`` (a scenario's
    ``policies:`` block) or an inline ``base(key=value, ...)``; ``seed`` reaches every random
    choice the policy makes, so a scenario's seed decides the whole run.
    """
    return _build(resolve_config(name, configs), seed, configs)
