"""The stand-in's data mode: EDL's data pipeline inside the real process.

The main test runs the real module (as the SSH and Slurm executors launch it), resizes it in
place (SIGUSR2), stops it (SIGUSR1), restarts it on another GPU and lets it finish, then reads
``ID.samples`` and asserts that every complete epoch covered every sample exactly once and the
partial last epoch none twice. The in-process tests pin the arithmetic and the crash rules.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuplan.executors.standin import DataFeed, UsageError


def poll(what: str, check: Callable[[], bool], timeout_s: float = 120.0) -> None:
    """Wait until ``check()`` holds (a busy machine is slow: the bound means "never")."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError, KeyError):
            pass  # a file not written yet
        time.sleep(0.02)
    raise AssertionError(f"never reached: {what}")


def sample_lines(state: Path, job: str) -> list[dict]:
    path = state / f"{job}.samples"
    return [json.loads(line) for line in path.read_text().splitlines()]


def per_epoch(lines: list[dict]) -> dict[int, Counter[int]]:
    """epoch -> how often each sample id was committed in it."""
    seen: dict[int, Counter[int]] = defaultdict(Counter)
    for line in lines:
        seen[line["epoch"]].update(range(line["first"], line["last"] + 1))
    return seen


def assert_exactly_once(lines: list[dict], dataset: int, total: int) -> None:
    """``total`` samples over epochs 0, 1, ...: every full epoch has each sample once, the
    last (partial) epoch has ``total mod dataset`` distinct samples, none twice."""
    seen = per_epoch(lines)
    full, rest = divmod(total, dataset)
    assert sorted(seen) == list(range(full + (1 if rest else 0)))
    for epoch in range(full):
        assert seen[epoch] == Counter(range(dataset)), f"epoch {epoch}"
    if rest:
        last = seen[full]
        assert max(last.values()) == 1 and len(last) == rest
        assert set(last) <= set(range(dataset))


def _start(state: Path, gpus: str, resize_file: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus, "GPUPLAN_RESIZE_FILE": str(resize_file)}
    argv = [
        sys.executable,
        "-m",
        "gpuplan.executors.standin",
        "--job-id",
        "j",
        "--work",
        "60",
        "--rate-per-gpu",
        "8",
        "--state-dir",
        str(state),
        "--progress-interval",
        "0.05",
        "--dataset-size",
        "120",
        "--samples-per-iteration",
        "5",
        "--data-seed",
        "7",
        *extra,
    ]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _progress(state: Path) -> dict:
    return json.loads((state / "j.progress").read_text())


def test_exactly_once_across_in_place_resize_stop_and_restart(tmp_path: Path) -> None:
    resize = tmp_path / "resize.json"
    proc = _start(tmp_path, "0,1", resize)
    try:
        poll(
            "running on 2 GPUs",
            lambda: _progress(tmp_path)["pid"] == proc.pid and _progress(tmp_path)["done"] > 5,
        )
        resize.write_text(json.dumps({"gpus": [1, 2, 3]}))
        proc.send_signal(signal.SIGUSR2)
        poll(
            "3 GPUs reported",
            lambda: _progress(tmp_path)["gpus"] == 3 and _progress(tmp_path)["done"] > 15,
        )
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    first_pid = proc.pid
    stopped = json.loads((tmp_path / "j.ckpt").read_text())["done"]
    assert 15 < stopped < 60
    saved = json.loads((tmp_path / "j.data.json").read_text())
    assert saved["consumed"] == int(stopped * 5 + 1e-9) and saved["done"] == stopped
    assert sorted(w for w, _lease in saved["leader"]["leases"]) == ["1", "2", "3"]

    proc = _start(tmp_path, "5", resize)
    try:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "j.done").exists()
    lines = sample_lines(tmp_path, "j")
    assert_exactly_once(lines, dataset=120, total=300)  # 60 iterations x 5 = 2.5 epochs
    # Who consumed: GPUs 0,1 until the resize, then 1,2,3, then 5 after the restart.
    segs = [json.loads(x) for x in (tmp_path / "j.log").read_text().splitlines()]
    assert [s["reason"] for s in segs] == ["resize", "signal:SIGUSR1", "complete"]
    assert [s["pid"] for s in segs[:2]] == [first_pid, first_pid]
    at_resize = int(segs[0]["end"] * 5 + 1e-9)
    consumed = 0
    before_resize: Counter[str] = Counter()
    for line in lines:
        count = line["last"] - line["first"] + 1
        if consumed < at_resize:
            assert line["worker"] in {"0", "1"}, (consumed, line)
            before_resize[line["worker"]] += count
        elif consumed < saved["consumed"]:
            assert line["worker"] in {"1", "2", "3"}, (consumed, line)
        else:
            assert line["worker"] == "5", (consumed, line)
        consumed += count
    assert consumed == 300
    # The two first workers took equal shares (one commit: the remainder goes to the first).
    assert before_resize["0"] - before_resize["1"] in (0, 1)


def test_without_dataset_size_no_data_files(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    argv = [
        sys.executable,
        "-m",
        "gpuplan.executors.standin",
        "--job-id",
        "j",
        "--work",
        "2",
        "--rate-per-gpu",
        "50",
        "--state-dir",
        str(tmp_path),
    ]
    assert subprocess.run(argv, env=env, timeout=120).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.ckpt", "j.done", "j.log", "j.progress"]


def test_state_for_another_dataset_is_a_usage_error(tmp_path: Path) -> None:
    feed = DataFeed(tmp_path, "j", 50, 1.0, 3, ["0"])
    feed.consume_to(7)
    feed.save(7)
    with pytest.raises(UsageError, match="50 samples with seed 3"):
        DataFeed(tmp_path, "j", 60, 1.0, 3, ["0"])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan.executors.standin",
            "--job-id",
            "j",
            "--work",
            "9",
            "--rate-per-gpu",
            "50",
            "--state-dir",
            str(tmp_path),
            "--dataset-size",
            "50",
            "--data-seed",
            "4",
        ],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "seed 3" in proc.stderr


def test_feed_shares_samples_evenly_and_rolls_epochs(tmp_path: Path) -> None:
    feed = DataFeed(tmp_path, "j", 10, 4.0, 1, ["a", "b", "c"])
    feed.consume_to(1.0)  # 4 samples: 2 + 1 + 1
    assert Counter(
        str(x["worker"]) for x in feed.pending for _ in range(int(x["last"]) - int(x["first"]) + 1)
    ) == {"a": 2, "b": 1, "c": 1}
    feed.consume_to(0.5)  # never backwards
    assert feed.consumed == 4
    feed.consume_to(6.25)  # 25 samples: epochs 0 and 1 complete, 5 of epoch 2
    assert feed.consumed == 25 and feed.leader.epoch == 2 and feed.leader.committed == 5
    feed.save(6.25)
    assert_exactly_once(sample_lines(tmp_path, "j"), dataset=10, total=25)


def test_restart_forgets_unsaved_log_lines_and_never_repeats(tmp_path: Path) -> None:
    """A run that dies after appending to ID.samples but before saving its state: the lines
    are dropped on restart, and their samples are consumed (once) by the next run. A run that
    dies after the state but before its checkpoint leaves the leader ahead: no repeat."""
    feed = DataFeed(tmp_path, "j", 30, 1.0, 5, ["0", "1"])
    feed.consume_to(11)
    feed.save(11)
    feed.consume_to(17)
    log = tmp_path / "j.samples"
    with open(log, "a", encoding="utf-8") as fh:  # appended, state never saved: a crash
        fh.write("".join(json.dumps(x) + "\n" for x in feed.pending))
    again = DataFeed(tmp_path, "j", 30, 1.0, 5, ["2"])
    assert again.consumed == 11 and again.leader.workers == ("2",)
    again.consume_to(20)
    again.save(20)
    # Crash after the state, before the checkpoint (still 17): the next run consumes nothing
    # until its progress passes 20.
    third = DataFeed(tmp_path, "j", 30, 1.0, 5, ["0"])
    third.consume_to(17)
    assert third.consumed == 20 and not third.pending
    third.consume_to(45)
    third.save(45)
    assert_exactly_once(sample_lines(tmp_path, "j"), dataset=30, total=45)


def test_in_place_resize_hands_a_leaving_workers_rest_to_the_others(tmp_path: Path) -> None:
    feed = DataFeed(tmp_path, "j", 640, 1.0, 2, ["0", "1", "2"])  # partitions of 10
    feed.consume_to(4)  # 2 + 1 + 1 samples, each worker inside its first partition
    assert len(feed.pending) == 3
    held = feed.leader.held("1")
    assert held is not None and held[1] - held[0].begin == 1
    feed.resize(["0", "9"])
    assert feed.leader.workers == ("0", "9")
    assert feed.leader.held("9") is None
    feed.consume_to(640)
    feed.save(640)
    lines = sample_lines(tmp_path, "j")
    assert_exactly_once(lines, dataset=640, total=640)
    assert {x["worker"] for x in lines[3:]} == {"0", "9"}
    # The rests of the leavers' partitions were handed out next, not at the epoch's end.
    rest_of_1 = held[0].partition * 10 + 1
    assert any(x["first"] == rest_of_1 for x in lines[3:6])


def test_a_lone_copy_runs_on_the_system_interpreter_and_data_mode_says_what_it_needs(
    tmp_path: Path,
) -> None:
    """The Slurm tests and benchmark copy ``standin.py`` alone to a shared directory and run it
    with the system interpreter (no gpuplan): it must run there, and data mode must either find
    ``data_pipeline.py`` beside it or refuse in one line (exit 2), never crash on import."""
    import shutil

    from gpuplan.executors import data_pipeline, standin

    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(standin.__file__, lone / "standin.py")
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "0,1"}

    def run(job: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                python,
                str(lone / "standin.py"),
                "--job-id",
                job,
                "--work",
                "2",
                "--rate-per-gpu",
                "50",
                "--state-dir",
                str(lone),
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    plain = run("plain")
    assert plain.returncode == 0, plain.stderr
    assert (lone / "plain.done").exists()
    refused = run("data", "--dataset-size", "20")
    assert refused.returncode == 2 and "data_pipeline" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    shutil.copy(data_pipeline.__file__, lone / "data_pipeline.py")
    ok = run("data", "--dataset-size", "20")
    assert ok.returncode == 0, ok.stderr
    assert (lone / "data.samples").read_text().strip()
