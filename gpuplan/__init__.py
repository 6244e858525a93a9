"""gpuplan: allocation engine for deep-learning training jobs on shared GPU clusters.

Library use::

    import gpuplan
    result = gpuplan.run_scenario("philly-default", "srtf")
    print(gpuplan.summarize(result).avg_jct_s)

Attributes load lazily (PEP 562) so that light entry points, such as the stand-in training job
``python -m gpuplan.executors.standin`` started on every restart, do not import numpy, OR-Tools
and the solver stack.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "compare": "gpuplan.api",
    "plan": "gpuplan.api",
    "prepare": "gpuplan.api",
    "run": "gpuplan.api",
    "run_scenario": "gpuplan.api",
    "summarize": "gpuplan.executors.metrics",
    "make_policy": "gpuplan.solver_core.registry",
    "policy_names": "gpuplan.solver_core.registry",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuplan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
