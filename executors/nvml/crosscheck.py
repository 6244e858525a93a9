"""NVML's GPUs against the declared inventory: an SSH node's ``Node`` (count, ``gpu_type``) and
a Slurm node's GRES (``gpu[:type]:N``).

The engine plans a node as ``Node.gpus`` interchangeable GPUs indexed ``0..gpus-1``. On a node
whose NVML answers are known, logical index ``i`` is bound to the ``i``-th GPU of the
*intersection* (NVML's GPUs, in NVML index = PCI bus order, whose model matches the declared
type), by UUID. The engine has no per-GPU "down" state, so a node is *usable* only when that
intersection has at least ``Node.gpus`` GPUs and every bound one is usable (healthy, not in MIG
mode); otherwise the caller takes the whole node out (its jobs are stopped from their
checkpoints and replanned) with the reason given here, until a later inventory says it is whole
again. A node without NVML keeps the declared inventory and is bound by index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuplan.models import Node

from .records import GpuRecord, NodeInventory


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def model_matches(declared_type: str, nvml_name: str | None) -> bool:
    """Whether NVML's product name fits the operator's type label: every alphanumeric token
    of the label appears in the name (``h100`` fits "NVIDIA H100 80GB HBM3", ``a100-80g``
    fits "NVIDIA A100-SXM4-80GB", ``v100`` does not fit "NVIDIA H200")."""
    if nvml_name is None:
        return False
    name = _squash(nvml_name)
    tokens = [t for t in re.split(r"[^a-z0-9]+", declared_type.lower()) if t]
    return bool(tokens) and all(t in name for t in tokens)


@dataclass(frozen=True, slots=True)
class NodeBinding:
    """How a node's logical GPUs map to physical ones, and whether the node can be used."""

    node: str
    devices: tuple[str, ...] | None
    """``CUDA_VISIBLE_DEVICES`` entry per logical index (GPU UUIDs); None: bind by index."""
    out_reason: str | None = None
    """Why the node cannot be used now (None: usable)."""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    """Mismatches between the declared and the found inventory (said once by the caller)."""

    @property
    def usable(self) -> bool:
        return self.out_reason is None


def bind_node(node: Node, inventory: NodeInventory) -> NodeBinding:
    """Cross-check ``node`` with its NVML ``inventory`` (see the module doc)."""
    if not inventory.nvml:
        return NodeBinding(node.name, None)
    found = list(inventory.gpus)
    # A GPU NVML cannot name (lost) counts as the declared type: it is out for its own reason.
    matching = [g for g in found if g.model is None or model_matches(node.gpu_type, g.model)]
    warnings: list[str] = []
    if len(found) != node.gpus or len(matching) != len(found):
        models = sorted({g.model or "?" for g in found})
        warnings.append(
            f"node {node.name}: declared {node.gpus} x {node.gpu_type}, NVML reports "
            f"{len(found)} GPU(s) ({', '.join(models) or 'none'}), {len(matching)} of the "
            f"declared type: using the intersection"
        )
    bound = matching[: node.gpus]
    uuids = [g.uuid for g in bound]
    devices = tuple(str(u) for u in uuids) if None not in uuids else None
    out = [
        f"GPU {g.index} ({g.uuid or 'no UUID'}): {g.unusable_reason}" for g in bound if not g.usable
    ]
    if len(bound) < node.gpus:
        out.insert(0, f"only {len(bound)} of {node.gpus} declared GPUs found")
    if devices is None and not out:
        out.append("NVML gave a GPU without a UUID")
    return NodeBinding(node.name, devices, "; ".join(out) or None, tuple(warnings))


def degraded(inventory: NodeInventory) -> list[GpuRecord]:
    """GPUs that stay in use but whose health is worth a warning."""
    return [g for g in inventory.gpus if g.health.verdict == "degraded"]


_GRES_GPU = re.compile(r"^(?:gres[:/])?gpu(?::([^:=(]+))?[:=](\d+)")


def check_gres(node: str, gres: str | None, inventory: NodeInventory) -> list[str]:
    """Mismatches between a Slurm node's GRES (``scontrol show node``'s ``Gres=``, e.g.
    ``gpu:h100:4(S:0-1)`` or ``gpu:2,shard:8``) and what NVML found on it, one line each;
    empty when they agree or NVML was not read. Reports only: Slurm's GRES stays what Slurm
    schedules by."""
    if not inventory.nvml:
        return []
    declared: list[tuple[str | None, int]] = []
    for part in (gres or "").split(","):
        match = _GRES_GPU.match(part.strip())
        if match:
            declared.append((match.group(1), int(match.group(2))))
    count = sum(n for _, n in declared)
    problems = []
    if count != len(inventory.gpus):
        problems.append(
            f"node {node}: GRES declares {count} GPU(s), NVML reports {len(inventory.gpus)}"
        )
    for gpu_type, n in declared:
        if gpu_type is None:
            continue
        fits = sum(
            g.model is None or model_matches(gpu_type, g.model) for g in inventory.gpus
        )  # an unnamed (lost) GPU is reported below
        if fits < n:
            models = sorted({g.model or "?" for g in inventory.gpus})
            problems.append(
                f"node {node}: GRES declares {n} x {gpu_type}, NVML reports "
                f"{fits} of that type ({', '.join(models) or 'none'})"
            )
    for gpu in inventory.gpus:
        if not gpu.usable:
            problems.append(f"node {node}: GPU {gpu.index} ({gpu.uuid}): {gpu.unusable_reason}")
    return problems
