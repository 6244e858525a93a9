"""Every CLI table reads whole at 80 and 160 columns (issue 27 item 7; gpuplan/term.py).

Each command runs as a user would with ``COLUMNS`` set and its output piped. The printed
tables are read back from the text: no line wider than the width, no ellipsis anywhere (rich
cut cells as "17.…" and two inline configurations as the same "tiresias-l(thr…"), the names
of every table (its first column, put back together where a long name wraps) distinct and
exactly the expected ones, and in the metric tables every other cell a whole number. Then
:func:`gpuplan.term.fit_table` is checked on seeded random tables at many widths.
"""

from __future__ import annotations

import io
import random
import re
from collections.abc import Callable

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from gpuplan.cli import main
from gpuplan.scenarios.build import embedded_scenarios
from gpuplan.solve import PROBLEMS
from gpuplan.solver_core.params import describe_params
from gpuplan.solver_core.registry import policy_def, policy_names, wrapper_names
from gpuplan.term import fit_table

WIDTHS = (80, 160)
LONG_A = "tiresias-l(thresholds=[500],promote_knob=null)"
LONG_B = "tiresias-l(thresholds=[1000],promote_knob=null)"
NUMBER = re.compile(r"—|-|-?\d+(\.\d+)?( s| min| h| d|%|x)?|\d+ \(\d+\)")


def _first_two(cells: list[str], rows: list[list[str]]) -> bool:
    return bool(cells[0]) and (len(cells) < 2 or bool(cells[1]))


def _tables(text: str, starts: Callable[..., bool] = _first_two) -> list[list[list[str]]]:
    """The tables in ``text``: per table its body rows, each a list of cell texts. A body line
    for which ``starts(cells, rows so far)`` holds (by default: its first two cells hold text)
    starts a row; other lines continue the row above (a name or description wrapped onto
    more lines), their pieces joined to its cells."""
    tables: list[list[list[str]]] = []
    for line in text.splitlines():
        if line.startswith("┏"):
            tables.append([])
        elif line.startswith("│"):
            cells = [c.strip() for c in line.strip().strip("│").split("│")]
            rows = tables[-1]
            if not rows or starts(cells, rows):
                rows.append(cells)
            else:
                for i, piece in enumerate(cells):
                    sep = "" if i == 0 else " "
                    rows[-1][i] = (rows[-1][i] + sep + piece).strip() if piece else rows[-1][i]
    return tables


def _run(capsys: pytest.CaptureFixture[str], monkeypatch, width: int, argv: list[str]) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.strip()
    return out


def _check(text: str, width: int, expected: list[set[str]], numeric: bool) -> None:
    too_wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not too_wide, too_wide[:3]
    assert "…" not in text
    known = set().union(*expected)

    def starts(cells: list[str], rows: list[list[str]]) -> bool:
        """A row starts on a line with a name piece once the row above holds a whole known
        name that this piece does not continue (a wrapped name's second line may hold text in
        other columns too, so the default rule would split it)."""
        if not cells[0]:
            return False
        if not rows:
            return True
        above = rows[-1][0]
        return above in known and not any(n.startswith(above + cells[0]) for n in known)

    tables = _tables(text, starts)
    assert tables
    seen: list[set[str]] = []
    for rows in tables:
        names = [r[0] for r in rows]
        assert len(names) == len(set(names)), names
        assert set(names) in expected, (names, expected)
        seen.append(set(names))
        if numeric:
            for row in rows:
                for cell in row[1:]:
                    assert NUMBER.fullmatch(cell), (cell, row)
    assert all(e in seen for e in expected)


def _params(name: str) -> set[str]:
    return {row[0] for row in describe_params(policy_def(name).params)}


CASES = [
    pytest.param(
        ["compare", "--scenario", "h200-colocation", "--policies", f"{LONG_A},{LONG_B}"],
        lambda: [{LONG_A, LONG_B}],
        True,
        id="compare-inline-configurations",
    ),
    pytest.param(
        ["simulate", "--scenario", "h200-colocation", "--policy", "fifo"],
        lambda: [{"fifo"}],
        True,
        id="simulate",
    ),
    pytest.param(
        ["compare", "--scenario", "aryl-testbed", "--policies", "aryl-sjf,aryl"],
        lambda: [{"aryl-sjf", "aryl"}],
        True,
        id="compare-and-loaning",
    ),
    pytest.param(["scenarios"], lambda: [set(embedded_scenarios())], False, id="scenarios"),
    pytest.param(
        ["policies"], lambda: [set(policy_names()), set(wrapper_names())], False, id="policies"
    ),
    pytest.param(
        ["policies", "tiresias-l"], lambda: [_params("tiresias-l")], False, id="policy-params"
    ),
    pytest.param(["solve", "--list"], lambda: [set(PROBLEMS)], False, id="solve-list"),
    pytest.param(
        ["solve", "mckp", "--generate", "--size", "4", "--solvers", "dp,greedy"],
        lambda: [{"dp", "greedy"}],
        False,  # a status column ("optimal") beside the numbers
        id="solve",
    ),
]


@pytest.mark.parametrize(("argv", "expected", "numeric"), CASES)
@pytest.mark.parametrize("width", WIDTHS)
def test_cli_table_reads_whole(capsys, monkeypatch, width, argv, expected, numeric) -> None:
    text = _run(capsys, monkeypatch, width, argv)
    _check(text, width, expected(), numeric)


def test_the_check_fails_on_rich_s_own_shrinking() -> None:
    """The check above can fail: rich's own shrinking, at 80 columns, cuts both long names to
    the same text and the numbers with an ellipsis."""
    table = Table(title="t")
    table.add_column("Policy")
    for title in ("Avg JCT", "p99 JCT", "Avg queueing", "Makespan", "GPU util", "Unfinished"):
        table.add_column(title, justify="right")
    for name in (LONG_A, LONG_B):
        table.add_row(name.replace("[", r"\["), *["17.90 h"] * 6)
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(table)
    text = buf.getvalue()
    assert "…" in text
    names = [row[0] for row in _tables(text)[0]]
    assert len(set(names)) == 1  # both read "tiresias-l(thr…"
    with pytest.raises(AssertionError):
        _check(text, 80, [{LONG_A, LONG_B}], True)


def _random_table(rng: random.Random) -> tuple[Table, list[str], list[str]]:
    words = ["avg", "p99", "JCT", "queueing", "ratio", "(ms)", "decision", "usage", "GPU"]
    table = Table(title=" ".join(rng.choices(words, k=rng.randint(1, 8))))
    table.add_column("name")
    # a number first: a row's first line is the one whose second cell holds text (_tables)
    kinds = ["number"] + [rng.choice(["number", "text"]) for _ in range(rng.randint(0, 11))]
    for kind in kinds:
        header = " ".join(rng.choices(words, k=rng.randint(1, 4)))
        table.add_column(header, justify="right" if kind == "number" else "left")
    names, numbers = [], []
    for r in range(rng.randint(1, 6)):
        name = f"p{r}-" + "x" * rng.randint(0, 60)
        names.append(name)
        cells = []
        for kind in kinds:
            if kind == "number":
                cells.append(f"{rng.uniform(0, 10 ** rng.randint(0, 6)):.2f}")
                numbers.append(cells[-1])
            else:
                cells.append(" ".join(rng.choices(words, k=rng.randint(1, 30))))
        table.add_row(name, *cells)
    return table, names, numbers


@pytest.mark.parametrize("seed", range(25))
def test_fit_table_never_cuts_a_cell(seed: int) -> None:
    rng = random.Random(seed)
    table, names, numbers = _random_table(rng)
    for width in (60, 80, 100, 160, 240):
        buf = io.StringIO()
        out = Console(file=buf, width=width, color_system=None)
        for part in fit_table(table, width):
            out.print(part)
        text = buf.getvalue()
        assert all(cell_len(line) <= width for line in text.splitlines()), width
        assert "…" not in text
        tables = _tables(text, lambda cells, rows: cells[0].startswith(f"p{len(rows)}-"))
        assert tables
        for rows in tables:
            assert [r[0] for r in rows] == names
        body = [cell for rows in tables for row in rows for cell in row[1:]]
        for number in numbers:  # each whole, in some part
            assert number in body


def test_explain_text_fits_80_columns(capsys, monkeypatch, tmp_path) -> None:
    """``explain`` is text, not a table: wrapped at 80 columns whatever ``COLUMNS`` says."""
    pytest.importorskip("matplotlib")  # simulate --out draws its plots
    out = tmp_path / "run"
    _run(
        capsys,
        monkeypatch,
        160,
        ["simulate", "--scenario", "h200-colocation", "--policy", "tiresias-l", "--out", f"{out}"],
    )
    text = _run(capsys, monkeypatch, 160, ["explain", "transformer-1", "--run", str(out)])
    assert "start:" in text
    assert all(cell_len(line) <= 80 for line in text.splitlines())
