"""GPU types: relative compute speed and memory.

Speeds are relative to a reference type (1.0). Throughput profiles measured on one type are
scaled to another by the ratio of speeds unless the profile carries a per-type measurement.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .bounds import MAX_SPEED


class GpuType(BaseModel):
    """A kind of GPU, e.g. V100 or T4."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)
    relative_speed: float = Field(
        default=1.0, ge=1 / MAX_SPEED, le=MAX_SPEED, description="compute speed vs reference GPU"
    )
    memory_gb: float = Field(default=16.0, gt=0, le=1e6)


KNOWN_GPU_TYPES: dict[str, GpuType] = {
    g.name: g
    for g in (
        GpuType(name="gtx1080", relative_speed=0.45, memory_gb=8),
        GpuType(name="k80", relative_speed=0.25, memory_gb=12),
        GpuType(name="p100", relative_speed=0.6, memory_gb=16),
        GpuType(name="t4", relative_speed=0.25, memory_gb=16),
        GpuType(name="v100", relative_speed=1.0, memory_gb=32),
        GpuType(name="a100", relative_speed=2.0, memory_gb=80),
        GpuType(name="h100", relative_speed=3.5, memory_gb=80),
    )
}
"""Defaults when a cluster file names a type without describing it. T4 = 1/4 of a V100, the
normalisation Aryl uses for inference servers (001 digest §5)."""
