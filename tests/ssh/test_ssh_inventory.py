"""GPU inventory, UUID binding and health over the real SSH lab (issue 26 item 2).

The lab's nodes have no GPUs and no nvidia-ml-py: the agents answer ``inventory`` with
``{"nvml": false}`` and jobs keep the declared inventory, bound by index. For the UUID binding
and a GPU turning unhealthy and healthy again end to end, the second test gives the nodes'
Python a stand-in ``pynvml`` module (a parsing-level mock of NVML: it answers from a JSON file
the test edits, per node, keyed by the SSH server address) through a wrapper ``remote_python``;
everything else (sshd, agent, sidecars, stand-in jobs, the engine) is real.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpuplan.executors.engine import Engine
from gpuplan.executors.ssh.executor import SshExecutor, StandinLauncher
from gpuplan.executors.ssh.launchers import WorkerCommand, safe_name
from gpuplan.models import Cluster, JobSpec, Node
from gpuplan.solver_core.registry import make_policy
from tests.ssh.test_ssh import (  # noqa: F401  (ssh_lab, harness: fixtures)
    RATE,
    Harness,
    check_run,
    harness,
    rigid,
    ssh_lab,
)

POLL_BOUND_S = 120.0  # generous: 2 busy cores shared by many sessions


class VisibleRecording(StandinLauncher):
    """The stand-in, started through ``sh`` that first appends the ``CUDA_VISIBLE_DEVICES``
    it was given to ``STATE/ID.visible`` (then ``exec``: same PID, same signals)."""

    def visible_file(self, job_id: str) -> Path:
        return Path(self.state_dir) / f"{safe_name(job_id)}.visible"

    def worker(self, spec: JobSpec, rank: int, nranks: int, target: float) -> WorkerCommand:
        cmd = super().worker(spec, rank, nranks, target)
        argv = (
            "/bin/sh",
            "-c",
            'printf "%s\\n" "$CUDA_VISIBLE_DEVICES" >> "$0"; exec "$@"',
            str(self.visible_file(spec.id)),
            *cmd.argv,
        )
        return WorkerCommand(argv, cmd.env, cmd.files)


def recorder(h: Harness) -> VisibleRecording:
    return VisibleRecording(h.state, RATE, python=sys.executable)


def wait_for(what: str, check: Any) -> Any:
    deadline = time.monotonic() + POLL_BOUND_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not reached within {POLL_BOUND_S} s: {what}")


def test_nodes_without_nvml_keep_the_declared_inventory(harness: Harness) -> None:  # noqa: F811
    jobs = [rigid("plain", 0.0, 2, 1.0)]
    cluster = Cluster(nodes=[Node(name="node1", gpus=2)])
    launcher = recorder(harness)
    ex = harness.executor(cluster, jobs, launcher=launcher, inventory_interval_s=0.25)
    engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None, restart_gate=None)
    engine.run()
    check_run(engine, ex, jobs)
    answer = ex._run(ex.nodes.call("node1", "inventory"))
    assert answer["nvml"] is False and "pynvml" in answer["reason"]
    assert ex.gpus.bindings["node1"].devices is None and not ex.gpus.out and not ex.gpu_log
    assert launcher.visible_file("plain").read_text().splitlines() == ["0,1"]


FAKE_PYNVML = '''
"""A stand-in pynvml for the SSH lab: answers from state.json beside it, per SSH server
address (each lab node is a loopback address of one machine)."""
import json, os
class NVMLError(Exception):
    def __init__(self, value):
        super().__init__("NVML error %d" % value)
        self.value = value
def _gpus():
    server = os.environ.get("SSH_CONNECTION", "? ? local ?").split()[2]
    with open(os.path.join(os.path.dirname(__file__), "state.json")) as fh:
        return json.load(fh)[server]
def _v(h, key):
    gpu = _gpus()[h]
    if gpu.get("lost"):
        raise NVMLError(15)
    if key not in gpu:
        raise NVMLError(3)
    return gpu[key]
def nvmlInit(): pass
def nvmlSystemGetDriverVersion(): return "550.54.15"
def nvmlDeviceGetCount(): return len(_gpus())
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetUUID(h): return _v(h, "uuid")
def nvmlDeviceGetName(h): return _v(h, "name")
def nvmlDeviceGetTotalEccErrors(h, error_type, counter): return _v(h, "ecc")
'''


def test_uuid_binding_and_an_unhealthy_gpu_moves_the_job(harness: Harness, tmp_path: Path) -> None:  # noqa: F811
    """NVML (stand-in) on both nodes: the job sees its GPUs' UUIDs; an ECC error on one of
    its GPUs takes the node out at once, the job is checkpoint-stopped and resumes on the other
    node's UUIDs with its progress; the GPU healthy again brings the node back."""
    fake = tmp_path / "fakenvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    hosts = {name: harness.lab.node(name).host for name in ("node1", "node2")}
    state = {
        host: [
            {"uuid": f"GPU-{name}-{i}", "name": "NVIDIA H100 80GB HBM3", "ecc": 0} for i in range(2)
        ]
        for name, host in hosts.items()
    }

    def write_state() -> None:
        tmp = fake / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(fake / "state.json")

    write_state()
    python = tmp_path / "python-with-fake-nvml"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={fake} exec /usr/bin/python3 "$@"\n')
    python.chmod(0o755)

    jobs = [rigid("train", 0.0, 2, 6.0)]
    cluster = Cluster(nodes=[Node(name=n, gpus=2, gpu_type="h100") for n in hosts])
    launcher = recorder(harness)
    ex: SshExecutor = harness.executor(
        cluster, jobs, launcher=launcher, inventory_interval_s=0.25, remote_python=str(python)
    )
    visible = launcher.visible_file("train")
    seen: dict[str, Any] = {}

    def operator() -> None:
        """Breaks the GPU 1 of the node the job first runs on, heals it once it moved."""
        try:
            first = wait_for(
                "the job started", lambda: visible.exists() and visible.read_text().splitlines()[:1]
            )[0]
            node = first.split(",")[0].split("-")[1]
            seen["first"] = node
            state[hosts[node]][1]["ecc"] = 2
            write_state()
            wait_for("the job restarted", lambda: len(visible.read_text().splitlines()) >= 2)
            state[hosts[node]][1]["ecc"] = 0
            write_state()
        except BaseException as exc:  # surfaced by the main thread's asserts
            seen["error"] = exc

    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None, restart_gate=None)
    engine.run()
    thread.join(timeout=POLL_BOUND_S)
    assert "error" not in seen, seen.get("error")
    check_run(engine, ex, jobs)  # progress kept across the move, every GPU one job at a time
    broken = seen["first"]
    other = next(n for n in hosts if n != broken)
    lines = visible.read_text().splitlines()
    assert lines[0] == f"GPU-{broken}-0,GPU-{broken}-1"
    assert lines[1] == f"GPU-{other}-0,GPU-{other}-1"
    changes = [(e["node"], e["change"]) for e in ex.gpu_log]
    assert changes[:1] == [(broken, "out")]
    assert ex.gpu_log[0]["reason"] == (
        f"GPU 1 (GPU-{broken}-1): 2 volatile uncorrected ECC error(s)"
    )
    # The node comes back once its GPU is healthy (the run may end before the next look).
    if len(changes) > 1:
        assert changes[1] == (broken, "back")
    assert all(a["nvml"] for a in [ex._run(ex.nodes.call(n, "inventory")) for n in hosts])
