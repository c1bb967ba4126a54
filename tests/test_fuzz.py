"""Issue 14 item 1: no traceback anywhere. A generated corpus of malformed problems, tasks,
clusters, bundles, traces, profile tables, calibrations, experiment configs and command lines
(tests/fuzz_corpus.py, ~600 cases) goes through every entry point's ``main(argv)`` in a child
process (tests/fuzz_runner.py: address space capped, a wall-clock bound per case); each case must
exit with status 2 and print one line on standard error, no traceback, within its time and memory
bounds. A few cases also run as real ``python -m`` processes, and a closed pipe ends quietly.

Against the code before the fix (commit 2c8be50), 118 of the 597 cases failed: 91 tracebacks,
8 silent successes (an accuracy SLO of 0.25, 80000 GB of GPU memory, infinite or zero latencies
in a profile table, an empty table calibrated, a trace spanning 1e308 s), 15 usage errors over
several lines, and 4 errors echoing a 20 MB value whole.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fuzz_corpus import FACES, build
from tests.fuzz_hostile import ESCAPE

ROOT = Path(__file__).resolve().parents[1]
CASE_LIMIT_S = 20.0          # wall seconds per case (the slowest, a deep YAML file, takes ~1 s)
CASE_MEMORY_MB = 1000        # peak resident memory a case may add
MAX_LINE = 1040              # characters of the one error line (long values are cut: flowmaker.entry.MAX_LINE)


def _problems(r: dict) -> str | None:
    lines = [ln for ln in r["stderr"].splitlines() if ln.strip() and not ln.startswith("warning:")]
    if r["outcome"] != "returned":
        return f"{r['outcome']}: {r['traceback'].strip().splitlines()[-1] if r['traceback'] else ''}"
    if r["code"] != 2:
        return f"exit status {r['code']} (stdout: {r['stdout'][:120]!r})"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr: {r['stderr'][:300]!r}"
    if "Traceback" in r["stderr"]:
        return "a traceback"
    if r["stderr_len"] > MAX_LINE + 200 or len(lines[0]) > MAX_LINE:
        return f"an error line of {r['stderr_len']} characters"
    if r["seconds"] > CASE_LIMIT_S:
        return f"took {r['seconds']:.1f} s"
    if (r["peak_growth_mb"] or 0) > CASE_MEMORY_MB:
        return f"grew by {r['peak_growth_mb']:.0f} MB"
    return None


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """The whole corpus run once: its results by case id, and every file that appeared under the
    corpus's temporary root while it ran (issue 28: nothing may land outside ``files/out``)."""
    root = tmp_path_factory.mktemp("fuzz")
    cases = build(root / "files")
    before = _files(root)
    payload = json.dumps([(cid, FACES[face], argv) for cid, face, argv in cases])
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "fuzz_runner.py"), "--limit-s", "60",
                           "--rlimit-mb", "6000"], input=payload, capture_output=True, text=True,
                          cwd=root / "files", timeout=1200, env=_env())
    wall = time.monotonic() - t0
    out = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert len(out) == len(cases), f"the runner stopped after {len(out)} of {len(cases)} cases: {proc.stderr[-2000:]}"
    print(f"\nfuzz corpus: {len(out)} cases in {wall:.1f} s")
    return {"results": out, "root": root, "new": _files(root) - before}


@pytest.fixture(scope="module")
def results(corpus) -> dict[str, dict]:
    return corpus["results"]


def test_nothing_is_written_outside_the_results_folder(corpus) -> None:
    """Issue 28 item 1: names like ``../../../../X`` (experiment, task, app, run id) never place a
    file outside the output folder (``files/out``) the cases name; nor beside an input file."""
    def allowed(f: str) -> bool:       # an --out file, or a run folder of the corpus's experiment names
        parts = f.split("/")
        return (ESCAPE not in f and parts[:2] == ["files", "out"]
                and (len(parts) == 3 or parts[2:4] in (["results", "fz"], ["results", "quickstart"])))
    outside = sorted(f for f in corpus["new"] if not allowed(f))
    assert not outside, outside[:20]
    escaped = [*map(str, corpus["root"].parent.glob(f"**/*{ESCAPE}*")), *map(str, Path("/tmp").glob(f"*{ESCAPE}*"))]
    assert not escaped, escaped[:20]


def _env() -> dict:
    import os
    env = dict(os.environ)
    env.update(MPLBACKEND="Agg", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env.pop("FLOWMAKER_DEBUG", None)
    return env


def test_corpus_is_large_and_covers_every_input_kind(results) -> None:
    assert len(results) >= 900
    kinds = {"solve/leaf/", "solve/file/", "deploy/bundle/", "resolve/task/", "resolve/cluster/",
             "simulate/trace/", "resolve/profile/", "validate/measured/", "calibrate/measured/",
             "predict/calibration/", "run/file/", "run/config/", "bench_",
             # issue 28's categories
             "special/", "names/experiment/", "names/run-id/", "names/task/", "names/app/", "names/kind/",
             "app-file/", "overflow/", "endless/", "coerce/", "dup/"}
    for k in kinds:
        assert sum(i.startswith(k) for i in results) >= 5, k


def test_every_case_is_one_line_and_exit_2(results) -> None:
    bad = {cid: why for cid, r in results.items() if (why := _problems(r))}
    assert not bad, f"{len(bad)} of {len(results)} cases failed:\n" + "\n".join(f"{k}: {v}" for k, v in bad.items())


@pytest.mark.parametrize("cid, needle", [
    # the examples of issue 14 item 1, each with what its one line must say
    ("resolve/cluster-file/binary", "binary"),
    ("resolve/models-file/binary", "binary"),
    ("resolve/profile/csv", "not a readable parquet table"),
    ("resolve/profile/truncated", "not a readable parquet table"),
    ("resolve/out-missing-folder", "--out: folder"),
    ("simulate/trace/tokens-1e30", "at most 2147483647 tokens"),
    ("simulate/trace/azure-timezone", "time zone"),
    ("simulate/kv-tokens-1", "--kv-tokens"),
    ("simulate/replicas-1e6", "--replicas"),
    ("simulate/trace/dev-zero", "character device"),
    ("predict/calibration/binary", "binary"),
    ("run/file/binary", "binary"),
    ("run/file/unclosed", "line 2, column 1"),
    ("deploy/bundle-deep-100k", "nested"),
    ("calibrate/measured/latency-inf", "infinite"),
    ("calibrate/measured/ttft-zero", "must be > 0"),
    ("validate/measured/empty", "no rows"),
    ("calibrate/measured/empty", "no rows"),
    ("validate/measured/tp-zero", "'tp' must be > 0"),
    ("solve/20MB-value", "characters cut"),
    ("simulate/trace/tokens-500KB", "characters cut"),
    ("simulate/trace/line-20MB", "longer than 1 MiB"),
    # issue 18: unit mistakes, names vs paths, the right file kind
    ("resolve/task/accuracy-fraction", "0-100 scale"),
    ("resolve/cluster/mem-80000", "not MB"),
    ("solve/task-file", "resolve it first"),
    ("run/config/quickstart-cluster-path-missing", "a100x4.yaml"),
    ("resolve/unknown-cluster", "known: a6000x8"),
    ("run/unknown-name", "known:"),
    ("solve/time-limit=nan", "--time-limit"),
])
def test_issue_examples_say_what_is_wrong(results, cid: str, needle: str) -> None:
    r = results[cid]
    assert r["code"] == 2 and needle in r["stderr"], r["stderr"][:400]
    assert ".yaml.yaml" not in r["stderr"]


PROCESS_CASES = [
    (["-m", "selector", "solve", "{bin}"], "binary"),
    (["-m", "selector", "resolve", "chat", "--cluster", "a6000x9"], "unknown cluster"),
    (["-m", "harness", "simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--trace", "/dev/zero"], "--trace"),
    (["-m", "profiler", "validate", "--measured", "{bin}"], "parquet"),
    (["-m", "experiments.run", "{bin}"], "binary"),
    # every known name listed, none cut (the last in order is the longest way in)
    (["-m", "experiments.run", "quickstrat"], "teola_real_cpu_sim (or give a path to an experiment config file)"),
    (["-m", "profiler", "run", "models"], "unknown profile config 'models'"),   # data, not a profile config
    (["-m", "experiments.kinds.selector_gap", "--freeze", "nope.yaml"], "no such suite file"),   # was a traceback
]


@pytest.mark.parametrize("argv, needle", PROCESS_CASES, ids=[" ".join(a[1:3]) for a, _ in PROCESS_CASES])
def test_python_m_faces_exit_2_with_one_line(tmp_path, argv: list[str], needle: str) -> None:
    b = tmp_path / "bin.yaml"
    b.write_bytes(bytes(range(256)) * 4)
    cmd = [sys.executable, *[a.format(bin=b) for a in argv]]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120, env=_env())
    assert r.returncode == 2, r
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr and "Traceback" not in r.stderr


def test_a_closed_pipe_is_quiet(tmp_path) -> None:
    """``python -m selector resolve chat | head -1``: no BrokenPipeError traceback."""
    r = subprocess.run(f"'{sys.executable}' -m selector resolve chat | head -1", shell=True, capture_output=True,
                       text=True, cwd=tmp_path, timeout=120, env=_env())
    assert r.stdout.startswith("task:") and r.stderr == "", r.stderr


@pytest.mark.parametrize("module", ["selector", "harness", "profiler", "experiments.run"])
def test_version(module: str) -> None:
    from flowmaker import __version__
    r = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120,
                       env=_env())
    assert r.returncode == 0 and __version__ in r.stdout


def test_every_option_has_help_text() -> None:
    """Every option and positional argument of every command line says what it is (issue 18)."""
    import argparse
    import importlib

    parsers = {"selector": importlib.import_module("selector.cli").build_parser(),
               "harness": importlib.import_module("harness.cli").build_parser(),
               "profiler": importlib.import_module("profiler.cli")._parser()}
    missing = []

    def walk(name: str, p: argparse.ArgumentParser) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, sp in a.choices.items():
                    walk(f"{name} {sub}", sp)
            elif not isinstance(a, (argparse._HelpAction, argparse._VersionAction)) and not a.help:
                missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}")

    for name, p in parsers.items():
        walk(name, p)
    for mod in ("experiments.run",):
        captured = {}
        orig = argparse.ArgumentParser.parse_args

        def grab(self, *a, **k):
            captured["p"] = self
            raise SystemExit(0)
        argparse.ArgumentParser.parse_args = grab
        try:
            importlib.import_module(mod).main([])
        except SystemExit:
            pass
        finally:
            argparse.ArgumentParser.parse_args = orig
        walk(mod, captured["p"])
    assert not missing, missing
