"""The small seeded instances on which ``offline-optimal`` is compared with the online
policies (docs/results/optimality.md; ``gpuplan reproduce optimality-rigid`` and
``optimality-elastic``).

They live in the product, not in the bench, because a results page quotes rows computed on
them and a test recomputes some of those rows: the instance a seed names must be the same for
the command, the bench's plot and the embedded scenarios ``optimality-rigid-5`` and
``optimality-elastic-1`` (which write two of them out; tests/docs/test_doc_commands.py checks
that they are these). Only the models are needed here; running them needs the simulator
(:mod:`gpuplan.optimality_reproduction`).
"""

from __future__ import annotations

import random

from gpuplan.models import Cluster, Elasticity, JobSpec, Overheads, ThroughputProfile

SLOT_S = 60.0
"""The instances' grid: arrivals and durations are multiples of it (also the slotted
fallback's slot length)."""
NO_OVERHEADS = Overheads(start_s=0, restart_s=0, sidecar_s=0, stop_free_s=0, migrate_s=0)
"""The offline model ignores overheads, so the comparison runs every policy without them."""
RIGID_POLICIES = [
    "fifo",
    "fifo-backfill",
    "sjf",
    "srtf",
    "srsf",
    "tiresias-l",
    "themis",
    "max-min",
    "afs-l",
    "afs-p",
    "optimus",
]
"""The online policies compared on rigid instances, in the tables' order."""
ELASTIC_POLICIES = [
    "fifo",
    "srtf",
    "srsf",
    "tiresias-l",
    "themis",
    "max-min",
    "afs-l",
    "afs-p",
    "optimus",
    "srtf-e",
    "srsf-e",
    "elastic-tiresias",
    "edl-elastic",
]
"""The online policies compared on elastic instances, in the tables' order."""
CURVES = [
    {1: 1.0, 2: 1.9, 4: 3.5, 8: 6.0},  # scales well
    {1: 1.0, 2: 1.7, 4: 2.6, 8: 3.2},  # medium
    {1: 1.0, 2: 1.4, 4: 1.6, 8: 1.7},  # saturates early
]


def policies_of(kind: str) -> list[str]:
    """The online policies compared on instances of ``kind`` (``rigid`` or ``elastic``)."""
    return RIGID_POLICIES if kind == "rigid" else ELASTIC_POLICIES


def small_instance(
    seed: int, elastic: bool, jobs: int = 8, nodes: int = 2, gpus_per_node: int = 4
) -> tuple[Cluster, list[JobSpec]]:
    """A seeded instance on the slot grid: arrivals in [0, 6] slots, durations 1-5 slots at
    the requested count (1, 2 or 4 GPUs); elastic jobs may run on 1, 2, 4 or 8 GPUs with one
    of :data:`CURVES`. Small enough (8 jobs, 8 GPUs) for the exact search to close on most."""
    rng = random.Random(seed * 2 + int(elastic))
    out = []
    for i in range(jobs):
        kw: dict[str, object] = {
            "id": f"j{i}",
            "submit_time": SLOT_S * rng.randint(0, 6),
            "requested_gpus": rng.choice([1, 1, 2, 4]),
            "duration": SLOT_S * rng.randint(1, 5),
        }
        if elastic:
            kw["elasticity"] = Elasticity(min_gpus=1, max_gpus=8, allowed=(1, 2, 4, 8))
            kw["throughput"] = ThroughputProfile(points=rng.choice(CURVES))
        out.append(JobSpec(**kw))  # type: ignore[arg-type]
    return Cluster.uniform(nodes, gpus_per_node), out
