"""Shared by the OJPP tests and benchmark: random instances on a 0.01 grid, brute force."""

from __future__ import annotations

import random
from collections.abc import Iterator

from gpuplan.models.ojpp import OjppInstance
from gpuplan.solver_core.policies.ojpp.check import check_solution

TYPES = ("lenet", "resnet", "vgg", "lstm")


def random_instance(
    seed: int, workers: int, composition: str = "additive", max_per_job: int = 3
) -> OjppInstance:
    """``workers`` workers in jobs of 1..``max_per_job``, values on a 0.01 grid (exact for
    CP-SAT's 1e-6 scaling), bounds loose enough that GPUs are shared."""
    rng = random.Random(seed)
    jobs = []
    left = workers
    while left > 0:
        w = min(left, rng.randint(1, max_per_job))
        left -= w
        gamma = rng.randint(2, 40) / 100
        jobs.append(
            {
                "id": f"j{len(jobs)}",
                "workers": w,
                "alpha": rng.randint(5, 60) / 100,
                "gamma": gamma,
                "delta": rng.randint(0, int(100 - 100 * gamma)) / 100,
                "p": rng.randint(0, 40) / 100,
                "type": rng.choice(TYPES),
            }
        )
    matrix = {a: {b: rng.randint(0, 25) / 100 for b in TYPES} for a in TYPES}
    return OjppInstance.model_validate(
        {
            "tau_max": rng.choice([0.05, 0.1, 0.2]),
            "theta_max": rng.choice([0.2, 0.3, 0.5]),
            "theta_balance": rng.choice([0.1, 0.2, 0.4]),
            "composition": composition,
            "jobs": jobs,
            "interference": matrix,
        }
    )


def _partitions(items: list[str]) -> Iterator[list[list[str]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for k in range(len(part)):
            yield [*part[:k], [first, *part[k]], *part[k + 1 :]]
        yield [[first], *part]


def brute_force(inst: OjppInstance) -> int | None:
    """The fewest GPUs over every set partition of the workers (None: infeasible)."""
    workers = [w for job in inst.jobs for w in job.worker_ids()]
    best = None
    for part in _partitions(workers):
        if (best is None or len(part) < best) and not check_solution(inst, part):
            best = len(part)
    return best
