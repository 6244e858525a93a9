"""Observed per-GPU interference in the simulator (``ClusterView.interference``).

Why: an online adjuster (OJPAP, paper 002 Alg. 4) monitors how much each GPU's co-located
workers are slowed down, not a job's overall rate (which is its *worst* GPU's). The simulator
knows the truth from its own rate model, so it reports, for every shared GPU, the slowdown of
the most slowed-down worker on it: ``1 / factor - 1`` with the executor's
:class:`~gpuplan.models.interference.InterferenceModel`, i.e. exactly what slowed the jobs.

A model may offer ``observe(job, others, rng) -> slowdown`` to report a *measured* value instead
of its expectation (OJPP's model draws the memory collisions of a monitoring window, so a
monitor sees noise around the expected penalty). Its ``rng`` is seeded by the run's seed, the
time and the GPU, never by call order, so the same seed gives the same observations however
often (or whether) a policy reads them, and all workers of one GPU see the same draws.

The mapping is lazy: building a view costs one small object; the GPUs are evaluated only when
a policy reads the field, so runs whose policy ignores it pay nothing.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cluster import SimulatedCluster

__all__ = ["ObservedInterference"]

Gpu = tuple[str, int]


class ObservedInterference(Mapping[Gpu, float]):
    """(node, GPU) -> observed slowdown of its worst worker, for every GPU holding a share < 1
    of a running job (0.0 for a GPU with one such job: it suffers no interference)."""

    __slots__ = ("_now", "_sim", "_values")

    def __init__(self, sim: SimulatedCluster, now: float) -> None:
        self._sim, self._now = sim, now
        self._values: dict[Gpu, float] | None = None

    def _all(self) -> dict[Gpu, float]:
        if self._values is None:
            self._values = self._compute()
        return self._values

    def _compute(self) -> dict[Gpu, float]:
        sim = self._sim
        model = sim.interference
        assert model is not None
        sample = getattr(model, "observe", None)
        out: dict[Gpu, float] = {}
        for key in sorted(sim._colocated):
            ids = sorted(j for j in sim._colocated[key] if sim._jobs_by_id[j].status == "running")
            if not ids:
                continue
            specs = [sim._true.get(j) or sim._jobs_by_id[j].spec for j in ids]
            worst = 0.0
            for n, spec in enumerate(specs):
                others = specs[:n] + specs[n + 1 :]
                if not others:
                    continue
                if sample is not None:
                    rng = random.Random(f"{sim.seed}:{self._now!r}:{key[0]}:{key[1]}")
                    s = float(sample(spec, others, rng))
                else:
                    s = 1.0 / model.factor(spec, others) - 1.0
                worst = max(worst, s)
            out[key] = worst
        return out

    def __getitem__(self, key: Gpu) -> float:
        return self._all()[key]

    def __iter__(self) -> Iterator[Gpu]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __contains__(self, key: object) -> bool:
        return key in self._all()
