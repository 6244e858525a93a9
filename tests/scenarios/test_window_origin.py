"""``workload.origin``: the clock a Philly / ITP window counts on (docs/results/aryl.md's
windows are days of one VC's own clock, not of the whole Philly file's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuplan.cli import main
from gpuplan.scenarios.build import build, load_scenario_file

PHILLY = (
    "timestamp,duration,num_gpus,gpu_time,cluster\n"
    "2017-10-01 00:00:00,10,1,10,other\n"  # the file's first submission, another VC
    "2017-10-02 00:00:00,10,1,10,vc\n"  # vc's first: one day later
    "2017-10-02 01:00:00,10,2,20,vc\n"
    "2017-10-03 00:30:00,10,1,10,vc\n"
)
ITP = "job_id,submission_time,duration,num_gpu\na,5000,10,1\nb,8600,10,1\nc,95000,10,2\n"


def _scenario(tmp_path: Path, workload: dict) -> Path:
    path = tmp_path / "s.yaml"
    data = {"name": "t", "cluster": {"nodes": 1, "gpus_per_node": 4}, "workload": workload}
    path.write_text(yaml.safe_dump(data))
    return path


def _ids(path: Path) -> list[str]:
    return [j.id for j in build(load_scenario_file(path), path.parent).jobs]


def test_philly_first_counts_from_the_vcs_own_first_submission(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(PHILLY)
    window = {"source": "philly", "path": "t.csv", "vc": "vc", "start_s": 0, "end_s": 7200}
    # The file's clock: the vc's jobs are a day after its origin, outside [0, 2 h).
    assert _ids(_scenario(tmp_path, window)) == []
    # The vc's own clock: its first two jobs are at 0 and 1 h.
    assert _ids(_scenario(tmp_path, {**window, "origin": "first"})) == [
        "philly-vc-2",
        "philly-vc-3",
    ]


def test_itp_first_counts_from_the_files_earliest_submission(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text(ITP)
    window = {"source": "itp", "path": "c.csv", "start_s": 0, "end_s": 3601}
    assert _ids(_scenario(tmp_path, window)) == []  # raw times 5000 s and later
    assert _ids(_scenario(tmp_path, {**window, "origin": "first"})) == ["a", "b"]


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        (
            {
                "source": "synthetic",
                "jobs": 2,
                "arrival_rate_per_h": 1,
                "mean_duration_s": 60,
                "origin": "first",
            },
            "origin 'first' applies to the itp, itp_augmented, philly sources, not 'synthetic'",
        ),
        ({"source": "philly", "path": "t.csv", "origin": "vc"}, "workload.origin"),
    ],
)
def test_a_bad_origin_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: dict, expected: str
) -> None:
    path = _scenario(tmp_path, workload)
    code = main(["simulate", "--scenario", str(path), "--policy", "fifo"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert str(path) in lines[0] and expected in lines[0], lines[0]
