"""The import contract of ../shared/ARCHITECTURE.md ("Who may import whom"), checked on every
project module's imports as written (``ast``: module level, inside functions and under
``TYPE_CHECKING`` alike), and the rule that split modules are real seams: a name is imported from
the module that defines it, never through a module that only re-exports it."""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from profiler.catalog import repo_root

ROOT = repo_root()
PACKAGES = ("flowmaker", "profiler", "selector", "solvers", "orchestrator", "harness", "experiments")

#: layer -> project packages it must never import (ARCHITECTURE.md, one line each)
FORBIDDEN = {
    # the shared base of every command-line face imports no other part
    "flowmaker": {"profiler", "selector", "solvers", "orchestrator", "harness", "experiments"},
    # "profiler/ knows only configs and its own backends"
    "profiler": {"selector", "solvers", "harness", "orchestrator", "experiments"},
    # "selector's core never imports a solver; only its command-line face reaches the registry"
    "selector": {"solvers", "harness", "orchestrator", "experiments"},
    # "solvers/ import selector/'s model and evaluation"
    "solvers": {"harness", "orchestrator", "experiments"},
    # "orchestrator/ never imports harness/, solvers/ or experiments/"
    "orchestrator": {"harness", "solvers", "experiments"},
    # "harness/ imports selector/ (plans), profiler/ (step times) and orchestrator/ (execution)"
    "harness": {"solvers", "experiments"},
    # "experiments/ is the top: it wires everything and nothing imports it"
    "experiments": set(),
}
#: modules allowed one import their layer otherwise may not make, and why (ARCHITECTURE.md)
EXCEPTIONS = {
    ("selector.cli", "solvers"): "the command-line face reaches the solver registry",
    ("selector.cli_joint", "solvers"): "the joint command's face (spec section 11) reaches the joint registry",
}
#: packages whose lazy ``__init__`` (PEP 562) names their public API: ``from orchestrator import
#: load_app`` is the documented face of the Teola package (issue 22 item 2: "lazy or empty package
#: __init__s"); every other module's names are imported from the module that defines them
PENDING_REEXPORTS = {"orchestrator", "orchestrator.engines", "orchestrator.runtime"}


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, imported module, names) of every absolute import in the file."""
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module, tuple(a.name for a in node.names)))
    return out


def layering_violations(mods: dict[str, Path]) -> list[str]:
    bad = []
    for name, path in mods.items():
        layer = name.split(".")[0]
        for line, target, _ in imports(path):
            top = target.split(".")[0]
            if top in FORBIDDEN.get(layer, ()) and (name, top) not in EXCEPTIONS:
                bad.append(f"{_rel(path)}:{line}: {layer} imports {target}")
    return bad


def solver_modules() -> set[str]:
    """The modules solvers/registry.py names (its ``"module:Class"`` strings)."""
    return {node.value.split(":")[0] for node in ast.walk(_tree(ROOT / "solvers" / "registry.py"))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"solvers(\.\w+)+:\w+", node.value)}


def cross_solver_imports(mods: dict[str, Path]) -> list[str]:
    """A registered solver never imports another solver's module (a warm start goes through the
    registry's public ``select``)."""
    solvers = solver_modules()
    return [f"{_rel(mods[s])}:{line}: {s} imports solver {target}"
            for s in sorted(solvers) for line, target, _ in imports(mods[s]) if target in solvers and target != s]


def defined_names(path: Path) -> set[str]:
    """Names a module binds itself (functions, classes, assignments, at any depth of its top-level
    statements' ``if``/``try`` blocks); imported names are not among them."""
    out: set[str] = set()
    for node in _tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.If, ast.Try, ast.With)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    out.add(sub.id)
                elif isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    out.add(sub.name)
    return out


def reexports(mods: dict[str, Path], files: dict[str, Path]) -> list[str]:
    """``from M import n`` where project module M does not define n (n is not a submodule either)."""
    bad = []
    for name, path in files.items():
        for line, target, names in imports(path):
            if target not in mods or target in PENDING_REEXPORTS:
                continue
            missing = [n for n in names if n != "*" and n not in defined_names(mods[target])
                       and f"{target}.{n}" not in mods]
            bad += [f"{_rel(path)}:{line}: {n} imported from {target}, defined elsewhere" for n in missing]
    return bad


def test_every_package_has_a_rule():
    assert {m.split(".")[0] for m in modules()} == set(FORBIDDEN)


def test_no_layer_imports_what_architecture_forbids():
    assert layering_violations(modules()) == []


def test_no_solver_imports_another_solvers_module():
    assert len(solver_modules()) >= 8
    assert cross_solver_imports(modules()) == []


def test_names_are_imported_from_the_module_that_defines_them():
    files = dict(modules()) | {str(p): p for p in sorted((ROOT / "tests").rglob("*.py"))}
    assert reexports(modules(), files) == []


@pytest.mark.parametrize("source, target, expected", [
    ("profiler/x.py", "from harness.closedloop import run_loop\n", "profiler imports harness.closedloop"),
    ("selector/x.py", "def f():\n    from harness.servers.export import export_plan\n", "selector imports harness"),
    ("orchestrator/x.py", "import experiments.run\n", "orchestrator imports experiments.run"),
    ("selector/cli.py", "from solvers.registry import get_solver\n", None),
    ("harness/x.py", "from orchestrator.engines.base import Engine\n", None),
])
def test_the_checker_catches_a_violation(tmp_path, source, target, expected):
    """The contract is real: a planted import of each forbidden kind is reported (and allowed
    ones are not), so an empty report above means something."""
    fake = tmp_path / source
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_text(target, encoding="utf-8")
    mods = {_module_name(ROOT / source): fake}
    found = [v for v in layering_violations(mods) if expected is None or expected in v]
    assert bool(found) == (expected is not None), found


def test_the_checker_catches_a_reexport(tmp_path):
    mods = {"harness.a": tmp_path / "a.py", "harness.b": tmp_path / "b.py"}
    mods["harness.a"].write_text("from harness.b import thing  # noqa: F401 - re-exported\n", encoding="utf-8")
    mods["harness.b"].write_text("def thing():\n    return 1\n", encoding="utf-8")
    user = tmp_path / "c.py"
    user.write_text("from harness.a import thing\nfrom harness.b import thing\n", encoding="utf-8")
    assert reexports(mods, {"c": user}) == [f"{user}:1: thing imported from harness.a, defined elsewhere"]
