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
MAX_OVERHEAD_S = 86400.0
"""Any overhead (start, restart, resize, migrate, checkpoint, measuring pauses): one day.
Measured overheads are milliseconds to minutes (CoDDL 4 ms, checkpoint-restart tens of s,
SideCar's termination restart 242 s); a day is 300 times the largest. A pause is paid at every
start or resize: a 20-year one (within ``MAX_TIME_S``) pushed a two-job, 100-s workload to
the simulator's 40-year stop, sampled hourly (350,000 samples, over a minute of work)."""
MAX_LIST = 4096
"""Entries of a list or table in one job or block (``elasticity.allowed``, throughput points,
``size_mix``): hand-written lists are a few dozen entries; every decision walks them."""
MAX_RATE = 1e9
"""Iterations/s of a throughput point: one iteration per nanosecond. Real profiles are 0.3 to
700 it/s (Gavel, AFS zoo); a larger number is a unit error and made cluster efficiency
(a speed-up sum) absurd (3.6e306 from one point of 1e308)."""
MAX_SUPERLINEAR = 16.0
"""Largest per-GPU speed-up over the smallest measured count: ``P(c)/c <= 16 P(c0)/c0``.
Scaling is at best slightly superlinear (Gavel's measured profiles reach 1.57x, from larger
aggregate caches); more is a typo, and cluster efficiency divides by ``P(1)``."""
MAX_SPEED = 1000.0
"""GPU speed factors: relative speeds, per-type multipliers and allocation efficiencies lie
within [1/1000, 1000] (known types span 0.1 to ~5 against a V100)."""
MIN_TIME_SCALE, MAX_TIME_SCALE = 1e-4, 1e4
"""``workload.time_scale``: AFS §5.3 replays at 0.01 and 0.002. Beyond 10^4 either way an hour
of trace becomes under 0.4 s or over a year of simulated time: JCTs of 1e-297 s are not a
result."""
MAX_QPS = 1e12
"""Requests per second in a QPS series (the Alibaba GenAI trace peaks near 10^3)."""
MAX_JOBS = 10_000_000
"""Jobs a synthetic workload generates or ``max_jobs`` keeps."""
MAX_JOBS_PER_HOUR = 1e9
"""``arrival_rate_per_h`` of a synthetic workload (Philly's busiest hour: a few hundred)."""
MIN_LOAN_RATIO, MAX_LOAN_RATIO = 0.01, 64.0
"""``loaning.ratio``: one inference GPU is worth between 1/100 and 64 training GPUs (T4 vs V100
is 1/4); a normalised server must still be a node of at most ``MAX_GPUS_PER_NODE`` slots and
its speed a ``GpuType`` speed (1e300 made a node of 8e300 GPUs: an internal error)."""
MAX_HEADROOM = 10.0
"""``loaning.headroom``: the inference side keeps at most 11x its load (the paper's SLA headroom
is ~10 %); a huge headroom overflowed the server count."""
