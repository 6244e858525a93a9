"""Table 4's baselines as constraint toggles of Greedy (digest §2.11).

All use the opportunistic memory model, Eq. (3), and classic best-fit device choice (the least
residual capacity), since Best-fit "uses the least number of devices" in the paper:

* ``best-fit``: compute and memory only;
* ``i-greedy``: + device slowdown <= theta_max;
* ``b-greedy``: + balance (spread of a job's slowdowns <= theta_balance);
* ``c-greedy``: + collision probability <= tau_max.
"""

from __future__ import annotations

from gpuplan.models.ojpp import OjppInstance

from .greedy import run_greedy
from .packer import Rules

__all__ = ["BASELINE_RULES", "run_baseline"]

BASELINE_RULES: dict[str, Rules] = {
    "best-fit": Rules(collision=False, interference=False, balance=False, select="best-fit"),
    "i-greedy": Rules(collision=False, interference=True, balance=False, select="best-fit"),
    "b-greedy": Rules(collision=False, interference=False, balance=True, select="best-fit"),
    "c-greedy": Rules(collision=True, interference=False, balance=False, select="best-fit"),
}


def run_baseline(inst: OjppInstance, name: str) -> list[list[str]] | None:
    return run_greedy(inst, BASELINE_RULES[name])
