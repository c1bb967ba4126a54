"""Help text and messages name the commands the user has (issue 27 item 5): the console script when
one runs (an installed copy), ``python -m`` otherwise; docs pages are given as paths that exist."""
from __future__ import annotations

import sys
from pathlib import Path

from flowmaker.entry import SCRIPTS, command_name, doc


def test_console_scripts_name_themselves_and_each_other(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/flowmaker-harness", "export"])
    assert command_name("harness") == "flowmaker-harness" and command_name("selector") == "flowmaker-select"
    from harness.servers.export import resolved_not_plan
    assert "run `flowmaker-select solve FILE --json" in resolved_not_plan()
    monkeypatch.setattr(sys, "argv", ["-m"])
    assert command_name("selector") == "python -m selector"
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert all(f'{script} = "' in pyproject for script in SCRIPTS.values())


def test_help_points_to_docs_that_exist(monkeypatch, capsys):
    import pytest

    from selector.cli import main
    monkeypatch.setattr(sys, "argv", ["/venv/bin/flowmaker-select", "--help"])
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out.replace("\n", " ")
    assert out.startswith("usage: flowmaker-select") and "README" not in out
    page = doc("your-own-task.md")
    assert Path(page).is_file() and page.split()[0] in " ".join(out.split())
