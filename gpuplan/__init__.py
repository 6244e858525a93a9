"""gpuplan: allocation engine for deep-learning training jobs on shared GPU clusters.

Library use::

    from gpuplan import run_scenario, summarize
    result = run_scenario("philly-default", "srtf")
    print(summarize(result).avg_jct_s)
"""

from gpuplan.executors.metrics import summarize
from gpuplan.solver_core.registry import make_policy, policy_names

from .api import compare, plan, run_scenario

__all__ = ["compare", "make_policy", "plan", "policy_names", "run_scenario", "summarize"]
__version__ = "0.1.0"
