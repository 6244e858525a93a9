"""The AFS model zoo: the nine models of AFS/CoDDL Table 4 with throughput curves.

The paper gives each model's *Max #GPUs* (the count where its throughput peaks on the authors'
16 x 4 GTX 1080 / 40 GbE cluster) but not the measured curves. The trace mapping
(:func:`gpuplan.scenarios.mapping.map_afs`) needs full curves, so each model gets one that

* starts from a **measured** scaling curve of the same or the closest model in the shared tables
  (ElasticFlow A100 strong scaling at a fixed global batch, which is the AFS semantics; Gavel
  V100 where it has the very model), and
* is bent by the per-iteration time model of the AFS digest §3.1 so that its raw argmax is
  **exactly** Table 4's Max #GPUs::

      T(c) / T(1) = (1 - f) / c + f + b (c - 1),        P(c) = P(1) * T(1) / T(c)

  ``f`` (serial fraction: per-iteration time that data parallelism cannot split, e.g. the
  bandwidth part of a ring all-reduce) is fitted to the measured speedups at 2..min(8, max) GPUs
  (one server in both sources); ``b`` (per-extra-GPU communication cost) is then fixed by the
  peak: the integer argmax of ``P`` is ``m`` iff ``(1-f)/(m(m+1)) < b < (1-f)/(m(m-1))``, and we
  take the geometric mean ``b = (1-f) / (m sqrt(m^2 - 1))`` (~ the digest's ``T1/c*^2``).
  ``T`` is strictly convex, so ``P`` strictly increases up to ``m`` and strictly decreases
  after it. No inter-node step term is added: a step would either move the peak or break the
  monotone rise that "Max #GPUs" means, and AFS's network packing makes the measured (packed)
  curve already include the placement.

Points are stored at every count 1..64 so any size evaluates exactly (no interpolation), with
``flat`` extrapolation beyond. All curves use the **V100** as reference GPU (A100 rates are
converted with the project's relative speeds), so a V100 cluster reproduces trace durations at
the requested GPU count and all nine models scale alike on any other type.

The zoo ships as ``data/afs_zoo.json`` so it works without the shared traces; rebuild it with
``python -m gpuplan.scenarios.zoo --write`` after changing the derivation (a test checks the
shipped file equals a fresh build).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuplan.models.errors import InputError
from gpuplan.models.gpu import KNOWN_GPU_TYPES
from gpuplan.models.throughput import ThroughputProfile

from .profiles import elasticflow_profile, gavel_profiles

__all__ = [
    "AFS_TABLE4",
    "MAX_COUNT",
    "REFERENCE_GPU",
    "ZooModel",
    "ZooSource",
    "build_afs_zoo",
    "fit_serial_fraction",
    "load_afs_zoo",
    "main",
    "peak_curve",
    "zoo_document",
]

REFERENCE_GPU = "v100"
MAX_COUNT = 64
"""Largest count stored: the AFS testbed and every scaled trace run on at most 64 GPUs."""
FIT_MAX_COUNT = 8
"""Measured points used for the fit: one server in both Gavel (8 V100) and ElasticFlow (8 A100)."""
_F_STEPS = 9500  # serial fraction searched on the grid 0, 1e-4, ..., 0.95
_DATA_FILE = "afs_zoo.json"


class ZooModel(BaseModel):
    """One Table 4 model: its training setup, Max #GPUs and a curve peaking exactly there."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    dataset: str
    batch_size: int = Field(ge=1, description="global batch, fixed while the share changes")
    max_gpus: int = Field(ge=1, description="AFS Table 4 Max #GPUs = raw throughput argmax")
    profile: ThroughputProfile
    derivation: str = Field(description="which measured curve shaped it, and why that one")
    measured_speedup: dict[int, float] = Field(
        default_factory=dict, description="source speedups the serial fraction was fitted to"
    )
    serial_fraction: float = Field(ge=0, lt=1, description="fitted f of T(c)")
    comm_coeff: float = Field(gt=0, description="b of T(c), set by max_gpus")


@dataclass(frozen=True)
class ZooSource:
    """Where a zoo model's shape comes from: a table row of the shared traces."""

    name: str
    dataset: str
    batch_size: int
    max_gpus: int
    table: Literal["elasticflow", "gavel"]
    key: str  # ElasticFlow file name, or Gavel job type
    batch: int | None  # ElasticFlow global batch row (None for Gavel: in the job type)
    why: str


AFS_TABLE4: tuple[ZooSource, ...] = (
    ZooSource(
        "VGG16", "ImageNet", 256, 8, "elasticflow", "vgg16.csv", 256, "same model and global batch"
    ),
    ZooSource(
        "GoogLeNet",
        "ImageNet",
        128,
        20,
        "elasticflow",
        "inception3.csv",
        128,
        "Inception-v3, the measured member of GoogLeNet's (Inception-v1) family; same global batch",
    ),
    ZooSource(
        "Inception-v4",
        "ImageNet",
        256,
        52,
        "elasticflow",
        "inception3.csv",
        128,
        "Inception-v3, the closest measured Inception; batch 128 is its largest row",
    ),
    ZooSource(
        "ResNet-50",
        "ImageNet",
        128,
        28,
        "elasticflow",
        "resnet50.csv",
        128,
        "same model and global batch",
    ),
    ZooSource(
        "DCGAN",
        "Celeb-A",
        256,
        20,
        "elasticflow",
        "resnet50.csv",
        256,
        "convolutional image model at the same global batch; no GAN is measured on "
        ">1 GPU (Gavel's CycleGAN is single-GPU only)",
    ),
    ZooSource(
        "Video Prediction",
        "Push",
        64,
        28,
        "elasticflow",
        "deepspeech2.csv",
        64,
        "conv + recurrent layers like CDNA's conv-LSTM; same global batch",
    ),
    ZooSource(
        "Chatbot",
        "OpenSubtitles",
        256,
        4,
        "gavel",
        "LM (batch size 80)",
        None,
        "recurrent (LSTM) language model like the seq2seq Chatbot; largest LM batch",
    ),
    ZooSource(
        "Deep Speech 2",
        "LibriSpeech ASR corpus",
        64,
        20,
        "elasticflow",
        "deepspeech2.csv",
        64,
        "same model and global batch",
    ),
    ZooSource(
        "Transformer",
        "IWSLT 2016 English-German corpus",
        256,
        44,
        "gavel",
        "Transformer (batch size 256)",
        None,
        "same model and global batch",
    ),
)
"""Table 4 of the AFS paper, with the measured curve chosen for each model (and why)."""


# --------------------------------------------------------------------------- the curve model
def peak_curve(
    rate_1: float, serial_fraction: float, max_gpus: int, counts: int = MAX_COUNT
) -> tuple[dict[int, float], float]:
    """Points 1..counts of ``P(c) = rate_1 / ((1-f)/c + f + b(c-1))`` peaking at ``max_gpus``.

    Returns the points and ``b``. ``max_gpus == 1`` has no upper bound on ``b`` and uses
    ``b = 1 - f`` (any ``b > (1-f)/2`` makes 1 GPU the peak).
    """
    if not 0 <= serial_fraction < 1:
        raise ValueError(f"serial fraction {serial_fraction} must be in [0, 1)")
    if max_gpus < 1 or rate_1 <= 0:
        raise ValueError("max_gpus must be >= 1 and rate_1 > 0")
    a = 1.0 - serial_fraction
    m = max_gpus
    b = a / (m * math.sqrt(m * m - 1)) if m > 1 else a
    points = {c: rate_1 / (a / c + serial_fraction + b * (c - 1)) for c in range(1, counts + 1)}
    return points, b


def _model_speedup(serial_fraction: float, max_gpus: int, gpus: int) -> float:
    a = 1.0 - serial_fraction
    m = max_gpus
    b = a / (m * math.sqrt(m * m - 1)) if m > 1 else a
    return 1.0 / (a / gpus + serial_fraction + b * (gpus - 1))


def fit_serial_fraction(speedups: dict[int, float], max_gpus: int) -> float:
    """Least-squares (in log speedup) serial fraction on the grid 0, 1e-4, ..., 0.95.

    A grid instead of a numerical optimiser keeps the result bit-reproducible, which the
    shipped-zoo equality test relies on. When the measured curve scales better than any
    ``f >= 0`` allows (Table 4's peak caps the speedup near ``m/2``), ``f = 0``: the shape is
    then set by the peak alone.
    """
    pairs = [(c, s) for c, s in sorted(speedups.items()) if c > 1 and s > 0]
    if not pairs:
        return 0.0
    best_f, best_err = 0.0, math.inf
    for i in range(_F_STEPS + 1):
        f = i / 10000
        err = sum((math.log(_model_speedup(f, max_gpus, c)) - math.log(s)) ** 2 for c, s in pairs)
        if err < best_err:
            best_f, best_err = f, err
    return best_f


# --------------------------------------------------------------------------- building
def _source_profile(
    spec: ZooSource, traces_dir: Path, gavel: dict[tuple[str, str], ThroughputProfile] | None
) -> ThroughputProfile:
    if spec.table == "elasticflow":
        path = traces_dir / "elasticflow_profiles" / "throughputs_A100" / spec.key
        return elasticflow_profile(path, spec.batch or spec.batch_size)
    try:
        return (gavel or {})[(spec.key, REFERENCE_GPU)]
    except KeyError:
        raise InputError(
            f"no {REFERENCE_GPU} entry for job type {spec.key!r}",
            source=str(traces_dir / "gavel" / "simulation_throughputs.json"),
            field=spec.key,
        ) from None


def _check_peak(name: str, points: dict[int, float], max_gpus: int) -> None:
    """Guard the zoo's defining property (the maths guarantees it; a refactor might not)."""
    counts = sorted(points)
    for lo, hi in itertools.pairwise(counts):
        rising = points[hi] > points[lo]
        if rising != (hi <= max_gpus):
            raise ValueError(f"{name}: curve does not peak exactly at {max_gpus} GPUs")


def build_afs_zoo(traces_dir: Path | str) -> dict[str, ZooModel]:
    """Derive the nine Table 4 models from the shared profile tables under ``traces_dir``."""
    root = Path(traces_dir)
    gavel = None
    if any(s.table == "gavel" for s in AFS_TABLE4):
        gavel = gavel_profiles(root / "gavel" / "simulation_throughputs.json")
    ref_speed = KNOWN_GPU_TYPES[REFERENCE_GPU].relative_speed
    zoo: dict[str, ZooModel] = {}
    for spec in AFS_TABLE4:
        src = _source_profile(spec, root, gavel)
        src_speed = KNOWN_GPU_TYPES[src.reference_gpu].relative_speed
        rate_1 = src.points[1] * ref_speed / src_speed
        fit_max = min(FIT_MAX_COUNT, spec.max_gpus)
        speedups = {c: r / src.points[1] for c, r in src.points.items() if c <= fit_max}
        f = fit_serial_fraction(speedups, spec.max_gpus)
        points, b = peak_curve(rate_1, f, spec.max_gpus)
        _check_peak(spec.name, points, spec.max_gpus)
        convert = (
            ""
            if src.reference_gpu == REFERENCE_GPU
            else f"; rate x{ref_speed / src_speed:g} {src.reference_gpu}->{REFERENCE_GPU}"
        )
        derivation = (
            f"{spec.why}. Source: {src.source}{convert}; T(c)=(1-f)/c+f+b(c-1) with "
            f"f={f:g} fitted to speedups at 2..{fit_max} GPUs, b set so the peak is "
            f"{spec.max_gpus} (AFS Table 4)"
        )
        zoo[spec.name] = ZooModel(
            name=spec.name,
            dataset=spec.dataset,
            batch_size=spec.batch_size,
            max_gpus=spec.max_gpus,
            profile=ThroughputProfile(
                points=points,
                reference_gpu=REFERENCE_GPU,
                extrapolation="flat",
                source=f"AFS zoo {spec.name}: {src.source}, peak fitted to AFS Table 4",
            ),
            derivation=derivation,
            measured_speedup=speedups,
            serial_fraction=f,
            comm_coeff=b,
        )
    return zoo


def zoo_document(zoo: dict[str, ZooModel]) -> dict[str, Any]:
    """The JSON document shipped as ``data/afs_zoo.json`` (models in Table 4 order)."""
    return {
        "description": "AFS/CoDDL (NSDI'21) Table 4 model zoo; curves peak at Max #GPUs. "
        "See docs/profiles.md.",
        "generated_by": "python -m gpuplan.scenarios.zoo --write",
        "reference_gpu": REFERENCE_GPU,
        "models": [m.model_dump(mode="json") for m in zoo.values()],
    }


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


# --------------------------------------------------------------------------- loading
def load_afs_zoo() -> dict[str, ZooModel]:
    """The shipped zoo (package data), keyed by model name, in Table 4 order.

    Reads only the embedded JSON, so it works without the shared traces folder.
    """
    where = f"gpuplan.scenarios/data/{_DATA_FILE}"
    try:
        text = (
            resources.files("gpuplan.scenarios")
            .joinpath("data", _DATA_FILE)
            .read_text(encoding="utf-8")
        )
        doc = json.loads(text)
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(f"cannot read the shipped zoo: {err}", source=where) from None
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list):
        raise InputError("expected a 'models' list", source=where, field="models")
    zoo: dict[str, ZooModel] = {}
    for i, entry in enumerate(models):
        try:
            model = ZooModel.model_validate(entry)
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(x) for x in first.get("loc", ()))
            raise InputError(
                first.get("msg", str(err)), source=where, row=i, field=f"models.{field}"
            ) from None
        zoo[model.name] = model
    return zoo


# --------------------------------------------------------------------------- CLI
def _data_path() -> Path:
    return Path(__file__).resolve().parent / "data" / _DATA_FILE


def _default_traces() -> Path:
    from .traces import shared_traces_dir

    return shared_traces_dir()


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuplan.scenarios.zoo [--traces DIR] [--write | --check]``."""
    parser = argparse.ArgumentParser(
        prog="python -m gpuplan.scenarios.zoo",
        description="Build the AFS model zoo from the shared profile tables.",
    )
    parser.add_argument("--traces", type=Path, help="shared traces folder (default: located)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"write data/{_DATA_FILE}")
    group.add_argument(
        "--check", action="store_true", help="exit 1 if the shipped file differs from a fresh build"
    )
    args = parser.parse_args(argv)
    try:
        traces = args.traces or _default_traces()
        zoo = build_afs_zoo(traces)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = _dumps(zoo_document(zoo))
    target = _data_path()
    if args.write:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}")
    elif args.check:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            print(f"{target} is stale: run with --write", file=sys.stderr)
            return 1
        print(f"{target} is up to date")
    for m in zoo.values():
        p = m.profile
        print(
            f"{m.name:17s} max {m.max_gpus:2d}  raw peak {p.peak_gpus:2d}  "
            f"f={m.serial_fraction:<6g}  speedup@peak {p.speedup(m.max_gpus):5.2f}  "
            f"@8 {p.speedup(8):5.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
