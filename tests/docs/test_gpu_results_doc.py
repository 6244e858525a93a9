"""docs/results/gpu.md reports the real-GPU run exactly as it was recorded.

The device run (``tests/gpu/run_on_device.sh`` on a lent H200; it drives ``gpuplan server``,
``gpuplan submit``, ``gpuplan cancel`` and ``gpuplan status --server --json``) wrote
``gpu-results.json``, committed as ``docs/results/data/gpu-results.json``. Every number of the
page's result tables is rebuilt here from that file and must appear in the page as one table row,
so the page can neither drift from the recording nor round it differently. CI has no GPU: this
checks the record, it does not repeat the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "results" / "gpu.md"
DATA = REPO / "docs" / "results" / "data" / "gpu-results.json"


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def expected_rows(r: dict[str, Any]) -> list[str]:
    """The result tables' rows, as the page must print them."""
    inv = r["inventory"]
    rec, smi = inv["records"][0], inv["nvidia_smi"]["rows"][0]
    rows = [
        f"| gpuplan (NVML) | {rec['uuid']} | {rec['model']} | {rec['memory_mib']} | "
        f"{rec['verdict']} |",
        f"| nvidia-smi | {smi['uuid']} | {smi['name']} | {smi['memory_mib']} | - |",
    ]
    p = r["preemption"]
    s = p["seconds"]
    first, second = p["segments"][0], p["segments"][1]
    rows += [
        f"| checkpoint at the preemption | step {p['checkpoint']['done']:.0f}, "
        f"loss {p['checkpoint']['loss']:.6f} |",
        f"| resumed run started from | step {p['resumed_from']:.0f}, "
        f"loss {p['resumed_loss']:.6f} |",
        f"| committed segments | [{first['start']:.0f}, {first['end']:.0f}] "
        f"({first['reason']}), [{second['start']:.0f}, {second['end']:.0f}] "
        f"({second['reason']}) |",
        f"| short job arrives -> long job checkpointed | {s['arrival_to_checkpointed']:.1f} s |",
        f"| short job (200 steps, its own start-up included) | {s['short_job']:.1f} s |",
        f"| short job ends -> long job's first step again | "
        f"{s['short_end_to_resumed_first_step']:.1f} s |",
    ]
    for label, pair in r["colocation"].items():
        a, b = sorted(pair["solo_steps_per_s"])
        pred = pair["predicted"]
        rows.append(
            f"| {label} ({pair['config']}) | {_f(pair['solo_steps_per_s'][a], 1)} / "
            f"{_f(pair['solo_steps_per_s'][b], 1)} | "
            f"{_f(pair['colocated_steps_per_s'][a], 1)} / "
            f"{_f(pair['colocated_steps_per_s'][b], 1)} | "
            f"{_f(pair['measured_slowdown'][a], 3)} / {_f(pair['measured_slowdown'][b], 3)} | "
            f"{_f(pred['simulator_h200'], 3)} | {_f(pred['ojpp_policy'], 3)} | "
            f"{_f(pair['combined_throughput_gain'])} | "
            f"{_f(pair['gpu_utilisation_alone'][a])} / {_f(pair['gpu_utilisation_alone'][b])} |"
        )
    return rows


def test_the_recorded_run_passed_every_check() -> None:
    r = json.loads(DATA.read_text())
    assert r["ok"] is True and all(r["checks"]) and not r["dry_run"]
    assert r["inventory"]["match"]
    pre = r["preemption"]
    assert pre["same_step_and_loss"] and pre["segments_tile_work"]
    assert pre["each_job_sees_exactly_its_gpu"] and pre["preempted_and_resumed"]
    for pair in r["colocation"].values():
        assert pair["same_gpu"]


def test_every_result_row_of_the_page_is_the_recording() -> None:
    doc = DOC.read_text(encoding="utf-8").splitlines()
    missing = [row for row in expected_rows(json.loads(DATA.read_text())) if row not in doc]
    assert not missing, "rows of docs/results/gpu.md that differ from the recording:\n" + "\n".join(
        missing
    )
