"""The real-GPU check of issue 26 item 4 (prepared here, run on a lent GPU machine).

Run as a program (``run_on_device.sh`` does, from outside the checkout so the installed gpuplan
wheel is imported, not the source tree)::

    python3 tests/gpu/test_real_gpu.py --out DIR [--dry-run] [--steps N]

It writes ``DIR/gpu-results.json`` with:

1. ``inventory``: gpuplan's NVML records (``executors/nvml``) beside ``nvidia-smi
   --query-gpu=uuid,name,memory.total --format=csv``, and whether UUID, name and memory agree;
2. ``preemption``: a ResNet-18 job (``docs/examples/pytorch_train.py``) started through the SSH
   executor's sidecar (the process manager gpuplan runs on each node; no SSH here) bound by GPU
   UUID; when a higher-priority job arrives the check plays the scheduler: it checkpoint-stops
   the first job through the sidecar, runs the second on the same GPU, then resumes the first,
   and records whether it resumed with its checkpoint's step counter and loss and whether its
   segments tile its work;
3. ``devices``: what each training process saw (``CUDA_VISIBLE_DEVICES`` and torch's device
   UUIDs), and whether that is exactly the planned GPU.

``--dry-run`` (CPU, no NVML needed; needs PyTorch) runs the same sequence on the CPU with a
made-up UUID, to check the program itself before spending device time. Under pytest the checks
are marked ``gpu`` and skipped without NVML, a GPU or PyTorch (CI is GPU-free).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "docs" / "examples" / "pytorch_train.py"
POLL_BOUND_S = 300.0


def nvidia_smi() -> dict[str, Any]:
    """nvidia-smi's view: the CSV rows and its one-line summary (for docs/results/gpu.md)."""
    out: dict[str, Any] = {"rows": [], "line": None}
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid,name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        for row in csv.reader(io.StringIO(text)):
            if row:
                uuid, name, memory = (c.strip() for c in row)
                out["rows"].append(
                    {"uuid": uuid, "name": name, "memory_mib": int(memory.split()[0])}
                )
        out["line"] = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,pci.bus_id",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        out["error"] = str(exc)
    return out


def inventory_check(dry: bool) -> dict[str, Any]:
    from gpuplan.executors.nvml.local import read_local

    inv = read_local()
    records = [
        {
            "index": g.index,
            "uuid": g.uuid,
            "model": g.model,
            "memory_mib": g.memory_mib,
            "mig": g.mig_enabled,
            "verdict": g.health.verdict,
            "reason": g.health.reason,
        }
        for g in inv.gpus
    ]
    smi = nvidia_smi() if not dry else {"rows": [], "line": "dry run: no nvidia-smi"}
    ours = [(r["uuid"], r["model"], r["memory_mib"]) for r in records]
    theirs = [(r["uuid"], r["name"], r["memory_mib"]) for r in smi["rows"]]
    return {
        "nvml": inv.nvml,
        "driver": inv.driver,
        "reason": inv.reason,
        "records": records,
        "nvidia_smi": smi,
        "match": bool(ours) and ours == theirs,
    }


def _sidecar() -> Any:
    from gpuplan.executors.ssh import agent as sidecar

    return sidecar


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _wait(what: str, check: Any) -> Any:
    deadline = time.monotonic() + POLL_BOUND_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"not reached within {POLL_BOUND_S} s: {what}")


class Job:
    """One training job under its own sidecar (the SSH executor's node-side wrapper)."""

    def __init__(self, root: Path, job_id: str, steps: int, uuid: str, extra: list[str]) -> None:
        self.id = job_id
        self.dir = root / "runs" / job_id
        self.state = root / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.steps = steps
        self.seq = 0
        self.gen = 0
        self.uuid = uuid
        self.argv = [
            sys.executable,
            str(TRAIN),
            "--job-id",
            job_id,
            "--state-dir",
            str(self.state),
            "--steps",
            str(steps),
            "--progress-interval",
            "0.2",
            "--seed",
            "1",
            *extra,
        ]
        self.files = {
            k: str(self.state / f"{job_id}.{s}")
            for k, s in (("progress", "progress"), ("checkpoint", "ckpt"), ("done", "done"))
        }

    def control(self, action: str) -> dict[str, Any]:
        self.seq += 1
        return {
            "seq": self.seq,
            "action": action,
            "gen": self.gen,
            "rank": 0,
            "nranks": 1,
            "gpus": [0],
            "devices": [self.uuid],
            "argv": self.argv,
            "env": {},
            "cwd": str(self.state),
            "files": self.files,
        }

    def launch(self) -> None:
        spec = {
            "protocol": 1,
            "job_id": self.id,
            "node": "local",
            "lease_file": None,
            "lease_s": 0,
            "ckpt_grace_s": 120.0,
            "term_grace_s": 10.0,
            "checkpoint_signal": "SIGUSR1",
        }
        res = _sidecar().cmd_launch(self.dir, {"spec": spec, "control": self.control("run")}, 60.0)
        assert res["ok"], res

    def send(self, action: str) -> dict[str, Any]:
        if action == "run":
            self.gen += 1
        res = _sidecar().cmd_control(self.dir, self.control(action), 200.0)
        assert res["ok"], res
        return res

    def progress(self) -> dict[str, Any]:
        return _json(Path(self.files["progress"])) or {}

    def log(self) -> list[dict[str, Any]]:
        path = self.state / f"{self.id}.log"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def devices_seen(self) -> list[dict[str, Any]]:
        lines = (self.dir / "train.log").read_text(errors="replace").splitlines()
        seen = []
        for line in lines:
            if line.startswith('{"event": "devices"'):
                seen.append(json.loads(line))
        return seen


def preemption_check(uuid: str, steps: int, dry: bool, root: Path) -> dict[str, Any]:
    extra = ["--device", "cpu", "--batch-size", "4", "--image-size", "32"] if dry else []
    low = Job(root, "low", steps, uuid, extra)
    high = Job(root, "high", max(steps // 3, 1), uuid, extra)
    t0 = time.time()
    low.launch()
    _wait("low trains", lambda: low.progress().get("done", 0) >= min(20, steps // 4))
    t_arrive = time.time()
    low.send("stop")  # the higher-priority job arrives: checkpoint-stop the running one
    ckpt = _json(Path(low.files["checkpoint"]))
    t_stopped = time.time()
    high.launch()
    _wait("high completes", lambda: Path(high.files["done"]).exists())
    t_high_done = time.time()
    low.send("run")  # resume
    resumed = _wait(
        "low resumed",
        lambda: (
            lambda p: (
                p if p.get("resumed_from") is not None and p.get("time", 0) > t_high_done else None
            )
        )(low.progress()),
    )
    t_resumed = resumed.get("started")
    _wait("low completes", lambda: Path(low.files["done"]).exists())
    segments = low.log()
    for job in (low, high):
        _sidecar().cmd_control(job.dir, job.control("exit"), 60.0)
    tiles = (
        bool(segments)
        and segments[0]["start"] == 0.0
        and all(b["start"] == a["end"] for a, b in itertools.pairwise(segments))
        and segments[-1]["end"] == float(steps)
    )
    seen = {job.id: job.devices_seen() for job in (low, high)}
    want = uuid.lower().removeprefix("gpu-")
    exact = all(
        s["visible"] == uuid
        and (dry or [u.lower().removeprefix("gpu-") for u in s["cuda_uuids"]] == [want])
        for runs in seen.values()
        for s in runs
    ) and all(seen.values())
    return {
        "steps": steps,
        "checkpoint": ckpt,
        "resumed_from": resumed.get("resumed_from"),
        "resumed_loss": resumed.get("resumed_loss"),
        "same_step_and_loss": bool(ckpt)
        and resumed.get("resumed_from") == ckpt["done"]
        and resumed.get("resumed_loss") == ckpt["loss"],
        "segments": segments,
        "segments_tile_work": tiles,
        "devices": seen,
        "each_job_sees_exactly_its_gpu": exact,
        "seconds": {
            "first_start_to_preempt": t_arrive - t0,
            "stop": t_stopped - t_arrive,
            "high_job": t_high_done - t_stopped,
            "resume_to_first_step": (t_resumed - t_high_done) if t_resumed else None,
            "total": time.time() - t0,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true", help="CPU, made-up UUID (no GPU needed)")
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"dry_run": args.dry_run, "time": time.time()}
    root = Path(tempfile.mkdtemp(prefix="gpuplan-gpu-"))
    try:
        results["inventory"] = inventory_check(args.dry_run)
        if args.dry_run:
            uuid = "GPU-00000000-0000-0000-0000-000000000000"
        else:
            usable = [r for r in results["inventory"]["records"] if r["verdict"] != "unhealthy"]
            if not usable:
                raise SystemExit("no usable GPU in the NVML inventory")
            uuid = usable[0]["uuid"]
        results["preemption"] = preemption_check(uuid, args.steps, args.dry_run, root)
        pre = results["preemption"]
        results["ok"] = bool(
            (args.dry_run or results["inventory"]["match"])
            and pre["same_step_and_loss"]
            and pre["segments_tile_work"]
            and pre["each_job_sees_exactly_its_gpu"]
        )
    except BaseException as exc:  # the JSON still comes back, with what failed
        results["error"] = f"{type(exc).__name__}: {exc}"
        results["ok"] = False
    finally:
        (args.out / "gpu-results.json").write_text(json.dumps(results, indent=1, default=str))
        for train_log in root.glob("runs/*/train.log"):
            shutil.copy(train_log, args.out / f"train-{train_log.parent.name}.log")
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"ok": results["ok"], "error": results.get("error")}))
    return 0 if results["ok"] else 1


pytestmark = pytest.mark.gpu


def test_real_gpu_inventory_preemption_and_uuid_binding(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("needs an NVIDIA GPU (nvidia-smi), NVML and PyTorch")
    pytest.importorskip("pynvml", reason="needs nvidia-ml-py (the 'gpu' extra)")
    rc = main(["--out", str(tmp_path)])
    assert rc == 0, (tmp_path / "gpu-results.json").read_text()


def test_dry_run_on_cpu(tmp_path: Path) -> None:
    """The device program itself, on the CPU (made-up UUID), before spending device time."""
    pytest.importorskip("torch", reason="PyTorch is not installed (not a gpuplan dependency)")
    rc = main(["--out", str(tmp_path), "--dry-run", "--steps", "12"])
    assert rc == 0, (tmp_path / "gpu-results.json").read_text()


if __name__ == "__main__":
    sys.exit(main())
