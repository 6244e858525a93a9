"""The policy registry: strict (a name twice is an error naming both modules), declared (the
tables match what the modules register, both ways), lazy (listing imports no policy module;
``make_policy('fifo')`` imports no solver backend), and core never imports a plugin."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pkgutil
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from gpuplan.solver_core.params import PolicyConfig
from gpuplan.solver_core.policies.aryl.hetero import ADVANCED_EFFICIENCY, IDEAL_EFFICIENCY
from gpuplan.solver_core.policy import StagedPolicy
from gpuplan.solver_core.registry import (
    TABLES,
    PolicyDef,
    Registry,
    RegistryError,
    make_policy,
    policy_def,
    policy_names,
    wrapper_names,
)

POLICIES_PACKAGE = "gpuplan.solver_core.policies"
SOLVER_CORE = Path(importlib.import_module("gpuplan.solver_core").__file__).parent
HEAVY = (
    "ortools",
    "scipy.optimize",
    "pulp",
    "gpuplan.solver_core.policies.aryl",
)


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> str:
    """A real package on ``sys.path`` (unique name, removed from ``sys.modules`` afterwards)."""
    name = f"regtest_{uuid.uuid4().hex[:12]}"
    root = tmp_path / name
    root.mkdir()
    header = (
        "from gpuplan.solver_core.declarations import policy, preset, wrapper\n"
        "from gpuplan.solver_core.registry import PolicyDef, WrapperDef, parameterless\n"
    )
    for file, body in files.items():
        (root / file).write_text(header + textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in [m for m in sys.modules if m.startswith("regtest_")]:
        monkeypatch.delitem(sys.modules, mod)
    return name


def _own_build(params: object, seed: int) -> StagedPolicy:
    return make_policy("fifo").renamed("mine")  # type: ignore[union-attr]


# ------------------------------------------------------------------------------ strictness
def test_a_name_declared_in_two_tables_is_refused_naming_both_modules(tmp_path, monkeypatch):
    a = _package(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": 'DECLARED = (policy("twin", ".one", "first"),)\n',
            "one.py": 'POLICIES = [parameterless("twin", lambda: None)]\n',
        },
    )
    b = _package(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": 'DECLARED = (policy("twin", ".two", "second"),)\n',
            "two.py": 'POLICIES = [parameterless("twin", lambda: None)]\n',
        },
    )
    with pytest.raises(RegistryError, match="registered twice") as err:
        Registry((a, b)).policies()
    assert f"{a}.one" in str(err.value) and f"{b}.two" in str(err.value)
    assert Registry((a,)).policies()["twin"].summary == "first"  # alone, each table is fine


def test_a_preset_named_like_a_base_is_refused(tmp_path, monkeypatch):
    pkg = _package(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": """
        DECLARED = (policy("p", ".one", "base"), preset("p", "again", base="p"))
    """
        },
    )
    with pytest.raises(
        RegistryError,
        match=rf"'p' is registered twice: by {pkg}\.one and by "
        rf"{pkg}$",
    ):
        Registry((pkg,)).policies()


def test_a_module_registering_another_modules_name_is_refused(tmp_path, monkeypatch):
    pkg = _package(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": 'DECLARED = (policy("p", ".one", "p"), policy("q", ".two", "q"))\n',
            "one.py": 'POLICIES = [parameterless("p", lambda: "p from one")]\n',
            "two.py": 'POLICIES = [parameterless("q", lambda: "q"), '
            'parameterless("p", lambda: "p from two")]\n',
        },
    )
    registry = Registry((pkg,))
    with pytest.raises(RegistryError, match="registered twice") as err:
        registry.policy_code("q")
    assert f"by {pkg}.one and by {pkg}.two" in str(err.value)
    assert registry.policy_code("p").build(None, 0) == "p from one"  # two's copy never taken
    with pytest.raises(RegistryError):  # still refused, not half-registered
        registry.policy_code("q")


def test_undeclared_and_unregistered_names_are_refused(tmp_path, monkeypatch):
    extra = _package(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": 'DECLARED = (policy("p", ".one", "p"),)\n',
            "one.py": 'POLICIES = [parameterless("p", lambda: 1), parameterless("extra", '
            "lambda: 2)]\n",
        },
    )
    with pytest.raises(
        RegistryError,
        match=rf"{extra}\.one registers policy 'extra', which no "
        "DECLARED table declares",
    ):
        Registry((extra,)).policy_code("p")
    ghost = _package(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": 'DECLARED = (policy("p", ".one", "p"), policy("ghost", ".one", "g"))\n',
            "one.py": 'POLICIES = [parameterless("p", lambda: 1)]\n',
        },
    )
    with pytest.raises(RegistryError, match=rf"{ghost}\.one does not register 'ghost'"):
        Registry((ghost,)).policy_code("p")
    wrapped = _package(
        tmp_path,
        monkeypatch,
        {
            "__init__.py": 'DECLARED = (wrapper("w", ".one", "w"),)\n',
            "one.py": 'WRAPPERS = [WrapperDef("w", lambda p, _params, _seed: p)]\n'
            'POLICIES = [parameterless("w", lambda: 1)]\n',
        },
    )
    with pytest.raises(RegistryError, match="registers policy 'w', which no DECLARED"):
        Registry((wrapped,)).wrapper_code("w")


def test_register_refuses_a_taken_name_naming_both_modules():
    registry = Registry(TABLES)
    with pytest.raises(RegistryError) as err:
        registry.register(PolicyDef("fifo", _own_build), "my FIFO")
    message = str(err.value)
    assert (
        "gpuplan.solver_core.policies.baselines.fifo" in message
        and _own_build.__module__ in message
    )
    registry.register(PolicyDef("mine", _own_build), "my own policy")
    assert registry.policies()["mine"].summary == "my own policy"
    assert registry.policy_code("mine").build is _own_build
    with pytest.raises(RegistryError, match=f"by {_own_build.__module__} and by "):
        registry.register(PolicyDef("mine", _own_build), "again")


# ------------------------------------------------------------------- declarations == code
def _scan() -> tuple[dict[str, tuple[str, object]], dict[str, tuple[str, object]]]:
    """Every ``POLICIES``/``WRAPPERS`` entry of every module of the declared folders
    (helpers included: a module that registers without a declaration is found too)."""
    found: tuple[dict[str, tuple[str, object]], ...] = ({}, {})
    names = {
        info.name
        for package in TABLES
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}.")
    }  # every module below a table, paper folders and shared helpers included
    for name in sorted(names):
        module = importlib.import_module(name)
        for attr, book in zip(("POLICIES", "WRAPPERS"), found, strict=True):
            for d in getattr(module, attr, ()):
                assert d.name not in book, (
                    f"{d.name} registered by {book[d.name][0]} and {module.__name__}"
                )
                book[d.name] = (module.__name__, d)
    return found


def test_declarations_match_what_the_modules_register():
    registry = Registry(TABLES)
    policies, wrappers = _scan()
    bases = {n: d.module for n, d in registry.policies().items() if d.kind == "policy"}
    assert {n: m for n, (m, _) in policies.items()} == bases
    assert {n: m for n, (m, _) in wrappers.items()} == {
        n: d.module for n, d in registry.wrappers().items()
    }
    for name, (_, d) in policies.items():
        assert registry.policy_code(name) is d
    for name, (_, d) in wrappers.items():
        assert registry.wrapper_code(name) is d
    presets = [d for d in registry.policies().values() if d.kind == "preset"]
    assert len(bases) + len(presets) == len(policy_names()) >= 58
    assert len(wrappers) == len(wrapper_names()) >= 6
    for d in presets:  # a preset is data alone: its base and wrappers are declared names
        assert d.base in registry.policies() and set(d.wrappers) <= set(wrapper_names())


def test_aryl_presets_use_the_papers_efficiencies():
    assert policy_def("aryl-hetero").values["hetero_efficiency"] == ADVANCED_EFFICIENCY
    assert policy_def("aryl-hetero-ideal").values["hetero_efficiency"] == IDEAL_EFFICIENCY


def test_every_policy_builds_with_its_parameters():
    for name in policy_names():
        assert make_policy(name, seed=3).name == name
        info = policy_def(name)
        if info.build is None:
            continue
        defaults = info.params().model_dump()
        config = PolicyConfig(name="explicit", base=name, values=defaults)
        built = make_policy("explicit", seed=3, configs={"explicit": config})
        assert built.name == ("explicit" if isinstance(built, StagedPolicy) else name)
    with pytest.raises(Exception, match="unknown parameter"):
        make_policy("aryl(no_such_knob=1)")


# --------------------------------------------------------------------------------- laziness
def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after ``code``."""
    run = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(run.stdout.splitlines()[-1]))


def test_make_policy_fifo_imports_no_solver_backend():
    mods = _modules_after(
        "from gpuplan.solver_core.registry import make_policy\n"
        "assert make_policy('fifo').name == 'fifo'"
    )
    assert "gpuplan.solver_core.policies.baselines.fifo" in mods
    assert sorted(m for m in mods if m.startswith(HEAVY)) == []


def test_listing_and_resolving_import_no_policy_module():
    mods = _modules_after(
        "from gpuplan.solver_core.registry import policy_names, resolve_config, wrapper_names\n"
        "names = policy_names()\n"
        "assert len(names) >= 58 and wrapper_names()\n"
        "for name in names: resolve_config(name)\n"
        "resolve_config('afs-l(wrappers=[network-packing], regulation=exact)')"
    )
    plugins = sorted(
        m
        for m in mods
        if m.startswith(("gpuplan.solver_core.policies.", "gpuplan.solver_core.wrappers"))
    )
    assert plugins == [] and sorted(m for m in mods if m.startswith(HEAVY)) == []


def test_core_imports_no_plugin_module():
    """No module of ``solver_core`` outside ``policies/`` imports one inside it, or a declared
    plugin module: the registry alone reaches them, by name, when a policy is used.
    ``problems/`` (``gpuplan solve``'s front ends, loaded by that command only) may use a
    paper's solver library (``policies/aryl/mckp.py``), never a declared policy module."""
    plugins = set(Registry(TABLES).modules())
    assert "gpuplan.solver_core.policies.aryl.aryl" in plugins  # the rule has teeth
    offenders = []
    for path in SOLVER_CORE.rglob("*.py"):
        rel = path.relative_to(SOLVER_CORE).with_suffix("")
        module = ".".join(("gpuplan", "solver_core", *rel.parts)).removesuffix(".__init__")
        if rel.parts[0] == "policies" or module in plugins:
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = (
                    importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level
                    else node.module
                )
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            offenders += [
                f"{module} imports {t}"
                for t in targets
                if t in plugins
                or (rel.parts[0] != "problems" and (t or "").startswith(POLICIES_PACKAGE))
            ]
    assert offenders == []


# ------------------------------------------------------------------------------ the listing
def test_gpuplan_policies_lists_every_declared_name_and_summary():
    out = subprocess.run(
        [sys.executable, "-m", "gpuplan", "policies"], capture_output=True, text=True, check=True
    ).stdout
    flat = re.sub(r"[\s\u2500-\u257f|]", "", out)  # wrapped cells and box drawing removed
    at = -1
    for name, summary in [*policy_names().items(), *wrapper_names().items()]:
        row = re.sub(r"\s", "", name + summary)
        assert row in flat, f"{name} not listed with its summary"
        assert flat.index(row) > at, f"{name} out of order"
        at = flat.index(row)
