"""A scenario's ``simulator.interference`` block -> the simulator's ``InterferenceModel``.

Why: the simulator slows co-located workers only when it is handed an interference model; the
scenario file is where the *true* interference of the simulated cluster is declared (a policy's
``interference`` parameter is only its prediction). This module turns the validated block into
:class:`~.ojpp_interference.OjppInterference` (matrix under the block's composition, plus drawn
memory collisions seeded by the run's seed) and checks it against the jobs it will rate: every
job's model must have a row, and every matrix type must be some job's model (a typo would
otherwise silently fall back to the default slowdowns).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.models import InputError, JobSpec
from gpuplan.models.scenario import SimInterferenceSpec

from .ojpp_interference import OjppInterference
from .ojpp_workloads import interference_matrix

__all__ = ["FIELD", "simulator_interference"]

FIELD = "simulator.interference"


def _table(spec: SimInterferenceSpec) -> dict[str, dict[str, float]]:
    if spec.matrix is not None:
        return spec.matrix
    return {"ojpp": interference_matrix}[spec.table or "ojpp"]()


def simulator_interference(spec: SimInterferenceSpec | None, jobs: Sequence[JobSpec],
                           seed: int, source: str) -> OjppInterference | None:
    """The model for ``spec`` (None without a block), with collisions drawn from ``seed``;
    a job the matrix cannot rate, or a matrix type no job has, is an :class:`InputError`
    naming ``source`` and the field."""
    if spec is None:
        return None
    matrix = _table(spec)
    models = {j.model for j in jobs}
    for job in jobs:
        if job.model is None:
            raise InputError(f"job {job.id} has no model: the interference matrix is by model",
                             source=source, field=f"{FIELD}.matrix")
        if job.model not in matrix:
            raise InputError(f"job {job.id}'s model {job.model!r} has no row (types: "
                             f"{', '.join(sorted(matrix))})", source=source,
                             field=f"{FIELD}.{'matrix' if spec.matrix else 'table'}")
    if spec.matrix is not None:
        unknown = sorted(set(spec.matrix) - models)
        if unknown:
            raise InputError(f"type(s) {', '.join(unknown)} are no job's model (models: "
                             f"{', '.join(sorted(m for m in models if m))})", source=source,
                             field=f"{FIELD}.matrix")
    return OjppInterference(matrix, spec.composition,
                            kappa=spec.kappa if spec.collisions else 0.0,
                            draw_seed=seed if spec.collisions else None, window=spec.window)
