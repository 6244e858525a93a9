"""Cluster: nodes with GPUs, pools (training / inference), racks and switches.

The cluster is a static description. Which nodes are currently *usable* by training (loaned,
reclaimed, failed) is runtime state kept by the engine; the cluster only says what exists.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .bounds import MAX_GPUS_PER_NODE
from .gpu import KNOWN_GPU_TYPES, GpuType

if TYPE_CHECKING:
    import networkx as nx

Pool = Literal["training", "inference"]


class Node(BaseModel):
    """One server. ``gpus`` GPUs of one type, indexed 0..gpus-1."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)
    gpus: int = Field(ge=1, le=MAX_GPUS_PER_NODE)
    gpu_type: str = "v100"
    pool: Pool = "training"
    rack: str = "rack0"
    switch: str = "switch0"


class Cluster(BaseModel):
    """A set of nodes and the GPU types they use."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    nodes: list[Node] = Field(min_length=1)
    gpu_types: dict[str, GpuType] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        seen: set[str] = set()
        for i, node in enumerate(self.nodes):
            if node.name in seen:
                raise ValueError(f"nodes[{i}].name: duplicate node name {node.name!r}")
            seen.add(node.name)
            if node.gpu_type not in self.gpu_types and node.gpu_type not in KNOWN_GPU_TYPES:
                raise ValueError(
                    f"nodes[{i}].gpu_type: unknown GPU type {node.gpu_type!r}; "
                    f"declare it in gpu_types or use one of {sorted(KNOWN_GPU_TYPES)}"
                )
        return self

    @classmethod
    def uniform(
        cls,
        nodes: int,
        gpus_per_node: int,
        gpu_type: str = "v100",
        pool: Pool = "training",
        nodes_per_rack: int | None = None,
        prefix: str = "node",
    ) -> Cluster:
        """``nodes`` identical servers, e.g. the AFS paper's 16 x 4 GTX 1080 cluster."""
        per_rack = nodes_per_rack or nodes
        return cls(
            nodes=[
                Node(
                    name=f"{prefix}{i:03d}",
                    gpus=gpus_per_node,
                    gpu_type=gpu_type,
                    pool=pool,
                    rack=f"rack{i // per_rack}",
                    switch=f"switch{i // per_rack}",
                )
                for i in range(nodes)
            ]
        )

    def gpu_type(self, name: str) -> GpuType:
        """The :class:`GpuType` called ``name`` (declared here or a known default)."""
        return self.gpu_types.get(name) or KNOWN_GPU_TYPES[name]

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def total_gpus(self) -> int:
        """All GPUs of every pool (cached: the model is frozen, and admission asks per job)."""
        return sum(n.gpus for n in self.nodes)

    def gpus_in_pool(self, pool: Pool) -> int:
        return sum(n.gpus for n in self.nodes if n.pool == pool)

    @property
    def gpus_per_node(self) -> int:
        """The largest node size; network packing uses it as the packing unit."""
        return max(n.gpus for n in self.nodes)

    def topology(self) -> nx.Graph:
        """Switch - rack - node - GPU tree. Edge attribute ``level`` names the link kind.

        Best-fit placement reads node-to-node hop distances from it (:meth:`hops`) to keep a
        multi-node job's servers close. networkx is imported here, not at module level: it only
        computes hop counts, and every command that loads the models would otherwise pay for
        it (issue 28: a fast CLI).
        """
        import networkx as nx

        graph = nx.Graph()
        for node in self.nodes:
            graph.add_edge(f"switch:{node.switch}", f"rack:{node.rack}", level="switch")
            graph.add_edge(f"rack:{node.rack}", f"node:{node.name}", level="rack")
            for gpu in range(node.gpus):
                graph.add_edge(f"node:{node.name}", f"gpu:{node.name}:{gpu}", level="pcie")
        return graph

    @cached_property
    def node_gpu_types(self) -> frozenset[str]:
        """GPU types of the nodes (cached): a one-type cluster lets best fit skip type checks."""
        return frozenset(n.gpu_type for n in self.nodes)

    @cached_property
    def multi_rack(self) -> bool:
        """Whether the nodes sit in more than one rack (hop distances then differ)."""
        return len({n.rack for n in self.nodes}) > 1

    @cached_property
    def _hop_cache(self) -> tuple[nx.Graph, dict[tuple[str, str], float]]:
        return self.topology(), {}

    def hops(self, a: str, b: str) -> float:
        """Links between nodes ``a`` and ``b`` in :meth:`topology` (0 same node, 2 same rack,
        4 same switch); ``inf`` when the tree has no path (different switches are not
        linked in it, i.e. the farthest apart)."""
        if a == b:
            return 0.0
        graph, cache = self._hop_cache
        key = (a, b) if a < b else (b, a)
        if key not in cache:
            import networkx as nx  # loaded by topology() already: a lookup, on a miss only

            try:
                cache[key] = float(nx.shortest_path_length(graph, f"node:{a}", f"node:{b}"))
            except nx.NetworkXNoPath:
                cache[key] = float("inf")
        return cache[key]
