"""Hypothesis strategies that break valid inputs: structured documents and CSV/TSV text.

A structured mutant starts from a valid document and gets one to three mutations at places
under a focus path (so each input block gets its own share of cases): a wrong type, a deleted
key, deep nesting, an extra key, or a hostile value (huge and non-finite numbers, unicode
digits, long strings, long lists). A text mutant edits rows and cells of a valid CSV: junk in a
cell, a row of another width, a duplicated or dropped row, a deleted column, a BOM, NUL bytes,
a truncated file.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

HOSTILE_NUMBERS = [
    math.inf,
    -math.inf,
    math.nan,
    1e308,
    -1e308,
    1e300,
    1e-300,
    1e-9,
    2**63,
    2**64,
    10**4000,
    -1,
    0,
    0.5,
    131072,
    200_000,
    630720000,
    1e15,
    -0.0,
]

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from(HOSTILE_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        [
            "²",
            "١٢",
            "\u202e",
            "\x00",
            "",
            " ",
            "1e308",
            "nan",
            "-inf",
            "0x10",
            "../../etc/passwd",
            "/dev/zero",
            "${HOME}",
            "{{x}}",
            "[/red]",
        ]
    ),
    st.text(min_size=5000, max_size=6000, alphabet="ab€\u202e\x00"),
    st.lists(st.integers(min_value=-5, max_value=10**6), max_size=5),
    st.just(list(range(20_000))),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
"""Values that replace a field."""


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in ``doc`` a mutation can hit (keys of mappings, indexes of lists)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield (*prefix, key)
            yield from paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield (*prefix, i)
            yield from paths(value, (*prefix, i))


def nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    parent = doc
    for step in path[:-1]:
        if not isinstance(parent, (dict, list)):
            return None
        try:
            parent = parent[step]
        except (KeyError, IndexError, TypeError):
            return None
    return parent if isinstance(parent, (dict, list)) else None


@st.composite
def mutated(draw: st.DrawFn, base: Any, focus: tuple[Any, ...] = ()) -> Any:
    """``base`` with 1-3 mutations at or under ``focus``."""
    doc = copy.deepcopy(base)
    places = [p for p in paths(doc) if p[: len(focus)] == focus] or list(paths(doc))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(places))
        parent = _parent(doc, path)
        if parent is None:
            continue
        how = draw(st.sampled_from(["junk", "junk", "delete", "nest", "extra"]))
        with contextlib.suppress(KeyError, IndexError, TypeError):
            if how == "delete":
                del parent[path[-1]]
            elif how == "nest":
                parent[path[-1]] = nest(draw(st.sampled_from([50, 500])))
            elif how == "extra" and isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=8))] = draw(JUNK)
            else:
                parent[path[-1]] = draw(JUNK)
    return doc


CELL_JUNK = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "nan",
            "NaN",
            "inf",
            "-inf",
            "1e308",
            "-1",
            "0",
            "-0",
            "1e-300",
            "99999999999999999999999",
            "9" * 5000,
            "²",
            "١٢",
            "0x10",
            "1_000",
            "\x00",
            "\ufeff",
            '"',
            '"unterminated',
            "a,b",
            "2017-13-45 25:61:61",
            "1e15",
            "630720001",
            "4294967296",
            "true",
            "None",
        ]
    ),
    st.text(max_size=12),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@st.composite
def mutated_table(draw: st.DrawFn, text: str, delimiter: str = ",") -> str:
    """A CSV/TSV ``text`` with 1-3 edits of cells, rows or columns."""
    rows = [line.split(delimiter) for line in text.splitlines()]
    for _ in range(draw(st.integers(1, 3))):
        how = draw(
            st.sampled_from(
                [
                    "cell",
                    "cell",
                    "cell",
                    "width",
                    "dup",
                    "drop",
                    "column",
                    "bom",
                    "nul",
                    "truncate",
                    "blank",
                    "many",
                ]
            )
        )
        if not rows:
            rows = [[""]]
        r = draw(st.integers(0, len(rows) - 1))
        if how == "cell" and rows[r]:
            rows[r][draw(st.integers(0, len(rows[r]) - 1))] = draw(CELL_JUNK)
        elif how == "width":
            rows[r] = rows[r] + ["extra"] if draw(st.booleans()) else rows[r][:-1]
        elif how == "dup":
            rows.insert(r, list(rows[r]))
        elif how == "drop":
            del rows[r]
        elif how == "column" and rows[0]:
            c = draw(st.integers(0, len(rows[0]) - 1))
            rows = [row[:c] + row[c + 1 :] for row in rows]
        elif how == "bom":
            rows[0][0] = "\ufeff" + rows[0][0]
        elif how == "nul":
            rows[r].append("\x00")
        elif how == "truncate":
            rows = rows[: max(1, r)]
        elif how == "blank":
            rows.insert(r, [])
        elif how == "many" and len(rows) > 1:
            rows += [list(rows[-1]) for _ in range(draw(st.sampled_from([10, 300])))]
    return "\n".join(delimiter.join(row) for row in rows) + "\n"
