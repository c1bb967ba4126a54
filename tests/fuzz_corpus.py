"""The fuzz corpus of issue 14 item 1: malformed problems, tasks, clusters, bundles, traces, profile
tables, calibrations, experiment configs and command lines for every entry point.

``build(root)`` writes the files under ``root`` and returns the cases: ``(id, face, argv)``,
``face`` one of :data:`FACES`. Every case is a user error: the entry point must answer with exit
status 2 and one line on standard error (tests/test_fuzz.py). Outputs of a case that would succeed
by mistake go under ``root`` (``--out``, ``--results``), never into the repository.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from tests.shared import SMALL_PROBLEM

ROOT = Path(__file__).resolve().parents[1]

#: entry point name -> "module:function" called as ``function(argv)``
FACES = {
    "selector": "selector.cli:main",
    "harness": "harness.cli:main",
    "profiler": "profiler.cli:main",
    "experiments": "experiments.run:main",
}

PROBLEM = SMALL_PROBLEM
TASK = {"name": "mine", "trace": "conv", "accuracy_slo": 20.0, "latency_slo_s": 8.0, "arrival_rate_rps": 1.0,
        "workflows": [{"name": "answer", "stages": [{"name": "answer", "role": "answer"}]}]}
CLUSTER = {"name": "c", "nodes": [{"name": "n0", "gpus": [{"id": 0, "gpu": "a6000", "mem_gb": 48},
                                                         {"id": 1, "gpu": "a6000", "mem_gb": 48}]}],
           "instances": []}
#: values that are wrong for every leaf of a problem (numbers, whole numbers and names alike)
BAD_LEAVES = {"map": {"x": 1}, "list": [1], "null": None, "bool": True, "nan": float("nan")}
BINARY = bytes(range(256)) * 8


class Corpus:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cases: list[tuple[str, str, list[str]]] = []
        root.mkdir(parents=True, exist_ok=True)

    def file(self, name: str, content: bytes | str | Any) -> str:
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif isinstance(content, str):
            p.write_text(content, encoding="utf-8")
        else:
            p.write_text(yaml.safe_dump(content, sort_keys=False) if not name.endswith(".json")
                         else json.dumps(content), encoding="utf-8")
        return str(p)

    def add(self, cid: str, face: str, argv: list[str]) -> None:
        assert face in FACES, face
        self.cases.append((cid, face, [str(a) for a in argv]))

    @property
    def out(self) -> str:
        return str(self.root / "out")


def _leaves(d: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(d, dict):
        return [p for k, v in d.items() for p in _leaves(v, path + (k,))]
    if isinstance(d, list):
        return [p for i, v in enumerate(d) for p in _leaves(v, path + (i,))]
    return [path]


def _set(d: Any, path: tuple, value: Any) -> Any:
    d = copy.deepcopy(d)
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return d


def _deep(depth: int, json_syntax: bool = False) -> str:
    return ('{"a": ' if json_syntax else "a: ") + "[" * depth + "]" * depth + ("}" if json_syntax else "\n")


def _laughs(levels: int = 9) -> str:
    lines = ["x0: &x0 [1, 2]"]
    for i in range(1, levels + 1):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def file_syntax_cases(c: Corpus, stem: str) -> list[tuple[str, str]]:
    """(label, path) of files that are broken as files, whatever they should hold."""
    text = yaml.safe_dump(PROBLEM, sort_keys=False)
    out = [("binary", c.file(f"{stem}/binary.yaml", BINARY)),
           ("nul", c.file(f"{stem}/nul.yaml", b"task:\x00\x00\n")),
           ("latin1", c.file(f"{stem}/latin1.yaml", "name: caf\u00e9\n".encode("latin-1"))),
           ("empty", c.file(f"{stem}/empty.yaml", "")),
           ("comment-only", c.file(f"{stem}/comment.yaml", "# nothing\n")),
           ("scalar", c.file(f"{stem}/scalar.yaml", "42\n")),
           ("list", c.file(f"{stem}/list.yaml", "- a\n- b\n")),
           ("truncated", c.file(f"{stem}/trunc.yaml", text[: len(text) // 3] + "[")),
           ("unclosed", c.file(f"{stem}/unclosed.yaml", "task: {name: [1, 2\n")),
           ("tab-indent", c.file(f"{stem}/tab.yaml", "task:\n\tname: x\n")),
           ("dup-key", c.file(f"{stem}/dup.yaml", "a: 1\nb: 2\na: 3\n")),
           ("deep-100k", c.file(f"{stem}/deep.yaml", _deep(100_000))),
           ("deep-200", c.file(f"{stem}/deep200.yaml", _deep(200))),
           ("laughs", c.file(f"{stem}/laughs.yaml", _laughs())),
           ("recursive-alias", c.file(f"{stem}/rec.yaml", "a: &a [1, *a]\n")),
           ("python-tag", c.file(f"{stem}/tag.yaml", "a: !!python/object/apply:os.system ['true']\n")),
           ("json-broken", c.file(f"{stem}/broken.json", '{"task": {"name": "x",}')),
           ("json-deep", c.file(f"{stem}/deep.json", _deep(100_000, json_syntax=True))),
           ("json-dup", c.file(f"{stem}/dup.json", '{"a": 1, "a": 2}')),
           ("missing", str(c.root / stem / "does-not-exist.yaml")),
           ("folder", str(c.root))]
    return out


# -- selector -----------------------------------------------------------------------------------
def selector_cases(c: Corpus) -> None:
    for label, path in file_syntax_cases(c, "problem"):
        c.add(f"solve/file/{label}", "selector", ["solve", path])
    for label, path in file_syntax_cases(c, "bundle"):
        c.add(f"deploy/file/{label}", "selector", ["deploy", path])
    for label, path in file_syntax_cases(c, "task")[:12]:
        c.add(f"resolve/task-file/{label}", "selector", ["resolve", path, "--out", c.out + "/p.yaml"])
    for label, path in file_syntax_cases(c, "cluster")[:10]:
        c.add(f"resolve/cluster-file/{label}", "selector", ["resolve", "chat", "--cluster", path])
    for label, path in file_syntax_cases(c, "models")[:6]:
        c.add(f"resolve/models-file/{label}", "selector", ["resolve", "chat", "--models", path])
    for label, path in file_syntax_cases(c, "accuracy")[:4]:
        c.add(f"resolve/accuracy-file/{label}", "selector", ["resolve", "chat", "--accuracy", path])
    # every leaf of a problem, with values wrong for any leaf
    for leaf in _leaves(PROBLEM):
        for name, value in BAD_LEAVES.items():
            where = ".".join(map(str, leaf))     # JSON has no NaN literal; YAML (.nan) does
            path = (c.file(f"problems/{where}-{name}.yaml", yaml.safe_dump(_set(PROBLEM, leaf, value)))
                    if name == "nan" else c.file(f"problems/{where}-{name}.json", _set(PROBLEM, leaf, value)))
            c.add(f"solve/leaf/{'.'.join(map(str, leaf))}={name}", "selector", ["solve", path, "--solver", "milp"])
    for key in PROBLEM:
        d = {k: v for k, v in PROBLEM.items() if k != key}
        c.add(f"solve/missing/{key}", "selector", ["solve", c.file(f"problems/no-{key}.yaml", d)])
    c.add("solve/20MB-value", "selector", ["solve", c.file("problems/huge-value.json",
                                                           _set(PROBLEM, ("task", "latency_slo_s"), "9x" * 10_000_000))])
    c.add("solve/20MB-unknown-name", "selector", ["solve", c.file("problems/huge-name.json",
                                                                  _set(PROBLEM, ("perf", 0, "model"), "m" * 20_000_000))])
    c.add("solve/20MB-token-cell", "selector", ["solve", c.file("problems/huge-number.yaml",
                                                                 "task: " + "9" * 20_000_000 + "\n")])
    c.add("solve/task-file", "selector", ["solve", str(ROOT / "configs" / "tasks" / "chat.yaml")])
    c.add("solve/cluster-file", "selector", ["solve", str(ROOT / "configs" / "clusters" / "a6000x8.yaml")])
    good = c.file("problems/good.yaml", PROBLEM)
    for v in ("nan", "inf", "0", "-1", "abc", "1e999", ""):
        c.add(f"solve/time-limit={v}", "selector", ["solve", good, "--time-limit", v])
        c.add(f"deploy/time-limit={v}", "selector", ["deploy", "chat", "--time-limit", v])
    c.add("solve/unknown-solver", "selector", ["solve", good, "--solver", "mlip"])
    c.add("deploy/unknown-solver", "selector", ["deploy", "chat", "--solver", "nope"])
    c.add("selector/no-command", "selector", [])
    c.add("unknown-command", "selector", ["frobnicate"])
    c.add("unknown-option", "selector", ["solve", good, "--frob"])
    # task files
    for label, task in [
        ("accuracy-fraction", {**TASK, "accuracy_slo": 0.25}),
        ("accuracy-negative", {**TASK, "accuracy_slo": -1}),
        ("both-slos", {**TASK, "latency_slo_factor": 2.0}),
        ("no-slo", {k: v for k, v in TASK.items() if k != "latency_slo_s"}),
        ("unknown-trace", {**TASK, "trace": "chatbot"}),
        ("unknown-role", {**TASK, "workflows": [{"name": "w", "stages": [{"name": "s", "role": "nope"}]}]}),
        ("no-workflows", {**TASK, "workflows": []}),
        ("no-stages", {**TASK, "workflows": [{"name": "w", "stages": []}]}),
        ("rate-zero", {**TASK, "arrival_rate_rps": 0}),
        ("rate-string", {**TASK, "arrival_rate_rps": "fast"}),
        ("extra-field", {**TASK, "colour": "red"}),
        ("calls-zero", {**TASK, "workflows": [{"name": "w", "stages": [{"name": "s", "role": "answer", "calls": 0}]}]}),
        ("orchestration-unknown", {**TASK, "orchestration": {"nope": {"app": "naive_rag", "stages": {"x": "y"}}}}),
    ]:
        c.add(f"resolve/task/{label}", "selector", ["resolve", c.file(f"tasks/{label}.yaml", task)])
    c.add("resolve/unknown-task", "selector", ["resolve", "chatbot"])
    c.add("resolve/roles-as-task", "selector", ["resolve", "roles"])
    c.add("resolve/out-missing-folder", "selector", ["resolve", "chat", "--out", str(c.root / "no" / "dir" / "p.yaml")])
    c.add("bundle/out-missing-folder", "selector", ["bundle", "chat", "--out", str(c.root / "no" / "b.yaml")])
    c.add("resolve/unknown-cluster", "selector", ["resolve", "chat", "--cluster", "a6000x9"])
    c.add("resolve/cluster-path-missing", "selector", ["resolve", "chat", "--cluster", str(c.root / "a100x4.yaml")])
    c.add("resolve/sharing-bad", "selector", ["resolve", "chat", "--sharing", "time"])
    # clusters
    for label, cl in [
        ("mem-80000", _set(CLUSTER, ("nodes", 0, "gpus", 0, "mem_gb"), 80000)),
        ("mem-negative", _set(CLUSTER, ("nodes", 0, "gpus", 0, "mem_gb"), -48)),
        ("mixed-unknown-gpu", _set(CLUSTER, ("nodes", 0, "gpus", 1, "gpu"), "h300")),   # a mixed fleet is valid (spec 10)
        ("unknown-gpu", _set(_set(CLUSTER, ("nodes", 0, "gpus", 0, "gpu"), "tpu"), ("nodes", 0, "gpus", 1, "gpu"), "tpu")),
        ("no-nodes", {k: v for k, v in CLUSTER.items() if k != "nodes"}),
        ("nodes-string", {**CLUSTER, "nodes": "all"}),
        ("sharing-bad", {**CLUSTER, "sharing": "time"}),
        ("instance-bad", {**CLUSTER, "instances": [{"id": "x"}]}),
        ("problem-layout", PROBLEM["cluster"]),
    ]:
        c.add(f"resolve/cluster/{label}", "selector", ["resolve", "chat", "--cluster", c.file(f"clusters/{label}.yaml", cl)])
    # bundles
    prob = {k: v for k, v in PROBLEM.items() if k != "cluster"}
    for label, b in [
        ("no-cluster", {"tasks": [prob]}),
        ("no-tasks", {"cluster": PROBLEM["cluster"]}),
        ("tasks-empty", {"cluster": PROBLEM["cluster"], "tasks": []}),
        ("tasks-map", {"cluster": PROBLEM["cluster"], "tasks": {"a": prob}}),
        ("task-number", {"cluster": PROBLEM["cluster"], "tasks": [3]}),
        ("task-unknown-name", {"cluster": "a6000x8", "tasks": ["chatbot"]}),
        ("task-name-on-problem-cluster", {"cluster": PROBLEM["cluster"], "tasks": ["chat"]}),
        ("cluster-unknown-name", {"cluster": "a6000x9", "tasks": ["chat"]}),
        ("cluster-path-missing", {"cluster": str(c.root / "nope.yaml"), "tasks": ["chat"]}),
        ("cluster-number", {"cluster": 8, "tasks": [prob]}),
        ("cluster-nodes-bad", {"cluster": {"nodes": [{"gpus": [{"id": 0}]}]}, "tasks": ["chat"]}),
        ("duplicate-names", {"cluster": PROBLEM["cluster"], "tasks": [prob, prob]}),
        ("task-with-cluster", {"cluster": PROBLEM["cluster"], "tasks": [PROBLEM]}),
        ("extra-key", {"cluster": PROBLEM["cluster"], "tasks": [prob], "solver": "milp"}),
        ("task-bad-leaf", {"cluster": PROBLEM["cluster"], "tasks": [_set(prob, ("perf", 0, "latency_s"), -1)]}),
        ("cluster-mem-80000", {"cluster": _set(CLUSTER, ("nodes", 0, "gpus", 0, "mem_gb"), 80000), "tasks": ["chat"]}),
    ]:
        c.add(f"deploy/bundle/{label}", "selector", ["deploy", c.file(f"bundles/{label}.yaml", b)])
    c.add("deploy/bundle-deep-100k", "selector", ["deploy", c.file("bundles/deep.yaml", "tasks: " + "[" * 100_000 + "]" * 100_000 + "\n")])
    c.add("deploy/unknown-task", "selector", ["deploy", "chatbot"])
    c.add("deploy/bundle-and-cluster", "selector", ["deploy", c.file("bundles/ok.yaml", {"cluster": "a6000x8", "tasks": ["chat"]}),
                                                    "--cluster", "a6000x8"])
    c.add("deploy/cluster-file-as-task", "selector", ["deploy", str(ROOT / "configs" / "clusters" / "a6000x8.yaml")])
    # export
    for label, path in file_syntax_cases(c, "plan")[:8]:
        c.add(f"export/file/{label}", "harness", ["export", path, "--format", "sh", "--gpu", "a6000"])
    c.add("export/not-a-plan", "harness", ["export", c.file("plan/problem.json", PROBLEM), "--format", "sh", "--gpu", "a6000"])
    c.add("export/bad-model-path", "harness", ["export", good, "--format", "sh", "--gpu", "a6000", "--model-path", "x"])
    c.add("export/bad-format", "harness", ["export", good, "--format", "zip", "--gpu", "a6000"])


# -- profile tables ---------------------------------------------------------------------------
def table_files(c: Corpus) -> list[tuple[str, str]]:
    import pandas as pd

    from profiler.table import SCHEMA
    src = ROOT / "results" / "profiles" / "cpu-tiny-torch.parquet"
    good = pd.read_parquet(src)
    data = src.read_bytes()

    def pq(name: str, df: pd.DataFrame) -> str:
        p = c.root / "tables" / f"{name}.parquet"
        p.parent.mkdir(parents=True, exist_ok=True)
        df.to_parquet(p, index=False)
        return str(p)

    out = [("csv", c.file("tables/table.csv", good.to_csv(index=False))),
           ("csv-named-parquet", c.file("tables/csv.parquet", good.to_csv(index=False))),
           ("truncated", c.file("tables/trunc.parquet", data[: len(data) // 2])),
           ("header-only", c.file("tables/head.parquet", data[:4])),
           ("binary", c.file("tables/bin.parquet", BINARY)),
           ("json", c.file("tables/t.json", good.head(3).to_json())),
           ("empty", pq("empty", good.head(0))),
           ("missing-column", pq("nocol", good.drop(columns=["tpot_s"]))),
           ("tp-zero", pq("tp0", good.assign(tp=0))),
           ("batch-zero", pq("b0", good.assign(batch=0))),
           ("latency-inf", pq("inf", good.assign(latency_s=float("inf")))),
           ("ttft-zero", pq("ttft0", good.assign(ttft_s=0.0))),
           ("tpot-negative", pq("neg", good.assign(tpot_s=-1.0))),
           ("mem-nan", pq("nan", good.assign(mem_gb=float("nan")))),
           ("duplicate-key", pq("dup", pd.concat([good.head(2), good.head(2)]))),
           ("string-numbers", pq("str", good.assign(latency_s=good.latency_s.astype(str)))),
           ("float-key", pq("floatkey", good.assign(tp=good.tp.astype(float)))),
           ("model-not-string", pq("model-int", good.assign(model=1))),
           ("missing", str(c.root / "tables" / "none.parquet")),
           ("folder", str(c.root / "tables"))]
    assert SCHEMA is not None
    return out


def table_cases(c: Corpus) -> None:
    for label, path in table_files(c):
        c.add(f"resolve/profile/{label}", "selector", ["resolve", "chat", "--profile", path])
        c.add(f"validate/measured/{label}", "profiler", ["validate", "--measured", path])
        c.add(f"calibrate/measured/{label}", "profiler", ["calibrate", "--measured", path, "--out", c.out + "/cal.yaml"])
    good = str(ROOT / "results" / "profiles" / "cpu-tiny-torch.parquet")
    c.add("validate/reference-bad", "profiler", ["validate", "--measured", good, "--reference",
                                                  c.file("tables/ref.parquet", BINARY)])
    c.add("resolve/profile-unknown-name", "selector", ["resolve", "chat", "--profile", "cpu-huge"])
    c.add("resolve/profile-missing-model", "selector", ["resolve", "chat", "--profile", good])
    c.add("calibrate/out-missing-folder", "profiler", ["calibrate", "--measured", good, "--out", str(c.root / "no" / "c.yaml")])


# -- profiler -------------------------------------------------------------------------------------
def profiler_cases(c: Corpus) -> None:
    for label, path in file_syntax_cases(c, "calibration"):
        c.add(f"predict/calibration/{label}", "profiler", ["predict", "--model", "llama-2-7b", "--gpu", "a6000",
                                                           "--prompt-tokens", "100", "--output-tokens", "10",
                                                           "--calibration", path])
    for label, cal in [("schema", {"gpus": {"a6000": {"compute_eff": "fast"}}}), ("extra", {"colour": 1}),
                       ("gpus-list", {"gpus": [1, 2]}), ("negative", {"gpus": {"a6000": {"compute_eff": -1}}})]:
        c.add(f"predict/calibration/{label}", "profiler", ["predict", "--model", "llama-2-7b", "--gpu", "a6000",
                                                           "--prompt-tokens", "100", "--output-tokens", "10",
                                                           "--calibration", c.file(f"calibration/{label}.yaml", cal)])
    c.add("predict/calibration-unknown-name", "profiler", ["predict", "--model", "llama-2-7b", "--gpu", "a6000",
                                                           "--prompt-tokens", "1", "--output-tokens", "1",
                                                           "--calibration", "nope"])
    base = ["predict", "--model", "llama-2-7b", "--gpu", "a6000", "--prompt-tokens", "100", "--output-tokens", "10"]
    for label, extra in [("tp-zero", ["--tp", "0"]), ("tp-text", ["--tp", "two"]), ("tp-3", ["--tp", "3"]),
                         ("batch-negative", ["--batch", "-4"]), ("tp-huge", ["--tp", "1" + "0" * 30])]:
        c.add(f"predict/{label}", "profiler", base + extra)
    c.add("predict/unknown-model", "profiler", ["predict", "--model", "llama-9", "--gpu", "a6000",
                                                "--prompt-tokens", "1", "--output-tokens", "1"])
    c.add("predict/unknown-gpu", "profiler", ["predict", "--model", "llama-2-7b", "--gpu", "v100",
                                              "--prompt-tokens", "1", "--output-tokens", "1"])
    c.add("predict/no-tokens", "profiler", ["predict", "--model", "llama-2-7b", "--gpu", "a6000"])
    c.add("table/out-missing-folder", "profiler", ["table", "--out", str(c.root / "no" / "t.parquet"), "--models", "llama-2-7b"])
    c.add("table/unknown-model", "profiler", ["table", "--out", c.out + "/t.parquet", "--models", "llama-9"])
    c.add("memory/fraction", "profiler", ["memory", "--model", "llama-2-7b", "--gpu", "a6000", "--fraction", "2"])
    c.add("memory/fraction-nan", "profiler", ["memory", "--model", "llama-2-7b", "--gpu", "a6000", "--fraction", "nan"])
    c.add("memory/tp-3", "profiler", ["memory", "--model", "llama-2-7b", "--gpu", "a6000", "--tp", "3"])
    for label, text in [("binary", BINARY), ("not-json", "{nope\n"), ("not-rows", '{"a": 1}\n'), ("list", "[1, 2]\n"),
                        ("empty", ""), ("deep", "[" * 100_000 + "]" * 100_000 + "\n"),
                        ("bad-values", json.dumps({"model": "x", "gpu": "y", "tp": "one"}) + "\n")]:
        c.add(f"convert/{label}", "profiler", ["convert", c.file(f"rows/{label}.jsonl", text), "--out", c.out + "/r.parquet"])
    c.add("convert/missing", "profiler", ["convert", str(c.root / "none.jsonl"), "--out", c.out + "/r.parquet"])
    for label, path in file_syntax_cases(c, "profile-config")[:8]:
        c.add(f"run/config/{label}", "profiler", ["run", path, "--out", c.out + "/m.parquet"])
    c.add("run/unknown-config", "profiler", ["run", "cpu-huge"])
    c.add("run/config-schema", "profiler", ["run", c.file("profile-config/schema.yaml", {"name": "x", "backend": "torch"})])
    c.add("profiler/no-command", "profiler", [])
    c.add("calibrate-vidur/data-missing", "profiler", ["calibrate-vidur", "--data", str(c.root / "nope"),
                                                        "--out", c.out + "/v.yaml"])
    c.add("calibrate-vidur/ops-bad", "profiler", ["calibrate-vidur", "--ops", "a6000", "--out", c.out + "/v.yaml"])


# -- harness ------------------------------------------------------------------------------------
def trace_files(c: Corpus) -> list[tuple[str, str]]:
    h = "arrived_at_s,prompt_tokens,output_tokens\n"
    az = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    return [("binary", c.file("traces/bin.csv", BINARY)),
            ("utf16", c.file("traces/u16.csv", (h + "0,1,1\n").encode("utf-16"))),
            ("empty", c.file("traces/empty.csv", "")),
            ("header-only", c.file("traces/head.csv", h)),
            ("unknown-header", c.file("traces/hdr.csv", "a,b,c\n0,1,1\n")),
            ("two-fields", c.file("traces/two.csv", h + "0,1\n")),
            ("four-fields", c.file("traces/four.csv", h + "0,1,1,1\n")),
            ("not-number", c.file("traces/nan-text.csv", h + "zero,1,1\n")),
            ("arrival-negative", c.file("traces/neg.csv", h + "-1,1,1\n")),
            ("arrival-nan", c.file("traces/anan.csv", h + "nan,1,1\n")),
            ("arrival-inf", c.file("traces/ainf.csv", h + "0,1,1\ninf,1,1\n")),
            ("arrival-1e308", c.file("traces/abig.csv", h + "0,1,1\n1e308,1,1\n")),
            ("tokens-zero", c.file("traces/t0.csv", h + "0,0,1\n")),
            ("tokens-fraction", c.file("traces/tf.csv", h + "0,1.5,1\n")),
            ("tokens-1e30", c.file("traces/t1e30.csv", h + "0,1e30,1\n")),
            ("tokens-10^30", c.file("traces/t10e30.csv", h + "0," + "1" + "0" * 30 + ",1\n")),
            ("tokens-2^63", c.file("traces/t263.csv", h + "0,1,9223372036854775808\n")),
            ("tokens-500KB", c.file("traces/t500kb.csv", h + "0," + "7" * 500_000 + ",1\n")),
            ("line-20MB", c.file("traces/l20mb.csv", h + "0,1," + "x" * 20_000_000 + "\n")),
            ("azure-timezone", c.file("traces/tz.csv", az + "2023-11-16 18:17:03.97+00:00,10,10\n2023-11-16 18:17:04,10,10\n")),
            ("azure-bad-date", c.file("traces/date.csv", az + "yesterday,10,10\n")),
            ("azure-year-0", c.file("traces/y0.csv", az + "0000-01-01 00:00:00,10,10\n")),
            ("dev-zero", "/dev/zero"),
            ("missing", str(c.root / "traces" / "none.csv")),
            ("folder", str(c.root / "traces"))]


def harness_cases(c: Corpus) -> None:
    base = ["simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb"]
    for label, path in trace_files(c):
        c.add(f"simulate/trace/{label}", "harness", base + ["--trace", path])
    ok = c.file("traces/ok.csv", "arrived_at_s,prompt_tokens,output_tokens\n0,10,10\n1,10,10\n")
    for label, extra in [
        ("kv-tokens-1", ["--kv-tokens", "1"]), ("kv-tokens-0", ["--kv-tokens", "0"]),
        ("replicas-1e6", ["--replicas", "1000000"]), ("replicas-0", ["--replicas", "0"]),
        ("tp-0", ["--tp", "0"]), ("tp-3", ["--tp", "3"]), ("tp-huge", ["--tp", "1" + "0" * 40]),
        ("pp-text", ["--pp", "two"]), ("max-requests-0", ["--max-requests", "0"]),
        ("time-scale-0", ["--time-scale", "0"]), ("time-scale-nan", ["--time-scale", "nan"]),
        ("time-scale-inf", ["--time-scale", "inf"]), ("time-scale-neg", ["--time-scale", "-2"]),
        ("gpu-mem-util-2", ["--gpu-mem-util", "2"]), ("gpu-mem-util-nan", ["--gpu-mem-util", "nan"]),
        ("block-size-0", ["--block-size", "0"]), ("max-batch-0", ["--max-batch", "0"]),
        ("max-batch-tokens-0", ["--max-batch-tokens", "0"]), ("chunk-size-0", ["--chunk-size", "0"]),
        ("watermark-2", ["--watermark", "2"]), ("scheduler-bad", ["--scheduler", "fifo"]),
        ("router-bad", ["--router", "random"]),
    ]:
        c.add(f"simulate/{label}", "harness", base + ["--trace", ok] + extra)
    c.add("simulate/unknown-model", "harness", ["simulate", "--model", "llama-9", "--gpu", "a100-80gb", "--trace", ok])
    c.add("simulate/unknown-gpu", "harness", ["simulate", "--model", "llama-2-7b", "--gpu", "v100", "--trace", ok])
    c.add("simulate/no-fit", "harness", ["simulate", "--model", "llama-2-70b", "--gpu", "a6000", "--tp", "1", "--trace", ok])
    c.add("simulate/azure-unknown", "harness", base + ["--trace", "azure:chat"])
    c.add("simulate/no-trace", "harness", base)
    c.add("harness/no-command", "harness", [])
    for label, path in file_syntax_cases(c, "launch-plan")[:8]:
        c.add(f"launch/plan/{label}", "harness", ["launch", path, "--dry-run", "--gpu", "a6000"])
    c.add("launch/not-a-plan", "harness", ["launch", c.file("launch-plan/problem.json", PROBLEM), "--dry-run"])
    c.add("replay/no-endpoints", "harness", ["replay", "--trace", ok])
    c.add("replay/bad-endpoints-file", "harness", ["replay", "--trace", ok, "--endpoints-file", c.file("ep/bin.json", BINARY)])


# -- experiments ---------------------------------------------------------------------------------
def experiment_cases(c: Corpus) -> None:
    res = ["--results", c.out + "/results", "--no-progress"]
    for label, path in file_syntax_cases(c, "experiment"):
        c.add(f"run/file/{label}", "experiments", [path] + res)
    base = {"experiment": "fz", "kind": "quickstart", "params": {"tasks": ["chat"], "selectors": ["flowmaker"]}}
    for label, cfg in [
        ("unknown-kind", {**base, "kind": "nope"}),
        ("kind-pattern", {**base, "kind": "../x"}),
        ("experiment-pattern", {**base, "experiment": "../../etc"}),
        ("no-experiment", {k: v for k, v in base.items() if k != "experiment"}),
        ("extra-top", {**base, "colour": "red"}),
        ("params-list", {**base, "params": [1]}),
        ("seed-text", {**base, "seed": "one"}),
        ("quickstart-unknown-task", {**base, "params": {"tasks": ["chatbot"], "selectors": ["flowmaker"]}}),
        ("quickstart-unknown-cluster", {**base, "params": {"tasks": ["chat"], "cluster": "a6000x9"}}),
        ("quickstart-cluster-path-missing", {**base, "params": {"tasks": ["chat"], "cluster": str(c.root / "a100x4.yaml")}}),
        ("quickstart-unknown-selector", {**base, "params": {"tasks": ["chat"], "selectors": ["nope"]}}),
        ("quickstart-time-limit-nan", {**base, "params": {"tasks": ["chat"], "time_limit_s": float("nan")}}),
        ("quickstart-time-limit-inf", {**base, "params": {"tasks": ["chat"], "time_limit_s": float("inf")}}),
        ("quickstart-time-limit-0", {**base, "params": {"tasks": ["chat"], "time_limit_s": 0}}),
        ("quickstart-sharing-bad", {**base, "params": {"tasks": ["chat"], "sharing": ["time"]}}),
        ("quickstart-tasks-empty", {**base, "params": {"tasks": []}}),
        ("quickstart-extra-param", {**base, "params": {"tasks": ["chat"], "colour": 1}}),
        ("quickstart-accuracy-fraction", {**base, "params": {"tasks": [c.file("exp-tasks/frac.yaml",
                                                                                {**TASK, "accuracy_slo": 0.25})]}}),
        ("scaling-depth-zero", {**base, "kind": "selector_scaling", "params": {"depths": [0], "catalog_sizes": []}}),
        ("gap-suite-missing", {**base, "kind": "selector_gap", "params": {"suite": str(c.root / "none.yaml")}}),
        ("gap-suite-binary", {**base, "kind": "selector_gap", "params": {"suite": c.file("suite/bin.yaml", BINARY)}}),
        ("gap-unknown-solver", {**base, "kind": "selector_gap", "params": {"solvers": ["nope"]}}),
        ("cost-slo-unknown-task", {**base, "kind": "cost_vs_slo", "params": {"tasks": ["chatbot"]}}),
    ]:
        c.add(f"run/config/{label}", "experiments", [c.file(f"experiments/{label}.yaml", cfg)] + res)
    ok = c.file("experiments/ok.yaml", {**base, "params": {"tasks": ["chatbot"]}})
    c.add("run/unknown-name", "experiments", ["quickstrat"] + res)
    c.add("run/run-id-escape", "experiments", [ok, "--run-id", "../x"] + res)
    c.add("run/results-is-a-file", "experiments", [ok, "--results", c.file("results-file", "x"), "--no-progress"])
    c.add("run/no-config", "experiments", [])


def bench_cases(c: Corpus) -> None:
    """The benchmark kinds (``python -m experiments.run bench_*``) given bad parameters."""
    res = ["--results", c.out + "/results", "--no-progress"]
    for label, kind, params in [
        ("bench_selectors/time-limit-nan", "bench_selectors", {"time_limit_s": float("nan")}),
        ("bench_selectors/unknown-solver", "bench_selectors", {"solvers": ["nope"]}),
        ("bench_selectors/space-bad", "bench_selectors", {"spaces": ["galaxy"]}),
        ("bench_selectors/repeats-text", "bench_selectors", {"repeats": "many"}),
        ("bench_time_limits/limits-nan", "bench_time_limits", {"limits_s": [float("nan")]}),
        ("bench_time_limits/unknown-solver", "bench_time_limits", {"solvers": ["nope"]}),
        ("bench_sim/only-bad", "bench_sim", {"only": "everything"}),
        ("bench_vidur/metrics-binary", "bench_vidur", {"vidur_metrics": c.file("vidur/bin.csv", BINARY)}),
        ("bench_vidur/metrics-missing", "bench_vidur", {"vidur_metrics": str(c.root / "none.csv")}),
        ("bench_vidur/metrics-columns", "bench_vidur", {"vidur_metrics": c.file("vidur/cols.csv", "a,b\n1,2\n")}),
        ("bench_prefill_split/split-zero", "bench_prefill_split", {"splits": [[0, 8]]}),
    ]:
        cfg = {"experiment": "fz", "kind": kind, "seed": 0, "params": params}
        c.add(label, "experiments", [c.file(f"experiments/{label.replace('/', '-')}.yaml", cfg)] + res)


def build(root: Path) -> list[tuple[str, str, list[str]]]:
    c = Corpus(Path(root))
    (c.root / "out").mkdir(exist_ok=True)
    from tests.fuzz_hostile import build_hostile
    for part in (selector_cases, table_cases, profiler_cases, harness_cases, experiment_cases, bench_cases,
                 build_hostile):
        part(c)
    ids = [i for i, _, _ in c.cases]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    return c.cases
