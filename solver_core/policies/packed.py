"""Network-packed and reuse-placed variants of the elastic policies (AFS/CoDDL §4.4, App. E).

Why presets and not code: packing changes only *which* counts are legal and *where* GPUs go,
so it is a wrapper (:mod:`gpuplan.solver_core.wrappers`) that applies to any staged policy.
These names are kept as registered presets because the AFS results and benchmarks use them:

* ``<base>-packed`` = ``{base: <base>, wrappers: [network-packing]}``: counts regulated to
  {1, 2, ..., GPUs per node, multiples of it} with the least change (greedy regulation), then a
  reuse-maximising placement with no network sharing (Props. 1 and 2);
* ``<base>-reuse`` = ``{base: <base>, wrappers: [reuse]}``: the base counts unchanged, placed
  to keep as many jobs as possible on at least one of their GPUs, then as many reused GPUs as
  possible (migrate only when unavoidable).

Any other policy gets the same with ``wrappers:`` in a scenario's ``policies:`` block.
"""

from __future__ import annotations

from ..registry import PolicyDef

BASES: tuple[str, ...] = ("afs-l", "afs-p", "srtf", "srsf", "tiresias-l", "max-min")

POLICIES: list[PolicyDef] = []
for _name in BASES:
    POLICIES.append(PolicyDef(
        f"{_name}-packed",
        f"{_name} with network packing (legal sizes, no network sharing) and reuse placement",
        base=_name, wrappers=("network-packing",)))
    POLICIES.append(PolicyDef(
        f"{_name}-reuse",
        f"{_name} with reuse-maximising placement (migrate only when unavoidable)",
        base=_name, wrappers=("reuse",)))
