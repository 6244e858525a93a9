"""NVML inventory and health (issue 26 item 1/2) at unit level, from RECORDED NVML answers.

``FakeNvml`` stands in for nvidia-ml-py's ``pynvml`` module (a parsing-level mock, no GPU): it
answers the calls :class:`NvmlReader` makes with values recorded per GPU, raises an
``NVMLError`` with NVML's codes where a real GPU would (not supported, GPU lost), and queues
Xid critical events. The reader's answers then go through the real parsing, verdict, binding
and executor usable-set logic.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from gpuplan.executors.nvml import local as nvml_local
from gpuplan.executors.nvml.crosscheck import bind_node, check_gres, model_matches
from gpuplan.executors.nvml.local import read_local
from gpuplan.executors.nvml.records import BadInventory, parse_inventory
from gpuplan.executors.ssh.agent import NvmlReader
from gpuplan.executors.ssh.gpus import NodeGpus
from gpuplan.models import Cluster, Node, NodeFailure, NodeRecovery

GIB = 1 << 30


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


NOT_SUPPORTED, TIMEOUT, LOST = 3, 10, 15


def h100(index: int, **over: Any) -> dict[str, Any]:
    """Recorded answers of one healthy H100 (values as nvidia-ml-py 12 returns them)."""
    gpu = {
        "uuid": f"GPU-5d7c0b2e-1a4e-4b6a-9f0e-00000000000{index}",
        "name": "NVIDIA H100 80GB HBM3",
        "memory": 85520809984,
        "mig": [0, 0],
        "ecc": 0,
        "retired": [],
        "pending": 0,
        "rows": (0, 0, 0, 0),
        "throttle": 0x1,
    }
    gpu.update(over)
    return gpu


class FakeNvml:
    """A ``pynvml`` module object answering from recorded per-GPU values."""

    NVMLError = NVMLError
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[dict[str, Any]], *, init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.events: list[tuple[int, int]] = []  # (gpu index, xid) not yet drained
        self.calls: list[str] = []

    def _gpu(self, handle: int) -> dict[str, Any]:
        gpu = self.gpus[handle]
        if gpu.get("lost"):
            raise NVMLError(LOST)
        return gpu

    def _value(self, handle: int, key: str) -> Any:
        value = self._gpu(handle)[key]
        if value == "unsupported":
            raise NVMLError(NOT_SUPPORTED)
        return value

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return self._value(h, "uuid").encode()  # old nvidia-ml-py versions return bytes

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._value(h, "name")

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=self._value(h, "memory"), used=0, free=0)

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return self._value(h, "mig")

    def nvmlDeviceGetTotalEccErrors(self, h: int, error_type: int, counter: int) -> int:
        assert (error_type, counter) == (1, 0)  # uncorrected, volatile
        return self._value(h, "ecc")

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        assert cause == 1  # double-bit ECC
        return self._value(h, "retired")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return self._value(h, "pending")

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return self._value(h, "rows")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return self._value(h, "throttle")

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, types: int, event_set: str) -> None:
        assert types == self.nvmlEventTypeXidCriticalError and event_set == "event-set"

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0  # never blocks the agent
        if not self.events:
            raise NVMLError(TIMEOUT)
        index, xid = self.events.pop(0)
        return SimpleNamespace(device=index, eventType=8, eventData=xid)


def inventory_of(*gpus: dict[str, Any]) -> Any:
    return parse_inventory(NvmlReader(FakeNvml(list(gpus))).answers())


def test_healthy_h100s_give_typed_records() -> None:
    inv = inventory_of(h100(0), h100(1))
    assert inv.nvml and inv.driver == "550.54.15"
    assert [g.index for g in inv.gpus] == [0, 1]
    first = inv.gpus[0]
    assert first.uuid == "GPU-5d7c0b2e-1a4e-4b6a-9f0e-000000000000"
    assert first.model == "NVIDIA H100 80GB HBM3" and first.memory_mib == 81559
    assert first.health.verdict == "healthy" and first.usable and not first.mig_enabled


def test_ecc_uncorrected_errors_make_a_gpu_unhealthy() -> None:
    inv = inventory_of(h100(0), h100(1, ecc=2))
    assert inv.gpus[0].usable
    bad = inv.gpus[1]
    assert bad.health.verdict == "unhealthy" and not bad.usable
    assert "2 volatile uncorrected ECC error(s)" in bad.health.reason


def test_retired_pages_pending_is_unhealthy_retired_alone_is_degraded() -> None:
    inv = inventory_of(h100(0, retired=[0x1F000, 0x2A000], pending=1), h100(1, retired=[7]))
    assert inv.gpus[0].health.verdict == "unhealthy"
    assert "page retirement pending" in inv.gpus[0].health.reason
    assert inv.gpus[1].health.verdict == "degraded" and inv.gpus[1].usable
    assert "1 page(s) retired" in inv.gpus[1].health.reason


def test_row_remap_failure_and_unsupported_counters() -> None:
    inv = inventory_of(
        h100(0, rows=(3, 1, 0, 1)),
        h100(
            1, ecc="unsupported", retired="unsupported", pending="unsupported", rows="unsupported"
        ),
    )
    assert inv.gpus[0].health.reason == "row remapping failed"
    assert inv.gpus[1].health.verdict == "healthy"  # not supported says nothing


def test_a_lost_gpu_is_unhealthy_and_the_others_still_read() -> None:
    inv = inventory_of(h100(0), h100(1, lost=True), h100(2))
    assert [g.health.verdict for g in inv.gpus] == ["healthy", "unhealthy", "healthy"]
    assert "fallen off the bus" in inv.gpus[1].health.reason


def test_mig_enabled_gpu_is_healthy_but_not_usable_whole() -> None:
    inv = inventory_of(h100(0, mig=[1, 1]), h100(1, mig=[0, 1]))
    assert inv.gpus[0].mig_enabled and not inv.gpus[0].usable
    assert inv.gpus[0].health.verdict == "healthy"
    assert "MIG" in (inv.gpus[0].unusable_reason or "")
    assert inv.gpus[1].usable  # MIG only pending (after a reset): still whole now


def test_hardware_throttling_is_degraded() -> None:
    inv = inventory_of(h100(0, throttle=0x40 | 0x1))
    assert inv.gpus[0].health.verdict == "degraded"
    assert inv.gpus[0].health.reason == "hardware thermal slowdown"


def test_xid_events_are_drained_kept_and_judged() -> None:
    fake = FakeNvml([h100(0), h100(1)])
    reader = NvmlReader(fake)
    assert parse_inventory(reader.answers()).gpus[1].health.verdict == "healthy"
    fake.events += [(1, 79), (0, 13)]
    inv = parse_inventory(reader.answers())
    assert inv.gpus[1].health.verdict == "unhealthy" and "Xid 79" in inv.gpus[1].health.reason
    assert inv.gpus[0].health.verdict == "degraded"  # Xid 13: an application fault
    again = parse_inventory(reader.answers())  # the event stays (XID_KEEP_S), not re-queued
    assert again.gpus[1].health.verdict == "unhealthy"
    assert fake.calls.count("init") == 1


def test_no_nvml_is_declared_inventory_said_once_at_info(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once per process: start from a process that has not said it yet (an earlier test, the
    # GPU program's dry run among them, may have read this host's inventory already).
    monkeypatch.setattr(nvml_local, "_said", set())
    caplog.set_level(logging.INFO)
    inv = read_local(FakeNvml([], init_error=12))  # NVML_ERROR_LIBRARY_NOT_FOUND
    assert not inv.nvml and "NVML not usable" in (inv.reason or "")
    read_local(FakeNvml([], init_error=12))
    notes = [r for r in caplog.records if "declared GPU inventory" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    "answers",
    [
        None,
        {"nvml": "yes"},
        {"nvml": True, "gpus": "all"},
        {"nvml": True, "gpus": [{"index": -1}]},
        {"nvml": True, "gpus": [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": "GPU-a"}]},
        {"nvml": True, "gpus": [{"index": 0, "xids": [{"xid": "79"}]}]},
        {"nvml": True, "gpus": [{"index": 0, "remapped_rows": [1, 2]}]},
    ],
)
def test_malformed_answers_are_refused(answers: Any) -> None:
    with pytest.raises(BadInventory):
        parse_inventory(answers)


def test_model_matching() -> None:
    assert model_matches("h100", "NVIDIA H100 80GB HBM3")
    assert model_matches("a100-80g", "NVIDIA A100-SXM4-80GB")
    assert not model_matches("v100", "NVIDIA H200")
    assert not model_matches("h100", None)


def test_binding_by_uuid_and_intersection() -> None:
    node = Node(name="n1", gpus=2, gpu_type="h100")
    ok = bind_node(node, inventory_of(h100(0), h100(1)))
    assert ok.usable and ok.devices == (
        "GPU-5d7c0b2e-1a4e-4b6a-9f0e-000000000000",
        "GPU-5d7c0b2e-1a4e-4b6a-9f0e-000000000001",
    )
    assert not ok.warnings
    more = bind_node(node, inventory_of(h100(0), h100(1), h100(2, name="NVIDIA L4")))
    assert more.usable and len(more.devices or ()) == 2 and len(more.warnings) == 1
    assert "declared 2 x h100, NVML reports 3 GPU(s)" in more.warnings[0]
    short = bind_node(node, inventory_of(h100(0), h100(1, name="NVIDIA L4")))
    assert not short.usable and short.out_reason == "only 1 of 2 declared GPUs found"
    sick = bind_node(node, inventory_of(h100(0), h100(1, ecc=1)))
    assert not sick.usable and "GPU 1" in (sick.out_reason or "")
    none = bind_node(node, parse_inventory({"nvml": False, "reason": "no pynvml"}))
    assert none.usable and none.devices is None


def test_slurm_gres_cross_check() -> None:
    inv = inventory_of(h100(0), h100(1))
    assert check_gres("n1", "gpu:h100:2(S:0-1)", inv) == []
    assert check_gres("n1", "gpu:2,shard:8", inv) == []
    problems = check_gres("n1", "gpu:a100:4", inv)
    assert problems == [
        "node n1: GRES declares 4 GPU(s), NVML reports 2",
        "node n1: GRES declares 4 x a100, NVML reports 0 of that type (NVIDIA H100 80GB HBM3)",
    ]
    sick = check_gres("n1", "gpu:h100:2", inventory_of(h100(0), h100(1, lost=True)))
    assert len(sick) == 1 and "fallen off the bus" in sick[0]
    assert check_gres("n1", "gpu:9", parse_inventory({"nvml": False})) == []


def test_executor_usable_set_follows_health_transitions(tmp_path: Any) -> None:
    """Recorded answers drive the SSH executor's usable-set logic: a GPU turning unhealthy
    takes its node out at once (NodeFailure, reason logged), healthy again brings it back."""
    from gpuplan.executors.ssh.executor import SshExecutor, SshSettings, StandinLauncher
    from gpuplan.executors.ssh.pool import NodeAddress

    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    key = tmp_path / "id_ed25519"  # never used: no connection is made
    key.write_text("")
    cluster = Cluster(
        nodes=[Node(name="n1", gpus=2, gpu_type="h100"), Node(name="n2", gpus=1, gpu_type="h100")]
    )
    ex = SshExecutor(
        cluster,
        {"n1": NodeAddress("127.0.0.1"), "n2": NodeAddress("127.0.0.2")},
        StandinLauncher("/nonexistent", 1.0),
        SshSettings(known_hosts=str(known_hosts), client_keys=(str(key),)),
    )
    try:
        fake1, fake2 = FakeNvml([h100(0), h100(1)]), FakeNvml([h100(5)])
        r1, r2 = NvmlReader(fake1), NvmlReader(fake2)
        assert ex.gpu_events(1.0, {"n1": r1.answers(), "n2": r2.answers()}) == []
        assert ex.nodes.bind("n1", (1,)) == ["GPU-5d7c0b2e-1a4e-4b6a-9f0e-000000000001"]
        assert ex.nodes.bind("n2", (0,)) == ["GPU-5d7c0b2e-1a4e-4b6a-9f0e-000000000005"]
        fake1.gpus[1]["ecc"] = 3
        events = ex.gpu_events(2.0, {"n1": r1.answers(), "n2": r2.answers()})
        assert [(type(e), e.node) for e in events] == [(NodeFailure, "n1")]
        assert ex.gpus.out == {
            "n1": "GPU 1 (GPU-5d7c0b2e-1a4e-4b6a-9f0e-000000000001): "
            "3 volatile uncorrected ECC error(s)"
        }
        assert ex.gpu_events(3.0, {"n1": r1.answers()}) == []  # still out: no second event
        fake1.gpus[1]["ecc"] = 0  # reset by the operator: volatile counters start again
        events = ex.gpu_events(4.0, {"n1": r1.answers()})
        assert [(type(e), e.node) for e in events] == [(NodeRecovery, "n1")]
        assert [(e["t"], e["node"], e["change"]) for e in ex.gpu_log] == [
            (2.0, "n1", "out"),
            (4.0, "n1", "back"),
        ]
        fake2.gpus[0]["lost"] = True
        events = ex.gpu_events(5.0, {"n2": r2.answers()})
        assert [(type(e), e.node) for e in events] == [(NodeFailure, "n2")]
        assert "GPU is lost" in ex.gpus.out["n2"]
        assert ex.gpu_events(6.0, {"n1": {"nvml": True, "gpus": "junk"}}) == []  # kept as was
        assert ex.nodes.bind("n1", (0,)) == ["GPU-5d7c0b2e-1a4e-4b6a-9f0e-000000000000"]
    finally:
        ex.detach()


def test_node_gpus_without_nvml_binds_by_index() -> None:
    gpus = NodeGpus(Cluster(nodes=[Node(name="n1", gpus=2)]))
    assert gpus.update("n1", {"nvml": False, "reason": "pynvml missing"}, 0.0) is None
    assert gpus.devices("n1", (0, 1)) is None and not gpus.out
