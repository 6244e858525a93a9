"""Algorithm 1 (Greedy): best-fit decreasing over jobs, each placed by Placement (Alg. 2).

Jobs are taken in descending order of their workers' compute requirement ``alpha`` (paper
§4.2), ties by peak memory ``gamma + delta``, then more workers, then id (digest §2.7,
inferred), and each is placed whole by :meth:`.packer.Packer.place_job`.
"""

from __future__ import annotations

from gpuplan.models.ojpp import OjppInstance

from .packer import Packer, Rules

__all__ = ["greedy_order", "pack", "run_greedy"]


def greedy_order(inst: OjppInstance) -> list[int]:
    """Alg. 1 line 1: job indices by resource requirement, descending."""
    return sorted(
        range(len(inst.jobs)),
        key=lambda i: (
            -inst.jobs[i].alpha,
            -(inst.jobs[i].gamma + inst.jobs[i].delta),
            -inst.jobs[i].workers,
            inst.jobs[i].id,
        ),
    )


def pack(inst: OjppInstance, order: list[int], rules: Rules) -> list[list[str]] | None:
    """Place the jobs in ``order``; the GPUs' worker lists, or None when a worker does not
    fit even alone (the instance is infeasible)."""
    packer = Packer(inst, rules)
    devices: list[list[int]] = [[] for _ in inst.jobs]
    for i in order:
        got = packer.place_job(i)
        if got is None:
            return None
        devices[i] = got
    return packer.solution(devices)


def run_greedy(inst: OjppInstance, rules: Rules | None = None) -> list[list[str]] | None:
    """Alg. 1 with every constraint (or the baselines' ``rules``)."""
    return pack(inst, greedy_order(inst), rules or Rules())
