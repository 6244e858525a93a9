"""docs/examples/pytorch_train.py: the real PyTorch job template (issue 26 item 3).

Always: the script parses and speaks only the job protocol's names (the stand-in's signals,
files, progress fields and environment variables; the stop handler installed before ``import
torch``). With PyTorch importable (it is not a gpuplan dependency): a CPU run that is stopped by
the checkpoint signal and resumed ends with exactly the step counter, losses and segment log of
an uninterrupted run.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuplan.executors import standin

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "examples" / "pytorch_train.py"
PROTOCOL_ENV = {"CUDA_VISIBLE_DEVICES", standin.RESIZE_FILE_ENV}
STANDIN_PROGRESS = {"done", "gpus", "time", "pid", "started", "work", "requests"}
POLL_BOUND_S = 300.0


def tree() -> ast.Module:
    return ast.parse(SCRIPT.read_text(encoding="utf-8"), filename=str(SCRIPT))


def test_the_template_parses_and_uses_only_protocol_names() -> None:
    module = tree()
    strings = {
        n.value
        for n in ast.walk(module)
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    env_like = {
        s
        for s in strings
        if s.isidentifier() and s.isupper() and ("CUDA" in s or s.startswith("GPUPLAN"))
    }
    assert env_like == PROTOCOL_ENV, env_like
    # The stand-in's files, by suffix.
    for suffix in (".ckpt", ".progress", ".log", ".done"):
        assert any(s.endswith(suffix) for s in strings), suffix
    # Same signals as the stand-in: stop set and resize signal.
    assigns = {
        t.id: n.value
        for n in module.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    stop = [f"{a.value.id}.{a.attr}" for a in assigns["STOP_SIGNALS"].elts]  # type: ignore[attr-defined]
    assert stop == [f"signal.{s.name}" for s in standin.STOP_SIGNALS]
    resize = assigns["RESIZE_SIGNAL"]
    assert isinstance(resize, ast.Attribute) and resize.attr == standin.RESIZE_SIGNAL.name
    # The progress report carries every field the stand-in's does.
    progress = next(
        n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == "progress"
    )
    keys = {
        k.value
        for d in ast.walk(progress)
        if isinstance(d, ast.Dict)
        for k in d.keys
        if isinstance(k, ast.Constant)
    }
    assert keys >= STANDIN_PROGRESS, STANDIN_PROGRESS - keys
    # The stop handler exists before torch is imported (a signal during import is not lost).
    handler = next(
        n.lineno
        for n in module.body
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "SIGNALS" for t in n.targets)
    )
    torch_import = next(
        n.lineno
        for n in module.body
        if isinstance(n, ast.Import) and any(a.name == "torch" for a in n.names)
    )
    assert handler < torch_import


def test_template_refuses_bad_usage_in_one_line(tmp_path: Path) -> None:
    """Usage errors exit 2 with one line, before any training (needs torch to import)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed (not a gpuplan dependency)")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--job-id",
            "j",
            "--state-dir",
            str(tmp_path),
            "--steps",
            "3",
            "--device",
            "cpu",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=POLL_BOUND_S,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == "pytorch_train: error: CUDA_VISIBLE_DEVICES is not set"


def _start(state: Path, job: str, steps: int, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"}
    return subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--job-id",
            job,
            "--state-dir",
            str(state),
            "--steps",
            str(steps),
            "--device",
            "cpu",
            "--batch-size",
            "4",
            "--image-size",
            "32",
            "--progress-interval",
            "0.05",
            "--seed",
            "7",
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _wait(what: str, check: Any) -> Any:
    deadline = time.monotonic() + POLL_BOUND_S
    while time.monotonic() < deadline:
        try:
            value = check()
        except (OSError, ValueError):
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not reached within {POLL_BOUND_S} s: {what}")


def test_template_stops_checkpoints_and_resumes_exactly_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="PyTorch is not installed (not a gpuplan dependency)")
    steps = 8
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    straight.mkdir()
    stopped.mkdir()
    ref = _start(straight, "job", steps)
    assert ref.wait(timeout=POLL_BOUND_S) == 0, ref.stdout.read() if ref.stdout else ""
    ref_log = [json.loads(line) for line in (straight / "job.log").read_text().splitlines()]
    assert (straight / "job.done").exists() and _json(straight / "job.ckpt")["done"] == steps

    proc = _start(stopped, "job", steps)
    _wait("two steps done", lambda: _json(stopped / "job.progress")["done"] >= 2)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=POLL_BOUND_S) == 0
    ckpt = _json(stopped / "job.ckpt")
    assert 2 <= ckpt["done"] < steps and not (stopped / "job.done").exists()
    first = [json.loads(line) for line in (stopped / "job.log").read_text().splitlines()]
    assert [s["reason"] for s in first] == ["signal:SIGUSR1"]
    assert first[0]["end"] == ckpt["done"] and first[0]["gpus"] == 2

    again = _start(stopped, "job", steps)
    report = _wait(
        "resumed",
        lambda: (lambda p: p if p["pid"] == again.pid else None)(_json(stopped / "job.progress")),
    )
    assert report["resumed_from"] == ckpt["done"] and report["resumed_loss"] == ckpt["loss"]
    assert again.wait(timeout=POLL_BOUND_S) == 0
    log = [json.loads(line) for line in (stopped / "job.log").read_text().splitlines()]
    assert [(s["start"], s["end"]) for s in log] == [
        (0.0, ckpt["done"]),
        (ckpt["done"], float(steps)),
    ]
    # The same computation as the uninterrupted run: same final loss, bit for bit on the CPU.
    assert log[-1]["loss"] == ref_log[-1]["loss"]
    assert _json(stopped / "job.ckpt") == _json(straight / "job.ckpt")
