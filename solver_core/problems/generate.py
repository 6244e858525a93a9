"""Seeded random instances of every ``gpuplan solve`` problem, for benchmarks and ``--generate``.

Why here and not in a benchmark: the command line, the solver x size bench and the tests must
draw the *same* instances from the same (problem, size, seed), so the generators live beside the
loaders that validate them. Each generator returns the parsed JSON of an instance file (plain
dicts and lists); :func:`instance_text` turns it into the file's bytes, identical for the same
arguments on any machine (one :class:`random.Random` per call, floats rounded to 3 decimals,
fixed key order). What ``size`` counts differs per problem (:data:`SIZE_MEANS`).

The shapes follow the decisions the engine makes: Aryl-like concave knapsack groups, 8-GPU loaned
servers shared by jobs spanning 1-8 of them (at 1,000 servers one coupled component, the hard
case of issue 15), AFS-style nodes with held GPUs, shares to regulate, and OJPP jobs with the
memory profiles and interference matrix of paper 002's ranges.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_SIZES", "GENERATORS", "MAX_SIZES", "SIZE_MEANS", "generate", "instance_text"]

Instance = dict[str, Any]


def _r(x: float) -> float:
    """Three decimals: short files, and no float repr that could differ between platforms."""
    return round(x, 3)


def gen_mckp(n: int, rng: random.Random) -> Instance:
    """``n`` groups of 1-4 items; each extra step of weight adds less value (concave, as
    Aryl's flexible workers); capacity a third of the largest total weight (tight)."""
    groups = []
    for g in range(n):
        base = rng.uniform(5.0, 50.0)
        step = rng.choice((1, 2, 4))
        items = []
        value = 0.0
        for k in range(rng.randint(1, 4)):
            value += base / (k + 1)
            items.append({"weight": step * (k + 1), "value": _r(value)})
        groups.append({"id": f"g{g}", "items": items})
    full = sum(g["items"][-1]["weight"] for g in groups)
    return {"capacity": full // 3, "groups": groups}


def gen_reclaim(n: int, rng: random.Random) -> Instance:
    """``n`` 8-GPU loaned servers filled by jobs spanning 1, 2, 4 or 8 servers (30 % elastic,
    allowed down to half their size); a quarter of the servers demanded back."""
    servers = [f"s{i}" for i in range(n)]
    free = dict.fromkeys(servers, 8)
    jobs: list[Instance] = []
    while len(jobs) < 4 * n:
        open_ = [s for s in servers if free[s] > 0]
        if not open_:
            break
        span = min(rng.choice((1, 1, 2, 4, 8)), len(open_))
        gpus = {s: rng.randint(1, free[s]) for s in rng.sample(open_, span)}
        for s, g in gpus.items():
            free[s] -= g
        job: Instance = {
            "id": f"j{len(jobs)}",
            "gpus": dict(sorted(gpus.items(), key=lambda kv: int(kv[0][1:]))),
        }
        total = sum(gpus.values())
        if total > 1 and rng.random() < 0.3:
            job["allowed"] = list(range(max(1, total // 2), total + 1))
        jobs.append(job)
    return {"servers": servers, "jobs": jobs, "demand": max(1, n // 4)}


def gen_placement(n: int, rng: random.Random) -> Instance:
    """``n`` nodes of ``unit`` GPUs (some partly busy); jobs of 1 to 2*unit GPUs asking for
    about the free capacity; two thirds already hold GPUs (where they ran last round) and a few
    are restricted to a subset of nodes (which includes those they hold GPUs on)."""
    unit = rng.choice((4, 8))
    nodes = {f"n{i}": (unit if rng.random() < 0.8 else rng.randint(0, unit)) for i in range(n)}
    names = list(nodes)
    capacity = sum(nodes.values())
    left = dict(nodes)
    jobs: list[Instance] = []
    asked = 0
    while asked < capacity and len(jobs) < 4 * n:
        count = rng.choice((1, 2, unit // 2, unit, unit, 2 * unit))
        job: Instance = {"id": f"j{len(jobs)}", "count": count}
        if rng.random() < 2 / 3:
            held: dict[str, int] = {}
            want = count
            for node in rng.sample(names, min(len(names), 1 + count // unit)):
                k = min(want, left[node], rng.randint(1, unit))
                if k > 0:
                    held[node] = k
                    left[node] -= k
                    want -= k
            if held:
                job["held"] = held
        if rng.random() < 0.15 and n > 1:  # where it may run: always where it holds GPUs
            may = set(rng.sample(names, rng.randint(1, n))) | set(job.get("held", {}))
            job["nodes"] = sorted(may, key=lambda s: int(s[1:]))
        jobs.append(job)
        asked += count
    return {"unit": unit, "nodes": nodes, "no_network_sharing": rng.random() < 0.75, "jobs": jobs}


def gen_packing(n: int, rng: random.Random) -> Instance:
    """``n`` jobs with shares 0-12 on ``unit`` = 4 or 8 GPU nodes, a fifth with allowed counts;
    capacity 70-100 % of the shares (so regulation must sometimes round down)."""
    unit = rng.choice((4, 8))
    jobs: list[Instance] = []
    for i in range(n):
        job: Instance = {"id": f"j{i}", "share": rng.choice((0, *range(1, 13)))}
        if rng.random() < 0.2:
            top = rng.randint(2, 16)
            job["allowed"] = sorted(rng.sample(range(1, top + 1), rng.randint(1, min(4, top))))
        jobs.append(job)
    total = sum(j["share"] for j in jobs)
    return {"unit": unit, "capacity": int(total * rng.uniform(0.7, 1.0)), "jobs": jobs}


_OJPP_TYPES = ("resnet", "vgg", "lenet", "bert", "lstm")


def gen_ojpp(n: int, rng: random.Random) -> Instance:
    """``n`` jobs of 1-4 workers, each worker small enough to fit a GPU alone; interference
    values for every ordered pair of the types drawn, same-type pairs the strongest."""
    jobs = []
    for i in range(n):
        gamma = rng.uniform(0.05, 0.35)
        jobs.append(
            {
                "id": f"j{i}",
                "workers": rng.randint(1, 4),
                "alpha": _r(rng.uniform(0.05, 0.5)),
                "gamma": _r(gamma),
                "delta": _r(gamma + rng.uniform(0.0, 0.25)),
                "p": _r(rng.uniform(0.0, 0.3)),
                "type": rng.choice(_OJPP_TYPES),
            }
        )
    types = sorted({j["type"] for j in jobs})
    matrix = {
        a: {b: _r(rng.uniform(0.1, 0.3) if a == b else rng.uniform(0.0, 0.2)) for b in types}
        for a in types
    }
    return {
        "tau_max": 0.1,
        "theta_max": 0.3,
        "theta_balance": 0.2,
        "composition": rng.choice(("additive", "max", "multiplicative")),
        "jobs": jobs,
        "interference": matrix,
    }


GENERATORS: dict[str, Callable[[int, random.Random], Instance]] = {
    "mckp": gen_mckp,
    "reclaim": gen_reclaim,
    "placement": gen_placement,
    "packing": gen_packing,
    "ojpp": gen_ojpp,
}

SIZE_MEANS = {
    "mckp": "groups",
    "reclaim": "loaned servers",
    "placement": "nodes",
    "packing": "jobs",
    "ojpp": "jobs",
}

DEFAULT_SIZES = {"mckp": 100, "reclaim": 100, "placement": 8, "packing": 50, "ojpp": 6}
"""``--size`` when none is given: solved by every exact solver in about a second here."""

MAX_SIZES = {"mckp": 10_000, "reclaim": 5_000, "placement": 1_000, "packing": 10_000, "ojpp": 1_000}
"""Largest ``size`` drawn: at least five times the largest size the solver bench measures
and beyond any decision the engine makes, while still drawn in seconds (reclaim's and
placement's generators are quadratic in ``size``: reclaim at 5,000 takes about 6 s here;
``--size 100000000`` used to grow memory without end)."""


def generate(problem: str, size: int | None = None, seed: int = 0) -> Instance:
    """The instance of ``problem`` with ``size`` (default :data:`DEFAULT_SIZES`) and ``seed``.

    ``problem`` must be a key of :data:`GENERATORS` and ``size`` in [1, :data:`MAX_SIZES`]
    (``ValueError`` otherwise; the CLI checks both first and reports one-line input errors)."""
    if problem not in GENERATORS:
        raise ValueError(f"no generator for {problem!r}")
    n = DEFAULT_SIZES[problem] if size is None else size
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SIZES[problem]:
        raise ValueError(f"size must be an integer in [1, {MAX_SIZES[problem]}], got {n!r}")
    # one stream per (problem, size, seed): a string seed is hashed by SHA-512, not hash()
    rng = random.Random(f"{problem}/{n}/{seed}")
    return GENERATORS[problem](n, rng)


def instance_text(data: Instance) -> str:
    """The file's text: one JSON object, stable key order, newline-terminated."""
    return json.dumps(data, indent=1) + "\n"
