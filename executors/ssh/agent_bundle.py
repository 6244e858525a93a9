"""The one script shipped to every node, built from the :mod:`.agent` package's modules.

Why a bundle: a node runs the sidecar with its own ``python3`` and has nothing of gpuplan
installed, so the executor uploads a single self-contained file (content-addressed,
``{root}/.sidecar-<sha12>.py``, see :mod:`.remote`); the package is split by purpose for the
people who read and test it. :func:`agent_source` joins the modules in dependency order —
their relative imports removed (every name they import must be defined by an earlier module),
their stdlib imports gathered once at the top under the package's docstring — and ends with the
one ``if __name__ == "__main__"`` that runs :func:`~.agent.program.main`. The text depends only
on the modules' text, so its digest changes exactly when the shipped program does, and the
local transport (single server) installs and runs the very same script.

A module of the package must keep this layout for the bundle to be right, and the bundler
refuses anything else (a :class:`BundleError` at import of :mod:`.remote`, so a broken bundle
never ships): docstring, imports (absolute ones from the standard library only), then code with
no further top-level import; no top-level name defined in two modules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).with_name("agent")
"""The package's folder (its ``.py`` files ship in the wheel)."""
MODULES = ("files", "sidecar", "commands", "nvml_reader", "program")
"""The modules bundled, each after every module it imports from. ``__init__`` gives only its
docstring (its re-exports are the package's API on the engine host), ``__main__`` nothing."""
MAIN_GUARD = 'if __name__ == "__main__":\n    sys.exit(main())\n'


class BundleError(RuntimeError):
    """A module of the agent package breaks the layout the bundle needs (a developer error)."""


def _lines_of(lines: list[str], node: ast.stmt) -> str:
    """The whole lines a top-level statement spans (a slice: ``ast.get_source_segment`` would
    split the file again for every statement)."""
    return "".join(lines[node.lineno - 1 : node.end_lineno]).rstrip("\n")


def _docstring_source(where: str, lines: list[str], tree: ast.Module) -> str:
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        raise BundleError(f"{where}: no module docstring")
    return _lines_of(lines, first)


def _module_part(
    package: Path, name: str, defined: set[str], imports: set[str]
) -> tuple[str, set[str]]:
    """The code of ``<package>/<name>.py`` after its imports, and the top-level names it
    defines. Its stdlib imports go into ``imports``; its relative imports are checked against
    ``defined`` (the names of the modules before it) and dropped."""
    path = package / f"{name}.py"
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    lines = text.splitlines(keepends=True)
    _docstring_source(f"{package.name}/{name}.py", lines, tree)
    body_from: int | None = None  # 0-based line where the code after the imports starts
    names: set[str] = set()
    for node in tree.body[1:]:
        where = f"{package.name}/{name}.py line {node.lineno}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            if body_from is not None:
                raise BundleError(f"{where}: import after code")
            if isinstance(node, ast.ImportFrom) and node.level:
                for alias in node.names:
                    if alias.asname or alias.name not in defined:
                        raise BundleError(
                            f"{where}: {alias.name!r} is not defined by an earlier module "
                            "(or is renamed)"
                        )
                continue
            roots = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for root in (r.partition(".")[0] for r in roots):
                if root != "__future__" and root not in sys.stdlib_module_names:
                    raise BundleError(f"{where}: {root!r} is not in the standard library")
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            imports.add(_lines_of(lines, node))
            continue
        if body_from is None:
            end = max(n.end_lineno or n.lineno for n in tree.body[: tree.body.index(node)])
            body_from = end  # the line after the last import (comments before code stay)
        names |= _defined_names(node)
    clash = names & defined
    if clash:
        raise BundleError(
            f"{package.name}/{name}.py: {sorted(clash)} already defined by an earlier module"
        )
    body = "".join(lines[body_from:]) if body_from is not None else ""
    return body.strip("\n") + "\n", names


def _defined_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def agent_source(package: Path = PACKAGE, modules: tuple[str, ...] = MODULES) -> str:
    """The shipped script: the package docstring, the gathered stdlib imports, each module's
    code in ``modules`` order, and the ``__main__`` guard. Deterministic; compiled here once
    so that a bundle that is not valid Python never leaves the engine. (``package`` and
    ``modules`` are parameters for the bundler's own tests.)"""
    init_text = (package / "__init__.py").read_text(encoding="utf-8")
    docstring = _docstring_source(
        f"{package.name}/__init__.py", init_text.splitlines(keepends=True), ast.parse(init_text)
    )
    imports: set[str] = set()
    defined: set[str] = set()
    parts: list[str] = []
    for name in modules:
        body, names = _module_part(package, name, defined, imports)
        defined |= names
        rule = "-" * max(4, 96 - len(name) - 6)
        parts.append(f"# {rule} {name}.py\n\n{body}")
    if "main" not in defined or "import sys" not in imports:
        raise BundleError("agent bundle: needs main() and 'import sys' for its __main__ guard")
    plain = sorted(i for i in imports if i.startswith("import "))
    froms = sorted(i for i in imports if not i.startswith("import "))
    source = "\n".join(
        [
            docstring,
            "",
            "from __future__ import annotations",
            "",
            *plain,
            *froms,
            "",
            "",
            "\n\n".join(parts),
            "",
            MAIN_GUARD,
        ]
    )
    compile(source, "<agent bundle>", "exec")
    return source
