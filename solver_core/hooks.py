"""The policy interface's optional hooks, each a declared, runtime-checkable Protocol.

The engine, the simulator and the controller ask ``isinstance(policy, Hook)`` instead of
probing for attributes by name, so a misspelt hook is a type error, not a silently skipped
feature, and every hook a policy may offer is listed here:

* :class:`DeltaStage`: an allocation stage that can also answer with the changes only;
* :class:`DeltaPolicy`: a policy that can decide as changes only (``decide_delta``);
* :class:`ResizePreference`: a policy that says whether it assumes stop-free resizing;
* :class:`Foreseeing`: a policy handed the whole job list before the first event
  (offline-optimal, simulator only);
* :class:`BoundReporting`: a policy that proves a bound on the optimum (offline-optimal);
* :class:`Stateful` and :class:`Stateless`: how a stage's state is saved across a controller
  restart, declared by every stage object (see :func:`undeclared_state`).

``isinstance`` on a runtime-checkable Protocol costs tens of microseconds, so callers on the
per-decision path (the engine, :class:`~.policy.StagedPolicy`) check once, when the policy or
stage is installed, never per decision.
"""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from gpuplan.models import Cluster, ClusterView, JobSpec, SolverStats
    from gpuplan.models.records import ObjectiveBound

    from .policy import Allocation, Decision, Delta, PlacementStage

__all__ = [
    "BoundReporting",
    "DeltaPolicy",
    "DeltaStage",
    "Foreseeing",
    "Memories",
    "ResizePreference",
    "Stateful",
    "Stateless",
    "undeclared_state",
]


@runtime_checkable
class DeltaStage(Protocol):
    """An allocation stage that can also answer as a :class:`~.policy.Delta`. ``delta``
    returns None when it cannot on this view (or with this ``placement`` stage): the engine
    then asks :meth:`~.policy.StagedPolicy.decide` as usual. A stateful stage that finds out
    only after ranking that a delta cannot stand for its counts returns the full
    :class:`~.policy.Decision` instead (built with ``placement`` from the same counts), so it
    is never asked twice per event."""

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Allocation: ...

    def delta(self, view: ClusterView, placement: PlacementStage) -> Delta | Decision | None: ...


@runtime_checkable
class DeltaPolicy(Protocol):
    """A policy that may answer a decision as changes only, on the engine's live view (the
    engine's fast path); None from ``decide_delta`` means "ask ``decide``"."""

    def decide_delta(self, view: ClusterView) -> Delta | Decision | None: ...


@runtime_checkable
class ResizePreference(Protocol):
    """A policy that declares whether it resizes often because it assumes stop-free scaling
    (EDL). On an executor that resizes by restart the engine still runs it, but warns once
    and counts every such resize (``RunResult.degraded_resizes``)."""

    wants_in_place_resize: bool


@runtime_checkable
class Foreseeing(Protocol):
    """A policy that must see every arrival before the first event (offline-optimal): the
    simulator calls ``foresee`` with the scenario's cluster and jobs first. Real executors
    have no future to hand it."""

    def foresee(self, cluster: Cluster, jobs: Sequence[JobSpec]) -> None: ...


@runtime_checkable
class BoundReporting(Protocol):
    """A policy that proves something about the optimum (offline-optimal's lower bound); the
    simulator copies ``bound`` (None: nothing proven) into the run's result."""

    bound: ObjectiveBound | None


@runtime_checkable
class Stateful(Protocol):
    """A stage that remembers things between decisions (AFS-P counters, Tiresias queues,
    Themis leases, max-min-perf's attained time). ``snapshot`` returns plain JSON data;
    ``restore`` on a fresh object of the same configuration makes it decide exactly as the
    original would have, so a controller that restarts changes no decision. A policy saves
    it by naming it as its ``memory`` (:class:`~.policy.StagedPolicy`)."""

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...


class Stateless:
    """Declares a stage class whose objects keep nothing a restart must carry over: its
    attributes are configuration, or caches rebuilt from the view (a fresh object decides
    exactly as an old one). A stage class is either this or :class:`Stateful`;
    :class:`~.policy.StagedPolicy` refuses one that is neither, so a stage with state cannot
    forget to say how it is saved."""

    __slots__ = ()


class Memories:
    """A policy's memory made of several :class:`Stateful` parts (a base policy's and a
    wrapper's), which a subclass snapshots side by side; ``parts`` names them so the
    declaration check (:func:`undeclared_state`) knows they are saved."""

    __slots__ = ()

    @property
    def parts(self) -> tuple[Stateful, ...]:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        raise NotImplementedError

    def restore(self, state: dict[str, Any]) -> None:
        raise NotImplementedError


_VALUES = (type(None), bool, int, float, complex, str, bytes, range, type, enum.Enum)
"""Closure contents that are values, not state (immutable, or a class)."""


def _frozen(obj: object) -> bool:
    """An immutable record: a frozen dataclass or a frozen pydantic model."""
    params = getattr(type(obj), "__dataclass_params__", None)  # dataclasses' own marker
    if params is not None:
        return bool(params.frozen)
    config = getattr(type(obj), "model_config", None)
    return isinstance(config, dict) and bool(config.get("frozen"))


def undeclared_state(stage: object, saved: object | None, _depth: int = 0) -> str | None:
    """Why ``stage`` may hold state that nothing saves, or None when it is declared.

    A stage is declared when it is (or is a bound method of) an object of a
    :class:`Stateless` class, or a :class:`Stateful` object that ``saved`` (the policy's
    ``memory``) is or holds in its ``parts``; a plain function is declared when its closure
    holds only values, declared stages and functions that are themselves declared. Anything
    else (an object of an undeclared class, in a closure or its captured containers) is named.
    """
    if _depth > 8:
        return None  # deep closures are built from the stages already checked
    if isinstance(stage, types.MethodType):
        stage = stage.__self__
    if isinstance(stage, functools.partial):
        for part in (stage.func, *stage.args, *stage.keywords.values()):
            if (why := undeclared_state(part, saved, _depth + 1)) is not None:
                return why
        return None
    if isinstance(stage, (types.BuiltinFunctionType, types.ModuleType)):
        return None
    if isinstance(stage, types.FunctionType):
        for cell in stage.__closure__ or ():
            try:
                held = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later in the outer function)
                continue
            if (why := _undeclared_held(held, saved, _depth)) is not None:
                return f"{stage.__qualname__} holds {why}"
        return None
    if isinstance(stage, Stateless):
        return None
    if isinstance(stage, Stateful):
        if stage is saved or any(stage is p for p in _parts(saved)):
            return None
        return f"{type(stage).__qualname__} keeps state but is not the policy's memory"
    return f"{type(stage).__qualname__}, declared neither Stateless nor Stateful"


def _undeclared_held(held: object, saved: object | None, depth: int) -> str | None:
    if isinstance(held, (*_VALUES, Stateless)) or _frozen(held):
        return None
    if isinstance(held, (tuple, frozenset, list, dict, set)):
        # Data a closure was built with (a table, scripted counts): its objects are checked,
        # the container is taken as configuration. A closure that mutates what it captured
        # is state in disguise: write it as a Stateful class instead.
        items = held.values() if isinstance(held, dict) else held
        for item in items:
            if (why := _undeclared_held(item, saved, depth + 1)) is not None:
                return why
        return None
    return undeclared_state(held, saved, depth + 1)


def _parts(saved: object | None) -> tuple[object, ...]:
    """The stateful objects a composite memory saves (its ``parts``, recursively)."""
    if not isinstance(saved, Memories):
        return ()
    parts = saved.parts
    return parts + tuple(p for part in parts for p in _parts(part))
