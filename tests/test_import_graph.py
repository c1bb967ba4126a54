"""The import graph of every project module has no cycle, and ``python -m harness simulate``
imports only what it uses and sends a request through few files (issue 22, item 2).

The graph is read from the source (``ast``): an edge per import executed when a module loads
(module level, ``TYPE_CHECKING`` blocks left out; imports inside functions run later and cannot
deadlock a load). ``from pkg import name`` where ``pkg``'s ``__init__`` resolves ``name`` lazily
(``_EXPORTS``) is an edge to the submodule that defines it, as that import runs at once."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("flowmaker", "profiler", "selector", "solvers", "harness", "orchestrator", "experiments")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _lazy_exports(tree: ast.Module) -> dict[str, str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _load_time_imports(tree: ast.Module):
    """Import nodes that run when the module loads."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "TYPE_CHECKING" not in test:
                todo += node.body
            todo += node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]
        elif isinstance(node, (ast.With,)):
            todo += node.body


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in mods.items()}
    lazy = {m: _lazy_exports(t) for m, t in trees.items() if mods[m].name == "__init__.py"}
    graph: dict[str, set[str]] = {m: set() for m in mods}

    def add(src: str, target: str) -> None:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):      # importing a.b.c loads a, a.b and a.b.c
            name = ".".join(parts[:i])
            # a module's own packages are loaded (or loading) before it: no edge back to them
            if name in mods and name != src and not src.startswith(name + "."):
                graph[src].add(name)

    for m, tree in trees.items():
        is_pkg = mods[m].name == "__init__.py"
        for node in _load_time_imports(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    add(m, a.name)
                continue
            if node.level:
                base = m.split(".") if is_pkg else m.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            add(m, target)
            for a in node.names:
                if f"{target}.{a.name}" in mods:
                    add(m, f"{target}.{a.name}")
                elif a.name in lazy.get(target, {}):
                    add(m, f"{target}.{lazy[target][a.name]}")
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_planted_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_project_modules():
    graph = import_graph()
    assert len(graph) > 150 and "orchestrator.engines.llm_core" in graph["harness.cluster"]
    assert cycles(graph) == []


# What `python -m harness simulate` may load: the command and its error types, the what-if and its
# load options, the cluster simulator, the engine core and its policies, the event loop, the step-time model, the
# catalog, and the instance spec (selector.deployment, with the problem model it is defined on).
SIMULATE_MODULES = {
    "flowmaker", "flowmaker.entry", "flowmaker.inputs", "flowmaker.lazy", "harness", "harness.__main__",
    "harness.cli", "profiler.collectives", "selector.problem", "selector.errors", "selector.yamlio",
    "harness.simulate", "harness.cluster", "harness.metrics", "harness.trace", "harness.load",
    "orchestrator", "orchestrator.engines", "orchestrator.engines.llm_core", "orchestrator.engines.llm_seq", "orchestrator.engines.llm_plan",
    "orchestrator.engines.llm_timing", "orchestrator.engines.admission", "orchestrator.engines.vllm_v1",
    "orchestrator.runtime",
    "orchestrator.runtime.events", "profiler", "profiler.engine", "profiler.steps", "profiler.analytic",
    "profiler.catalog", "profiler.calibration", "profiler.ops", "selector", "selector.deployment",
}

_PROBE = r"""
import json, sys, threading
from pathlib import Path
root = Path(sys.argv[1])
sys.argv = ["harness", "simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--trace", sys.argv[2], "--json"]
files = set()
def tracer(frame, event, arg):
    if event == "call":
        f = frame.f_code.co_filename
        # project files only: a virtual environment inside the checkout (make test's .venv) is not ours
        if f.startswith(str(root)) and "/tests/" not in f and "site-packages" not in f:
            files.add(str(Path(f).relative_to(root)))
    return None
import harness.cluster as cluster
run = cluster.ClusterSim.run
def traced(self, workload):
    sys.setprofile(None)
    sys.settrace(tracer)
    try:
        return run(self, workload)
    finally:
        sys.settrace(None)
cluster.ClusterSim.run = traced
import runpy
try:
    runpy.run_module("harness", run_name="__main__")
except SystemExit:
    pass
mods = sorted(m for m in sys.modules if m.split(".")[0] in %r)
print(json.dumps({"modules": mods, "files": sorted(files)}), file=sys.stderr)
""" % (PACKAGES,)


def test_harness_simulate_imports_only_what_it_uses_and_a_request_crosses_few_files(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at_s,prompt_tokens,output_tokens\n0,300,20\n0.01,200,10\n")
    r = subprocess.run([sys.executable, "-c", _PROBE, str(ROOT), str(trace)], capture_output=True, text=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["requests"] == 2
    probe = json.loads(r.stderr.strip().splitlines()[-1])
    assert set(probe["modules"]) <= SIMULATE_MODULES, sorted(set(probe["modules"]) - SIMULATE_MODULES)
    # the files whose code runs while the requests are simulated (ClusterSim.run)
    assert len(probe["files"]) <= 6, "\n".join(probe["files"])
