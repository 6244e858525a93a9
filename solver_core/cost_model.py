"""The ``cost-model`` wrapper: a configuration declares the overheads its decisions run at.

A baseline whose mechanism implies a cost declares it on its ``PolicyDef`` (``termination``:
every grow is a full terminate-and-restart). Where the same *decisions* are to be measured
at another mechanism's costs -- SideCar's reshaping choices paid at termination prices, the
middle row of docs/results/sidecar.md's case study -- a configuration adds this wrapper with
the ``Overheads`` fields to replace::

    sidecar-termination-costs: {base: sidecar, wrappers: [cost-model],
                                resize_mode: checkpoint_restart, resize_down_s: 204,
                                resize_up_s: 242, early_init_s: 0}

The policy object is returned unchanged; ``gpuplan.api.run`` applies the declared fields to
the scenario's overheads (``policy_overheads``), so the CLI and the library run the same thing.
A field left out (None) keeps the scenario's value.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gpuplan.models.bounds import MAX_OVERHEAD_S
from gpuplan.models.scenario import ResizeMode

from .params import Params
from .policy import StagedPolicy
from .registry import WrapperDef

__all__ = ["WRAPPERS", "CostModelParams"]


class CostModelParams(Params):
    resize_mode: ResizeMode | None = Field(None, description="overheads.resize_mode")
    resize_up_s: float | None = Field(
        None, ge=0, le=MAX_OVERHEAD_S, description="overheads.resize_up_s (a grow, s)"
    )
    resize_down_s: float | None = Field(
        None, ge=0, le=MAX_OVERHEAD_S, description="overheads.resize_down_s (a shrink, s)"
    )
    early_init_s: float | None = Field(
        None, ge=0, le=MAX_OVERHEAD_S, description="overheads.early_init_s (s)"
    )
    stop_free_s: float | None = Field(
        None, ge=0, le=MAX_OVERHEAD_S, description="overheads.stop_free_s (s)"
    )
    migrate_s: float | None = Field(
        None, ge=0, le=MAX_OVERHEAD_S, description="overheads.migrate_s (s)"
    )


def _declared(p: CostModelParams) -> dict[str, Any]:
    return {k: v for k, v in p.model_dump().items() if v is not None}


def _unchanged(policy: StagedPolicy, p: CostModelParams, seed: int) -> StagedPolicy:
    return policy


WRAPPERS = [WrapperDef("cost-model", _unchanged, CostModelParams, cost_model=_declared)]
