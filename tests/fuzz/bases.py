"""Valid starting points the fuzzers mutate: one small scenario per workload source and block,
a state snapshot, a sweep, and the secondary files a scenario names (traces, QPS series).

Why small: every base runs in well under a second, so hundreds of mutants fit in the suite's
two minutes, and a mutant that makes a run expensive shows up as a hang rather than hiding in
an already slow baseline. Each scenario base names the block its mutations focus on.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

INLINE_JOBS: list[dict[str, Any]] = [
    {"id": "a", "submit_time": 0, "requested_gpus": 2, "duration": 100},
    {
        "id": "b",
        "submit_time": 5,
        "requested_gpus": 4,
        "duration": 50,
        "elasticity": {"min_gpus": 1, "max_gpus": 8, "allowed": [1, 2, 4, 8]},
    },
    {
        "id": "c",
        "submit_time": 9,
        "requested_gpus": 1,
        "total_iterations": 500,
        "throughput": {"points": {"1": 10.0, "2": 18.0, "4": 30.0}},
        "priority_weight": 2,
    },
]

SMALL: dict[str, Any] = {
    "name": "fuzz",
    "seed": 1,
    "cluster": {"nodes": 2, "gpus_per_node": 4},
    "workload": {"source": "inline", "inline_jobs": INLINE_JOBS},
    "overheads": {"start_s": 1, "restart_s": 10},
    "engine": {"sample_interval_s": 60},
}

# ----------------------------------------------------------------- secondary files (text)
PHILLY_CSV = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-11 16:18:16,500.0,2,1000.0,vc1
2017-10-11 16:20:10,300.0,1,300.0,vc1
2017-10-11 16:22:04,900.0,4,3600.0,vc1
2017-10-11 16:25:11,120.0,1,120.0,vc2
"""
TIRESIAS_CSV = """job_id,num_gpu,submit_time,iterations,model_name,duration,interval
0,1,0,606,vgg19,164,30
1,2,30,133,vgg11,147,23
2,4,53,300,resnet50,200,10
"""
POLLUX_CSV = """name,time,application,num_replicas,batch_size
cifar10-0,107,cifar10,2,2048
bert-1,110,bert,1,12
imagenet-2,150,imagenet,4,400
"""
ITP_CSV = """job_id,submission_time,duration,num_gpu
j1,1000,500,2
j2,1100,300,1
j3,1300,800,4
"""
GAVEL_TRACE = (
    "\n".join(
        [
            "ResNet-50 (batch size 64)\tpython3 main.py\t--num_minibatches\t1\t2000\t0\t1",
            "Transformer (batch size 16)\tpython3 train.py\t-step\t1\t3000\t60\t2",
            "ResNet-18 (batch size 128)\tpython3 main.py\t--num_steps\t1\t4000\t120\t1",
        ]
    )
    + "\n"
)
QPS_CSV = "t_s,qps\n0,0.1\n300,0.4\n600,0.9\n900,0.3\n1200,0.2\n"
ARYL_JSON: dict[str, Any] = {
    "cluster": {
        "training_servers": 2,
        "inference_servers": 2,
        "gpus_per_server": 4,
        "normalise": True,
    },
    "jobs": {
        "count": 6,
        "elastic": 1,
        "size_mix": {"1": 0.5, "2": 0.3, "4": 0.2},
        "submit_span_s": 600,
        "duration_range_s": [60, 300],
        "agnostic_fraction": 0.2,
        "checkpoint_fraction": 0.5,
    },
    "inference": {
        "period_s": 600,
        "step_s": 120,
        "peak_busy": 0.9,
        "base_busy": 0.2,
        "headroom": 0.1,
        "drain_s": 600,
    },
}

SECONDARY: dict[str, str] = {
    "philly.csv": PHILLY_CSV,
    "tiresias.csv": TIRESIAS_CSV,
    "pollux.csv": POLLUX_CSV,
    "itp.csv": ITP_CSV,
    "gavel.trace": GAVEL_TRACE,
    "qps.csv": QPS_CSV,
    "aryl.json": json.dumps(ARYL_JSON),
}
"""File name -> valid content; every case folder gets all of them (scenarios name them)."""


def write_secondary(folder: Path, override: dict[str, str | bytes] | None = None) -> None:
    for name, text in {**SECONDARY, **(override or {})}.items():
        path = folder / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")


def _with(workload: dict[str, Any], **top: Any) -> dict[str, Any]:
    doc = copy.deepcopy(SMALL)
    doc["workload"] = workload
    doc.update(copy.deepcopy(top))
    return doc


SCENARIOS: dict[str, tuple[dict[str, Any], tuple[Any, ...]]] = {
    # name: (document, the path its mutations focus on)
    "cluster": (copy.deepcopy(SMALL), ("cluster",)),
    "cluster-nodes": (
        _with(
            SMALL["workload"],
            cluster={
                "nodes": [
                    {"name": "n1", "gpus": 4, "gpu_type": "v100", "pool": "training", "rack": "r1"},
                    {"name": "n2", "gpus": 2, "gpu_type": "v100", "rack": "r2"},
                ]
            },
        ),
        ("cluster",),
    ),
    "inline": (copy.deepcopy(SMALL), ("workload",)),
    "elasticity": (copy.deepcopy(SMALL), ("workload", "inline_jobs", 1, "elasticity")),
    "throughput": (copy.deepcopy(SMALL), ("workload", "inline_jobs", 2)),
    "synthetic": (
        _with(
            {
                "source": "synthetic",
                "jobs": 6,
                "arrival_rate_per_h": 20,
                "size_mix": {1: 0.5, 2: 0.3, 4: 0.2},
                "mean_duration_s": 300,
            }
        ),
        ("workload",),
    ),
    "philly": (
        _with(
            {
                "source": "philly",
                "path": "philly.csv",
                "vc": "vc1",
                "mapping": "afs",
                "max_jobs": 10,
                "time_scale": 1.0,
            }
        ),
        ("workload",),
    ),
    "aryl": (
        _with(
            {
                "source": "aryl_testbed",
                "path": "aryl.json",
                "mapping": "aryl",
                "aryl": {"elastic_fraction": 0.2},
            }
        ),
        ("workload",),
    ),
    "gavel": (_with({"source": "gavel", "path": "gavel.trace"}), ("workload",)),
    "pollux": (_with({"source": "pollux", "path": "pollux.csv"}), ("workload",)),
    "tiresias": (_with({"source": "tiresias", "path": "tiresias.csv"}), ("workload",)),
    "itp": (_with({"source": "itp", "path": "itp.csv", "mapping": "elastic"}), ("workload",)),
    "overheads": (
        _with(
            SMALL["workload"],
            overheads={
                "start_s": 1,
                "resize_mode": "stop_free",
                "restart_s": 10,
                "stop_free_s": 0.004,
                "sidecar_s": 3,
                "migrate_s": 30,
                "preempt_s": 1,
                "expand_prep_s": 1,
                "resize_up_s": 2,
                "resize_down_s": 1,
                "early_init_s": 0.5,
            },
        ),
        ("overheads",),
    ),
    "engine": (
        _with(
            SMALL["workload"],
            engine={
                "round_interval_s": 60,
                "decide_only_at_rounds": True,
                "sample_interval_s": 120,
            },
            learning={"enabled": True, "measure_s": 30},
        ),
        ("engine",),
    ),
    "loaning": (
        _with(
            SMALL["workload"],
            cluster={"nodes": 2, "gpus_per_node": 4},
            loaning={
                "servers": 2,
                "gpus_per_server": 4,
                "gpu_type": "t4",
                "ratio": 0.25,
                "qps": "qps.csv",
                "period_s": 1200,
                "step_s": 120,
                "peak_busy": 0.9,
                "base_busy": 0.2,
                "headroom": 0.1,
                "horizon_s": 2400,
            },
        ),
        ("loaning",),
    ),
    "interference": (
        _with(
            {
                "source": "inline",
                "inline_jobs": [
                    {
                        "id": "x",
                        "submit_time": 0,
                        "requested_gpus": 1,
                        "total_iterations": 400,
                        "model": "A",
                        "memory": {"gamma": 0.2, "delta": 0.3, "p": 0.1, "compute": 0.3},
                    },
                    {
                        "id": "y",
                        "submit_time": 0,
                        "requested_gpus": 1,
                        "total_iterations": 300,
                        "model": "B",
                        "memory": {"gamma": 0.1, "delta": 0.2, "p": 0.1, "compute": 0.3},
                    },
                ],
            },
            cluster={"nodes": 1, "gpus_per_node": 1},
            simulator={
                "interference": {
                    "matrix": {"A": {"A": 0.1, "B": 0.2}, "B": {"A": 0.1, "B": 0.1}},
                    "composition": "additive",
                    "collisions": True,
                    "kappa": 1.0,
                    "window": 100,
                }
            },
        ),
        ("simulator",),
    ),
    "policies": (
        _with(
            SMALL["workload"],
            policies={
                "mine": {"base": "tiresias-l", "thresholds": [500, 1000], "promote_knob": None},
                "other": {"base": "afs-l", "wrappers": ["network-packing", "reuse"]},
            },
        ),
        ("policies",),
    ),
}
"""Scenario bases by the input block they exercise."""

POLICY_FOR: dict[str, str] = {
    "policies": "mine",
    "interference": "fifo-ojpp",
    "aryl": "aryl",
    "loaning": "aryl-loaning",
}
"""The policy a base runs under (default srtf)."""


def policy_for(base: str) -> str:
    return POLICY_FOR.get(base, "srtf")


STATE: dict[str, Any] = {
    "now": 100.0,
    "cluster": {"nodes": [{"name": "n1", "gpus": 4}, {"name": "n2", "gpus": 4}]},
    "jobs": [
        {
            "spec": {"id": "a", "submit_time": 0, "requested_gpus": 2, "duration": 100},
            "done_iterations": 10.0,
            "allocation": {"job_id": "a", "placement": {"n1": [0, 1]}},
        },
        {
            "spec": {
                "id": "b",
                "submit_time": 50,
                "requested_gpus": 4,
                "duration": 300,
                "elasticity": {"min_gpus": 2, "max_gpus": 8},
            },
            "pending_time": 20.0,
            "attained_service": 0.0,
        },
    ],
}

SWEEP: dict[str, Any] = {
    "name": "fuzz sweep",
    "scenarios": [
        "scenario.yaml",
        {"name": "fast", "scenario": "scenario.yaml", "overrides": {"overheads.restart_s": 5}},
    ],
    "policies": ["fifo", {"name": "tl", "base": "tiresias-l", "thresholds": [500]}],
    "seeds": [3],
    "overrides": [
        {"set": {"engine.sample_interval_s": 120}},
        {"scenario": "fast", "policy": "fifo", "seed": 3, "set": {"overheads.start_s": 2}},
    ],
}


def dump(doc: Any, fmt: str) -> bytes:
    """A document as YAML or JSON bytes (JSON keeps NaN/Infinity, as a careless writer would)."""
    if fmt == "json":
        return json.dumps(doc, allow_nan=True).encode()
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
