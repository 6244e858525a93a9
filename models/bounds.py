"""Bounds on every number a user can give gpuplan (scenario files, state files, traces, CLI).

Why: a number can be valid for its type and still make a run hang or exhaust memory (a job of
``1e15`` seconds sampled once an hour, ``max_gpus: 2**63`` enumerated count by count, a
5,000-digit integer). Every input model checks against these, so bad input is refused in one
line naming its field instead of being discovered hours into a run. The bounds are far above
any real cluster or trace (docs/cli.md lists them).
"""

from __future__ import annotations

MAX_TIME_S = 20 * 365 * 86400.0
"""Any time or duration: 20 years (submit times, durations, intervals, limits)."""
MAX_ITERATIONS = 1e15
"""Work of one job in iterations."""
MAX_GPUS = 1 << 20
"""GPUs of one job (requested, elastic bounds) or one cluster."""
MAX_GPUS_PER_NODE = 64
"""GPUs of one node or server."""
MAX_NODES = 1 << 17
"""Nodes of one cluster."""
MAX_SEED = 2**32 - 1
"""Seeds: non-negative, within what NumPy's and OR-Tools' generators take."""
MAX_INPUT_BYTES = 256 << 20
"""Largest scenario or state file read (a device or a huge file is refused, not read)."""
SIMULATION_HORIZON_S = 2 * MAX_TIME_S
"""A simulation stops at this simulated time: every job that can run finishes long before,
and one that cannot (a near-zero throughput) is reported unfinished instead of running for
ever while the metrics sampler grows without bound."""
