"""Throughput profiles: training iterations per second as a function of GPU count.

A profile is a table of measured points ``{gpus: iterations/s}`` on a reference GPU type. It is
turned into a function of any GPU count by three explicit rules:

* **interpolation** — linear between measured counts; below the smallest measured count the
  rate is proportional to the count (``P(0) = 0``);
* **monotone envelope** — ``P(n) = max_{k <= n} P_raw(k)``: a job given more GPUs than help it can
  always leave the extra ones idle, so throughput never falls as GPUs are added. The raw curve's
  argmax is still available as :attr:`ThroughputProfile.peak_gpus` (the AFS "Max #GPUs").
* **extrapolation** beyond the largest measured count: ``flat`` holds the last value, ``linear``
  grows proportionally to the count from the last point (the AFS §4.5 "overestimate first"
  assumption), ``none`` refuses (raises) so a caller can't silently use an unmeasured size.

Per-GPU-type scaling multiplies the rate by ``type_speed[type]`` if given (a per-model measured
speed relative to ``reference_gpu``, e.g. Gavel's K80/V100 ratio of that model, which ranges
from about 0.1 to 0.95), else by the ratio of the GPU types' relative speeds (the flat
:data:`~gpuplan.models.gpu.KNOWN_GPU_TYPES` numbers), so profiles without per-type data
behave exactly as before. A spread placement (job over more than one node) multiplies by
``spread_factor`` (Gavel's unconsolidated / consolidated measurements; 1.0 = insensitive).

Bounds (``models/bounds.py``): GPU counts within ``MAX_GPUS``; rates in (0, ``MAX_RATE``] and
at most ``MAX_SUPERLINEAR`` times linear scaling from the smallest measured count (cluster
efficiency is a sum of speed-ups ``P(c)/P(1)``: one absurd point made it absurd); type
multipliers within [1/``MAX_SPEED``, ``MAX_SPEED``]; spread factors in (0, 1].
"""

from __future__ import annotations

import bisect
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from .bounds import MAX_GPUS, MAX_LIST, MAX_RATE, MAX_SPEED, MAX_SUPERLINEAR

Extrapolation = Literal["flat", "linear", "none"]


class ThroughputProfile(BaseModel):
    """Iterations/s by GPU count for one job (one model + global batch size)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    points: dict[int, float] = Field(
        description="GPU count -> iterations/s, reference GPU type", max_length=MAX_LIST
    )
    reference_gpu: str = "v100"
    extrapolation: Extrapolation = "flat"
    type_speed: dict[str, float] = Field(
        default_factory=dict,
        max_length=MAX_LIST,
        description="per-GPU-type multiplier overriding relative speeds",
    )
    spread_factor: dict[int, float] = Field(
        default_factory=dict,
        max_length=MAX_LIST,
        description="GPU count -> throughput multiplier when spread over >1 node (<=1)",
    )
    default_spread_factor: float = Field(default=1.0, gt=0, le=1)
    source: str = Field(default="", description="provenance of the numbers")

    _counts: list[int] = PrivateAttr(default_factory=list)
    _rates: list[float] = PrivateAttr(default_factory=list)
    _cache: dict[int, float] = PrivateAttr(default_factory=dict)

    @field_validator("points")
    @classmethod
    def _check_points(cls, points: dict[int, float]) -> dict[int, float]:
        if not points:
            raise ValueError("points: at least one measured GPU count is required")
        for gpus, rate in points.items():
            if not 1 <= gpus <= MAX_GPUS:
                raise ValueError(f"points: GPU count {gpus} must be in [1, {MAX_GPUS}]")
            if not rate > 0:
                raise ValueError(f"points[{gpus}]: throughput {rate} must be > 0")
            if rate > MAX_RATE:
                raise ValueError(
                    f"points[{gpus}]: throughput {rate:g} must be at most {MAX_RATE:g} iterations/s"
                )
        ordered = dict(sorted(points.items()))
        first = next(iter(ordered))
        per_gpu = ordered[first] / first
        for gpus, rate in ordered.items():
            if rate / gpus > MAX_SUPERLINEAR * per_gpu:
                raise ValueError(
                    f"points[{gpus}]: throughput {rate:g} is more than "
                    f"{MAX_SUPERLINEAR:g} x linear scaling from points[{first}] "
                    f"= {ordered[first]:g}"
                )
        return ordered

    @field_validator("type_speed")
    @classmethod
    def _check_type_speed(cls, speeds: dict[str, float]) -> dict[str, float]:
        for name, speed in speeds.items():
            if not 1 / MAX_SPEED <= speed <= MAX_SPEED:
                raise ValueError(
                    f"type_speed[{name}]: multiplier {speed} must be in "
                    f"[{1 / MAX_SPEED:g}, {MAX_SPEED:g}]"
                )
        return speeds

    @field_validator("spread_factor")
    @classmethod
    def _check_spread(cls, factors: dict[int, float]) -> dict[int, float]:
        for gpus, factor in factors.items():
            if not 1 <= gpus <= MAX_GPUS:
                raise ValueError(f"spread_factor: GPU count {gpus} must be in [1, {MAX_GPUS}]")
            if not 0 < factor <= 1:
                raise ValueError(f"spread_factor[{gpus}]: {factor} must be in (0, 1]")
        return factors

    def model_post_init(self, __context: object) -> None:
        counts = sorted(self.points)
        envelope: list[float] = []
        best = 0.0
        for c in counts:
            best = max(best, self.points[c])
            envelope.append(best)
        self._counts = counts
        self._rates = envelope

    def __eq__(self, other: object) -> bool:
        """Equal when the declared fields are equal (the evaluation cache is not identity)."""
        if not isinstance(other, ThroughputProfile):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.points.items())))

    # ----------------------------------------------------------------- constructors
    @classmethod
    def linear(cls, per_gpu: float = 1.0, reference_gpu: str = "v100") -> ThroughputProfile:
        """Perfect linear scaling: the profile of a rigid trace job with no model information."""
        return cls(
            points={1: per_gpu},
            extrapolation="linear",
            reference_gpu=reference_gpu,
            source="linear scaling assumption",
        )

    # ----------------------------------------------------------------- evaluation
    def rate(self, gpus: int) -> float:
        """Iterations/s on ``gpus`` reference GPUs, packed (monotone envelope)."""
        # Read the private dict once: pydantic's private-attribute access costs ~1 us per read,
        # and this is the hottest call in the simulator.
        cache = self.__pydantic_private__["_cache"]  # type: ignore[index]
        value = cache.get(gpus)
        if value is None:
            value = self._evaluate(gpus) if gpus > 0 else 0.0
            cache[gpus] = value
        return value

    def _evaluate(self, gpus: int) -> float:
        counts, rates = self._counts, self._rates
        if gpus <= counts[0]:
            return rates[0] * gpus / counts[0]
        if gpus >= counts[-1]:
            if gpus == counts[-1] or self.extrapolation == "flat":
                return rates[-1]
            if self.extrapolation == "linear":
                return rates[-1] * gpus / counts[-1]
            raise ValueError(
                f"throughput at {gpus} GPUs is beyond the largest measured count {counts[-1]} "
                "and extrapolation is 'none'"
            )
        i = bisect.bisect_left(counts, gpus)
        if counts[i] == gpus:
            return rates[i]
        c0, c1 = counts[i - 1], counts[i]
        r0, r1 = rates[i - 1], rates[i]
        return r0 + (r1 - r0) * (gpus - c0) / (c1 - c0)

    def raw_rate(self, gpus: int) -> float:
        """The measured (non-enveloped) curve, linearly interpolated, for peak finding."""
        if gpus in self.points:
            return self.points[gpus]
        counts = self._counts
        if gpus < counts[0]:
            return self.points[counts[0]] * gpus / counts[0]
        if gpus > counts[-1]:
            return self.rate(gpus)
        i = bisect.bisect_left(counts, gpus)
        c0, c1 = counts[i - 1], counts[i]
        r0, r1 = self.points[c0], self.points[c1]
        return r0 + (r1 - r0) * (gpus - c0) / (c1 - c0)

    @property
    def peak_gpus(self) -> int:
        """Smallest measured count at which the raw curve peaks (AFS Table 4 "Max #GPUs").

        With ``linear`` extrapolation the curve never peaks; the largest measured count is
        returned, and callers that need an unbounded job should use its elasticity max instead.
        """
        best_c, best_r = self._counts[0], -1.0
        for c in self._counts:
            if self.points[c] > best_r:
                best_c, best_r = c, self.points[c]
        return best_c

    def speedup(self, gpus: int) -> float:
        """rate(gpus) / rate(1): the normalisation used by the AFS cluster-efficiency metric."""
        return self.rate(gpus) / self.rate(1)

    def type_multiplier(
        self, gpu_type: str, relative_speed: float, reference_speed: float
    ) -> float:
        """Factor converting reference-type throughput to ``gpu_type`` throughput: the
        measured ``type_speed`` entry when there is one, else ``relative_speed /
        reference_speed`` (the two types' generic speeds)."""
        if gpu_type in self.type_speed:
            return self.type_speed[gpu_type]
        return relative_speed / reference_speed

    def spread(self, gpus: int) -> float:
        """Multiplier when the job's GPUs span more than one node."""
        return self.spread_factor.get(gpus, self.default_spread_factor)

    def believed_from(self, measured: dict[int, float]) -> ThroughputProfile:
        """A profile that knows only ``measured`` points, extrapolating linearly beyond the last
        one (AFS §4.5: "assume linear scalability from the last allocatable unit")."""
        return ThroughputProfile(
            points=measured,
            reference_gpu=self.reference_gpu,
            extrapolation="linear",
            type_speed=self.type_speed,
            spread_factor=self.spread_factor,
            default_spread_factor=self.default_spread_factor,
            source="measured online",
        )


def allocatable_units(limit: int, gpus_per_node: int) -> list[int]:
    """Network-packing sizes up to ``limit``: powers of two below a node, then multiples of the
    node size (AFS §4.4: 1, 2, 4, 8, 12, ... with 4 GPUs per node is 1, 2, 4, 8, 12, ...)."""
    units: list[int] = []
    size = 1
    while size < gpus_per_node and size <= limit:
        units.append(size)
        size *= 2
    multiple = gpus_per_node
    while multiple <= limit:
        units.append(multiple)
        multiple += gpus_per_node
    return units
