"""``gpuplan scenarios`` reads a static index (scenarios/listing.py): it must say what parsing
every embedded file says, and a file changed after the index was written is parsed instead."""

from __future__ import annotations

import json

import pytest

from gpuplan.scenarios import listing
from gpuplan.scenarios.build import embedded_scenarios, load_scenario_file


def _parsed_rows() -> list[tuple[str, str, str, str]]:
    return [
        listing.row_of(name, load_scenario_file(path))
        for name, path in embedded_scenarios().items()
    ]


def test_the_index_is_up_to_date() -> None:
    """Fails when an embedded scenario changed without ``python -m gpuplan.scenarios.listing``."""
    assert listing.INDEX.read_text(encoding="utf-8") == listing.index_text()


def test_listing_equals_parsing_every_file() -> None:
    rows = listing.listing()
    assert rows == _parsed_rows()
    assert len(rows) == len(embedded_scenarios()) >= 20


@pytest.mark.parametrize("damage", ["stale", "missing", "garbage", "other-version"])
def test_a_stale_or_broken_index_falls_back_to_parsing(monkeypatch, tmp_path, damage) -> None:
    index = tmp_path / "listing.json"
    data = json.loads(listing.INDEX.read_text(encoding="utf-8"))
    first = next(iter(data["scenarios"]))
    if damage == "stale":  # a file edited since: its hash differs, its old text must not show
        data["scenarios"][first]["sha256"] = "0" * 64
        data["scenarios"][first]["description"] = "OLD TEXT"
        index.write_text(json.dumps(data))
    elif damage == "garbage":
        index.write_text("{not json")
    elif damage == "other-version":
        data["version"] = listing.VERSION + 1
        data["scenarios"][first]["description"] = "OLD TEXT"
        index.write_text(json.dumps(data))
    monkeypatch.setattr(listing, "INDEX", index)
    rows = listing.listing()
    assert rows == _parsed_rows()
    assert all(r[3] != "OLD TEXT" for r in rows)
