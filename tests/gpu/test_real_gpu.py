"""The real-GPU check of issue 26 item 4 (prepared here, run on a lent GPU machine).

Run as a program (``run_on_device.sh`` does, from outside the checkout so the installed gpuplan
wheel is imported, not the source tree)::

    python3 tests/gpu/test_real_gpu.py --out DIR [--dry-run]

Everything goes through the single-server executor (``gpuplan server`` / ``submit`` /
``cancel``, docs/single-server.md) with the real PyTorch job template
(``docs/examples/pytorch_train.py``); the program only submits, watches the job files and
reads NVML. It writes ``DIR/gpu-results.json`` with:

1. ``inventory``: gpuplan's NVML records (``executors/nvml``) beside ``nvidia-smi
   --query-gpu=uuid,name,memory.total``, and whether UUID, name and memory agree;
2. ``preemption`` (server policy ``srtf``): a long ResNet-18 job runs; a short one arrives, so
   SRTF's plan checkpoint-stops the long job, runs the short one on the GPU and resumes the
   long one. Recorded: the checkpoint (step, loss) and what the resumed run started from, the
   committed segments (they must tile the work), the seconds each step took, and what each
   training process saw (``CUDA_VISIBLE_DEVICES`` and torch's device UUIDs: exactly the
   planned GPU);
3. ``colocation`` (server policy ``fifo-ojpp``): two jobs submitted with an OJPP profile
   (``--memory``, ``--compute``) are packed onto the one GPU. Job A trains alone, B joins,
   both train, A is cancelled, B trains alone: each job's co-located rate against its solo
   rate is its measured slowdown, recorded beside the simulator's prediction (the measured
   H200 table's factor for the pair, where the pair is in it) and the OJPP policy's own
   prediction; NVML utilisation while each trained alone is recorded too. Two pairs: the
   template's default ResNet-18 (compute-bound, the H200 table's ``resnet18`` row) and a
   small, launch-bound configuration of it (batch 8, 64 px).

``--dry-run`` (CPU, no NVML, no PyTorch needed) runs the same sequence with the stand-in job
(``gpuplan.executors.standin``) on a 1-GPU server by index, to check the program itself before
spending device time. Under pytest the device check is marked ``gpu`` and skipped without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import io
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "docs" / "examples" / "pytorch_train.py"
POLL_BOUND_S = 150.0
SRTF = "srtf"
OJPP = "fifo-ojpp(theta_max=1.5,theta_balance=1.5)"
"""Thresholds above the default predictor's 0.2 same-type term, so two ResNet-18 copies may
share: what is measured is what sharing costs, which the default thresholds would forbid."""
TRAIN_LOGS: dict[str, dict[str, str]] = {}
"""Every server's stashed ``train.log`` texts (written to the output even after a failure)."""
OJPP_DEFAULT_SAME_TYPE = 0.2
"""The OJPP wrapper's conservative default slowdown term for two workers of one type."""


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


def wait(what: str, check: Callable[[], Any], tick: Callable[[], None] | None = None) -> Any:
    """Poll ``check`` until truthy (at most :data:`POLL_BOUND_S`); ``tick`` runs every poll."""
    deadline = time.monotonic() + POLL_BOUND_S
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"not reached within {POLL_BOUND_S:.0f} s: {what}")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Server:
    """One ``gpuplan server`` (the installed gpuplan) on a private state dir."""

    def __init__(self, base: Path, policy: str, dry: bool) -> None:
        self.base = base
        self.state = base / "state"
        self.dry = dry
        self.log_path = base / "server.log"
        self.train_logs = TRAIN_LOGS.setdefault(base.name, {})
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "gpuplan", "server", "--policy", policy]
        argv += ["--state-dir", str(self.state), "--poll", "0.3", "--lease", "0"]
        argv += ["--ckpt-grace", "120", "--no-restart-gate"]
        if dry:
            argv += ["--gpus", "1"]  # no NVML: one GPU by index
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "gpuplan server ready" not in line:
            raise RuntimeError(
                f"server did not start: {line!r} {self.log_path.read_text()[-2000:]}"
            )

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "gpuplan", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"gpuplan {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def submit(self, work: float, name: str, trainer: list[str], *extra: str) -> str:
        job = ["--gpus", "1", "--work", repr(float(work)), "--name", name, *extra]
        return self.cli("submit", "--server", str(self.state), *job, "--", *trainer).strip()

    def cancel(self, job: str) -> None:
        self.cli("cancel", job, "--server", str(self.state))

    def jobs(self) -> dict[str, dict[str, Any]]:
        data = json.loads(self.cli("status", "--server", str(self.state), "--json"))
        self.devices = data["server"]["devices"]
        return {j["id"]: j for j in data["jobs"]}

    def progress(self, job: str) -> dict[str, Any]:
        return read_json(self.state / "jobs" / f"{job}.progress") or {}

    def checkpoint(self, job: str) -> dict[str, Any] | None:
        return read_json(self.state / "jobs" / f"{job}.ckpt")

    def segments(self, job: str) -> list[dict[str, Any]]:
        path = self.state / "jobs" / f"{job}.log"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def stash_train_logs(self) -> None:
        """Keep each run's ``train.log`` (the sidecar's folder goes when the job ends)."""
        for path in (self.state / "runs").glob("*/train.log"):
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace")
                key = path.parent.name
                if len(text) >= len(self.train_logs.get(key, "")):
                    self.train_logs[key] = text

    def devices_seen(self) -> dict[str, list[dict[str, Any]]]:
        seen: dict[str, list[dict[str, Any]]] = {}
        for key, text in self.train_logs.items():
            for line in text.splitlines():
                if line.startswith('{"event": "devices"'):
                    seen.setdefault(key.split("@")[0], []).append(json.loads(line))
        return seen

    def stop(self) -> None:
        """End the daemon, then any job process it left (the run is over)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        marker = str(self.state).encode()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                with contextlib.suppress(OSError):
                    if marker in (entry / "environ").read_bytes():
                        os.kill(int(entry.name), signal.SIGKILL)


def trainer(dry: bool, small: bool = False) -> list[str]:
    """The job's command: the PyTorch template (or, dry, the stand-in) wired to the server's
    job-protocol environment through ``sh -c`` (argv is never run through a shell)."""
    if dry:
        body = (
            'exec "$0" -m gpuplan.executors.standin --job-id="$GPUPLAN_JOB_ID" '
            '--work "$GPUPLAN_WORK" --state-dir "$GPUPLAN_STATE_DIR" '
            "--rate-per-gpu 8 --progress-interval 0.2"
        )
    else:
        size = " --batch-size 8 --image-size 64" if small else ""
        body = (
            f'exec "$0" {TRAIN} --job-id="$GPUPLAN_JOB_ID" --state-dir "$GPUPLAN_STATE_DIR" '
            f'--steps "$GPUPLAN_WORK" --progress-interval 0.2 --seed 1{size}'
        )
    return ["sh", "-c", body, sys.executable]


def preemption_check(root: Path, dry: bool, planned_uuid: str | None) -> dict[str, Any]:
    srv = Server(root / "srtf", SRTF, dry)
    try:
        long_work, short_work = (240.0, 24.0) if dry else (2000.0, 200.0)
        t0 = time.time()
        low = srv.submit(long_work, "long", trainer(dry))
        wait(
            "the long job trains",
            lambda: srv.progress(low).get("done", 0) >= (16 if dry else 60),
            srv.stash_train_logs,
        )
        t_arrive = time.time()
        high = srv.submit(short_work, "short", trainer(dry))
        wait("SRTF preempts the long job", lambda: srv.jobs()[low]["state"] == "pending")
        ckpt = srv.checkpoint(low)
        t_stopped = time.time()
        wait(
            "the short job completes",
            lambda: srv.jobs()[high]["state"] == "completed",
            srv.stash_train_logs,
        )
        t_high_done = time.time()
        resumed = wait(
            "the long job resumes",
            lambda: (lambda p: p if p.get("time", 0) > t_high_done and p.get("pid") else None)(
                srv.progress(low)
            ),
            srv.stash_train_logs,
        )
        wait(
            "the long job completes",
            lambda: srv.jobs()[low]["state"] == "completed",
            srv.stash_train_logs,
        )
        srv.stash_train_logs()
        segments = srv.segments(low)
        short_end = max((s["t_end"] for s in srv.segments(high)), default=t_high_done)
        tiles = (
            bool(segments)
            and segments[0]["start"] == 0.0
            and all(b["start"] == a["end"] for a, b in itertools.pairwise(segments))
            and segments[-1]["end"] == long_work
        )
        seen = srv.devices_seen()
        want = (planned_uuid or "").lower().removeprefix("gpu-")
        exact = None
        if not dry:
            exact = bool(seen) and all(
                s["visible"] == planned_uuid
                and [u.lower().removeprefix("gpu-") for u in s["cuda_uuids"]] == [want]
                for runs in seen.values()
                for s in runs
            )
        resumed_from = resumed.get("resumed_from", segments[1]["start"] if segments[1:] else None)
        return {
            "policy": SRTF,
            "server_devices": srv.devices,
            "work": {"long": long_work, "short": short_work},
            "checkpoint": ckpt,
            "resumed_from": resumed_from,
            "resumed_loss": resumed.get("resumed_loss"),
            "same_step_and_loss": bool(ckpt)
            and resumed_from == ckpt["done"]
            and (dry or resumed.get("resumed_loss") == ckpt.get("loss")),
            "segments": segments,
            "preempted_and_resumed": len(segments) >= 2 and len({s["pid"] for s in segments}) >= 2,
            "segments_tile_work": tiles,
            "devices": seen,
            "each_job_sees_exactly_its_gpu": exact,
            "seconds": {
                "first_start_to_arrival": t_arrive - t0,
                "arrival_to_checkpointed": t_stopped - t_arrive,
                "short_job": t_high_done - t_stopped,
                "short_end_to_resumed_first_step": (resumed.get("started") or 0) - short_end,
                "total": time.time() - t0,
            },
        }
    finally:
        srv.stop()


class Sampler:
    """Samples each job's progress (and NVML utilisation) every 0.2 s in a thread."""

    def __init__(self, srv: Server, jobs: list[str], dry: bool) -> None:
        self.srv = srv
        self.jobs = jobs
        self.rows: list[tuple[float, str, float, float]] = []
        self.util: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._nvml = None
        if not dry:
            with contextlib.suppress(Exception):
                import pynvml

                pynvml.nvmlInit()
                self._nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(0))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for job in self.jobs:
                p = self.srv.progress(job)
                if p.get("pid") and "done" in p:
                    self.rows.append((time.time(), job, float(p["done"]), float(p["time"])))
            if self._nvml is not None:
                with contextlib.suppress(Exception):
                    nv, handle = self._nvml
                    self.util.append((time.time(), nv.nvmlDeviceGetUtilizationRates(handle).gpu))
            self.srv.stash_train_logs()
            self._stop.wait(0.2)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)

    def rate(self, job: str, t0: float, t1: float) -> float | None:
        """Steps per second from the job's own progress reports timed within ``[t0, t1]``."""
        pts = sorted({(t, d) for _, j, d, t in self.rows if j == job and t0 <= t <= t1})
        if len(pts) < 3 or pts[-1][0] - pts[0][0] <= 0:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def utilisation(self, t0: float, t1: float) -> float | None:
        vals = [u for t, u in self.util if t0 <= t <= t1]
        return sum(vals) / len(vals) / 100.0 if vals else None


def predictions(model: str) -> dict[str, Any]:
    """The simulator's prediction for two copies of ``model`` (the measured H200 table's
    factor, when the table has the model) and the OJPP policy's own (1 + same-type term)."""
    out: dict[str, Any] = {"ojpp_policy": 1.0 + OJPP_DEFAULT_SAME_TYPE, "simulator_h200": None}
    try:
        from gpuplan.models import JobSpec
        from gpuplan.models.measured_interference import MeasuredInterference
        from gpuplan.scenarios.measured_tables import measured_table

        table = measured_table("h200")
        if model in table.jobs:
            sim = MeasuredInterference(table)
            a = JobSpec(id="a", submit_time=0.0, requested_gpus=1, duration=1.0, model=model)
            b = JobSpec(id="b", submit_time=0.0, requested_gpus=1, duration=1.0, model=model)
            out["simulator_h200"] = sim.slowdown(a, [b])
    except Exception as exc:  # the measurement still comes back
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def colocation_pair(root: Path, dry: bool, label: str, small: bool, window: float) -> dict:
    srv = Server(root / f"ojpp-{label}", OJPP, dry)
    sampler: Sampler | None = None
    try:
        profile = ["--memory", "0.05", "--compute", "0.5"]
        big = 1e7
        a = srv.submit(big, label, trainer(dry, small), *profile)
        sampler = Sampler(srv, [a], dry)
        wait("A trains", lambda: srv.progress(a).get("done", 0) > 0)
        time.sleep(0 if dry else 3.0)  # past the first steps' warm-up (cuDNN autotuning)
        ta0 = time.time()
        time.sleep(window)  # a measuring window, not a wait for a state
        ta1 = time.time()
        b = srv.submit(big, label, trainer(dry, small), *profile)
        sampler.jobs = [a, b]
        both = wait(
            "B runs beside A",
            lambda: (lambda j: j if j[a]["state"] == j[b]["state"] == "running" else None)(
                srv.jobs()
            ),
        )
        wait("B trains", lambda: srv.progress(b).get("done", 0) > 0)
        time.sleep(0 if dry else 3.0)
        tc0 = time.time()
        time.sleep(window)
        tc1 = time.time()
        srv.cancel(a)
        wait("A is cancelled", lambda: srv.jobs()[a]["state"] == "cancelled")
        time.sleep(1.0)
        tb0 = time.time()
        time.sleep(window)
        tb1 = time.time()
        srv.cancel(b)
        wait("B is cancelled", lambda: srv.jobs()[b]["state"] == "cancelled")
        sampler.close()
        solo = {a: sampler.rate(a, ta0, ta1), b: sampler.rate(b, tb0, tb1)}
        shared = {a: sampler.rate(a, tc0, tc1), b: sampler.rate(b, tc0, tc1)}
        slowdown = {j: (solo[j] / shared[j]) if solo[j] and shared[j] else None for j in (a, b)}
        return {
            "config": "batch 8, 64 px" if small else "batch 64, 224 px",
            "policy": OJPP,
            "placements": {j: both[j]["placement"] for j in (a, b)},
            "same_gpu": both[a]["placement"] == both[b]["placement"] != "",
            "window_s": window,
            "solo_steps_per_s": solo,
            "colocated_steps_per_s": shared,
            "measured_slowdown": slowdown,
            "combined_throughput_gain": (
                (shared[a] + shared[b]) / ((solo[a] + solo[b]) / 2)
                if all(solo.values()) and all(shared.values())
                else None
            ),
            "gpu_utilisation_alone": {
                a: sampler.utilisation(ta0, ta1),
                b: sampler.utilisation(tb0, tb1),
            },
            "gpu_utilisation_shared": sampler.utilisation(tc0, tc1),
            "predicted": predictions("resnet18" if not small else "resnet18-small"),
            "devices": srv.devices_seen(),
        }
    finally:
        if sampler is not None:
            sampler.close()
        srv.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true", help="CPU, stand-in jobs (no GPU needed)")
    p.add_argument("--window", type=float, default=None, help="seconds per measuring window")
    args = p.parse_args(argv)
    dry = args.dry_run
    window = args.window or (2.0 if dry else 10.0)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"dry_run": dry, "time": time.time()}
    root = Path(tempfile.mkdtemp(prefix="gpuplan-gpu-"))
    checks: list[bool] = []
    try:
        results["inventory"] = inventory_check(dry)
        usable = [r for r in results["inventory"]["records"] if r["verdict"] != "unhealthy"]
        if not dry and not usable:
            raise SystemExit("no usable GPU in the NVML inventory")
        uuid = usable[0]["uuid"] if usable else None
        checks.append(dry or results["inventory"]["match"])
        try:
            pre = results["preemption"] = preemption_check(root, dry, uuid)
            checks += [
                pre["same_step_and_loss"],
                pre["preempted_and_resumed"],
                pre["segments_tile_work"],
                dry or pre["each_job_sees_exactly_its_gpu"],
            ]
        except Exception as exc:
            results["preemption"] = {"error": f"{type(exc).__name__}: {exc}"}
            checks.append(False)
        results["colocation"] = {}
        for label, small in (("resnet18", False), ("resnet18-small", True)):
            try:
                pair = colocation_pair(root, dry, label, small, window)
                results["colocation"][label] = pair
                checks.append(pair["same_gpu"] and all(pair["measured_slowdown"].values()))
            except Exception as exc:
                results["colocation"][label] = {"error": f"{type(exc).__name__}: {exc}"}
                checks.append(False)
        results["ok"] = all(checks)
    except BaseException as exc:  # the JSON still comes back, with what failed
        results["error"] = f"{type(exc).__name__}: {exc}"
        results["ok"] = False
    finally:
        results["checks"] = checks
        (args.out / "gpu-results.json").write_text(json.dumps(results, indent=1, default=str))
        logs = sorted(root.glob("*/server.log"))
        (args.out / "servers.log").write_text(
            "".join(f"== {p}\n{p.read_text(errors='replace')[-20000:]}\n" for p in logs)
        )
        (args.out / "train.logs").write_text(
            "".join(
                f"== {server} {run}\n{text[-6000:]}\n"
                for server, runs in TRAIN_LOGS.items()
                for run, text in runs.items()
            )
        )
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"ok": results["ok"], "checks": checks, "error": results.get("error")}))
    return 0 if results["ok"] else 1


@pytest.mark.gpu
def test_real_gpu_inventory_preemption_colocation(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("needs an NVIDIA GPU (nvidia-smi), NVML and PyTorch")
    pytest.importorskip("pynvml", reason="needs nvidia-ml-py (the 'gpu' extra)")
    rc = main(["--out", str(tmp_path)])
    assert rc == 0, (tmp_path / "gpu-results.json").read_text()


def test_dry_run_of_the_device_program(tmp_path: Path) -> None:
    """The device program itself, on the CPU with stand-in jobs, before spending device time:
    SRTF preempts and resumes the long job through the single server, and fifo-ojpp packs
    both profiled jobs onto the one GPU."""
    rc = main(["--out", str(tmp_path), "--dry-run"])
    results = json.loads((tmp_path / "gpu-results.json").read_text())
    assert rc == 0, json.dumps(results, indent=1)[-6000:]
    pre = results["preemption"]
    assert pre["checkpoint"]["done"] == pre["resumed_from"] > 0
    for pair in results["colocation"].values():
        assert pair["same_gpu"] and pair["placements"]
        # the stand-in does not slow down when sharing: its slowdown is ~1
        assert all(0.5 < s < 2.0 for s in pair["measured_slowdown"].values()), pair


if __name__ == "__main__":
    sys.exit(main())
