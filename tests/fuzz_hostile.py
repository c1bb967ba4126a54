"""The fuzz corpus's second half (issue 28): hostile inputs by category, each over every entry
point that takes one: special files (FIFOs, sockets, devices, links to them) as every input file,
names that would become paths (experiment, run id, task, app, kind), numbers that overflow,
values of the wrong type that lax parsing would coerce, duplicate names, sizes that make a run
endless, and app / engine-spec files. Every case is a user error (exit 2, one line).

Names meant to escape the results folder carry :data:`ESCAPE` so tests/test_fuzz.py can look for
a file of that name anywhere under the corpus's temporary root.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: part of every file name a path-escape case tries to create
ESCAPE = "ESCAPED-BY-FUZZ"
TASK = {"name": "mine", "trace": "conv", "accuracy_slo": 20.0, "latency_slo_s": 8.0, "arrival_rate_rps": 1.0,
        "workflows": [{"name": "answer", "stages": [{"name": "answer", "role": "answer"}]}]}
#: names that must never become a path component as they are
BAD_NAMES = {"dotdot": "..", "dot": ".", "up": f"../{ESCAPE}", "up4": f"../../../../{ESCAPE}",
             "up8": "../" * 8 + ESCAPE, "abs": f"/tmp/{ESCAPE}", "slash": f"a/{ESCAPE}", "hidden": ".hidden",
             "empty": "", "space": " ", "dash": "-rf", "long": "n" * 300, "nul": f"a\x00{ESCAPE}",
             "surrogate": "\ud800", "newline": "a\nb", "backslash": f"..\\{ESCAPE}", "tilde": "~",
             "unicode-slash": f"a\u2215{ESCAPE}"}


def _yaml_text(data: Any) -> str:
    """YAML text that keeps NUL and lone surrogates as escapes (safe_dump cannot write them)."""
    import json
    return json.dumps(data, ensure_ascii=True)        # JSON is YAML; \\ud800 stays an escape


def _special_files(c) -> list[tuple[str, str]]:
    """(label, path) of files that are not regular files, one per suffix an entry point expects."""
    d = c.root / "special"
    d.mkdir(exist_ok=True)
    out = []
    for suffix in (".yaml", ".json", ".csv", ".parquet", ".jsonl"):
        fifo = d / f"fifo{suffix}"
        if not fifo.exists():
            os.mkfifo(fifo)
        link = d / f"link{suffix}"
        if not link.exists():
            link.symlink_to(fifo)
        sock = d / f"sock{suffix}"
        if not sock.exists():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(str(sock))
            s.close()
        out += [(f"fifo{suffix}", str(fifo)), (f"fifo-link{suffix}", str(link)), (f"socket{suffix}", str(sock))]
    out += [("dev-zero", "/dev/zero"), ("dev-null", "/dev/null"), ("dev-urandom", "/dev/urandom"),
            ("dev-stdin", "/dev/stdin")]
    return out


def _exp(c, label: str, cfg: dict) -> str:
    return c.file(f"hostile/experiments/{label}.yaml", _yaml_text(cfg))


def _run(c, cid: str, cfg: dict, *extra: str) -> None:
    c.add(cid, "experiments", [_exp(c, cid.replace("/", "__"), cfg), "--results", c.out + "/results",
                               "--no-progress", *extra])


def special_file_cases(c) -> None:
    """Every file an entry point reads, given as a FIFO, a link to one, a socket or a device."""
    ok_trace = c.file("hostile/ok.csv", "arrived_at_s,prompt_tokens,output_tokens\n0,10,10\n1,10,10\n")
    good = str(ROOT / "results" / "profiles" / "cpu-tiny-torch.parquet")
    sim = ["simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--trace"]
    pred = ["predict", "--model", "llama-2-7b", "--gpu", "a6000", "--prompt-tokens", "1", "--output-tokens", "1",
            "--calibration"]
    faces = [  # (id, face, argv before the file, argv after, suffix it needs)
        ("solve", "selector", ["solve"], [], ".yaml"),
        ("solve-json", "selector", ["solve"], [], ".json"),
        ("deploy", "selector", ["deploy"], [], ".yaml"),
        ("resolve-task", "selector", ["resolve"], [], ".yaml"),
        ("resolve-cluster", "selector", ["resolve", "chat", "--cluster"], [], ".yaml"),
        ("resolve-models", "selector", ["resolve", "chat", "--models"], [], ".yaml"),
        ("resolve-accuracy", "selector", ["resolve", "chat", "--accuracy"], [], ".yaml"),
        ("resolve-profile", "selector", ["resolve", "chat", "--profile"], [], ".parquet"),
        ("export", "harness", ["export"], ["--format", "sh", "--gpu", "a6000"], ".json"),
        ("simulate-trace", "harness", sim, [], ".csv"),
        ("replay-endpoints", "harness", ["replay", "--trace", ok_trace, "--endpoints-file"], [], ".json"),
        ("replay-trace", "harness", ["replay", "--endpoints", "i0=http://127.0.0.1:9", "--trace"], [], ".csv"),
        ("launch", "harness", ["launch"], ["--dry-run", "--gpu", "a6000"], ".json"),
        ("predict-calibration", "profiler", pred, [], ".yaml"),
        ("validate-measured", "profiler", ["validate", "--measured"], [], ".parquet"),
        ("validate-reference", "profiler", ["validate", "--measured", good, "--reference"], [], ".parquet"),
        ("calibrate-measured", "profiler", ["calibrate", "--measured"], ["--out", c.out + "/cal.yaml"], ".parquet"),
        ("convert", "profiler", ["convert"], ["--out", c.out + "/r.parquet"], ".jsonl"),
        ("profile-run", "profiler", ["run"], ["--out", c.out + "/m.parquet"], ".yaml"),
        ("run-config", "experiments", [], ["--results", c.out + "/results", "--no-progress"], ".yaml"),
    ]
    specials = _special_files(c)
    for fid, face, before, after, suffix in faces:
        for label, path in specials:
            if label.endswith(tuple(s for s in (".yaml", ".json", ".csv", ".parquet", ".jsonl") if s != suffix)):
                continue
            c.add(f"special/{fid}/{label.removesuffix(suffix)}", face, [*before, path, *after])
    # the vidur benchmark's metrics file (an experiment kind's parameter)
    for label, path in specials:
        if label.endswith((".yaml", ".json", ".parquet", ".jsonl")):
            continue
        _run(c, f"special/vidur-metrics/{label.removesuffix('.csv')}",
             {"experiment": "fz", "kind": "bench_vidur", "params": {"vidur_metrics": path}})
    # files named inside an experiment config
    fifo_yaml = str(c.root / "special" / "fifo.yaml")
    q = {"experiment": "fz", "kind": "quickstart", "params": {"tasks": ["chat"], "selectors": ["flowmaker"]}}
    for label, params in [("quickstart-task", {"tasks": [fifo_yaml]}), ("quickstart-cluster", {"tasks": ["chat"],
                          "cluster": fifo_yaml}), ("cost-slo-task", {"tasks": [fifo_yaml]})]:
        kind = "cost_vs_slo" if label.startswith("cost") else "quickstart"
        _run(c, f"special/config/{label}", {**q, "kind": kind, "params": {**params, "selectors": ["flowmaker"]}})
    for label in ("fifo", "socket", "dev-zero"):
        path = {"fifo": fifo_yaml, "socket": str(c.root / "special" / "sock.yaml"), "dev-zero": "/dev/zero"}[label]
        _run(c, f"special/config/gap-suite-{label}", {**q, "kind": "selector_gap", "params": {"suite": path}})
        _run(c, f"special/config/teola-app-{label}", {**q, "kind": "teola_apps", "params": {"apps": [path]}})
        _run(c, f"special/config/teola-real-app-{label}", {**q, "kind": "teola_real_cpu", "params": {"apps": [path]}})


def path_component_cases(c) -> None:
    """Names that become folders or files: refused, never joined into a path as they are."""
    q = {"experiment": "fz", "kind": "quickstart", "params": {"tasks": ["chat"], "selectors": ["flowmaker"]}}
    ok = _exp(c, "ok-quickstart", q)
    for label, name in BAD_NAMES.items():
        _run(c, f"names/experiment/{label}", {**q, "experiment": name})
        if "\x00" not in name and "\ud800" not in name:
            c.add(f"names/run-id/{label}", "experiments", [ok, "--run-id", name, "--results", c.out + "/results",
                                                            "--no-progress"])
        task = c.file(f"hostile/tasks/{label}.yaml", _yaml_text({**TASK, "name": name}))
        c.add(f"names/task/resolve/{label}", "selector", ["resolve", task])
        _run(c, f"names/task/quickstart/{label}", {**q, "params": {"tasks": [task], "selectors": ["flowmaker"]}})
        _run(c, f"names/task/cost-slo/{label}", {**q, "kind": "cost_vs_slo",
                                                 "params": {"tasks": [task], "selectors": ["flowmaker"]}})
        if name:
            _run(c, f"names/app/teola/{label}", {**q, "kind": "teola_apps", "params": {"apps": [name]}})
            _run(c, f"names/app/teola-ablation/{label}", {**q, "kind": "teola_apps", "params": {"ablation_app": name}})
            _run(c, f"names/app/teola-real/{label}", {**q, "kind": "teola_real_cpu", "params": {"apps": [name, name]}})
    for kind in ("__init__", "_paper_plan", "_plotstyle", "_teola_report", "_paper_report", "../quickstart",
                 "kinds.quickstart", "Quickstart", "quickstart/", "quickstart\x00", "", "context", "run"):
        _run(c, f"names/kind/{kind.encode('unicode_escape').decode() or 'empty'}", {**q, "kind": kind})


def app_file_cases(c) -> None:
    """App files given by path (``teola_apps`` apps:) that are broken as files or as apps."""
    from tests.fuzz_corpus import file_syntax_cases
    q = {"experiment": "fz", "kind": "teola_apps", "params": {}}
    cases = [(label, p) for label, p in file_syntax_cases(c, "hostile/apps") if p.endswith(".yaml")]
    cases += [("task-file", str(ROOT / "configs" / "tasks" / "chat.yaml")),
              ("engine-spec", str(ROOT / "configs" / "engines" / next(
                  iter(sorted(p.name for p in (ROOT / "configs" / "engines").glob("*.yaml")))))),
              ("folder", str(c.root / "hostile" / "appdir.yaml")),
              ("missing-app", str(c.root / "hostile" / "none.yaml"))]
    (c.root / "hostile" / "appdir.yaml").mkdir(parents=True, exist_ok=True)
    app = yaml.safe_load((ROOT / "configs" / "apps" / "naive_rag.yaml").read_text())
    bad_engine = {**app, "engines": {k: {**v, "spec": "../../nope"} for k, v in app["engines"].items()}}
    spec_path = {**app, "engines": {k: {**v, "spec": str(ROOT / "configs" / "tasks" / "chat.yaml")}
                                    for k, v in app["engines"].items()}}
    cases += [("engine-unknown", c.file("hostile/apps/engine-unknown.yaml", bad_engine)),
              ("engine-spec-path", c.file("hostile/apps/engine-path.yaml", spec_path)),
              ("extra-key", c.file("hostile/apps/extra.yaml", {**app, "colour": 1})),
              ("no-engines", c.file("hostile/apps/noeng.yaml", {k: v for k, v in app.items() if k != "engines"}))]
    for label, path in cases:
        _run(c, f"app-file/teola/{label}", {**q, "params": {"apps": [path]}})
    for label, path in cases[:8]:
        _run(c, f"app-file/teola-real/{label}", {**q, "kind": "teola_real_cpu", "params": {"apps": [path, "naive_rag"]}})


def overflow_cases(c) -> None:
    """Numbers whose products or quotients overflow: bad input, not an internal error."""
    from tests.fuzz_corpus import PROBLEM, _leaves, _set
    import json
    values = {"1e308": 1e308, "5e-324": 5e-324, "2^70": 2**70, "-2^70": -2**70, "1e30": 1e30, "2^63": 2**63}
    for leaf in _leaves(PROBLEM):
        cur: Any = PROBLEM
        for k in leaf:
            cur = cur[k]
        if isinstance(cur, bool) or not isinstance(cur, (int, float)):
            continue
        where = ".".join(map(str, leaf))
        for name, v in values.items():
            if v < 0 and where.endswith(("used_gb", "utilization")):
                continue
            path = c.file(f"hostile/overflow/{where}={name}.json", json.dumps(_set(PROBLEM, leaf, v)))
            c.add(f"overflow/solve/{where}={name}", "selector", ["solve", path])
    for field, v in [("arrival_rate_rps", 1e308), ("arrival_rate_rps", 5e-324), ("latency_slo_s", 1e308),
                     ("latency_slo_s", 5e-324), ("accuracy_slo", 1e308)]:
        task = c.file(f"hostile/overflow/task-{field}-{v:g}.yaml", _yaml_text({**TASK, field: v}))
        c.add(f"overflow/resolve/{field}={v:g}", "selector", ["resolve", task])
    for calls in (2**70, 2**40, 10**12):
        t = {**TASK, "workflows": [{"name": "w", "stages": [{"name": "s", "role": "answer", "calls": calls}]}]}
        c.add(f"overflow/resolve/calls={calls}", "selector", ["resolve", c.file(f"hostile/overflow/calls{calls}.yaml", t)])
    q = {"experiment": "fz", "kind": "selector_scaling", "params": {"catalog_sizes": [], "solvers": ["flowmaker"]}}
    for d in (1000, 100, 10**9):
        _run(c, f"overflow/scaling/depths={d}", {**q, "params": {**q["params"], "depths": [d]}})
        _run(c, f"overflow/scaling/multi_depths={d}", {**q, "params": {**q["params"], "depths": [1], "multi_depths": [d]}})
    _run(c, "overflow/scaling/catalog-size=1e6", {**q, "params": {"depths": [], "catalog_sizes": [10**6]}})
    _run(c, "overflow/scaling/catalog-depth=1000", {**q, "params": {"depths": [], "catalog_sizes": [11],
                                                                    "catalog_depth": 1000}})
    mem = ["memory", "--model", "llama-2-7b", "--gpu", "a6000"]
    for label, extra in [("max-num-seqs-1e12", ["--max-num-seqs", "1000000000000"]),
                         ("max-num-seqs-1e30", ["--max-num-seqs", "1" + "0" * 30]),
                         ("max-num-seqs-0", ["--max-num-seqs", "0"]),
                         ("max-model-len-1e12", ["--max-model-len", "1000000000000"]),
                         ("tp-1e30", ["--tp", "1" + "0" * 30])]:
        c.add(f"overflow/memory/{label}", "profiler", mem + extra)
    pred = ["predict", "--model", "llama-2-7b", "--gpu", "a6000"]
    for label, extra in [("prompt-1e30", ["--prompt-tokens", "1" + "0" * 30, "--output-tokens", "1"]),
                         ("output-2^63", ["--prompt-tokens", "1", "--output-tokens", str(2**63)]),
                         ("batch-1e12", ["--prompt-tokens", "1", "--output-tokens", "1", "--batch", "1000000000000"])]:
        c.add(f"overflow/predict/{label}", "profiler", pred + extra)


def endless_cases(c) -> None:
    """Sizes that would make a run take days: refused before any work starts."""
    suite = {"name": "s", "random": {"start": 0, "stop": 1_000_000_000}}
    _run(c, "endless/gap-random-1e9", {"experiment": "fz", "kind": "selector_gap",
                                       "params": {"suite": c.file("hostile/suite-1e9.yaml", suite)}})
    _run(c, "endless/gap-variants-1e9", {"experiment": "fz", "kind": "selector_gap", "params": {
        "suite": c.file("hostile/suite-var.yaml", {"name": "s", "paper_variants": {"start": 0, "stop": 10**9}})}})
    # the 100,000 tasks hit the same bound as 5,000; the list's parse alone takes ~4 s of CPU
    _run(c, "endless/quickstart-5k-tasks", {"experiment": "fz", "kind": "quickstart",
                                            "params": {"tasks": ["chat"] * 5_000, "selectors": ["flowmaker"]}})
    _run(c, "endless/quickstart-10k-distinct", {"experiment": "fz", "kind": "quickstart",
                                                "params": {"tasks": [f"t{i}" for i in range(10_000)]}})
    _run(c, "endless/teola-n-queries-1e9", {"experiment": "fz", "kind": "teola_apps", "params": {"n_queries": 10**9}})
    _run(c, "endless/cost-slo-points-1e6", {"experiment": "fz", "kind": "cost_vs_slo", "params": {"points": 10**6}})
    _run(c, "endless/paper-seeds-1e9", {"experiment": "fz", "kind": "paper_goodput_cost",
                                        "params": {"tasks": ["chat"], "selectors": ["flowmaker"], "seeds": 10**9}})


def coercion_cases(c) -> None:
    """Values of the wrong type that lax parsing turns into something else: refused."""
    wrong = {"true": True, "false": False, "string-5": "5", "string-1.5": "1.5", "sexagesimal": "1:30@",
             "list": [5], "null": None}
    kinds = {  # kind -> (base params, numeric fields)
        "quickstart": ({"tasks": ["chat"], "selectors": ["flowmaker"]}, ["time_limit_s"]),
        "selector_gap": ({"max_random": 1}, ["time_limit_s", "bayesian_trials", "max_random"]),
        "cost_vs_slo": ({"tasks": ["chat"], "selectors": ["flowmaker"]}, ["time_limit_s", "points", "tightest"]),
        "selector_scaling": ({"depths": [1], "catalog_sizes": []}, ["time_limit_s", "bayesian_trials", "catalog_depth"]),
        "teola_apps": ({"apps": ["naive_rag"]}, ["n_queries", "saturation", "isolated_rate_rps", "dispatch_overhead_s"]),
        "paper_goodput_cost": ({"tasks": ["chat"], "selectors": ["flowmaker"]},
                               ["window_s", "seeds", "time_limit_s", "price_per_gb_s", "workers"]),
        "reselection": ({"tasks": ["chat"]}, ["nodes", "price_per_gb_s"]),
        "plan_orchestration": ({"tasks": ["rag-qa"], "orchestrated": ["rag-qa"]}, ["time_limit_s", "dispatch_overhead_s"]),
    }
    for kind, (base, fields) in kinds.items():
        for field in fields:
            for label, v in wrong.items():
                if label == "null" and field == "max_random":
                    continue          # optional: null is its default
                text = _yaml_text({"experiment": "fz", "kind": kind, "params": {**base, field: v}})
                if label == "sexagesimal":
                    text = text.replace('"1:30@"', "1:30")       # a bare YAML 1.1 base-60 number
                path = c.file(f"hostile/coerce/{kind}-{field}-{label}.yaml", text)
                c.add(f"coerce/{kind}/{field}={label}", "experiments", [path, "--results", c.out + "/results",
                                                                       "--no-progress"])
    for label, v in [("true", True), ("string", "1"), ("sexagesimal", "1:30@")]:
        for field in ("arrival_rate_rps", "latency_slo_s", "accuracy_slo"):
            text = _yaml_text({**TASK, field: v}).replace('"1:30@"', "1:30")
            c.add(f"coerce/task/{field}={label}", "selector", ["resolve", c.file(f"hostile/coerce/task-{field}-{label}.yaml",
                                                                                 text)])
    q = {"experiment": "fz", "kind": "quickstart", "params": {"tasks": ["chat"]}}
    for kind in ("quickstart", "cost_vs_slo", "paper_goodput_cost", "selector_gap", "selector_scaling"):
        key = "solvers" if kind in ("selector_gap", "selector_scaling") else "selectors"
        _run(c, f"coerce/{kind}/{key}-empty", {**q, "kind": kind, "params": {**q["params"], key: []}})
    for seed in (True, "1", 1.5, "1:30@"):
        text = _yaml_text({**q, "seed": seed}).replace('"1:30@"', "1:30")
        c.add(f"coerce/seed={seed!s}", "experiments", [c.file(f"hostile/coerce/seed-{seed!s}.yaml", text),
                                                       "--results", c.out + "/results", "--no-progress"])


def duplicate_name_cases(c) -> None:
    """The same task (or app, solver) twice: results keyed by name would overwrite each other."""
    twin = c.file("hostile/dup/chat-copy.yaml", {**yaml.safe_load((ROOT / "configs/tasks/chat.yaml").read_text())})
    lists = {"same-name": ["chat", "chat"], "name-and-file": ["chat", twin],
             "file-twice": [twin, twin], "three": ["rag-qa", "chat", "rag-qa"]}
    base = {"quickstart": {"selectors": ["flowmaker"]}, "cost_vs_slo": {"selectors": ["flowmaker"]},
            "paper_goodput_cost": {"selectors": ["flowmaker"]}, "reselection": {},
            "plan_orchestration": {"orchestrated": ["rag-qa"]}, "live_replay": {"selectors": ["flowmaker"]}}
    for kind, extra in base.items():
        for label, tasks in lists.items():
            _run(c, f"dup/{kind}/tasks-{label}", {"experiment": "fz", "kind": kind, "params": {**extra, "tasks": tasks}})
    _run(c, "dup/plan_orchestration/orchestrated", {"experiment": "fz", "kind": "plan_orchestration",
                                                    "params": {"tasks": ["rag-qa"], "orchestrated": ["rag-qa", "rag-qa"]}})
    _run(c, "dup/teola_apps/apps", {"experiment": "fz", "kind": "teola_apps", "params": {"apps": ["naive_rag"] * 2}})
    _run(c, "dup/teola_real/apps", {"experiment": "fz", "kind": "teola_real_cpu", "params": {"apps": ["naive_rag"] * 2}})
    for kind, key in (("quickstart", "selectors"), ("cost_vs_slo", "selectors"), ("selector_gap", "solvers"),
                      ("selector_scaling", "solvers"), ("paper_goodput_cost", "selectors")):
        params = {"tasks": ["chat"], key: ["flowmaker", "flowmaker"]} if kind not in ("selector_gap", "selector_scaling") \
            else {key: ["flowmaker", "flowmaker"]}
        _run(c, f"dup/{kind}/{key}", {"experiment": "fz", "kind": kind, "params": params})
    # selector_gap: two problems named alike (one of them infeasible) in one suite
    from tests.fuzz_corpus import PROBLEM, _set
    a = c.file("hostile/dup/gap/a.json", PROBLEM)
    b = c.file("hostile/dup/gap/b.json", _set(PROBLEM, ("task", "accuracy_slo"), 99.0))
    suite = c.file("hostile/dup/gap/suite.yaml", {"name": "dup", "problems": ["a.json", "b.json"]})
    _run(c, "dup/selector_gap/problem-names", {"experiment": "fz", "kind": "selector_gap",
                                               "params": {"suite": suite, "solvers": ["flowmaker"]}})
    assert a and b


def build_hostile(c) -> None:
    for part in (special_file_cases, path_component_cases, app_file_cases, overflow_cases, endless_cases,
                 coercion_cases, duplicate_name_cases):
        part(c)
