"""Issue 28: names confined to the results folder (item 1), the one bounded reader refusing
special files and coerced types (items 2, 4), distinct names (item 5), one file mode (item 9).
The corpus-wide checks are in tests/test_fuzz.py; these pin each mechanism on its own."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pandas as pd
import pytest

from flowmaker.inputs import InputError, load_mapping, open_input, parse_text, read_text
from flowmaker.names import BadName, check_name, file_name, path_inside

HOSTILE = ["..", ".", "../../../../X", "/tmp/X", "a/b", ".hidden", "", "a\x00b", "\ud800", "n" * 300, "a\\b", "-rf"]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_is_refused_and_its_file_name_stays_inside(tmp_path, name: str) -> None:
    with pytest.raises(BadName):
        check_name(name, "task")
    f = file_name(name)
    assert "/" not in f and not f.startswith(".") and 0 < len(f) <= 128 and "\x00" not in f
    assert path_inside(tmp_path, name).resolve().parent == tmp_path.resolve()


def test_file_names_of_distinct_keys_are_distinct() -> None:
    keys = ["a/b", "a_b", "a:b", "a b", "a/b/", "../a_b"]
    assert len({file_name(k) for k in keys}) == len(keys)
    assert file_name("naive_rag__1rps__teola__n8__s0") == "naive_rag__1rps__teola__n8__s0"   # safe: unchanged


def test_a_cell_named_after_an_app_path_stays_in_the_run_folder(tmp_path) -> None:
    """Before: teola_apps with an app given by path wrote its cells beside the app file."""
    from experiments.context import RunContext
    ctx = RunContext(run_dir=tmp_path / "run", seed=0, progress=False, config_path=tmp_path / "c.yaml")
    for key in ("/elsewhere/app.yaml__1rps__teola", "../../../../X__1rps", "../x"):
        p = ctx.cell_path(key)
        assert p.parent == tmp_path / "run" / "cells", p
    assert ctx.file_path("problems", "../../X.json").parent == tmp_path / "run" / "problems"


def _fifo(tmp_path: Path, name: str = "f.yaml") -> Path:
    p = tmp_path / name
    os.mkfifo(p)
    return p


def _in_thread(fn, *args):
    box: dict = {}

    def go():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "blocked on a special file"
    return box


@pytest.mark.parametrize("reader", [read_text, load_mapping, open_input])
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path, reader) -> None:
    box = _in_thread(reader, _fifo(tmp_path))
    assert isinstance(box.get("error"), InputError) and "FIFO" in str(box["error"])


@pytest.mark.parametrize("path, what", [("/dev/zero", "character device"), ("/dev/null", "character device")])
def test_devices_are_refused(path: str, what: str) -> None:
    with pytest.raises(InputError, match=what):
        read_text(path)


def test_every_reader_of_a_user_file_refuses_a_fifo(tmp_path) -> None:
    """The readers that used to block: a problem, a task, a trace, an app, an engine spec."""
    from harness.trace import TraceError, load_trace
    from orchestrator.apps import load_app
    from orchestrator.engines.factory import SpecError, load_engine_spec
    from selector.errors import ProblemError
    from selector.problem import load_problem
    from selector.taskspec import load_task
    fifo = _fifo(tmp_path)
    csv = _fifo(tmp_path, "t.csv")
    for fn, arg, err in [(load_problem, fifo, ProblemError), (load_task, fifo, ProblemError),
                         (load_trace, csv, TraceError), (load_app, fifo, SpecError), (load_engine_spec, fifo, SpecError)]:
        box = _in_thread(fn, arg)
        assert isinstance(box.get("error"), err), (fn.__name__, box)


@pytest.mark.parametrize("text, value", [("a: 1:30", "1:30"), ("a: 1e10", 1e10), ("a: 1.0e10", 1e10),
                                         ("a: 0x10", 16), ("a: 2.5", 2.5), ("a: 190:20:30", "190:20:30")])
def test_yaml_numbers_are_read_as_yaml_1_2_does(text: str, value) -> None:
    """Before: 1:30 became 90 (YAML 1.1 base 60) and 1.0e10 a string."""
    assert parse_text(text, json_syntax=False, where="x")["a"] == value


@pytest.mark.parametrize("text", ['a: "\\ud800"', 'a: "x\\0y"', '{"\\ud800": 1}'])
def test_nul_and_lone_surrogates_are_refused_in_any_file(text: str) -> None:
    with pytest.raises(InputError, match="NUL|surrogate"):
        parse_text(text, json_syntax=text.startswith("{"), where="x")


def test_a_task_file_value_of_the_wrong_type_is_refused_not_coerced(tmp_path) -> None:
    import yaml

    from selector.errors import ProblemError
    from selector.taskspec import load_task
    base = yaml.safe_load(Path("configs/tasks/chat.yaml").read_text())
    for field, v in [("arrival_rate_rps", True), ("latency_slo_s", "5"), ("accuracy_slo", True)]:
        p = tmp_path / f"{field}.yaml"
        p.write_text(yaml.safe_dump({**base, field: v}))
        with pytest.raises(ProblemError, match=field):
            load_task(p)


def test_result_files_have_one_mode(tmp_path) -> None:
    """Before: atomic writes (mkstemp) gave 0600 beside the 0644 of plain writes."""
    from experiments.context import atomic_write_parquet, atomic_write_text
    atomic_write_text(tmp_path / "a.md", "x")
    atomic_write_parquet(tmp_path / "b.parquet", pd.DataFrame({"x": [1]}))
    (tmp_path / "c.txt").write_text("x")
    modes = {stat.S_IMODE((tmp_path / n).stat().st_mode) for n in ("a.md", "b.parquet", "c.txt")}
    assert len(modes) == 1, [oct(m) for m in modes]
