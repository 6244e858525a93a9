"""The policies: one folder per paper, and this table of every name they register.

Folders: ``afs/`` (AFS / CoDDL), ``aryl/`` (Aryl: the policy and its reclaim, MCKP and
placement solvers), ``ojpp/`` (OJPP: the wrapper, OJPAP and the packing solvers), ``edl/``,
``sidecar/``, each with its entry module named after the paper (``afs/afs.py``), and
``baselines/`` (FIFO, SRTF/SRSF, SJF, Tiresias, Themis, Max-Min, Optimus, ...). Helpers that
several families share (ladders, water-filling, ranked queues) are in ``solver_core/helpers/``.

``DECLARED`` is what ``gpuplan policies`` lists and what configurations resolve against; the
registry reads it without importing the modules below, and imports a module the first time
one of its names is built (:mod:`..declarations`, docs/architecture.md, "The registry"). A
base policy's or wrapper's entry names the module whose ``POLICIES``/``WRAPPERS`` hold its
code; a preset is data only and lives here alone. The order is the order of the listing.

Modules without an entry here (``afs/afs_job``, ``sidecar/sidecar_model``, a paper's
solvers, ...) are helpers of the policy modules: nothing imports them unless a policy (or
``gpuplan solve``, for a paper's solvers) does.

Presets kept under names because results and benchmarks use them:

* ``<base>-packed`` = ``{base: <base>, wrappers: [network-packing]}`` (AFS/CoDDL §4.4, App. E):
  counts regulated to {1, 2, ..., GPUs per node, multiples of it} with the least change, then a
  reuse-maximising placement with no network sharing (Props. 1 and 2); ``<base>-reuse`` =
  ``{base: <base>, wrappers: [reuse]}``: the base counts, placed to keep as many jobs as
  possible on their GPUs (migrate only when unavoidable). Packing changes only which counts
  are legal and where GPUs go, so it is a wrapper any staged policy takes.
* ``<base>-learning`` (AFS §4.5, "overestimate first, re-adjust later"): in the simulator's
  learning mode a new job is believed to scale linearly; the ``learning`` wrapper caps an
  unmeasured job at its fair share ``max(1, M // n)`` until its curve is measured.
* ``<base>-ojpp`` and ``<base>-ojpp-ojpap``: OJPP co-location (paper 002) on a base policy,
  with OJPAP's online adjustment where the simulator observes interference.
"""

from __future__ import annotations

from ..declarations import Declared, policy, preset, wrapper


def _packed(base: str) -> tuple[Declared, Declared]:
    return (
        preset(
            f"{base}-packed",
            f"{base} with network packing (legal sizes, no network sharing) and reuse placement",
            base=base,
            wrappers=("network-packing",),
        ),
        preset(
            f"{base}-reuse",
            f"{base} with reuse-maximising placement (migrate only when unavoidable)",
            base=base,
            wrappers=("reuse",),
        ),
    )


def _learning(base: str, label: str) -> Declared:
    return preset(
        f"{base}-learning",
        f"{label} with AFS §4.5 learning: unmeasured jobs capped at their fair share M/n",
        base=base,
        wrappers=("learning",),
    )


def _ojpp(base: str) -> Declared:
    return preset(
        f"{base}-ojpp",
        f"{base} with OJPP co-location of jobs with a memory profile",
        base=base,
        wrappers=("ojpp",),
    )


def _ojpap(base: str) -> Declared:
    return preset(
        f"{base}-ojpp-ojpap",
        f"{base}-ojpp plus OJPAP online adjustment (Alg. 4) of "
        "over-interfered GPUs (simulator only: needs observed interference)",
        base=base,
        wrappers=("ojpp",),
        values={"ojpap": True},
    )


DECLARED: tuple[Declared, ...] = (
    # baselines/fifo.py, shortest_first.py: the rigid baselines
    policy("fifo", ".baselines.fifo", "rigid gang FIFO, no backfill (head-of-line blocking)"),
    policy("fifo-backfill", ".baselines.fifo", "rigid gang FIFO; later jobs that fit start early"),
    policy("srtf", ".baselines.shortest_first", "preemptive shortest remaining time first (rigid)"),
    policy(
        "srsf",
        ".baselines.shortest_first",
        "preemptive shortest remaining service (time x GPUs) first (rigid)",
    ),
    # afs/afs.py
    policy(
        "afs-l",
        ".afs.afs",
        "AFS-L: elastic GPU-by-GPU sharing by inequality (3), job lengths known",
    ),
    policy(
        "afs-p",
        ".afs.afs",
        "AFS-P: length-unaware AFS, (3) both ways + 2 h processor-sharing counters",
    ),
    policy(
        "afs-s",
        ".afs.afs",
        "AFS-S: AFS-P knowing only peak-throughput counts (capped max-min sharing)",
    ),
    # baselines/altruistic.py
    policy(
        "srtf-e",
        ".baselines.altruistic",
        "SRTF at requested GPUs, leftover GPUs to the largest throughput gain (AFS §5.5)",
    ),
    policy(
        "srsf-e",
        ".baselines.altruistic",
        "SRSF at requested GPUs, leftover GPUs to the largest throughput gain (AFS §5.5)",
    ),
    # aryl/aryl.py
    policy(
        "aryl",
        ".aryl.aryl",
        "Aryl: capacity loaning + elastic scaling (SJF + MCKP DP, grouped "
        "BFD, cost-greedy reclaim)",
    ),
    preset(
        "aryl-scaling",
        "Aryl elastic scaling only: two-phase allocation on training servers",
        base="aryl",
        values={"loaning": False},
    ),
    preset(
        "aryl-loaning",
        "Aryl capacity loaning only: rigid SJF on training + on-loan servers, cost-greedy reclaim",
        base="aryl",
        values={"scaling": False},
    ),
    preset(
        "aryl-loaning-scf",
        "capacity loaning only, Smallest-Count-First reclaim",
        base="aryl",
        values={"scaling": False, "reclaim": "scf"},
    ),
    preset(
        "aryl-loaning-random",
        "capacity loaning only, random reclaim (the run's seed)",
        base="aryl",
        values={"scaling": False, "reclaim": "random"},
    ),
    preset(
        "aryl-loaning-exact",
        "capacity loaning only, exact (CP-SAT) reclaim",
        base="aryl",
        values={"scaling": False, "reclaim": "exact"},
    ),
    preset(
        "aryl-exact",
        "Aryl with the exact (CP-SAT) reclaim instead of the greedy",
        base="aryl",
        values={"reclaim": "exact"},
    ),
    preset(
        "aryl-cpsat",
        "Aryl with phase 2 solved by CP-SAT instead of DP",
        base="aryl",
        values={"mckp": "cp-sat"},
    ),
    preset(
        "aryl-greedy",
        "Aryl with phase 2 solved by the marginal-gain greedy",
        base="aryl",
        values={"mckp": "greedy"},
    ),
    preset(
        "aryl-naive",
        "Aryl with naive BFD placement (no server groups; Tab. 6 ablation)",
        base="aryl",
        values={"grouped": False, "elastic_on_loan": False},
    ),
    preset(
        "aryl-sjf",
        "SJF with skip (Aryl phase 1 alone): no loaning, no scaling",
        base="aryl",
        values={"scaling": False, "loaning": False},
    ),
    preset(
        "aryl-hetero",
        "Aryl + heterogeneous training (App. A): flagged jobs may span "
        "training and loaned GPUs at 70 % of theoretical throughput (Advanced scenario)",
        base="aryl",
        values={"heterogeneous": True, "hetero_efficiency": 0.7},
    ),
    preset(
        "aryl-hetero-ideal",
        "Aryl + heterogeneous training at 100 % efficiency (Ideal scenario's hetero performance)",
        base="aryl",
        values={"heterogeneous": True, "hetero_efficiency": 1.0},
    ),
    # edl/edl.py, edl/elastic_tiresias.py
    policy(
        "edl-elastic",
        ".edl.edl",
        "EDL's synthetic-workload Elastic policy (003 §6.3): "
        "least-loaded machine, uniform shares per machine, scale out while throughput "
        "rises",
    ),
    policy(
        "elastic-tiresias",
        ".edl.elastic_tiresias",
        "EDL Elastic-Tiresias (003 Alg. 1): "
        "Tiresias-L plus compaction (scale in low-priority jobs when > N wait) and "
        "expansion (free GPUs to the largest relative throughput gain)",
    ),
    # learning presets (the learning wrapper is in ../wrappers.py)
    _learning("afs-l", "AFS-L"),
    _learning("afs-p", "AFS-P"),
    # baselines/max_gpus.py
    policy(
        "srtf-max",
        ".baselines.max_gpus",
        "SRTF, each job rigid at its max useful GPUs (AFS Fig. 6)",
    ),
    policy(
        "srsf-max",
        ".baselines.max_gpus",
        "SRSF, each job rigid at its max useful GPUs (AFS Fig. 6)",
    ),
    policy(
        "tiresias-l-max",
        ".baselines.max_gpus",
        "Tiresias-L (2D-LAS), each job rigid at its max useful GPUs (AFS Fig. 6)",
    ),
    # baselines/maxmin.py, maxmin_perf.py
    policy(
        "max-min",
        ".baselines.maxmin",
        "elastic max-min fair water-filling up to max useful GPUs; "
        "FIFO when jobs outnumber GPUs (length-unaware)",
    ),
    policy(
        "max-min-perf",
        ".baselines.maxmin_perf",
        "Gavel heterogeneity-aware max-min fairness (LP over time on GPU types, 360 s rounds)",
    ),
    policy(
        "max-min-agnostic",
        ".baselines.maxmin_perf",
        "Gavel heterogeneity-agnostic max-min fairness (max_min_fairness: the same LP with "
        "every throughput 1, 360 s rounds)",
    ),
    # baselines/gavel_fifo.py
    policy(
        "gavel-fifo",
        ".baselines.gavel_fifo",
        "Gavel's FIFO: arrival order, seeded random GPU type per job (or as Gavel's code "
        "ships: the last type), no backfill, Gavel's 360 s rounds",
    ),
    # baselines/offline_optimal.py
    policy(
        "offline-optimal",
        ".baselines.offline_optimal",
        "minimum average JCT with every arrival "
        "known (<= 12 jobs and 16 GPUs; rigid: time-indexed CP-SAT; elastic: exact "
        "continuous branch and bound over event orders; simulator only): the reference",
    ),
    # OJPP presets (the ojpp wrapper is in ojpp/ojpp.py)
    *(_ojpp(base) for base in ("fifo", "afs-l", "srtf")),
    *(_ojpap(base) for base in ("fifo", "afs-l", "srtf")),
    # baselines/optimus.py
    policy(
        "optimus",
        ".baselines.optimus",
        "Optimus: one GPU each in arrival order, then greedy "
        "largest remaining-time reduction per GPU (estimates assumed exact)",
    ),
    # pollux/pollux.py
    policy(
        "pollux",
        ".pollux.pollux",
        "Pollux (OSDI'21): every round, GPU counts (exact knapsack DP) and each job's batch "
        "size chosen together to maximise the generalised mean of goodput speedups",
    ),
    # packed and reuse presets
    *(
        d
        for base in ("afs-l", "afs-p", "srtf", "srsf", "tiresias-l", "max-min")
        for d in _packed(base)
    ),
    # sidecar/sidecar.py, sidecar/sidecar_baselines.py
    policy(
        "sidecar",
        ".sidecar.sidecar",
        "SideCar (004): Alg. 1 reshaping down with one donor for "
        "incoming jobs, Alg. 2 reshaping up for idle GPUs, least predicted makespan; one "
        "host per job",
    ),
    preset(
        "sidecar-accuracy",
        "SideCar for accuracy targets (WL4): job lengths predicted by "
        "Optimus-style NNLS fitting of noisy accuracy points (std 0.005), not known",
        base="sidecar",
        values={"accuracy_noise": 0.005},
    ),
    policy(
        "k8s-default",
        ".sidecar.sidecar_baselines",
        "Kubernetes default scheduler (SideCar "
        "baseline): a static count drawn from the job's options with the run's seed, "
        "first-fit on one host",
    ),
    policy(
        "termination",
        ".sidecar.sidecar_baselines",
        "Optimus-style termination baseline "
        "(SideCar): 1 GPU on arrival, then grow one option step at a time by "
        "terminate-and-restart, no shrink",
    ),
    # baselines/gittins.py
    policy(
        "tiresias-gittins",
        ".baselines.gittins",
        "Tiresias' discretised Gittins index "
        "(dlas-gpu-gittins): 3 GPU-time queues, ranked inside by the index of a GPU-service "
        "history, at the Tiresias simulator's events",
    ),
    # baselines/sjf.py, themis.py, tiresias.py
    policy(
        "sjf",
        ".baselines.sjf",
        "preemptive smallest-GPU-count first (Tiresias simulator's sjf), rigid",
    ),
    policy(
        "themis",
        ".baselines.themis",
        "Themis: finish-time fairness (rho) partial auctions among the "
        "worst 20%, random leftovers, 20-min GPU leases",
    ),
    policy(
        "tiresias-l",
        ".baselines.tiresias",
        "Tiresias-L: discretised 2D-LAS (GPU x time), 2 queues, rigid, preemptive, length-unaware",
    ),
    # wrappers (baselines/first_fit.py, ojpp/ojpp.py)
    wrapper(
        "first-fit",
        ".baselines.first_fit",
        "Slurm-like linear placement: nodes in name order, lowest GPU indices first",
    ),
    wrapper(
        "ojpp",
        ".ojpp.ojpp",
        "OJPP (paper 002): jobs with a memory profile packed as "
        "co-located workers under memory, collision, slowdown and balance bounds",
    ),
)
