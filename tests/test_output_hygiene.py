"""Piped output stays clean (issue 18 items 3 and 6): progress bars are drawn only on a terminal,
and library code reports through ``logging``, not ``print``.

``print`` is allowed where text on standard output is the product: command-line modules (a
``main``), the benchmarks, an experiment kind's report table and ``__main__`` blocks.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("selector", "solvers", "profiler", "harness", "orchestrator", "experiments", "flowmaker")
#: modules whose job is to print: command lines, benchmarks, experiment kinds (their tables)
PRINTING = ("cli.py", "cli_joint.py", "cli_fit.py", "servecli.py", "tokens.py", "run.py", "device_check.py",
            "torchserve.py", "sim_identity.py", "a6000_terms.py")


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)]


def test_every_progress_bar_can_be_switched_off() -> None:
    bare = []
    for path in _sources():
        for call in _calls(ast.parse(path.read_text()), "tqdm"):
            if not any(k.arg == "disable" for k in call.keywords):
                bare.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert bare == [], "tqdm(...) without disable= (pass disable=not show_progress() or ctx.progress)"


def _library_prints(path: Path) -> list[int]:
    """Lines of ``print`` calls, and of ``print`` passed as a value (``log=print``), outside a
    ``main`` function and the ``if __name__ == "__main__"`` block."""
    tree = ast.parse(path.read_text())
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in ("main", "console"):
            allowed |= set(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            allowed |= set(range(node.lineno, node.end_lineno + 1))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "print"
            and n.lineno not in allowed]


def test_library_code_logs_instead_of_printing() -> None:
    found = {}
    for path in _sources():
        rel = path.relative_to(ROOT)
        if path.name in PRINTING or path.name.startswith("bench_") or rel.parts[:2] == ("experiments", "kinds"):
            continue
        if lines := _library_prints(path):
            found[str(rel)] = lines
    assert found == {}


def test_the_print_check_sees_a_default_argument(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("def f(log=print):\n    log('x')\n\ndef main():\n    print('ok')\n\n"
                 "if __name__ == '__main__':\n    print(main())\n")
    assert _library_prints(p) == [1]


def test_piped_run_draws_no_progress_bar(tmp_path: Path) -> None:
    cfg = tmp_path / "qs.yaml"
    cfg.write_text("experiment: quickstart\nkind: quickstart\nparams:\n  tasks: [chat, rag-qa]\n"
                   "  selectors: [flowmaker, langchain]\n")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-m", "experiments.run", str(cfg), "--results", str(tmp_path / "res")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "\r" not in r.stderr and "task/s" not in r.stderr and "deploying" not in r.stderr, r.stderr[-1000:]
