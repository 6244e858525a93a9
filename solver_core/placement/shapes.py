"""Node shapes: place a job only in a shape it (and Slurm) can honour.

Why: a batch script that does not start its own ranks sees only its first node's GPUs, so a
2-GPU job placed as 1 + 1 over two nodes runs on one GPU while holding two; Slurm's
``--nodes=N --gpus-per-node=G`` also fixes how a job is split. ``JobSpec.node_shape`` says what
is allowed (``max_nodes``, ``gpus_per_node``); this module gives placement stages

* :func:`take_shaped` — pick GPUs for a shaped job (best-fit: the fullest nodes that fit);
* :func:`shrink_shaped` — which GPUs a shaped job keeps when it shrinks;
* :func:`enforce_shapes` — the guard :class:`~..policy.StagedPolicy` runs after any placement
  stage: a placement that breaks a job's shape is left out (a pending job stays pending, a
  running one is preempted and placed in a legal shape later). Leaving out only frees GPUs, so
  the rest of the plan stays consistent. Best-fit knows shapes and never triggers it; other
  stages stay correct without knowing.
"""

from __future__ import annotations

from gpuplan.models import ClusterView, JobAllocation, NodeShape

from ..policy import Placements

__all__ = ["enforce_shapes", "shrink_shaped", "take_shaped"]


def take_shaped(
    free: dict[str, list[int]],
    need: int,
    nodes: list[str],
    shape: NodeShape,
    held: dict[str, tuple[int, ...]],
    allowed: tuple[int, ...] = (),
) -> dict[str, tuple[int, ...]] | None:
    """``need`` more GPUs for a job holding ``held``, keeping ``shape``; updates ``free`` by
    replacing a node's list, never editing it (best-fit placement shares unchanged lists with
    the view).

    Single-node jobs grow only on their node — as far as it has room, to the largest of
    ``allowed`` that fits, when the full step does not — or, new, go best-fit to the fullest
    node that holds them; N x G jobs add whole G-GPU nodes, best-fit. None when the shape
    cannot be met.
    """
    if need <= 0:
        return {}
    g = shape.gpus_per_node
    limit = shape.max_nodes
    if g is None:
        if held and limit is not None and len(held) >= limit:
            # grow only on the nodes it has: as far as they allow, to an allowed count
            room = sum(len(free.get(n, ())) for n in held)
            if room < need:
                have = sum(len(g) for g in held.values())
                fits = [c - have for c in allowed if have < c <= have + room]
                if not fits:
                    return None
                need = max(fits)
            got: dict[str, tuple[int, ...]] = {}
            for node in sorted(held, key=lambda n: (-len(free.get(n, ())), n)):
                take = free.get(node, [])[:need]
                if take:
                    got[node] = tuple(take)
                    free[node] = free[node][len(take) :]
                    need -= len(take)
                if need == 0:
                    break
            return got
        if limit == 1:
            fitting = [n for n in nodes if len(free[n]) >= need]
            if not fitting:
                return None
            node = min(fitting, key=lambda n: (len(free[n]), n))
            take = free[node][:need]
            free[node] = free[node][need:]
            return {node: tuple(take)}
        return None  # a multi-node cap without G: left to the generic stages
    if need % g:
        return None
    count = need // g
    if limit is not None and len(held) + count > limit:
        return None
    fitting = sorted(
        (n for n in nodes if n not in held and len(free[n]) >= g), key=lambda n: (len(free[n]), n)
    )
    if len(fitting) < count:
        return None
    got = {}
    for node in fitting[:count]:
        got[node] = tuple(free[node][:g])
        free[node] = free[node][g:]
    return got


def shrink_shaped(
    alloc: JobAllocation, want: int, shape: NodeShape
) -> dict[str, tuple[int, ...]] | None:
    """GPUs a shaped job keeps when it shrinks to ``want``: whole G-GPU nodes for N x G (the
    fewest-numbered), a prefix of its one node otherwise. None if ``want`` breaks the shape."""
    g = shape.gpus_per_node
    if g is not None:
        if want % g:
            return None
        kept = sorted(alloc.placement)[: want // g]
        return {n: alloc.placement[n] for n in kept}
    if len(alloc.placement) == 1:
        ((node, gpus),) = alloc.placement.items()
        return {node: gpus[:want]}
    return None


def enforce_shapes(view: ClusterView, placements: Placements) -> Placements:
    """Drop placements that break their job's node shape (see the module docstring)."""
    bad = []
    for job_id in view.shaped:  # only the active jobs that have a shape: O(shaped), not O(n)
        alloc = placements.get(job_id)
        if alloc is None:
            continue
        job = view.running.get(job_id) or view.pending.get(job_id)
        shape = job.spec.node_shape if job is not None else None
        if shape is not None and not shape.allows(alloc.placement):
            bad.append(job_id)
    if not bad:
        return placements
    out = dict(placements)
    for job_id in bad:
        del out[job_id]  # only frees GPUs, so the rest of the plan stays consistent
    return out
