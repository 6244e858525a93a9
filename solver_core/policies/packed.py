"""Network-packed and reuse-placed variants of the elastic policies (AFS/CoDDL §4.4, App. E).

Why a module of its own: packing changes only *which* counts are legal and *where* GPUs go, so
it wraps any registered shares policy (:func:`~..placement.compose.packed_variant`) instead of
being written into each one. Two variants per base policy:

* ``<base>-packed``: shares regulated to {1, 2, ..., GPUs per node, multiples of it} with the
  least change (greedy regulation), then a reuse-maximising placement with no network sharing
  (Props. 1 and 2: every multi-node job owns whole nodes);
* ``<base>-reuse``: the base shares unchanged, placed to keep as many jobs as possible on at
  least one of their GPUs, then as many reused GPUs as possible (migrate only when unavoidable).
"""

from __future__ import annotations

from collections.abc import Callable

from ..placement.compose import packed_variant
from ..policy import StagedPolicy

BASES: tuple[str, ...] = ("afs-l", "afs-p", "srtf", "srsf", "tiresias-l", "max-min")


def _base(name: str, seed: int) -> StagedPolicy:
    from ..registry import make_policy  # the registry imports this module while discovering

    base = make_policy(name, seed=seed)
    if not isinstance(base, StagedPolicy):
        raise TypeError(f"{name} is not a staged policy and cannot be packed")
    return base


def _packed(name: str) -> Callable[..., StagedPolicy]:
    def factory(seed: int = 0) -> StagedPolicy:
        return packed_variant(_base(name, seed), f"{name}-packed")

    return factory


def _reuse(name: str) -> Callable[..., StagedPolicy]:
    def factory(seed: int = 0) -> StagedPolicy:
        return packed_variant(_base(name, seed), f"{name}-reuse", regulation=None)

    return factory


POLICIES: dict[str, tuple[Callable[..., StagedPolicy], str]] = {}
for _name in BASES:
    POLICIES[f"{_name}-packed"] = (
        _packed(_name),
        f"{_name} with network packing (legal sizes, no network sharing) and reuse placement",
    )
    POLICIES[f"{_name}-reuse"] = (
        _reuse(_name), f"{_name} with reuse-maximising placement (migrate only when unavoidable)")
