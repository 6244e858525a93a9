"""Throughput learning presets: "overestimate first, re-adjust later" (AFS §4.5).

In the simulator's learning mode (``LearningSpec``) a new job is believed to scale linearly, so a
share policy would happily hand it many GPUs. The paper limits that first share to the job's fair
share, ``floor(M / n)`` GPUs (at least one), until the job has measured its real curve; the next
decision after the measurement arrives re-adjusts it. The ``learning`` wrapper
(:class:`gpuplan.solver_core.wrappers.FairShareUntilMeasured`) applies that cap to any policy;
these presets keep the names the AFS results use.
"""

from __future__ import annotations

from ..registry import PolicyDef

POLICIES = [
    PolicyDef("afs-l-learning", "AFS-L with AFS §4.5 learning: unmeasured jobs capped at their "
              "fair share M/n", base="afs-l", wrappers=("learning",)),
    PolicyDef("afs-p-learning", "AFS-P with AFS §4.5 learning: unmeasured jobs capped at their "
              "fair share M/n", base="afs-p", wrappers=("learning",)),
]
