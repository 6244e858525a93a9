"""Issue 24 item 6: the controller's per-cycle timing, and a lab larger than the default.

* unit: :class:`~gpuplan.executors.control.cycle_times.CycleTimes` keeps a bounded ring and
  totals that are never dropped, writes JSON a reader can load, and marks the parts a cycle did
  not have (no poll, no decision) as missing rather than zero;
* real lab: the same lab code starts 8 nodes x 8 GPUs under a private root of its own (node
  names of its own too: see ``tests/bench/slurm_scale.py::node_prefix``), and
  ``gpuplan slurm-controller --policy afs-p`` runs single-node jobs that fragment the nodes —
  every job finishes, on one node, its work done exactly once, and the journal holds the
  controller's cycle times.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplan.executors.control.cycle_times import (
    COLUMNS,
    CycleTimes,
    load,
    meta_key,
    percentile,
)
from gpuplan.executors.control.journal import Journal
from gpuplan.executors.slurm import job_states
from gpuplan.executors.slurm.cli import SlurmJob
from tests.labs.slurm.lab import LabConfig, LabError, SlurmLab

from .. import slurm_fixtures as fx
from ..bench.slurm_scale import node_prefix
from .test_controller import LAB_WAIT_S, Controller, _assert_tiles, _states, _wait

# ---------------------------------------------------------------------------------------- unit


def test_cycle_times_ring_is_bounded_and_totals_are_not() -> None:
    times = CycleTimes(ring=3)
    for k in range(5):
        times.add(0.1 * k, 0.01, None if k % 2 else 0.2, 0.001, k, k % 2)
    doc = json.loads(times.to_json())
    assert doc["columns"] == list(COLUMNS)
    assert doc["cycles"] == 5 and len(doc["rows"]) == 3
    assert [row[COLUMNS.index("jobs")] for row in doc["rows"]] == [2, 3, 4]  # the newest kept
    assert [row[COLUMNS.index("full_reads")] for row in doc["rows"]] == [0, 1, 0]
    assert doc["totals"]["poll_s"] == pytest.approx(0.1 * (0 + 1 + 2 + 3 + 4))
    assert doc["totals"]["apply_s"] == pytest.approx(0.6)  # three cycles applied a plan
    assert doc["max"]["poll_s"] == pytest.approx(0.4)
    rows = load(times.to_json())
    assert [r["apply_s"] for r in rows] == [0.2, None, 0.2]
    assert rows[0]["poll_s"] == pytest.approx(0.2) and rows[0]["jobs"] == 2


def test_a_quiet_poll_has_no_decision_and_a_timer_no_poll() -> None:
    times = CycleTimes()
    times.add(0.05, None, None, None, 7)  # a poll that brought no event
    times.add(None, 0.002, None, 0.001, 7)  # a timer's decision, no poll
    rows = load(times.to_json())
    assert rows[0]["decide_s"] is None and rows[1]["poll_s"] is None
    assert times.totals["decide_s"] == pytest.approx(0.002)
    assert load(None) == []
    assert meta_key(3) == "cycle_times:3"


def test_flush_is_rate_limited() -> None:
    times = CycleTimes()
    assert times.due(now=1000.0)
    times.flushed(now=1000.0)
    assert not times.due(now=1005.0) and times.due(now=1010.0)


def test_percentile_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0
    assert math.isnan(percentile([], 0.5))


SEP = job_states.SEP


def _line(*fields: str) -> str:
    return "".join(f + SEP for f in fields)


RUNNING_LINE = _line(
    "12",
    "RUNNING",
    "1",
    "4294901759",
    "sc[1-2]",
    "sc1",
    "gpuplan",
    "gres:gpu:4",
    "N/A",
    "0",
    "None",
    "gpuplan:held;gpus=8;min=8;max=8;nodes=2;gpn=4",
)
HELD_LINE = _line(
    "13",
    "PENDING",
    "0",
    "0",
    "",
    "n/a",
    "gpuplan",
    "gres:gpu:2",
    "N/A",
    "0",
    "JobHeldUser",
    "(null)",
)


def test_the_narrow_read_parses_what_squeue_prints() -> None:
    run, held = job_states.parse(RUNNING_LINE + "\n" + HELD_LINE + "\n")  # type: ignore[misc]
    assert (run.job_id, run.state, run.restart_count, run.nodes, run.batch_host) == (
        12,
        "RUNNING",
        1,
        ("sc1", "sc2"),
        "sc1",
    )
    assert run.tres_per_node == "gres:gpu:4" and run.tres_per_job == ""
    assert run.admin_comment.startswith("gpuplan:held;gpus=8")
    assert (held.priority, held.nodes, held.batch_host, held.admin_comment) == (0, (), "", "")
    assert job_states.parse("") == []
    argv = job_states.argv()
    assert argv[:3] == ["squeue", "--noheader", "--states=all"] and "Comment" not in argv[-1]


@pytest.mark.parametrize(
    "bad",
    [
        RUNNING_LINE[:-1],  # a field short
        RUNNING_LINE + "x" + SEP,  # a field too many
        RUNNING_LINE.replace("12" + SEP, "12_4" + SEP, 1),  # an array task's id
        RUNNING_LINE + "\n" + RUNNING_LINE,  # the same job twice
        HELD_LINE.replace("(null)", "why=a\n13" + SEP + "RUNNING"),  # a field with a newline
        HELD_LINE.replace("JobHeldUser", "a" + SEP + "b"),  # a field holding the separator
        RUNNING_LINE.replace("RUNNING", "RUN NING"),
    ],
)
def test_anything_unexpected_in_the_narrow_read_means_read_json(bad: str) -> None:
    assert job_states.parse(bad) is None


def test_merge_keeps_the_full_record_and_takes_the_poll_fields() -> None:
    full = SlurmJob.from_json(
        {
            "job_id": 13,
            "job_state": "PENDING",
            "priority": 0,
            "comment": "gpuplan:work=5",
            "name": "j",
            "nodes": "",
            "tres_per_node": "gres:gpu:2",
            "state_reason": "JobHeldUser",
            "submit_time": 100,
            "partition": "gpuplan",
            "exit_code": 0,
        }
    )
    held = job_states.parse(HELD_LINE)[0]  # type: ignore[index]
    assert job_states.merge(full, held) is full  # nothing changed: the same record
    now = job_states.parse(
        _line(
            "13",
            "RUNNING",
            "0",
            "4294901759",
            "sc3",
            "sc3",
            "gpuplan",
            "gres:gpu:2",
            "N/A",
            "0",
            "None",
            "(null)",
        )
    )[0]  # type: ignore[index]
    merged = job_states.merge(full, now)
    assert (merged.state, merged.nodes, merged.held, merged.comment, merged.name) == (
        "RUNNING",
        ("sc3",),
        False,
        "gpuplan:work=5",
        "j",
    )
    assert merged.raw["job_state"] == "RUNNING" and merged.raw["submit_time"] == 100
    assert full.state == "PENDING"  # the full record itself is left as it was


# ---------------------------------------------------------------------------------------- lab

NODES, GPUS = 8, 8


@pytest.fixture(scope="module")
def big_lab() -> Iterator[SlurmLab]:
    """An 8 x 8 lab under a fresh private root (``mkdtemp``: no predictable shared path; ports
    follow the root), stopped and removed at the end."""
    if os.geteuid() != 0:
        fx.unavailable("needs root (slurmd, munged and cgroups run as root)")
    root = Path(tempfile.mkdtemp(prefix="gpuplan-lab8x8-", dir="/tmp"))
    lab = SlurmLab(
        LabConfig(
            root=root,
            nodes=NODES,
            gpus_per_node=GPUS,
            gpu_type="a100",
            job_submit_lua=True,
            node_prefix=node_prefix(root),
        )
    )
    try:
        with lab.exclusive(timeout_s=60):
            try:
                lab.up(timeout_s=240, owner=fx.OWNER)
            except LabError as err:
                lab.down()
                fx.unavailable(f"8 x 8 lab: {err}")
            try:
                yield lab
            finally:
                lab.down()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _sbatch(
    lab: SlurmLab, shared: Path, name: str, gpus: int, lo: int, hi: int, work: float
) -> int:
    proc = fx.submit_standin(
        lab,
        fx.UNPRIVILEGED_USER,
        shared,
        name,
        work=work,
        gpus=gpus,
        lo=lo,
        hi=hi,
        one_node=True,
        gres=True,
    )
    return fx.submitted_id(proc)


def _narrow_agrees(lab: SlurmLab, ids: dict[str, int]) -> bool:
    """One narrow read and one ``--json`` read of the lab give the same per-poll fields for
    every job, with some running and some held (False, to poll again, until then or when a
    job changed between the two reads)."""
    cli = lab.cli(timeout=30)
    narrow = job_states.parse(cli.run(job_states.argv()))
    full = {j.job_id: j for j in cli.jobs()}
    assert narrow is not None, "the narrow read did not parse on the lab"
    if {st.job_id for st in narrow} != set(full) or not set(ids.values()) <= set(full):
        return False
    states = {st.state for st in narrow if st.job_id in set(ids.values())}
    if not {"RUNNING", "PENDING"} <= states:
        return False
    return all(job_states.merge(full[st.job_id], st) is full[st.job_id] for st in narrow)


def test_an_8x8_lab_runs_single_node_jobs_through_the_controller(big_lab: SlurmLab) -> None:
    """Eight rigid 7-GPU jobs leave one free GPU on each of the 8 nodes; a rigid 2-GPU and an
    elastic 2..4 job fit only split, so they must wait for a whole node's worth of GPUs. All
    ten finish, each on one node, each one's work done exactly once, and the controller's
    cycle times are in its journal."""
    fx.ensure_user(fx.UNPRIVILEGED_USER)
    shared = fx.shared_job_dir("gpuplan-lab8x8-jobs-")
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    plan = [(f"w{k}", 7, 7, 7, 7 * 6.0) for k in range(NODES)]
    plan += [("r2", 2, 2, 2, 2 * 4.0), ("e3", 3, 2, 4, 3 * 4.0)]
    try:
        ids = {
            name: _sbatch(big_lab, shared, name, g, lo, hi, work) for name, g, lo, hi, work in plan
        }
        run = Controller(
            big_lab,
            db,
            log,
            args=("--policy", "afs-p", "--interval", "0.5", "--wake-file", str(big_lab.wake_file)),
        )
        try:
            _wait(
                "the narrow read to agree with squeue --json while jobs run and wait",
                lambda: _narrow_agrees(big_lab, ids),
                LAB_WAIT_S,
                log,
            )
            _wait(
                "all ten jobs finished",
                lambda: (
                    len(_states(big_lab, ids)) == len(ids)
                    and all(j.finished for j in _states(big_lab, ids).values())
                ),
                LAB_WAIT_S * 2,
                log,
            )
        finally:
            run.kill(signal.SIGTERM)
        assert run.wait(LAB_WAIT_S) == 0
        states = _states(big_lab, ids)
        assert {n: j.state for n, j in states.items()} == dict.fromkeys(ids, "COMPLETED")
        spread = {n: j.nodes for n, j in states.items() if len(j.nodes) != 1}
        assert not spread, f"jobs over more than one node: {spread}"
        for name, _, _, _, work in plan:
            _assert_tiles(shared, name, work)
        with Journal(db, writer=False) as journal:
            rows = load(journal.meta(meta_key(1)))
            finished = {r.engine_id: r.state for r in journal.jobs().values()}
        assert sorted(finished.values()) == ["completed"] * len(ids), finished
        assert any(r["poll_s"] is not None for r in rows), rows[:5]
        decided = [r for r in rows if r["decide_s"] is not None]
        assert decided and any(r["apply_s"] is not None for r in decided), rows[:5]
        assert all(v is None or v >= 0 for r in rows for v in r.values())
    finally:
        if not os.environ.get("GPUPLAN_KEEP_TEST_DIRS"):
            shutil.rmtree(shared, ignore_errors=True)
