"""The wheel (issue 18 item 6): built from the tracked sources, it carries the configs as package
data and the console scripts; installed in a fresh virtual environment and run from an empty
folder (no checkout in sight), it resolves a task by name and runs a quickstart experiment.

The fresh environment gets the dependencies from this interpreter's site-packages through a
``.pth`` line (so the test needs no network); the project itself comes only from the wheel: the
editable install's import hook lives in a ``.pth`` file that a ``.pth`` line does not run.
``make check-pythons`` runs it (with the other light tests) on Python 3.12 and 3.13, whose fresh
environments get the newest dependencies the ranges admit from the index.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLOWMAKER_DEBUG")}
    env.update(MPLBACKEND="Agg", HF_HUB_OFFLINE="1")
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if rel.startswith(("tests/", "results/", "notebooks/")) or not (ROOT / rel).is_file():
            continue
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    out = tmp_path_factory.mktemp("dist")
    try:
        isolated = int(metadata.version("setuptools").split(".")[0]) < 77
    except metadata.PackageNotFoundError:
        isolated = True                 # pip fetches the build backend (needs the index)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    r = _run(cmd if isolated else cmd[:4] + ["--no-build-isolation"] + cmd[4:], cwd=src)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("flowmaker-*.whl")
    return whl


def test_wheel_carries_configs_and_console_scripts(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "flowmaker_configs/models.yaml" in names and "flowmaker_configs/tasks/rag-qa.yaml" in names
    assert "flowmaker_configs/clusters/a6000x8.yaml" in names and "flowmaker_configs/experiments/quickstart.yaml" in names
    assert not [n for n in names if n.startswith(("tests/", "results/"))]
    meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(meta).decode()
    for s in ("flowmaker-select", "flowmaker-harness", "flowmaker-profiler", "flowmaker-experiment"):
        assert s in scripts
    info = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Python: <3.14,>=3.11" in info


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory) -> Path:
    env = tmp_path_factory.mktemp("venv")
    r = _run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=env)
    assert r.returncode == 0, r.stderr
    site = Path(_run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=env).stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_deps_from_test_env.pth").write_text("\n".join(sorted(deps)) + "\n")
    r = _run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--no-deps",
              "--no-index", "-q", str(wheel)], cwd=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return env


def test_installed_wheel_finds_its_configs_and_runs_the_quickstart(venv: Path, tmp_path: Path) -> None:
    py, bin_ = venv / "bin" / "python", venv / "bin"
    r = _run([str(py), "-c", "import selector, flowmaker_configs; from profiler.catalog import configs_dir; "
                             "print(selector.__file__); print(configs_dir())"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.split():
        assert line.startswith(str(venv)), r.stdout          # the wheel's code and configs, not the checkout's
    r = _run([str(bin_ / "flowmaker-select"), "resolve", "rag-qa", "--out", "rag.yaml"], cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "rag.yaml").exists(), r.stderr
    r = _run([str(bin_ / "flowmaker-select"), "solve", "rag.yaml", "--solver", "milp"], cwd=tmp_path)
    assert r.returncode == 0 and "rag-qa: optimal" in r.stdout, r.stderr
    r = _run([str(bin_ / "flowmaker-select"), "--version"], cwd=tmp_path)
    assert r.returncode == 0 and "0.1.0" in r.stdout
    cfg = tmp_path / "qs.yaml"      # the quickstart's kind, two tasks by name, the shipped cluster by name
    cfg.write_text("experiment: quickstart\nkind: quickstart\nparams:\n  tasks: [chat, rag-qa]\n"
                   "  selectors: [flowmaker, milp, langchain]\n  cluster: a6000x8\n")
    r = _run([str(bin_ / "flowmaker-experiment"), str(cfg), "--results", "res"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sharing: memory" in r.stdout and list((tmp_path / "res" / "quickstart").glob("*/summary.md"))
    r = _run([str(bin_ / "flowmaker-experiment"), "quickstrat"], cwd=tmp_path)
    assert r.returncode == 2 and "known:" in r.stderr and "quickstart" in r.stderr
