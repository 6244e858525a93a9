"""Policies as stages, wrappers, parameters, the registry, plan diff and checks, solvers.

``DECLARED`` declares the wrappers of :mod:`.wrappers` for the registry, which reads it
without importing that module (:mod:`.declarations`); ``policies/__init__.py`` declares the
policies and the wrappers of ``policies/``.
"""

from __future__ import annotations

from .declarations import Declared, wrapper

DECLARED: tuple[Declared, ...] = (
    wrapper(
        "network-packing",
        ".wrappers",
        "counts regulated to packing units, placed with no network sharing (AFS App. E)",
    ),
    wrapper("reuse", ".wrappers", "reuse-maximising placement: migrate only when unavoidable"),
    wrapper("learning", ".wrappers", "AFS §4.5: unmeasured jobs capped at their fair share M/n"),
    wrapper(
        "co-location",
        ".wrappers",
        "jobs with a compute share alpha < 1 share GPUs (fractional demands)",
    ),
    wrapper(
        "cost-model",
        ".cost_model",
        "the policy's decisions unchanged, run with these overheads in place of the "
        "scenario's (e.g. SideCar's decisions at termination-based resize costs)",
    ),
)
