"""Run every benchmark: ``python -m tests.bench`` (``make bench``)."""

from __future__ import annotations

from . import sim_throughput

if __name__ == "__main__":
    print("== simulator throughput ==")
    sim_throughput.main()
