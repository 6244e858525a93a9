"""SideCar's Workloads One to Four (004 digest §5.2-5.3) as inline job lists.

The embedded scenarios ``sidecar-wl1`` … ``sidecar-wl4`` (``data/sidecar-wl*.scenario.yaml``)
were written by :func:`write_workloads`; the files, not this code, are what runs, so a change
here changes nothing until the files are rewritten (``python -m gpuplan.scenarios.sidecar_jobs``).

From the paper: the job types of Tables VI (Job Set One) and VII (Job Set Two), one epoch of
ImageNet, ten of CIFAR-10 / MNIST, 40 / 20 / 40 / 40 jobs, types uniform at random, arrivals
exponential within [0, 11000] s, 2 hosts x 8 GPUs (V100 + P100, or V100 + K80 on AWS), each job
one container (one host). **Inferred** (the paper publishes none of it): the per-type iteration
times and speed-up curves below, iterations per epoch from the datasets' sizes with the batch
size read as global, optional GPU counts {1, 2, 4, 8}, and the arrival draw (exponential gaps
rescaled so the first job arrives at 0 s and the last at 11000 s, seeded). Workload Four's
accuracy targets are not modelled: it is Workload Three's job set drawn with another seed.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

IMAGENET, CIFAR10, MNIST = 1_281_167, 50_000, 60_000

# name, dataset size, epochs, batch, V100 seconds per iteration at 1 GPU, speed-ups at 1/2/4/8
JobType = tuple[str, int, int, int, float, tuple[float, float, float, float]]
SET_ONE: tuple[JobType, ...] = (
    ("resnet18-b64", IMAGENET, 1, 64, 0.10, (1.0, 1.5, 1.9, 2.1)),
    ("resnet18-b128", IMAGENET, 1, 128, 0.19, (1.0, 1.7, 2.4, 2.9)),
    ("resnet18-b256", IMAGENET, 1, 256, 0.37, (1.0, 1.8, 3.0, 4.2)),
    ("resnet34-b64", IMAGENET, 1, 64, 0.17, (1.0, 1.5, 1.9, 2.1)),
    ("resnet34-b128", IMAGENET, 1, 128, 0.32, (1.0, 1.7, 2.4, 2.9)),
    ("resnet50-b64", IMAGENET, 1, 64, 0.25, (1.0, 1.6, 2.2, 2.6)),
    ("resnet8-b1024-cifar10", CIFAR10, 10, 1024, 0.35, (1.0, 1.6, 2.0, 2.2)),
)
SET_TWO: tuple[JobType, ...] = (
    ("resnet18-b256", IMAGENET, 1, 256, 0.37, (1.0, 1.8, 3.0, 4.2)),
    ("resnet34-b128", IMAGENET, 1, 128, 0.32, (1.0, 1.7, 2.4, 2.9)),
    ("inceptionv3-b128", IMAGENET, 1, 128, 0.45, (1.0, 1.8, 3.1, 4.5)),
    ("vgg16-b64", IMAGENET, 1, 64, 0.22, (1.0, 1.4, 1.7, 1.8)),
    ("googlenet-b512", IMAGENET, 1, 512, 0.60, (1.0, 1.8, 3.2, 5.0)),
    ("alexnet-b256", IMAGENET, 1, 256, 0.08, (1.0, 1.3, 1.5, 1.6)),
    ("lenet-b1024-mnist", MNIST, 10, 1024, 0.02, (1.0, 1.2, 1.3, 1.3)),
)
TYPE_SPEED = {"p100": 0.72, "k80": 0.30}
"""Per-type speed vs V100: P100 from Table IV (0.18 / 0.25 s), K80 inferred."""

WORKLOADS: dict[int, tuple[tuple[JobType, ...], int, str, int]] = {
    1: (SET_ONE, 40, "p100", 1),
    2: (SET_ONE, 20, "p100", 2),
    3: (SET_TWO, 40, "k80", 3),
    4: (SET_TWO, 40, "k80", 4),
}
"""Workload -> (job set, jobs, second host's GPU type, seed)."""


def arrivals(count: int, seed: int, span: float = 11000.0) -> list[float]:
    """``count`` arrival times from exponential gaps, rescaled onto [0, span]."""
    rng = random.Random(seed)
    times = [0.0]
    for _ in range(count - 1):
        times.append(times[-1] + rng.expovariate(1.0))
    last = times[-1] or 1.0
    return [round(t * span / last, 1) for t in times]


def job_dict(job_id: str, job: JobType, submit: float) -> dict[str, Any]:
    """One inline job: one epoch count's iterations, the type's curve, one host, 1/2/4/8."""
    name, size, epochs, batch, t_iter, speedups = job
    iterations = -(-size // batch) * epochs
    points = {g: round(s / t_iter, 6) for g, s in zip((1, 2, 4, 8), speedups, strict=True)}
    return {
        "id": job_id,
        "submit_time": submit,
        "model": name,
        "requested_gpus": 4,
        "elasticity": {"min_gpus": 1, "max_gpus": 8, "allowed": [1, 2, 4, 8]},
        "node_shape": {"max_nodes": 1},
        "total_iterations": iterations,
        "checkpoint": {"on_signal": True},
        "throughput": {
            "points": points,
            "type_speed": TYPE_SPEED,
            "source": "inferred SideCar job type (scenarios/sidecar_jobs.py)",
        },
    }


def workload(number: int) -> dict[str, Any]:
    """The scenario document of Workload ``number``."""
    jobs, count, second, seed = WORKLOADS[number]
    rng = random.Random(1000 + seed)
    inline = [
        job_dict(f"wl{number}-{i:02d}", rng.choice(jobs), t)
        for i, t in enumerate(arrivals(count, seed))
    ]
    return {
        "name": f"sidecar-wl{number}",
        "description": f"SideCar Workload {number}: {count} jobs over 11000 s on 8 V100 + 8 "
        f"{second.upper()} (one host per job). Try k8s-default,termination,sidecar.",
        "seed": seed,
        "cluster": {
            "nodes": [
                {"name": "host-v100", "gpus": 8, "gpu_type": "v100"},
                {"name": f"host-{second}", "gpus": 8, "gpu_type": second},
            ]
        },
        "workload": {"source": "inline", "inline_jobs": inline},
        "overheads": {
            "start_s": 174,
            "resize_mode": "sidecar",
            "resize_down_s": 27,
            "resize_up_s": 37,
            "early_init_s": 83,
        },
        "engine": {"sample_interval_s": 600},
    }


def write_workloads(folder: Path) -> list[Path]:
    """Write ``sidecar-wl1..4.scenario.yaml`` into ``folder``."""
    paths = []
    for number in WORKLOADS:
        path = folder / f"sidecar-wl{number}.scenario.yaml"
        head = (
            f"# Generated by scenarios/sidecar_jobs.py (write_workloads): SideCar Workload "
            f"{number}; see that module for what is from the paper and what is inferred.\n"
        )
        path.write_text(head + yaml.safe_dump(workload(number), sort_keys=False))
        paths.append(path)
    return paths


if __name__ == "__main__":
    write_workloads(Path(__file__).parent / "data")
