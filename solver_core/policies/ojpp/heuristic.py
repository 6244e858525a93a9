"""Algorithm 3 (Heuristic, the paper's "OJPP"): Greedy re-ordered by gregariousness.

Gregariousness of job i in the remaining queue Q is Eq. (20), ``tau(i, Q) = max_q p_i p_q``,
the largest pairwise collision probability (Eq. (4) with two workers). Every round the queue is
stably re-sorted by it, ascending, and the front job is placed (digest §2.9: the box's lines 3
and 4 are swapped; the initial sort by resource requirement acts as the tie-break). Choices
(digest §7.1 #8): Q is the remaining queue; q = i counts only when the job has two or more
workers (its own workers may collide). Keeping the two largest ``p`` of Q makes a round O(n).
"""

from __future__ import annotations

from gpuplan.models.ojpp import OjppInstance

from .greedy import greedy_order
from .improve import empty_devices, packer_solution
from .packer import Packer, Rules

__all__ = ["gregariousness", "heuristic_order", "run_heuristic"]


def gregariousness(inst: OjppInstance, queue: list[int]) -> dict[int, float]:
    """Eq. (20) for every job of ``queue`` against the others in it."""
    ps = sorted(((inst.jobs[i].p, i) for i in queue), reverse=True)
    out: dict[int, float] = {}
    for i in queue:
        job = inst.jobs[i]
        best = 0.0
        for p, q in ps[:2]:
            if q != i:
                best = p
                break
        if job.workers >= 2:
            best = max(best, job.p)
        out[i] = job.p * best
    return out


def heuristic_order(inst: OjppInstance) -> list[int]:
    """The order Alg. 3 places jobs in (queue re-sorted before every pick)."""
    queue = greedy_order(inst)
    order: list[int] = []
    while queue:
        g = gregariousness(inst, queue)
        queue.sort(key=lambda i: g[i])  # stable: resource order breaks ties
        order.append(queue.pop(0))
    return order


def run_heuristic(
    inst: OjppInstance, rules: Rules | None = None, improve: bool = False
) -> list[list[str]] | None:
    """Alg. 3: the gregariousness order, each job placed by Placement (Alg. 2); with
    ``improve``, followed by the local pass of :mod:`.improve` (solver ``heuristic-ls``)."""
    packer = Packer(inst, rules or Rules())
    devices: list[list[int]] = [[] for _ in inst.jobs]
    for i in heuristic_order(inst):
        got = packer.place_job(i)
        if got is None:
            return None
        devices[i] = got
    if improve and empty_devices(packer):
        return packer_solution(packer)
    return packer.solution(devices)
