"""Named reproductions of the papers' experiments that are not a scenario run: each prints
rows of numbers that a results page quotes (``gpuplan reproduce NAME --json``).

A simulated experiment is a scenario and a policy (``gpuplan compare``); some of the papers'
results are not: OJPP's Table 5 places static queues with its part-A solvers and scores the
plans, AIP trains a predictor on Gavel's measurements. Those experiments live in code
(``gpuplan.scenarios.ojpp_reproduction``; OJPAP's simulated runs, which need the simulator,
:mod:`gpuplan.ojpap_reproduction`), and this registry names them so that a results page can name
the command that prints each number and ``tests/docs/test_doc_commands.py`` can run it.
Entries import their module only when run, so listing them loads nothing heavy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplan.models.errors import InputError

Row = dict[str, Any]


@dataclass(frozen=True)
class Reproduction:
    """One experiment: what it shows, where its rows come from and what it needs."""

    name: str
    summary: str
    module: str
    """The module holding ``function`` (imported when the reproduction runs)."""
    function: str
    """Returns the rows; takes ``traces`` (the shared traces folder or None) when ``traces``."""
    traces: bool = False
    """Reads a file of the shared traces folder (``$GPUPLAN_TRACES`` or ``../shared/traces``)."""
    extra: str | None = None
    """The optional extra it needs (``ml``: scikit-learn)."""
    options: tuple[str, ...] = ()
    """The options of ``gpuplan reproduce`` it takes (of :data:`OPTIONS`), passed to
    ``function`` as keywords (``from-log`` as ``from_log``); the others it refuses."""

    def rows(self, traces: str | None = None, **options: Any) -> list[Row]:
        """Run the experiment (imports its module now) with the options given (None: not
        given); an option it does not take is an :class:`InputError`."""
        given = {k: v for k, v in options.items() if v is not None}
        for key in given:
            if key.replace("_", "-") not in self.options:
                takes = ", ".join(f"--{o}" for o in self.options) or "no options"
                raise InputError(
                    f"reproduction {self.name!r} does not take --{key.replace('_', '-')} "
                    f"(it takes {takes})",
                    field=key.replace("_", "-"),
                )
        if self.extra is not None:
            from gpuplan.models.extras import require_extra

            require_extra(self.extra, f"gpuplan reproduce {self.name}")
        fn: Callable[..., list[Row]] = getattr(importlib.import_module(self.module), self.function)
        return fn(traces=traces, **given) if self.traces else fn(**given)


OPTIONS = ("from-log", "log", "first", "instances")
"""Options a reproduction may declare: tabulate a recorded per-instance log instead of running,
append each instance's row to a log, and which seeds to run (a long run can be split)."""
OPTIMALITY = "gpuplan.optimality_reproduction"


REPRODUCTIONS: dict[str, Reproduction] = {
    r.name: r
    for r in (
        Reproduction(
            "ojpp-table5",
            "OJPP Table 5: Alg. 3's performance and GPUs saved at six bound settings, "
            "mean of the four queues, beside the paper's",
            "gpuplan.scenarios.ojpp_reproduction",
            "table5_rows",
        ),
        Reproduction(
            "ojpp-queues",
            "OJPP at the default bounds (0.1, 0.2, 0.1): performance and GPUs saved per queue",
            "gpuplan.scenarios.ojpp_reproduction",
            "queue_rows",
        ),
        Reproduction(
            "ojpp-strategies",
            "OJPP Figs. 5/8: degradation and GPUs of each placement strategy on each queue",
            "gpuplan.scenarios.ojpp_reproduction",
            "strategy_rows",
        ),
        Reproduction(
            "ojpp-models",
            "OJPP Fig. 7: the Mixed queue's degradation per job type under each strategy",
            "gpuplan.scenarios.ojpp_reproduction",
            "model_rows",
        ),
        Reproduction(
            "ojpp-ablation",
            "OJPP Fig. 9: degradation and GPUs with and without the balance bound, "
            "1-10 workers per job",
            "gpuplan.scenarios.ojpp_reproduction",
            "ablation_rows",
        ),
        Reproduction(
            "ojpp-aip",
            "OJPP AIP: the predictor chosen per seed and its error on unseen Gavel pairs",
            "gpuplan.scenarios.ojpp_reproduction",
            "aip_rows",
            traces=True,
            extra="ml",
        ),
        Reproduction(
            "ojpp-aip-cost",
            "OJPP AIP: the placement cost of planning with predicted interference",
            "gpuplan.scenarios.ojpp_reproduction",
            "aip_cost_rows",
            traces=True,
            extra="ml",
        ),
        Reproduction(
            "ojpp-ojpap-queues",
            "OJPAP in the loop on the four queues (wrapper believing the true or the "
            "default matrix): JCT and makespan gains, migrations, cost",
            "gpuplan.ojpap_reproduction",
            "queue_rows",
        ),
        Reproduction(
            "ojpp-ojpap-drift",
            "OJPAP in the loop, Fig. 10's drift (ResNet/VGG19 arrivals predicted harmless): "
            "interference from 3 h, JCT, migrations, cost, without and with OJPAP",
            "gpuplan.ojpap_reproduction",
            "drift_rows",
        ),
        Reproduction(
            "edl-synthetic",
            "EDL §6.3: 16 jobs arriving every 30 s on 32 GPUs, cluster and per-GPU "
            "throughput over time, Static (fifo) against Elastic (edl-elastic)",
            "gpuplan.edl_reproduction",
            "rows",
        ),
        Reproduction(
            "sidecar-reshaping",
            "SideCar Table VIII: adds, removes and reshaping overhead of default, "
            "termination and SideCar on Workloads One to Four",
            "gpuplan.sidecar_reproduction",
            "rows",
        ),
        Reproduction(
            "slurm-prediction",
            "Slurm lab (docs/results/slurm.md): the simulator's drain and mean JCT of the "
            "200-job workload per mode, with the lab's per-start costs and with free control",
            "gpuplan.slurm_lab_predict",
            "rows",
        ),
        Reproduction(
            "slurm-prediction-startups",
            "Slurm lab: the same prediction with Run S's 11-16 s start-up at every start",
            "gpuplan.slurm_lab_predict",
            "startup_rows",
        ),
        Reproduction(
            "slurm-start-cost",
            "Slurm lab: the simulator's drain and mean JCT with the per-start costs swapped: "
            "Slurm alone at the controller's 1.0 s, each policy at Slurm's 0.4 s",
            "gpuplan.slurm_lab_predict",
            "start_cost_rows",
        ),
        *(
            Reproduction(
                f"optimality-{kind}{suffix}",
                f"{what} ({kind} instances, 8 jobs on 8 GPUs; minutes of CPU: see --from-log)",
                OPTIMALITY,
                f"{kind}_{function}",
                options=OPTIONS,
            )
            for kind in ("rigid", "elastic")
            for suffix, function, what in (
                ("", "table", "Each policy's gap to offline-optimal and to its lower bound"),
                ("-offline", "offline", "offline-optimal's solves: closed, LPs, proven gap"),
                ("-open", "open", "The instances offline-optimal's search did not close"),
            )
        ),
    )
}


def reproduction(name: str) -> Reproduction:
    """The named reproduction; an unknown name is an :class:`InputError` listing the known."""
    try:
        return REPRODUCTIONS[name]
    except KeyError:
        known = ", ".join(REPRODUCTIONS)
        raise InputError(f"no reproduction named {name!r}; known: {known}", field="name") from None
