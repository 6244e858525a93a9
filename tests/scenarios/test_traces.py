"""Trace loaders against the shared traces (documented counts) and against malformed input.

Counts asserted here are the ones written in each folder's ``SOURCES.md``; if a loader drops or
duplicates rows, these are the numbers that stop matching.
"""

from __future__ import annotations

import gc
import os
import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from gpuplan.models.errors import InputError
from gpuplan.scenarios.gavel import load_gavel_trace
from gpuplan.scenarios.itp import load_itp, load_itp_augmented
from gpuplan.scenarios.philly import load_philly, philly_vcs
from gpuplan.scenarios.pollux import load_pollux_workload
from gpuplan.scenarios.tiresias import load_tiresias, load_tiresias_cluster
from gpuplan.scenarios.trace_job import TraceJob
from gpuplan.scenarios.traces import (
    ENV_VAR,
    build_job,
    resolve_trace_path,
    select_window,
    shared_traces_dir,
)

from ..conftest import need_traces, traces_dir

pytestmark = pytest.mark.traces


TRACES = traces_dir() or Path("/nonexistent/shared/traces")


@pytest.fixture(autouse=True)
def _need_traces() -> None:
    """Under CI (``CI`` true, or ``GPUPLAN_REQUIRE_TRACES``) a missing traces folder fails
    every test here instead of skipping it, so a CI machine without the data can't pass by
    asserting nothing (tests/conftest.py's :func:`need_traces`)."""
    need_traces()


PHILLY = TRACES / "philly_pollux" / "philly.csv"
ITP = TRACES / "elasticflow_itp"
GAVEL = TRACES / "gavel"
POLLUX = TRACES / "pollux"
TIRESIAS = TRACES / "tiresias"

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


@pytest.fixture(scope="module")
def philly() -> list[TraceJob]:
    # module scope runs before the autouse check above: ask for the file itself
    return load_philly(need_traces("philly_pollux", "philly.csv"))


def _assert_sorted(jobs: list[TraceJob]) -> None:
    times = [j.submit_time for j in jobs]
    assert times == sorted(times)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- Philly -------------------------------------------------------------------------------------


def test_philly_total_and_gpu_histogram(philly: list[TraceJob]) -> None:
    assert len(philly) == 82_247
    assert Counter(j.gpus for j in philly) == {
        1: 76_627,
        2: 1_818,
        4: 1_870,
        8: 1_643,
        12: 7,
        16: 199,
        24: 7,
        32: 67,
        64: 6,
        128: 3,
    }
    assert len({j.id for j in philly}) == len(philly)
    _assert_sorted(philly)
    assert philly[0].submit_time == 0.0
    assert min(j.duration or 0 for j in philly) == 1.0
    assert max(j.duration or 0 for j in philly) == 4_628_226.0


def test_philly_span_matches_documented_dates(philly: list[TraceJob]) -> None:
    first = datetime(2017, 9, 4, 10, 30, 41)
    last = datetime(2017, 12, 22, 8, 2, 11)
    assert philly[-1].submit_time == (last - first).total_seconds()


PHILLY_VCS = {
    "6214e9": 41_226,
    "11cb48": 16_091,
    "6c71a0": 9_953,
    "b436b2": 7_423,
    "103959": 1_934,
    "ee9e8c": 1_511,
    "0e4a51": 1_435,
    "ed69ec": 1_137,
    "7f04ca": 723,
    "2869ce": 422,
    "e13805": 374,
    "23dbec": 8,
    "51b7ef": 4,
    "925e2b": 3,
    "795a4c": 3,
}


def test_philly_vcs_counts() -> None:
    counts = philly_vcs(PHILLY)
    assert counts == PHILLY_VCS
    assert list(counts)[:2] == ["6214e9", "11cb48"]  # largest first


@pytest.mark.parametrize("vc", ["6214e9", "11cb48", "2869ce", "ee9e8c", "e13805"])
def test_philly_per_vc_load(vc: str) -> None:
    jobs = load_philly(PHILLY, vc=vc)
    assert len(jobs) == PHILLY_VCS[vc]
    assert {j.vc for j in jobs} == {vc}
    assert all(j.id.startswith(f"philly-{vc}-") for j in jobs)
    _assert_sorted(jobs)


def test_philly_origins_whole_file_vs_vc() -> None:
    shared = load_philly(PHILLY, vc="ee9e8c")
    own = load_philly(PHILLY, vc="ee9e8c", vc_origin=True)
    assert own[0].submit_time == 0.0
    assert shared[0].submit_time > 0.0
    shift = shared[0].submit_time
    assert [j.submit_time - shift for j in shared] == [j.submit_time for j in own]
    assert [j.id for j in shared] == [j.id for j in own]


def test_philly_readme_example_job(philly: list[TraceJob]) -> None:
    """The one job the Philly README prints (vc ee9e8c, 8 GPUs, 193,256 s)."""
    [job] = [j for j in philly if j.vc == "ee9e8c" and j.duration == 193_256.0]
    assert job.gpus == 8
    offset = datetime(2017, 10, 7, 1, 11, 39) - datetime(2017, 9, 4, 10, 30, 41)
    assert job.submit_time == offset.total_seconds()


def test_philly_window_and_max_jobs(philly: list[TraceJob]) -> None:
    day = 86_400.0
    jobs = load_philly(PHILLY, start_s=10 * day, end_s=11 * day)
    expected = [j for j in philly if 10 * day <= j.submit_time < 11 * day]
    assert jobs == expected and jobs
    capped = load_philly(PHILLY, start_s=10 * day, end_s=11 * day, max_jobs=25)
    assert capped == expected[:25]
    assert load_philly(PHILLY, max_jobs=0) == []


def test_philly_deterministic(philly: list[TraceJob]) -> None:
    again = load_philly(PHILLY)
    assert again == philly
    assert [j.id for j in again] == [j.id for j in philly]


def test_philly_unknown_vc_and_vc_origin_without_vc() -> None:
    with pytest.raises(InputError, match=r"no jobs for VC 'nope'.*6214e9"):
        load_philly(PHILLY, vc="nope")
    with pytest.raises(InputError, match="vc_origin"):
        load_philly(PHILLY, vc_origin=True)


# --- ITP / ElasticFlow --------------------------------------------------------------------------

ITP_COUNTS = {"01": 1_595, "04": 15_802, "05": 3_629, "07": 12_699, "09": 11_134, "10": 260}


@pytest.mark.parametrize(("cluster", "count"), sorted(ITP_COUNTS.items()))
def test_itp_raw_counts(cluster: str, count: int) -> None:
    jobs = load_itp(ITP / "raw" / f"cluster{cluster}.csv")
    assert len(jobs) == count
    _assert_sorted(jobs)
    assert all(j.duration is not None and j.iterations is None for j in jobs)


def test_itp_cluster10_histogram_and_relative() -> None:
    path = ITP / "raw" / "cluster10.csv"
    jobs = load_itp(path)
    assert Counter(j.gpus for j in jobs) == {1: 193, 2: 51, 4: 14, 16: 2}
    rel = load_itp(path, relative=True)
    assert rel[0].submit_time == 0.0
    assert jobs[0].submit_time > 0  # shared origin: cluster10 starts ~26 days in
    assert [j.submit_time - jobs[0].submit_time for j in jobs] == [j.submit_time for j in rel]


def test_itp_augmented_same_jobs_row_for_row() -> None:
    raw = load_itp(ITP / "raw" / "cluster05.csv")
    aug = load_itp_augmented(ITP / "augmented" / "cluster05.csv")
    assert [(j.id, j.submit_time, j.duration, j.gpus) for j in raw] == [
        (j.id, j.submit_time, j.duration, j.gpus) for j in aug
    ]
    assert {j.model for j in aug} == {
        "bert",
        "gpt2",
        "vgg16",
        "resnet50",
        "inception3",
        "deepspeech2",
    }
    assert all(j.iterations and j.batch_size for j in aug)


# SOURCES.md: "The same 69,351 job ids appear in raw/ and augmented/ (row-for-row)", so the
# augmented files have the raw counts of its table.
ITP_AUGMENTED = {"01": 1_595, "04": 15_802, "07": 12_699, "09": 11_134, "10": 260}


@pytest.mark.parametrize(("cluster", "count"), sorted(ITP_AUGMENTED.items()))
def test_itp_augmented_counts(cluster: str, count: int) -> None:
    jobs = load_itp_augmented(ITP / "augmented" / f"cluster{cluster}.csv")
    assert len(jobs) == count
    _assert_sorted(jobs)
    assert all(j.iterations and j.batch_size and j.model for j in jobs)


def test_itp_195job() -> None:
    jobs = load_itp_augmented(ITP / "augmented" / "195job.csv")
    assert len(jobs) == 195
    assert Counter(j.gpus for j in jobs) == {1: 118, 2: 1, 4: 45, 8: 28, 16: 3}


def test_itp_window() -> None:
    path = ITP / "raw" / "cluster04.csv"
    full = load_itp(path, relative=True)
    part = load_itp(path, relative=True, start_s=86_400, end_s=2 * 86_400, max_jobs=10)
    assert part == [j for j in full if 86_400 <= j.submit_time < 2 * 86_400][:10]


# --- Pollux -------------------------------------------------------------------------------------

POLLUX_SETS = {
    "workloads": 160,
    "workloads-0.5": 80,
    "workloads-1.5": 240,
    "workloads-2.0": 320,
    "workloads-realistic": 160,
}


@pytest.mark.parametrize(("folder", "count"), sorted(POLLUX_SETS.items()))
def test_pollux_workload_counts(folder: str, count: int) -> None:
    files = sorted((POLLUX / folder).glob("workload-*.csv"))
    assert files
    for path in files:
        jobs = load_pollux_workload(path)
        assert len(jobs) == count
        _assert_sorted(jobs)
        assert {j.model for j in jobs} <= {
            "cifar10",
            "ncf",
            "deepspeech2",
            "bert",
            "yolov3",
            "imagenet",
        }
        assert all(j.duration is None and j.iterations is None for j in jobs)
        assert all(j.submit_time < 8 * 3600 for j in jobs)


def test_pollux_realistic_keeps_the_same_jobs_with_smaller_requests() -> None:
    """SOURCES.md: ``workloads-realistic/`` "keeps the same jobs but with realistic (mostly
    1-GPU) user requests". This copy holds workloads 1-4 of the upstream 8."""
    files = sorted((POLLUX / "workloads-realistic").glob("workload-*.csv"))
    assert [f.name for f in files] == [f"workload-{i}.csv" for i in range(1, 5)]
    for path in files:
        real = load_pollux_workload(path)
        tuned = load_pollux_workload(POLLUX / "workloads" / path.name)
        assert [(j.id, j.submit_time, j.model) for j in real] == [
            (j.id, j.submit_time, j.model) for j in tuned
        ]
        assert sum(j.gpus for j in real) < sum(j.gpus for j in tuned)
        assert sum(j.gpus == 1 for j in real) > 0.9 * len(real)


# --- Gavel --------------------------------------------------------------------------------------

GAVEL_VCS = {
    "0e4a51": 1181,
    "103959": 986,
    "11cb48": 2000,
    "23dbec": 9,
    "2869ce": 533,
    "51b7ef": 18,
    "6214e9": 2000,
    "6c71a0": 2000,
    "795a4c": 3,
    "7f04ca": 972,
    "925e2b": 4,
    "b436b2": 2000,
    "e13805": 607,
    "ed69ec": 951,
    "ee9e8c": 2000,
}
GAVEL_PHYSICAL = {
    "artifact_evaluation": 15,
    "debug": 14,
    "debug_v2": 14,
    "highmem_test": 8,
    "max_min_fairness": 96,
    "medium_test": 20,
    "minimize_makespan": 100,
    "small_test": 20,
}


@pytest.mark.parametrize(("vc", "count"), sorted(GAVEL_VCS.items()))
def test_gavel_per_vc_counts(vc: str, count: int) -> None:
    jobs = load_gavel_trace(GAVEL / "msr_philly_per_vc_seed0" / f"{vc}.trace")
    assert len(jobs) == count
    assert jobs[0].submit_time == 0.0  # per-VC files count from the VC's first job
    assert {j.vc for j in jobs} == {vc}
    _assert_sorted(jobs)


@pytest.mark.parametrize(("name", "count"), sorted(GAVEL_PHYSICAL.items()))
def test_gavel_physical_counts(name: str, count: int) -> None:
    jobs = load_gavel_trace(GAVEL / "physical_cluster" / f"{name}.trace")
    assert len(jobs) == count
    assert all(j.vc is None for j in jobs)


def test_gavel_fields() -> None:
    jobs = load_gavel_trace(GAVEL / "msr_philly_per_vc_seed0" / "6214e9.trace")
    first = jobs[0]
    assert first.model == "Transformer (batch size 128)"
    assert first.batch_size == 128
    assert first.iterations == 20_851_471
    assert first.gpus == 1
    assert first.duration is None
    assert all(j.model for j in jobs)
    makespan = load_gavel_trace(GAVEL / "physical_cluster" / "minimize_makespan.trace")
    assert {j.submit_time for j in makespan} == {0.0}
    fairness = load_gavel_trace(GAVEL / "physical_cluster" / "max_min_fairness.trace")
    assert fairness[-1].submit_time == 46_317.0


# --- Tiresias -----------------------------------------------------------------------------------


def test_tiresias_60_jobs() -> None:
    jobs = load_tiresias(TIRESIAS / "60_job.csv")
    assert len(jobs) == 60
    assert Counter(j.gpus for j in jobs) == {1: 30, 2: 10, 4: 10, 8: 10}
    assert len({j.model for j in jobs}) == 10
    assert all(121 <= (j.duration or 0) <= 1_800 for j in jobs)
    assert jobs[0].submit_time == 0 and jobs[-1].submit_time == 1_779
    _assert_sorted(jobs)


def test_tiresias_cluster_shapes() -> None:
    n32g4 = load_tiresias_cluster(TIRESIAS / "n32g4.csv")
    assert n32g4.total_gpus == 128
    assert len(n32g4.nodes) == 32
    assert {n.switch for n in n32g4.nodes} == {"sw0"}
    n256g8 = load_tiresias_cluster(TIRESIAS / "n256g8.csv", gpu_type="a100")
    assert n256g8.total_gpus == 2048
    assert len({n.rack for n in n256g8.nodes}) == 8
    assert {n.gpu_type for n in n256g8.nodes} == {"a100"}


# --- paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("", "1 skipped")])
def test_missing_traces_fail_under_ci_and_skip_elsewhere(
    tmp_path: Path, ci: str, outcome: str
) -> None:
    import subprocess
    import sys

    env = {**os.environ, "CI": ci, ENV_VAR: str(tmp_path / "absent"), "GPUPLAN_REQUIRE_TRACES": ""}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{__file__}::test_itp_195job",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert outcome in run.stdout, run.stdout[-2000:]
    assert (run.returncode != 0) == (ci == "true")
    if ci:
        assert "required (CI)" in run.stdout


def test_resolve_trace_path(tmp_path: Path) -> None:
    assert resolve_trace_path("tiresias/60_job.csv", None) == (TIRESIAS / "60_job.csv").resolve()
    assert resolve_trace_path(str(PHILLY), None) == PHILLY
    own = _write(tmp_path, "mine.csv", "x\n1\n")
    assert resolve_trace_path("mine.csv", tmp_path) == own.resolve()
    # base first, shared folder second
    assert resolve_trace_path("tiresias/60_job.csv", tmp_path).is_file()
    with pytest.raises(InputError, match=re.escape("no/such.csv")):
        resolve_trace_path("no/such.csv", tmp_path)
    with pytest.raises(InputError, match="not found"):
        resolve_trace_path(str(tmp_path / "absent.csv"), None)


def test_shared_traces_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert shared_traces_dir() == tmp_path.resolve()
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(InputError, match=ENV_VAR):
        shared_traces_dir()


def test_select_window_bounds() -> None:
    times = [0.0, 1.0, 1.0, 2.0, 5.0]
    assert select_window(times, 1.0, 2.0) == slice(1, 3)
    assert select_window(times, None, None, 2) == slice(0, 2)
    assert select_window(times, 6.0, None) == slice(5, 5)
    with pytest.raises(InputError, match="before"):
        select_window(times, 5.0, 1.0)
    with pytest.raises(InputError, match="max_jobs"):
        select_window(times, None, None, -1)
    with pytest.raises(InputError, match="finite"):
        select_window(times, float("nan"), None)


# --- malformed input ----------------------------------------------------------------------------


def test_philly_bad_duration_names_row_and_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "p.csv",
        PHILLY_HEADER
        + "2017-10-09 07:01:55,66.0,1,66.0,a\n"
        + "2017-10-09 07:02:55,67.0,1,67.0,a\n"
        + "2017-10-09 07:03:55,abc,1,0,a\n",
    )
    with pytest.raises(InputError) as err:
        load_philly(path)
    text = str(err.value)
    assert "row 3" in text and "duration" in text and str(path) in text
    assert err.value.row == 3 and err.value.field == "duration"


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("2017-10-09 07:01:55,66.0,-2,66.0,a", "num_gpus"),
        ("2017-10-09 07:01:55,66.0,0,66.0,a", "num_gpus"),
        ("2017-10-09 07:01:55,66.0,1.5,66.0,a", "num_gpus"),
        ("2017-10-09 07:01:55,nan,1,66.0,a", "duration"),
        ("2017-10-09 07:01:55,0,1,0,a", "duration"),
        ("yesterday,66.0,1,66.0,a", "timestamp"),
        ("2017-10-09 07:01:55,66.0,1,66.0,", "cluster"),
    ],
)
def test_philly_bad_values(tmp_path: Path, line: str, field: str) -> None:
    path = _write(tmp_path, "p.csv", PHILLY_HEADER + line + "\n")
    with pytest.raises(InputError) as err:
        load_philly(path)
    assert err.value.row == 1 and err.value.field == field


def test_philly_missing_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.csv", "timestamp,duration,cluster\n2017-10-09 07:01:55,66.0,a\n")
    with pytest.raises(InputError, match="missing column 'num_gpus'"):
        load_philly(path)


def test_philly_short_row(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.csv", PHILLY_HEADER + "2017-10-09 07:01:55,66.0,1,66.0,a\n1,2\n")
    with pytest.raises(InputError, match=r"row 2.*expected 5 fields"):
        load_philly(path)


def test_trailing_blank_lines_and_crlf_ignored(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(
        b"timestamp,duration,num_gpus,gpu_time,cluster\r\n"
        b"2017-10-09 07:05:00,10,2,20,b\r\n"
        b"2017-10-09 07:00:00,5,1,5,a\r\n\r\n\n"
    )
    jobs = load_philly(path)
    assert [(j.id, j.submit_time) for j in jobs] == [("philly-a-2", 0.0), ("philly-b-1", 300.0)]
    assert jobs[0].source == f"{path}, row 2"  # the InputError form: file, row


def test_ties_keep_file_order(tmp_path: Path) -> None:
    rows = "".join(f"2017-10-09 07:00:00,{i + 1},1,1,v\n" for i in range(5))
    jobs = load_philly(_write(tmp_path, "p.csv", PHILLY_HEADER + rows))
    assert [j.id for j in jobs] == [f"philly-v-{i}" for i in range(1, 6)]


@pytest.mark.parametrize(
    "loader",
    [
        load_philly,
        load_itp,
        load_itp_augmented,
        load_pollux_workload,
        load_gavel_trace,
        load_tiresias,
        load_tiresias_cluster,
    ],
)
def test_empty_file(tmp_path: Path, loader: Callable[[Path], object]) -> None:
    path = _write(tmp_path, "empty.csv", "")
    with pytest.raises(InputError, match="empty file"):
        loader(path)


def test_header_only_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no data rows"):
        load_philly(_write(tmp_path, "p.csv", PHILLY_HEADER))


@pytest.mark.parametrize(
    "loader",
    [
        load_philly,
        load_itp,
        load_itp_augmented,
        load_pollux_workload,
        load_gavel_trace,
        load_tiresias,
        load_tiresias_cluster,
        philly_vcs,
    ],
)
def test_missing_file_names_path(tmp_path: Path, loader: Callable[[Path], object]) -> None:
    path = tmp_path / "nowhere" / "trace.csv"
    with pytest.raises(InputError, match="file not found") as err:
        loader(path)
    assert str(path) in str(err.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="directory"):
        load_philly(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(PHILLY_HEADER.encode() + b"\xff\xfe,1,1,1,a\n")
    with pytest.raises(InputError, match="UTF-8"):
        load_philly(path)


GAVEL7 = "ResNet-50 (batch size 64)\tcmd\t-step\t1\t1000\t{t}\t{sf}\n"


def test_gavel_wrong_column_count(tmp_path: Path) -> None:
    text = GAVEL7.format(t=0, sf=1) + GAVEL7.format(t=5, sf=2) + "A3C\tcmd\t5\n"
    with pytest.raises(InputError) as err:
        load_gavel_trace(_write(tmp_path, "x.trace", text))
    assert err.value.row == 3
    assert "expected 7" in str(err.value) and "found 3" in str(err.value)


def test_gavel_unknown_layout(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"7 .* or 10 .*found 4"):
        load_gavel_trace(_write(tmp_path, "x.trace", "a\tb\tc\td\n"))


def test_gavel_bad_scale_factor_and_quotes(tmp_path: Path) -> None:
    quoted = 'A3C\tpython3 main.py --env "PongNoFrameskip-v4"\t-n\t1\t10\t3.5\t1\n'
    jobs = load_gavel_trace(_write(tmp_path, "q.trace", quoted + GAVEL7.format(t=1, sf=4)))
    assert [j.gpus for j in jobs] == [4, 1]
    assert jobs[1].model == "A3C" and jobs[1].batch_size is None
    with pytest.raises(InputError) as err:
        load_gavel_trace(_write(tmp_path, "b.trace", GAVEL7.format(t=0, sf=0)))
    assert err.value.row == 1 and err.value.field == "scale_factor"


def test_itp_duplicate_id(tmp_path: Path) -> None:
    text = "job_id,submission_time,duration,num_gpu\nx,1,10,1\ny,2,10,1\nx,3,10,1\n"
    with pytest.raises(InputError, match="duplicate job_id 'x' \\(first at row 1\\)") as err:
        load_itp(_write(tmp_path, "c.csv", text))
    assert err.value.row == 3


def test_itp_augmented_needs_augmented_columns(tmp_path: Path) -> None:
    text = "job_id,submission_time,duration,num_gpu\nx,1,10,1\n"
    path = _write(tmp_path, "c.csv", text)
    assert len(load_itp(path)) == 1
    with pytest.raises(InputError, match="missing column 'num_iteration'"):
        load_itp_augmented(path)


def test_tiresias_cluster_rejects_two_rows_and_zero(tmp_path: Path) -> None:
    header = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
    with pytest.raises(InputError, match="exactly one"):
        load_tiresias_cluster(_write(tmp_path, "a.csv", header + "1,2,4,1,1\n1,2,4,1,1\n"))
    with pytest.raises(InputError) as err:
        load_tiresias_cluster(_write(tmp_path, "b.csv", header + "1,0,4,1,1\n"))
    assert err.value.field == "num_node_p_switch"
    with pytest.raises(InputError, match="less than or equal to 64"):
        load_tiresias_cluster(_write(tmp_path, "c.csv", header + "1,1,128,1,1\n"))


def test_every_loader_sorted_and_repeatable() -> None:
    loaders = [
        (load_itp, ITP / "raw" / "cluster07.csv"),
        (load_itp_augmented, ITP / "augmented" / "195job.csv"),
        (load_pollux_workload, POLLUX / "workloads" / "workload-2.csv"),
        (load_gavel_trace, GAVEL / "msr_philly_per_vc_seed0" / "ee9e8c.trace"),
        (load_tiresias, TIRESIAS / "60_job.csv"),
    ]
    for loader, path in loaders:
        first = loader(path)
        assert first == loader(path)
        _assert_sorted(first)
        assert len({j.id for j in first}) == len(first)


def test_gc_state_restored_after_load_and_error(tmp_path: Path) -> None:
    assert gc.isenabled()
    load_tiresias(TIRESIAS / "60_job.csv")
    assert gc.isenabled()
    with pytest.raises(InputError):
        load_philly(_write(tmp_path, "p.csv", PHILLY_HEADER + "x,1,1,1,a\n"))
    assert gc.isenabled()
    gc.disable()
    try:
        load_tiresias(TIRESIAS / "60_job.csv")
        assert not gc.isenabled()  # a caller's choice is left alone
    finally:
        gc.enable()


def test_build_job_turns_validation_errors_into_input_errors() -> None:
    with pytest.raises(InputError) as err:
        build_job("f.csv", 7, id="x", submit_time=-1.0, gpus=1)
    assert err.value.row == 7 and err.value.field == "submit_time"
    assert "f.csv" in str(err.value)
