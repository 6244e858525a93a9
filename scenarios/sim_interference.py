"""A scenario's ``simulator.interference`` block -> the simulator's ``InterferenceModel``.

Why: the simulator slows co-located workers only when it is handed an interference model; the
scenario file is where the *true* interference of the simulated cluster is declared (a policy's
``interference`` parameter is only its prediction). This module turns the validated block into
:class:`~.ojpp_interference.OjppInterference` (matrix under the block's composition, plus drawn
memory collisions seeded by the run's seed) and checks it against the jobs it will rate: every
job's model must have a row, and every matrix type must be some job's model (a typo would
otherwise silently fall back to the default slowdowns). A measured table (``measured``, or
``table: h200``) becomes :class:`~gpuplan.models.measured_interference.MeasuredInterference`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.models import InputError, JobSpec
from gpuplan.models.measured_interference import MeasuredInterference
from gpuplan.models.scenario import MEASURED_TABLES, SimInterferenceSpec

from .measured_tables import measured_table
from .ojpp_interference import OjppInterference
from .ojpp_workloads import interference_matrix

__all__ = ["FIELD", "simulator_interference"]

FIELD = "simulator.interference"


def _table(spec: SimInterferenceSpec) -> dict[str, dict[str, float]]:
    if spec.matrix is not None:
        return spec.matrix
    return {"ojpp": interference_matrix}[spec.table or "ojpp"]()


def _measured(
    spec: SimInterferenceSpec, jobs: Sequence[JobSpec], source: str
) -> MeasuredInterference:
    """A measured table's replay; every job needs a model the table holds. (Table models no
    job has are fine here, unlike a matrix's: a measured table is reused across scenarios.)"""
    field = f"{FIELD}.measured" if spec.measured is not None else f"{FIELD}.table"
    table = spec.measured if spec.measured is not None else measured_table(spec.table or "")
    for job in jobs:
        if job.model is None:
            raise InputError(
                f"job {job.id} has no model: the measured table is by model",
                source=source,
                field=field,
            )
        if job.model not in table.jobs:
            raise InputError(
                f"job {job.id}'s model {job.model!r} was not measured (models: "
                f"{', '.join(sorted(table.jobs))})",
                source=source,
                field=field,
            )
    return MeasuredInterference(table, spec.composition)


def simulator_interference(
    spec: SimInterferenceSpec | None, jobs: Sequence[JobSpec], seed: int, source: str
) -> OjppInterference | MeasuredInterference | None:
    """The model for ``spec`` (None without a block), with collisions drawn from ``seed``;
    a job the matrix cannot rate, or a matrix type no job has, is an :class:`InputError`
    naming ``source`` and the field. A measured table (``measured``, ``table: h200``) is
    replayed by :class:`MeasuredInterference` (no collisions: they are in the measurement)."""
    if spec is None:
        return None
    if spec.measured is not None or spec.table in MEASURED_TABLES:
        return _measured(spec, jobs, source)
    matrix = _table(spec)
    models = {j.model for j in jobs}
    for job in jobs:
        if job.model is None:
            raise InputError(
                f"job {job.id} has no model: the interference matrix is by model",
                source=source,
                field=f"{FIELD}.matrix",
            )
        if job.model not in matrix:
            raise InputError(
                f"job {job.id}'s model {job.model!r} has no row (types: "
                f"{', '.join(sorted(matrix))})",
                source=source,
                field=f"{FIELD}.{'matrix' if spec.matrix else 'table'}",
            )
    if spec.matrix is not None:
        unknown = sorted(set(spec.matrix) - models)
        if unknown:
            raise InputError(
                f"type(s) {', '.join(unknown)} are no job's model (models: "
                f"{', '.join(sorted(m for m in models if m))})",
                source=source,
                field=f"{FIELD}.matrix",
            )
    collisions = spec.collisions is not False  # unset: on, as before measured tables existed
    return OjppInterference(
        matrix,
        spec.composition,
        kappa=spec.kappa if collisions else 0.0,
        draw_seed=seed if collisions else None,
        window=spec.window,
    )
