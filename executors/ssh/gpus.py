"""The SSH executor's view of each node's GPUs: UUID binding and health, from the agents'
``inventory`` answers (NVML on the node, see :mod:`gpuplan.executors.nvml`).

Why a node, not a GPU, goes out: the engine plans a node as ``Node.gpus`` interchangeable GPUs
and has no per-GPU "down" state. So when a bound GPU turns unhealthy (or the node's usable
intersection with the declared inventory is short), the executor reports the node failed: the
engine checkpoint-stops its jobs and replans them, as after any node failure; when a later
inventory finds the node whole again it reports it recovered. Every change is recorded with
its reason in :attr:`NodeGpus.log` (the executor's ``gpu_log``) and logged at WARNING.
A node without NVML keeps its declared inventory, bound by index (said once at INFO).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from gpuplan.models import Cluster

from ..nvml.crosscheck import NodeBinding, bind_node, degraded
from ..nvml.local import note_no_nvml
from ..nvml.records import BadInventory, parse_inventory

log = logging.getLogger(__name__)
Change = Literal["out", "back"]


class NodeGpus:
    """Per node: the current :class:`NodeBinding` and whether the node is out for its GPUs."""

    def __init__(self, cluster: Cluster) -> None:
        self.declared = {n.name: n for n in cluster.nodes}
        self.bindings: dict[str, NodeBinding] = {}
        self.out: dict[str, str] = {}
        """node -> why it is out of use because of its GPUs."""
        self.log: list[dict[str, Any]] = []
        """``{"t", "node", "change": out|back|reason, "reason"}`` for every change."""
        self._said: set[str] = set()

    def devices(self, node: str, gpus: tuple[int, ...] | list[int]) -> list[str] | None:
        """``CUDA_VISIBLE_DEVICES`` entries (GPU UUIDs) for the planned logical ``gpus`` of
        ``node``; None when they are not known (bind by index)."""
        binding = self.bindings.get(node)
        if binding is None or binding.devices is None:
            return None
        if any(not 0 <= g < len(binding.devices) for g in gpus):
            return None
        return [binding.devices[g] for g in gpus]

    def _once(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            log.warning("%s", text)

    def update(self, node: str, answers: Any, t: float) -> Change | None:
        """Take one ``inventory`` answer of ``node``; "out"/"back" when the node's usability
        changed (the executor reports NodeFailure/NodeRecovery), else None."""
        try:
            inventory = parse_inventory(answers)
        except BadInventory as exc:
            self._once(
                f"node {node}: unusable NVML inventory answer ({exc}): keeping the previous binding"
            )
            return None
        if not inventory.nvml:
            note_no_nvml(f"node {node}", inventory.reason)
        binding = bind_node(self.declared[node], inventory)
        for text in binding.warnings:
            self._once(text)
        for gpu in degraded(inventory):
            self._once(f"node {node}: GPU {gpu.index} ({gpu.uuid}) degraded: {gpu.health.reason}")
        self.bindings[node] = binding
        before = self.out.get(node)
        reason = binding.out_reason
        if reason is not None and before is None:
            self.out[node] = reason
            self.log.append({"t": t, "node": node, "change": "out", "reason": reason})
            log.warning("node %s taken out of use: %s", node, reason)
            return "out"
        if reason is None and before is not None:
            del self.out[node]
            self.log.append({"t": t, "node": node, "change": "back", "reason": "healthy"})
            log.warning("node %s back in use: its GPUs are healthy again (was: %s)", node, before)
            return "back"
        if reason is not None and reason != before:
            self.out[node] = reason
            self.log.append({"t": t, "node": node, "change": "reason", "reason": reason})
        return None
