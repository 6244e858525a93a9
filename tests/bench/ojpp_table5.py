"""OJPP results (paper 002 §5): Table 5, strategies per workload, AIP, placement cost.

``python -m tests.bench.ojpp_table5 [--out docs/results]`` prints every number of
docs/results/ojpp.md and, with ``--out``, writes ``ojpp.json``, the degradation plot and the
per-type plot (Fig. 7) there. The experiments are
:mod:`gpuplan.scenarios.ojpp_reproduction`'s, the ones ``gpuplan reproduce ojpp-*`` prints
(the doc quotes those commands); this script adds the summary, the JSON and the figures.
The OJPAP run is ``tests/bench/ojpp_online_run.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuplan.scenarios.ojpp_reproduction import (
    QUEUES,
    STRATEGIES,
    ablation,
    aip,
    per_model,
    strategies,
    table5,
)


def plot(strat: dict[str, dict[str, dict[str, float]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(STRATEGIES)
    for n, s in enumerate(STRATEGIES):
        xs = [k + n * width for k in range(len(QUEUES))]
        ax.bar(
            xs,
            [100 * strat[s][q]["slowdown"] for q in QUEUES],
            width,
            label="OJPP (Alg. 3)" if s == "heuristic" else s,
        )
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(QUEUES))], list(QUEUES))
    ax.set_ylabel("avg JCT degradation vs standalone (%)")
    ax.set_title("OJPP placement strategies, (tau, theta', theta) = (0.1, 0.2, 0.1)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "ojpp-degradation.png", dpi=110)
    plt.close(fig)


def plot_models(models: dict[str, dict[str, dict[str, float]]], out: Path) -> None:
    """Fig. 7 as ours: degradation per job type of the Mixed queue, one bar per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = list(next(iter(models.values())))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(STRATEGIES)
    for n, s in enumerate(STRATEGIES):
        xs = [k + n * width for k in range(len(types))]
        ax.bar(
            xs,
            [100 * models[s][t]["slowdown"] for t in types],
            width,
            label="OJPP (Alg. 3)" if s == "heuristic" else s,
        )
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(types))], types)
    ax.set_ylabel("avg JCT degradation vs standalone (%)")
    ax.set_title("Mixed queue per job type, (tau, theta', theta) = (0.1, 0.2, 0.1)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "ojpp-models.png", dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
    t5 = table5()
    print("Table 5 (heuristic, mean of 4 queues): setting -> ours (paper)")
    for row in t5:
        print(
            f"  {row['setting']}: performance {100 * row['performance']:.2f}% "
            f"({row['paper'][0]}%), reduction {100 * row['reduction']:.0f}% "
            f"({row['paper'][1]}%)  per queue: "
            + ", ".join(
                f"{q} {100 * r['performance']:.1f}%/{100 * r['reduction']:.0f}%"
                for q, r in row["queues"].items()
            )
        )
    strat = strategies()
    print("Strategies at (0.1, 0.2, 0.1): degradation % / GPUs per queue")
    for s, per in strat.items():
        mean = sum(r["slowdown"] for r in per.values()) / len(per)
        print(
            f"  {s:10s} mean {100 * mean:6.2f}%  "
            + ", ".join(f"{q} {100 * r['slowdown']:.1f}%/{r['gpus']}" for q, r in per.items())
        )
    models = per_model()
    print("Fig. 7, Mixed queue per job type: degradation % (worst job %)")
    for s, per in models.items():
        print(
            f"  {s:10s} "
            + ", ".join(
                f"{t} {100 * r['slowdown']:.1f}% ({100 * r['worst']:.1f})" for t, r in per.items()
            )
        )
    abl = ablation()
    print("Balance ablation (Mixed, all jobs w workers, theta-bar 0.4): degradation / GPUs")
    for r in abl:
        print(
            f"  w={r['workers']:2d}: with {100 * r['balance']['slowdown']:.1f}%/"
            f"{r['balance']['gpus']}, without {100 * r['no_balance']['slowdown']:.1f}%/"
            f"{r['no_balance']['gpus']}"
        )
    if "--quick" in argv:
        return
    result = aip()
    for h in result["held_out"]:
        print(
            f"AIP seed {h['seed']}: chose {h['chosen']}, held-out MAE {h['mae']:.3f}, "
            f"relative {100 * h['relative']:.2f}% over {h['pairs']:.0f} unseen pairs"
        )
    print(f"AIP stand-in block: relative {100 * result['block']['relative']:.2f}%")
    for s, c in result["placement_cost"].items():
        gpus = [(v["gpus_ideal"], v["gpus_predicted"]) for v in c["queues"].values()]
        print(f"  placement cost {s:10s} {100 * c['drop']:.2f}%  GPUs measured/predicted {gpus}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        plot(strat, out)
        plot_models(models, out)
        (out / "ojpp.json").write_text(
            json.dumps(
                {
                    "table5": t5,
                    "strategies": strat,
                    "models": models,
                    "ablation": abl,
                    "aip": result,
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
