"""A real PyTorch training job that follows gpuplan's job protocol, like the stand-in does.

gpuplan's executors run any command that behaves like ``gpuplan.executors.standin`` (read its
module docstring and docs/ssh.md §6 "Training-job contract"). This script is that contract
around a real model: ResNet-18 (defined here, no torchvision needed) trained with SGD on
synthetic ImageNet-shaped data (no download; batch ``s`` is drawn from a generator seeded with
``--seed`` and ``s``, so the data position is the step counter). Command line::

    python pytorch_train.py --job-id ID --state-dir DIR --steps N
        [--checkpoint-dir DIR2] [--checkpoint-interval S] [--progress-interval S]
        [--batch-size B] [--image-size P] [--lr LR] [--seed K] [--device auto|cpu|cuda]

``--work`` is accepted as a synonym of ``--steps`` and ``--rate-per-gpu`` is accepted and
ignored, so an executor's stand-in launcher can start this script with the stand-in's
arguments (see docs/examples/README.md). One unit of gpuplan "work" is one training step.

Protocol, as the stand-in:

* GPUs: the entries of ``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-<uuid>``); unset or empty is a
  usage error (exit 2). On CUDA the model runs on every visible GPU (``DataParallel`` when more
  than one); ``--device cpu`` trains on the CPU (tests) but still reports that many GPUs.
* Stop: SIGUSR1, SIGTERM or SIGINT make the loop finish its current step, checkpoint and exit 0.
  The handler is installed before ``import torch`` (importing takes seconds: 9 s on the
  measured H200 machine, shared/measurements/h200-restart).
* Checkpoint, at a stop, every ``--checkpoint-interval`` seconds and at completion: first
  ``CKPT/ID.pt`` (model, optimizer, step = data position, the last loss, every RNG state), then
  ``DIR/ID.ckpt`` ``{"done": step, "loss"}``, each written to a temporary file and renamed. The
  ``.ckpt`` file is the commit point the executor reads.
* Resume: a start with ``CKPT/ID.pt`` present loads it and continues at its step with its RNG
  states, so a stopped and resumed run computes exactly the losses of an uninterrupted one
  (bit for bit on the CPU; on CUDA up to cuDNN's nondeterminism).
* Progress: ``DIR/ID.progress`` ``{"done", "gpus", "time", "pid", "started", "work",
  "requests", "loss", "steps_per_s", "resumed_from", "resumed_loss"}`` written when the first
  step can run (``started``: the end of this run's start-up, what executors measure restart
  latency to) and every ``--progress-interval`` seconds: the engine's throughput learning reads
  the rate of ``done``.
* Segments: ``DIR/ID.log`` one JSON line per committed segment ``{"start", "end", "gpus",
  "pid", "reason", "t_start", "t_end", "loss"}``; ``DIR/ID.done`` at completion.
* In-place resize (SIGUSR2 + ``$GPUPLAN_RESIZE_FILE`` ``{"gpus": [...]}``): a CUDA process
  cannot change its visible devices, so the script checkpoints (reason ``resize``) and
  re-executes itself with the new ``CUDA_VISIBLE_DEVICES`` (``os.execve``: the same PID, so the
  sidecar's acknowledgement, a progress report with the new count from this PID, holds). It
  costs a process start-up, not a scheduler round trip. A request naming the current GPUs is
  no change, but still counted in ``requests``.

Exit codes: 0 after completion or a stop, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
RESIZE_SIGNAL = signal.SIGUSR2
RESIZE_FILE_ENV = "GPUPLAN_RESIZE_FILE"


class Signals:
    """The first stop signal and whether a resize was requested; acted on between steps."""

    def __init__(self) -> None:
        self.stop: int | None = None
        self.resize = False
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._record)
        signal.signal(RESIZE_SIGNAL, self._record)

    def _record(self, signum: int, _frame: object) -> None:
        if signum == RESIZE_SIGNAL:
            self.resize = True
        elif self.stop is None:
            self.stop = signum


SIGNALS = Signals()  # before the slow imports below: a stop during them is never lost

import torch  # noqa: E402
from torch import nn  # noqa: E402


class UsageError(Exception):
    """Bad arguments or environment: exit 2."""


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def visible_gpus() -> list[str]:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        raise UsageError("CUDA_VISIBLE_DEVICES is not set")
    entries = [e.strip() for e in value.split(",")]
    if not value.strip() or any(not e for e in entries):
        raise UsageError(f"CUDA_VISIBLE_DEVICES={value!r} names no GPUs")
    return entries


def resize_request() -> list[str] | None:
    path = os.environ.get(RESIZE_FILE_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            gpus = json.load(fh)["gpus"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [str(g) for g in gpus] if isinstance(gpus, list) and gpus else None


# --------------------------------------------------------------------------- ResNet-18
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


def resnet18(classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def batch(
    seed: int, step: int, size: int, pixels: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic batch ``step``: the same for the same (seed, step) in every run. Drawn on the
    training device: drawn on the CPU and copied, a 224-px batch of 64 capped ResNet-18 at
    12 steps/s with the GPU 17 % busy on an H200 (docs/results/gpu.md), a data-bound job
    unlike the compute-bound ones the engine and the measured tables describe."""
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + step)
    images = torch.randn(size, 3, pixels, pixels, generator=gen, device=device)
    labels = torch.randint(0, 1000, (size,), generator=gen, device=device)
    return images, labels


# --------------------------------------------------------------------------- the job
class Job:
    def __init__(self, args: argparse.Namespace, gpus: list[str]) -> None:
        self.args = args
        self.gpus = gpus
        self.id = args.job_id
        state, ckpt = args.state_dir, args.checkpoint_dir or args.state_dir
        self.ckpt_json = state / f"{self.id}.ckpt"
        self.progress_path = state / f"{self.id}.progress"
        self.log_path = state / f"{self.id}.log"
        self.done_path = state / f"{self.id}.done"
        self.model_path = ckpt / f"{self.id}.pt"
        self.device = self._device(args.device)
        torch.manual_seed(args.seed)
        model = resnet18().to(self.device)
        self.net: nn.Module = model
        if self.device.type == "cuda" and torch.cuda.device_count() > 1:
            self.net = nn.DataParallel(model)
        self.model = model
        self.report_devices()
        self.opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        self.step = 0
        self.loss: float | None = None
        self.resumed_from: int | None = None
        self.resumed_loss: float | None = None
        self.requests = 0
        if self.model_path.exists():
            self._load()
        self.committed = self.step
        self.pid = os.getpid()
        self.started = time.time()
        self.t_commit = self.started

    def report_devices(self) -> None:
        """One stdout line naming the GPUs this process can see (``train.log`` under a
        sidecar): what a check that every job sees exactly its planned GPUs reads."""
        seen: list[str] = []
        if self.device.type == "cuda":
            for i in range(torch.cuda.device_count()):
                uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
                seen.append(str(uuid) if uuid is not None else "?")
        print(
            json.dumps(
                {
                    "event": "devices",
                    "job": self.id,
                    "pid": os.getpid(),
                    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "device": str(self.device),
                    "cuda_uuids": seen,
                }
            ),
            flush=True,
        )

    @staticmethod
    def _device(choice: str) -> torch.device:
        if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
            return torch.device("cpu")
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device visible")
        return torch.device("cuda", 0)

    def _load(self) -> None:
        # Onto the CPU: the RNG states must stay CPU byte tensors (loaded onto a GPU,
        # set_rng_state refuses them and every resume on CUDA failed); load_state_dict copies
        # the weights and the optimizer's buffers onto the model's device itself.
        saved = torch.load(self.model_path, map_location="cpu", weights_only=False)
        self.model.load_state_dict(saved["model"])
        self.opt.load_state_dict(saved["optimizer"])
        self.step = int(saved["step"])
        self.loss = saved["loss"]
        torch.set_rng_state(saved["rng"]["torch"])
        if self.device.type == "cuda" and saved["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state_all(saved["rng"]["cuda"])
        self.resumed_from, self.resumed_loss = self.step, self.loss

    def checkpoint(self, reason: str) -> None:
        """Model state first, then the JSON commit point, then the segment line."""
        rng = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None,
        }
        tmp = self.model_path.with_name(f".{self.model_path.name}.{self.pid}.tmp")
        torch.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.opt.state_dict(),
                "step": self.step,
                "loss": self.loss,
                "rng": rng,
            },
            tmp,
        )
        os.replace(tmp, self.model_path)
        write_json_atomic(self.ckpt_json, {"done": self.done(), "loss": self.loss})
        now = time.time()
        if self.step > self.committed or reason == "complete":
            line = {
                "start": min(float(self.committed), self.args.steps),
                "end": self.done(),
                "gpus": len(self.gpus),
                "pid": self.pid,
                "reason": reason,
                "t_start": self.t_commit,
                "t_end": now,
                "loss": self.loss,
            }
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
        self.committed, self.t_commit = self.step, now

    def progress(self, rate: float | None) -> None:
        write_json_atomic(
            self.progress_path,
            {
                "done": self.done(),
                "gpus": len(self.gpus),
                "time": time.time(),
                "pid": self.pid,
                "started": self.started,
                "work": self.args.steps,
                "requests": self.requests,
                "loss": self.loss,
                "steps_per_s": rate,
                "resumed_from": self.resumed_from,
                "resumed_loss": self.resumed_loss,
            },
        )

    def done(self) -> float:
        """Progress in the protocol's units: steps, capped at the target (an executor may
        give a fractional ``--work``; the last step then completes it)."""
        return min(float(self.step), self.args.steps)

    def train_step(self) -> None:
        images, labels = batch(
            self.args.seed, self.step, self.args.batch_size, self.args.image_size, self.device
        )
        self.opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.net(images), labels)
        loss.backward()
        self.opt.step()
        self.loss = float(loss.detach())  # syncs: progress is what the GPU really did
        self.step += 1

    def resize(self) -> None:
        """SIGUSR2: checkpoint, then re-execute on the requested GPUs (same PID)."""
        SIGNALS.resize = False
        self.requests += 1
        new = resize_request()
        if new is None or new == self.gpus:
            self.progress(None)  # looked at, no change: the requester can tell
            return
        self.checkpoint("resize")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(new)}
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.argv], env)

    def run(self) -> int:
        args = self.args
        if self.step >= args.steps:
            return self.complete()
        self.done_path.unlink(missing_ok=True)
        self.progress(None)
        t_rate, s_rate = time.monotonic(), self.step
        next_progress = t_rate + args.progress_interval
        ckpt_every = args.checkpoint_interval
        next_ckpt = t_rate + ckpt_every if ckpt_every else float("inf")
        while self.step < args.steps:
            if SIGNALS.stop is not None:
                self.checkpoint(f"signal:{signal.Signals(SIGNALS.stop).name}")
                self.progress(None)
                return 0
            if SIGNALS.resize:
                self.resize()
            self.train_step()
            now = time.monotonic()
            if now >= next_ckpt:
                self.checkpoint("checkpoint")
                next_ckpt = now + ckpt_every
            if now >= next_progress:
                self.progress((self.step - s_rate) / max(now - t_rate, 1e-9))
                t_rate, s_rate, next_progress = now, self.step, now + args.progress_interval
        return self.complete()

    def complete(self) -> int:
        self.checkpoint("complete")
        self.progress(None)
        self.done_path.write_text(
            json.dumps({"done": self.done(), "time": time.time(), "loss": self.loss})
        )
        return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="pytorch_train.py", description="ResNet-18 on synthetic data, gpuplan job protocol"
    )
    p.add_argument("--job-id", required=True)
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument(
        "--steps",
        "--work",
        dest="steps",
        required=True,
        type=float,
        help="training steps to reach (the job's work)",
    )
    p.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="where the model checkpoint goes (default: --state-dir)",
    )
    p.add_argument("--checkpoint-interval", type=float, default=None, metavar="S")
    p.add_argument("--progress-interval", type=float, default=1.0, metavar="S")
    p.add_argument("--rate-per-gpu", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        job_id = args.job_id
        if not job_id or job_id in (".", "..") or "/" in job_id or "\0" in job_id:
            raise UsageError(f"--job-id {job_id!r} is not usable as a file name")
        if not 0 < args.steps < 1e12:
            raise UsageError("--steps must be > 0")
        for name in ("checkpoint_interval", "progress_interval"):
            value = getattr(args, name)
            if value is not None and not value > 0:
                raise UsageError(f"--{name.replace('_', '-')} must be > 0")
        if args.batch_size < 1 or args.image_size < 32:
            raise UsageError("--batch-size must be >= 1 and --image-size >= 32")
        for path in (args.state_dir, args.checkpoint_dir):
            if path is not None and not path.is_dir():
                raise UsageError(f"{str(path)!r} is not a directory")
        job = Job(args, visible_gpus())
    except UsageError as exc:
        print(f"pytorch_train: error: {exc}", file=sys.stderr)
        return 2
    return job.run()


if __name__ == "__main__":
    sys.exit(main())
