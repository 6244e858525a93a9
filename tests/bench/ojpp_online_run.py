"""OJPAP inside the simulation loop (paper 002 Alg. 4, Fig. 10): benefit vs migration cost.

``python -m tests.bench.ojpp_online_run [--quick] [--out docs/results]`` prints every run's
line and, with ``--out``, writes ``ojpp-ojpap.json`` and the interference-over-time plot
``ojpp-ojpap.png``. The runs are :mod:`gpuplan.ojpap_reproduction`'s (what they are, and the
settings, are in its docstring); docs/results/ojpp.md quotes their numbers through
``gpuplan reproduce ojpp-ojpap-queues`` / ``ojpp-ojpap-drift``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpuplan.ojpap_reproduction import ARRIVE_S, BASE, DRIFT_BELIEF, drift, queues


def run(quick: bool = False) -> dict[str, Any]:
    """The queues (only Mixed with ``quick``) and the drift run, as ``ojpp-ojpap.json``."""
    return {"queues": queues(quick), "drift": drift()}


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drift = result["drift"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for trace, style, name in (
        (drift["monitor_trace"], ":", "without OJPAP"),
        (drift["trace"], "-", "with OJPAP"),
    ):
        hours = [row["t"] / 3600 for row in trace]
        ax.plot(hours, [row["max"] for row in trace], style, label=f"max GPU, {name}")
        ax.plot(hours, [row["mean"] for row in trace], style, label=f"mean GPU, {name}", alpha=0.7)
    ax.plot(
        [row["t"] / 3600 for row in drift["trace"]],
        [row["ewma_max"] for row in drift["trace"]],
        "--",
        lw=0.8,
        label="max EWMA",
    )
    for row in drift["trace"]:
        if row["moves"]:
            ax.axvline(row["t"] / 3600, color="red", lw=0.6, alpha=0.6)
    ax.axhline(BASE["theta_max"], color="grey", lw=0.8, label="theta-bar")
    ax.axvline(ARRIVE_S / 3600, color="black", lw=0.8, ls="-.", label="arrivals begin")
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("observed slowdown per GPU")
    ax.set_title("OJPAP in the loop: arrivals from 3 h, adjustments (red)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "ojpp-ojpap.png", dpi=110)
    plt.close(fig)


def _line(name: str, row: dict[str, Any]) -> str:
    off, on = row["off"], row["on"]
    per = row["cost_per_saved"]
    return (
        f"  {name:18s} mean JCT {off['mean_jct_s'] / 3600:6.2f} h -> "
        f"{on['mean_jct_s'] / 3600:6.2f} h ({100 * row['jct_gain']:+5.1f} %), makespan "
        f"{off['makespan_s'] / 3600:6.2f} -> {on['makespan_s'] / 3600:6.2f} h "
        f"({100 * row['makespan_gain']:+5.1f} %); {on['migrations']:3d} migrations in "
        f"{on['adjustments']:2d} adjustments, cost {100 * row['cost_share']:.2f} % of all "
        f"/ {100 * row['cost_share_moved']:.2f} % of the moved jobs' standalone time"
        + (f", {100 * per:.1f} % of the JCT saved" if per else "")
        + f"; moved jobs' JCT {100 * row['moved_jct_gain']:+.1f} %"
        + f" [{off['wall_s']:.1f} / {on['wall_s']:.1f} s wall]"
    )


def main(argv: list[str]) -> None:
    result = run(quick="--quick" in argv)
    print("queue/believed matrix: without -> with OJPAP")
    for name, row in result["queues"].items():
        print(_line(name, row))
    drift = result["drift"]
    print(_line(f"drift ({DRIFT_BELIEF})", drift))
    for key in ("without", "with"):
        i = drift[f"interference_{key}"]
        print(
            f"  drift interference from 3 h, {key:7s} OJPAP: per-round max GPU "
            f"{i['mean_of_max']:.3f} on average, mean GPU {i['mean_of_mean']:.3f}, "
            f"{i['rounds_max_above_0.3']} rounds with a GPU above 0.3"
        )
    if "--out" in argv:
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        plot(result, out)
        (out / "ojpp-ojpap.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
