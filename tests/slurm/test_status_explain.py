"""Issue 25 item 2 without a cluster: ``gpuplan status`` / ``explain --journal`` on a journal
written through the controller's own :class:`Journal` API, and the journals they refuse.

(The same commands against a journal a real controller wrote on the Slurm lab are in
tests/slurm/test_controller_ops.py.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.executors.control.cycle_times import CycleTimes, meta_key
from gpuplan.executors.control.failopen import write_heartbeat
from gpuplan.executors.control.journal import ActionIntent, JobUpdate, Journal
from gpuplan.executors.control.reason_journal import current_wait, wait_field, with_wait
from gpuplan.models.reasons import Reason


def _reason(code: str, text: str, **terms: object) -> str:
    return Reason(code=code, text=text, terms=terms).model_dump_json()  # type: ignore[arg-type]


def _journal(path: Path) -> None:
    """A journal as a controller leaves it: r1 running on n1, w1 and w2 waiting with reasons
    (w2 behind w1), a plan that started r1 with its reason, a heartbeat, cycle times."""
    with Journal(path) as j:
        run = j.begin_run("fifo")
        for i, eid in enumerate(("slurm-1", "slurm-2", "slurm-3")):
            j.add_job(eid, i + 1, f"fp{i}", 10.0 + i, {"id": eid}, "pending")
        j.update_jobs(
            [JobUpdate(engine_id="slurm-1", state="running", done=1.0, gpus=2, placement={"n1": 2})]
        )
        epoch, ids = j.record_plan(
            run, 5.0, "fifo", "{}", [ActionIntent("slurm-1", 1, "start", {}, {"n1": 2}, 0)]
        )
        j.settle(ids, "applied")
        w1 = _reason(
            "no-node-fits",
            "needs 4 GPUs on one node, at most 2 free on any node",
            needs=4,
            ahead=0,
            rank=1,
        )
        w2 = _reason(
            "no-node-fits",
            "needs 4 GPUs on one node, at most 2 free on any node; "
            "behind 1 job of higher priority: slurm-2",
            needs=4,
            ahead=1,
            rank=2,
        )
        j.record_reasons(
            epoch,
            {"slurm-1": _reason("start", "start: rank 1, fits on n1", rank=1)},
            {"slurm-2": w1, "slurm-3": w2},
            [(5.0, "slurm-2", "waiting", w1), (5.0, "slurm-3", "waiting", w2)],
        )
        times = CycleTimes()
        times.add(0.012, 0.003, 0.02, 0.001, 3, 1)
        j.set_meta(meta_key(run), times.to_json())
    write_heartbeat(Path(f"{path}.heartbeat"), {"pid": os.getpid()})


def test_status_shows_queue_usage_and_health(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ctl.db"
    _journal(db)
    assert main(["status", "--journal", str(db)]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    lines = out.splitlines()
    assert "running" in lines[0] and "fifo" in lines[0]
    assert "heartbeat" in lines[1] and "s ago" in lines[1]
    assert "poll 12 ms" in out and "decision 3 ms" in out
    assert any(line.split() == ["n1", "2"] for line in lines)
    queue = [line for line in lines if line[:4].strip().isdigit()]
    assert [line.split()[1] for line in queue] == ["slurm-1", "slurm-2", "slurm-3"]
    assert "needs 4 GPUs on one node" in out and "behind 1 job" in out
    assert main(["status", "--journal", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [q["job"] for q in data["queue"]] == ["slurm-1", "slurm-2", "slurm-3"]
    assert data["queue"][2]["terms"]["ahead"] == 1 and data["usage"] == {"n1": 2}
    assert data["health"]["running"] is True and data["health"]["heartbeat_age_s"] >= 0


def test_explain_shows_a_jobs_decisions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "ctl.db"
    _journal(db)
    assert main(["explain", "slurm-1", "--journal", str(db)]) == 0
    out = capsys.readouterr().out
    assert "start" in out and "start: rank 1, fits on n1" in out and "[applied]" in out
    assert main(["explain", "3", "--journal", str(db)]) == 0  # a bare Slurm id works too
    out = capsys.readouterr().out
    assert "waiting now: needs 4 GPUs" in out and "waiting: needs 4 GPUs" in out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert main(["explain", "slurm-99", "--journal", str(db)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not in this journal" in err


def test_hostile_journals_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "ctl.db"
    _journal(db)
    link = tmp_path / "link.db"
    link.symlink_to(db)
    assert main(["status", "--journal", str(link)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "symlink" in err
    assert main(["explain", "1", "--journal", str(link)]) == 2
    capsys.readouterr()
    os.chmod(db, 0o620)
    assert main(["status", "--journal", str(db)]) == 2
    assert "writable by group or others" in capsys.readouterr().err
    os.chmod(db, 0o600)
    if os.geteuid() == 0:
        os.chown(db, 65534, -1)
        assert main(["status", "--journal", str(db)]) == 2
        err = capsys.readouterr().err
        assert "owned by uid 65534" in err and len(err.strip().splitlines()) == 1
        os.chown(db, 0, -1)
    assert main(["status", "--journal", str(tmp_path / "none.db")]) == 2
    assert "no journal here" in capsys.readouterr().err
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 10)
    os.chmod(garbage, 0o600)
    assert main(["status", "--journal", str(garbage)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_wait_field_is_safe_for_the_marker() -> None:
    hostile = "behind 1 job: evil;gpus=64,max=99\x1b[31m=x" + "y" * 400
    field = wait_field(hostile)
    assert ";" not in field and "," not in field and "=" not in field
    assert all(" " <= c <= "~" for c in field) and len(field) <= 160
    marked = with_wait("gpuplan:held;gpus=2;min=1;max=4", hostile)
    assert marked.startswith("gpuplan:held;gpus=2;min=1;max=4;wait=")
    assert current_wait(marked) == field
    again = with_wait(marked, "needs 4 GPUs")
    assert again == "gpuplan:held;gpus=2;min=1;max=4;wait=needs 4 GPUs"
    assert with_wait("not ours", "x") == "not ours"


def test_the_publisher_journals_current_reasons_and_a_compact_history(tmp_path: Path) -> None:
    """Real journal, no Slurm (``comments=False``): each action's reason lands on its row,
    ``jobs.waiting`` follows every text change, the history only changes of kind, and a job
    that left the queue loses its waiting reason."""
    from gpuplan.executors.control.reason_journal import ReasonPublisher
    from gpuplan.models.reasons import ActionReason, DecisionRecord

    db = tmp_path / "ctl.db"
    with Journal(db) as j:
        run = j.begin_run("fifo")
        for i in (1, 2):
            j.add_job(f"slurm-{i}", i, f"fp{i}", float(i), {"id": i}, "pending")
        epoch, _ = j.record_plan(
            run, 1.0, "fifo", "{}", [ActionIntent("slurm-1", 1, "start", {}, {"n1": 1}, 0)]
        )
        pub = ReasonPublisher(j, None, comments=False)  # type: ignore[arg-type]

        def wait(text: str, code: str = "no-capacity") -> Reason:
            return Reason(code=code, text=text, terms={})

        start = Reason(code="start", text="start: rank 1", terms={"rank": 1})
        gate = Reason(code="gate-skip", text="restart gate skips preempt", terms={})
        pub.take(
            DecisionRecord(
                time=1.0,
                policy="fifo",
                actions=[
                    ActionReason(kind="start", job_id="slurm-1", gpus_after=1, reason=start),
                    ActionReason(kind="preempt", job_id="slurm-9", carried=False, reason=gate),
                ],
                pending={"slurm-2": wait("needs 2 GPUs, 1 free; behind 1 job")},
            )
        )
        pub.publish(epoch, ["slurm-2"])
        pub.take(
            DecisionRecord(
                time=2.0,
                policy="fifo",
                pending={"slurm-2": wait("needs 2 GPUs, 1 free; behind 2 jobs")},
            )
        )
        pub.publish(epoch, ["slurm-2"])
        assert json.loads(j.job("slurm-2").waiting)["text"].endswith("behind 2 jobs")  # type: ignore[union-attr]
        assert [r.kind for r in j.reasons("slurm-2")] == ["waiting"]  # same kind: one row
        pub.take(
            DecisionRecord(
                time=3.0,
                policy="fifo",
                pending={"slurm-2": wait("fifo serves the jobs ahead first", "behind")},
            )
        )
        pub.publish(epoch, ["slurm-2"])
        assert [json.loads(r.reason)["code"] for r in j.reasons("slurm-2")] == [
            "no-capacity",
            "behind",
        ]
        assert json.loads(j.actions("slurm-1")[0].reason)["text"] == "start: rank 1"
        assert [(r.kind, json.loads(r.reason)["code"]) for r in j.reasons("slurm-9")] == [
            ("skipped", "gate-skip")
        ]
        pub.take(DecisionRecord(time=4.0, policy="fifo"))
        pub.publish(None, [])  # slurm-2 started or left
        assert j.job("slurm-2").waiting == ""  # type: ignore[union-attr]
