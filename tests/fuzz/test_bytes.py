"""Random bytes (and random text) as every kind of file the CLI reads: scenario YAML and
JSON, state JSON, solve instances, sweep files, and a scenario's trace and QPS files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import strategies as st

from .bases import SCENARIOS, SMALL, dump, policy_for, write_secondary
from .harness import Outcome, classify, explore, run_in_process

SLOTS: dict[str, tuple[str, list[str]]] = {  # slot -> (file name, argv with {path})
    "scenario-yaml": ("s.yaml", ["simulate", "--scenario", "{path}", "--policy", "fifo"]),
    "scenario-json": ("s.json", ["simulate", "--scenario", "{path}", "--policy", "fifo"]),
    "state": ("state.json", ["plan", "--state", "{path}", "--policy", "fifo"]),
    "instance": (
        "i.json",
        ["solve", "packing", "--instance", "{path}", "--solvers", "greedy-deficit"],
    ),
    "sweep": ("sweep.yaml", ["sweep", "{path}", "--out", "{dir}/out", "--workers", "1"]),
    "trace": ("philly.csv", ["simulate", "--scenario", "{dir}/scenario.yaml", "--policy", "fifo"]),
    "qps": (
        "qps.csv",
        ["simulate", "--scenario", "{dir}/scenario.yaml", "--policy", "aryl-loaning"],
    ),
}
BYTES = st.one_of(
    st.binary(max_size=600),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from(
        [
            b"",
            b"\xef\xbb\xbf",
            b"\x00" * 64,
            b"---\n...\n",
            b"[]",
            b"{}",
            b"null",
            b"- - -",
            b"!!binary AAAA",
        ]
    ),
)


@pytest.mark.parametrize("slot", sorted(SLOTS))
def test_bytes_as_every_file(slot: str, case_dir: Callable[[], Path]) -> None:
    name, argv = SLOTS[slot]
    base = {"trace": "philly", "qps": "loaning"}.get(slot)

    def body(data: bytes) -> tuple[str, Outcome]:
        folder = case_dir()
        write_secondary(folder, {name: data} if base else None)
        (folder / "scenario.yaml").write_bytes(dump(SCENARIOS[base][0] if base else SMALL, "yaml"))
        if not base:
            (folder / name).write_bytes(data)
        path = folder / name
        args = [a.replace("{path}", str(path)).replace("{dir}", str(folder)) for a in argv]
        if base:
            args[-1] = policy_for(base)
        return f"{slot}: {data[:120]!r}", classify(
            *run_in_process(args, cwd=folder), names=[str(folder)]
        )

    explore("bytes", BYTES, body, 12)
