"""The rows of ``gpuplan scenarios``, from a small static index of the embedded scenarios.

Why an index: parsing the 29 embedded YAML files and validating each as a
:class:`~gpuplan.models.ScenarioSpec` costs most of a cold ``gpuplan scenarios`` (PyYAML's
Python loader, pydantic's model building); the listing's goal is 0.3 s (issue 28). The index,
``data/listing.json``, keeps each file's four columns beside the SHA-256 of its bytes. A row is
taken from the index only when the file's bytes still hash to that value; any other file (an
edited or added scenario in a development tree) is parsed as before, so the listing is never
stale, only slower. ``python -m gpuplan.scenarios.listing`` rewrites the index;
tests/scenarios/test_scenario_listing.py fails while it is out of date.

The index ships inside the package and is read like the scenarios themselves: whoever can
write it can also write the scenario files, so it grants nothing more.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuplan.models import ScenarioSpec

__all__ = ["INDEX", "listing", "row_of", "write_index"]

DATA = Path(__file__).resolve().parent / "data"
INDEX = DATA / "listing.json"
SUFFIX = ".scenario.yaml"
VERSION = 1
"""Bumped when a row's columns change meaning: an index of another version is ignored."""

Row = tuple[str, str, str, str]
"""name, cluster, workload, description."""


def _files() -> dict[str, Path]:
    """The embedded scenario files, name -> path, sorted by name (as ``embedded_scenarios``)."""
    found = {p.name.removesuffix(SUFFIX): p for p in DATA.iterdir() if p.name.endswith(SUFFIX)}
    return dict(sorted(found.items()))


def row_of(name: str, spec: ScenarioSpec) -> Row:
    """A scenario's row: its cluster's shape (with the lending pool), workload source and
    description."""
    c = spec.cluster
    shape = (
        f"{c.nodes} x {c.gpus_per_node} {c.gpu_type}"
        if isinstance(c.nodes, int)
        else f"{len(c.nodes)} nodes"
    )
    if spec.loaning is not None:
        lo = spec.loaning
        shape += f" + {lo.servers} x {lo.gpus_per_server} {lo.gpu_type} lending"
    return (name, shape, spec.workload.source, spec.description)


def _parsed(name: str, path: Path) -> Row:
    from .build import load_scenario_file

    return row_of(name, load_scenario_file(path))


def _read_index() -> dict[str, dict[str, str]]:
    """The index's entries; none when it is missing, unreadable or of another version."""
    try:
        data = json.loads(INDEX.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return {}
    entries = data.get("scenarios")
    return entries if isinstance(entries, dict) else {}


def listing() -> list[Row]:
    """Every embedded scenario's row: from the index where the file is unchanged, else parsed."""
    entries = _read_index()
    rows = []
    for name, path in _files().items():
        entry = entries.get(name)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if isinstance(entry, dict) and entry.get("sha256") == digest:
            cols = [entry.get(k) for k in ("cluster", "workload", "description")]
            if all(isinstance(v, str) for v in cols):
                rows.append((name, cols[0], cols[1], cols[2]))
                continue
        rows.append(_parsed(name, path))
    return rows


def index_text() -> str:
    """The index as it should be: every embedded file parsed."""
    scenarios = {}
    for name, path in _files().items():
        _, cluster, workload, description = _parsed(name, path)
        scenarios[name] = {
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "cluster": cluster,
            "workload": workload,
            "description": description,
        }
    return json.dumps({"version": VERSION, "scenarios": scenarios}, indent=1) + "\n"


def write_index() -> Path:
    INDEX.write_text(index_text(), encoding="utf-8")
    return INDEX


if __name__ == "__main__":
    print(f"wrote {write_index()}", file=sys.stderr)
