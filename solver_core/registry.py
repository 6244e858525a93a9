"""Policy names -> policies: declared in tables, imported when used, assembled at run time.

Every policy and wrapper is declared in a table, ``DECLARED`` in its folder's ``__init__.py``
(:mod:`.declarations`): its name, one-line summary and the module holding its code. That module
lists the code in ``POLICIES = [PolicyDef(name, build, Params), ...]`` (and
``WRAPPERS = [WrapperDef(...)]``). The registry

* reads the tables of :data:`TABLES` without importing any policy module, so listing
  (``gpuplan policies``), resolving configurations and suggesting close names cost nothing;
* imports a module the first time one of its names is built or its parameters are needed
  (``make_policy('fifo')`` loads FIFO's module, not Aryl's CP-SAT or SciPy);
* is strict: a name declared twice, a module registering a name its table does not declare
  for it, or a declared name its module does not register, is a :class:`RegistryError` naming
  both places (``tests/policies/test_registry.py`` loads every module and checks both directions).

A name is either

* a **base**: ``build(params, seed) -> Policy`` with its parameter model, or
* a **preset**: another policy plus wrappers and values (``afs-l-packed`` is ``afs-l`` with
  the ``network-packing`` wrapper) -- the same thing a scenario's ``policies:`` block writes,
  so a preset is declared in the table alone.

Wrappers (:mod:`.wrappers`) turn a :class:`~.policy.StagedPolicy` into another. Every policy
is built with the run's seed, which reaches every random choice it makes (AFS-P's coin,
Themis' leftover order, Aryl's random reclaim); policies that make none ignore it.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib.util import resolve_name
from types import MappingProxyType
from typing import Any

from gpuplan.models import InputError

from .declarations import Declared
from .params import NoParams, Params, PolicyConfig, parse_inline, validate_params
from .policy import Policy, StagedPolicy

__all__ = [
    "TABLES",
    "PolicyDef",
    "PolicyInfo",
    "Registry",
    "RegistryError",
    "WrapperDef",
    "WrapperInfo",
    "cost_model_of",
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

TABLES: tuple[str, ...] = ("gpuplan.solver_core", "gpuplan.solver_core.policies")
"""The packages whose ``DECLARED`` tables the registry reads, in listing order."""


class RegistryError(RuntimeError):
    """A defect in the declarations or registrations (a name twice, a name without code):
    a programming error the tests catch, never bad input."""


@dataclass(frozen=True)
class PolicyDef:
    """A base policy's code, listed in its module's ``POLICIES``: ``build(params, seed)``
    and the parameter model. Its summary is in its folder's ``DECLARED``."""

    name: str
    build: Callable[[Any, int], Policy]
    params: type[Params] = NoParams
    cost_model: Callable[[Any], Mapping[str, Any]] | None = None
    """The overheads the policy's mechanism implies (termination-based resizing, stop-free
    scaling), from its parameters: ``Overheads`` fields that replace the scenario's when the
    policy runs in the simulator (:func:`cost_model_of`); None: the scenario's overheads."""


@dataclass(frozen=True)
class WrapperDef:
    """A wrapper's code, listed in its module's ``WRAPPERS``: ``apply(policy, params, seed)``
    and the parameter model. Its summary is in its folder's ``DECLARED``."""

    name: str
    apply: Callable[[StagedPolicy, Any, int], StagedPolicy]
    params: type[Params] = NoParams
    cost_model: Callable[[Any], Mapping[str, Any]] | None = None
    """As :attr:`PolicyDef.cost_model`; applied after the base's, wrappers in order."""


@dataclass(frozen=True)
class PolicyInfo:
    """A registered policy: its declaration and, for a base, its code (``build`` is None
    for a preset, which is ``base`` + ``wrappers`` + ``values``)."""

    name: str
    description: str
    module: str
    build: Callable[[Any, int], Policy] | None = None
    params: type[Params] = NoParams
    cost_model: Callable[[Any], Mapping[str, Any]] | None = None
    base: str | None = None
    wrappers: tuple[str, ...] = ()
    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class WrapperInfo:
    """A registered wrapper: its declaration and its code."""

    name: str
    description: str
    module: str
    apply: Callable[[StagedPolicy, Any, int], StagedPolicy]
    params: type[Params] = NoParams
    cost_model: Callable[[Any], Mapping[str, Any]] | None = None


def parameterless(name: str, make: Callable[[], Policy]) -> PolicyDef:
    """A base policy with no parameters and no random choices."""
    return PolicyDef(name, lambda _params, _seed: make())


class Registry:
    """The declarations of ``tables`` (read on first use) and the code of the modules
    imported so far. Thread-safe: a sweep may build policies from several threads."""

    def __init__(self, tables: Sequence[str]) -> None:
        self.tables = tuple(tables)
        self._lock = threading.RLock()
        self._policies: dict[str, Declared] | None = None
        self._wrappers: dict[str, Declared] = {}
        self._policy_code: dict[str, PolicyDef] = {}
        self._wrapper_code: dict[str, WrapperDef] = {}
        self._loaded: set[str] = set()

    # ------------------------------------------------------------------ declarations
    def policies(self) -> dict[str, Declared]:
        """Every declared policy (bases and presets), in table order; imports no policy."""
        if self._policies is None:
            self._read_tables()
        assert self._policies is not None
        return self._policies

    def wrappers(self) -> dict[str, Declared]:
        """Every declared wrapper, in table order; imports no wrapper."""
        self.policies()
        return self._wrappers

    def _read_tables(self) -> None:
        with self._lock:
            if self._policies is not None:
                return
            policies: dict[str, Declared] = {}
            wrappers: dict[str, Declared] = {}
            for package in self.tables:
                table = getattr(importlib.import_module(package), "DECLARED", None)
                if table is None:
                    raise RegistryError(f"{package} has no DECLARED table")
                for d in table:
                    if not isinstance(d, Declared):
                        raise RegistryError(
                            f"{package}.DECLARED: entries must be made by "
                            f"policy(), preset() or wrapper(), got {d!r}"
                        )
                    d = _resolved(d, package)
                    _add(wrappers if d.kind == "wrapper" else policies, d)
            self._wrappers = wrappers
            self._policies = policies

    # ------------------------------------------------------------------ code
    def policy_code(self, name: str) -> PolicyDef:
        """The code of the declared base policy ``name``, importing its module once."""
        code = self._policy_code.get(name)
        if code is None:
            d = self.policies()[name]
            if d.kind == "preset":
                raise ValueError(f"{name!r} is a preset of {d.base!r}: it has no code")
            self._load(d.module)
            code = self._policy_code[name]
        return code

    def wrapper_code(self, name: str) -> WrapperDef:
        """The code of the declared wrapper ``name``, importing its module once."""
        code = self._wrapper_code.get(name)
        if code is None:
            self._load(self.wrappers()[name].module)
            code = self._wrapper_code[name]
        return code

    def modules(self) -> list[str]:
        """Every module a declaration names for its code, in table order."""
        declared = [*self.policies().values(), *self.wrappers().values()]
        return list(dict.fromkeys(d.module for d in declared if d.kind != "preset"))

    def _load(self, module: str) -> None:
        """Import ``module`` and take its ``POLICIES`` and ``WRAPPERS``, checking each
        against the declarations (both directions) before any is taken."""
        with self._lock:
            if module in self._loaded:
                return
            imported = importlib.import_module(module)
            policies = _taken(
                module, getattr(imported, "POLICIES", ()), PolicyDef, self.policies(), "policy"
            )
            wrappers = _taken(
                module, getattr(imported, "WRAPPERS", ()), WrapperDef, self.wrappers(), "wrapper"
            )
            self._policy_code.update(policies)
            self._wrapper_code.update(wrappers)
            self._loaded.add(module)

    def register(self, definition: PolicyDef, description: str) -> None:
        """Add a base policy declared nowhere (a library user's own); a taken name is
        refused naming both modules."""
        if not isinstance(definition, PolicyDef):
            raise TypeError(f"register takes a PolicyDef, got {definition!r}")
        module = getattr(definition.build, "__module__", None) or "?"
        with self._lock:
            _add(self.policies(), Declared("policy", definition.name, description, module))
            self._policy_code[definition.name] = definition


def _resolved(d: Declared, package: str) -> Declared:
    """``d`` with its module absolute (a preset's is the table that declares it)."""
    module = package if d.kind == "preset" else resolve_name(d.module, package)
    return d if module == d.module else replace(d, module=module)


def _add(book: dict[str, Declared], d: Declared) -> None:
    first = book.get(d.name)
    if first is not None:
        raise RegistryError(
            f"{d.kind} {d.name!r} is registered twice: by {first.module} and by {d.module}"
        )
    book[d.name] = d


def _taken(
    module: str, items: Iterable[object], cls: type, declared: Mapping[str, Declared], kind: str
) -> dict[str, Any]:
    """``module``'s registrations by name, once each checked against ``declared``."""
    taken: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, cls):
            raise RegistryError(f"{module}: {kind} entries must be {cls.__name__}, got {item!r}")
        name: str = item.name  # type: ignore[attr-defined]
        d = declared.get(name)
        if d is None:
            raise RegistryError(
                f"{module} registers {kind} {name!r}, which no DECLARED table "
                f"declares: add {kind}({name!r}, ...) to its folder's "
                "__init__.py"
            )
        if d.module != module or d.kind == "preset" or name in taken:
            raise RegistryError(
                f"{kind} {name!r} is registered twice: by {d.module} and by {module}"
            )
        taken[name] = item
    missing = [
        n
        for n, d in declared.items()
        if d.module == module and d.kind != "preset" and n not in taken
    ]
    if missing:
        raise RegistryError(
            f"{module} does not register {', '.join(map(repr, missing))}, "
            f"which DECLARED says it holds"
        )
    return taken


REGISTRY = Registry(TABLES)
"""The registry every function below uses."""


def register(definition: PolicyDef, description: str) -> None:
    """Add a policy from outside the declared folders; a name already taken is an error."""
    REGISTRY.register(definition, description)


def policy_names() -> dict[str, str]:
    """Every registered policy name and its one-line description (imports no policy)."""
    return {name: d.summary for name, d in REGISTRY.policies().items()}


def _unknown_policy(name: str, where: str) -> InputError:
    names = list(REGISTRY.policies())
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return InputError(
        f"unknown policy {name!r}; {hint}`gpuplan policies` lists all "
        f"{len(names)} (or write base(key=value, ...))",
        field=where,
    )


def policy_def(name: str) -> PolicyInfo:
    """The registered policy ``name``; a base policy's module is imported for its code."""
    d = REGISTRY.policies().get(name)
    if d is None:
        raise _unknown_policy(name, "policy")
    if d.kind == "preset":
        return PolicyInfo(
            name, d.summary, d.module, base=d.base, wrappers=d.wrappers, values=d.values
        )
    code = REGISTRY.policy_code(name)
    return PolicyInfo(
        name,
        d.summary,
        d.module,
        build=code.build,
        params=code.params,
        cost_model=code.cost_model,
    )


def wrapper_names() -> dict[str, str]:
    """Every registered wrapper name and its one-line description (imports no wrapper)."""
    return {name: d.summary for name, d in REGISTRY.wrappers().items()}


def wrapper_def(name: str, where: str = "wrappers") -> WrapperInfo:
    """The registered wrapper ``name``, its module imported for its code."""
    wrappers = REGISTRY.wrappers()
    d = wrappers.get(name)
    if d is None:
        close = difflib.get_close_matches(name, list(wrappers), n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise InputError(
            f"unknown wrapper {name!r}; {hint}choose one of {', '.join(wrappers)}", field=where
        )
    code = REGISTRY.wrapper_code(name)
    return WrapperInfo(name, d.summary, d.module, code.apply, code.params, code.cost_model)


def resolve_config(name: str, configs: Mapping[str, PolicyConfig] | None = None) -> PolicyConfig:
    """The configuration ``name`` stands for: a scenario's named configuration, an inline
    ``base(key=value, ...)``, or a registered policy (a preset expands to its parts).
    Reads declarations only: no policy module is imported."""
    if configs and name in configs:
        return configs[name]
    inline = parse_inline(name)
    if inline is not None:
        return inline
    if name not in REGISTRY.policies():
        raise _unknown_policy(name, "policy")
    return PolicyConfig(name=name, base=name)


def _flatten(
    cfg: PolicyConfig, configs: Mapping[str, PolicyConfig] | None
) -> tuple[PolicyInfo, tuple[str, ...], dict[str, Any]]:
    """(base policy with its code, wrappers in order, values) after expanding presets and
    configurations that build on other configurations; imports the base's module only."""
    declared = REGISTRY.policies()
    wrappers: tuple[str, ...] = cfg.wrappers
    values: dict[str, Any] = dict(cfg.values)
    base = cfg.base
    seen = {cfg.name}
    for _ in range(MAX_CONFIG_DEPTH):
        if configs and base in configs and base not in seen:
            inner = configs[base]
            seen.add(base)
            wrappers, values, base = (
                inner.wrappers + wrappers,
                {**inner.values, **values},
                inner.base,
            )
            continue
        d = declared.get(base)
        if d is None:
            raise _unknown_policy(base, f"policies.{cfg.name}.base")
        if d.base is None:
            return policy_def(base), wrappers, values
        wrappers, values, base = d.wrappers + wrappers, {**d.values, **values}, d.base
    raise InputError(
        f"configuration chain deeper than {MAX_CONFIG_DEPTH} (a cycle?)",
        field=f"policies.{cfg.name}.base",
    )


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
            raise InputError(
                f"unknown parameter for {base.name}"
                f"{' + ' + ' + '.join(wrapper_names_) if wrapper_names_ else ''}; "
                f"known: {', '.join(known) or 'none'}",
                field=f"{where}.{key}",
            )
        for i in targets:
            split[i][key] = value
    params = [validate_params(m, v, where) for m, v in zip(models, split, strict=True)]
    assert base.build is not None
    policy = base.build(params[0], seed)
    for w, p in zip(wrappers, params[1:], strict=True):
        if not isinstance(policy, StagedPolicy):
            raise InputError(
                f"{base.name} is not a staged policy; wrapper {w.name} needs one",
                field=f"{where}.wrappers",
            )
        policy = w.apply(policy, p, seed)
    if isinstance(policy, StagedPolicy) and policy.name != cfg.name:
        policy = policy.renamed(cfg.name)
    cost: dict[str, Any] = {}
    for declares, p in zip([base, *wrappers], params, strict=True):
        if declares.cost_model is not None:
            cost.update(declares.cost_model(p))
    if cost:
        # An attribute, not a field: wrappers and renames rebuild the object first.
        policy.cost_model = cost  # type: ignore[attr-defined]
    return policy


def cost_model_of(policy: Policy) -> Mapping[str, Any] | None:
    """The overheads ``policy`` declared for itself (``PolicyDef.cost_model``), or None."""
    return getattr(policy, "cost_model", None)


def make_policy(
    name: str, seed: int = 0, configs: Mapping[str, PolicyConfig] | None = None
) -> Policy:
    """A fresh policy object (policies may hold state, so never share one between runs).

    ``name`` is a registered policy, a configuration of ``configs`` (a scenario's
    ``policies:`` block) or an inline ``base(key=value, ...)``; ``seed`` reaches every random
    choice the policy makes, so a scenario's seed decides the whole run.
    """
    return _build(resolve_config(name, configs), seed, configs)
