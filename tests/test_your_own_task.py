"""docs/your-own-task.md's worked example, run as written (issue 18 item 1): its files are
written, its commands run through the command lines' ``main``, and every line of its printed
outputs that does not measure time matches what the commands print now."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "your-own-task.md"
#: words of an output line whose value is a measurement of this machine, not a result
TIMED = re.compile(r"\([\w-]+, \d+\.\d+ s,|wall|req/s")


def _blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, file name or '', body) of every fenced block, in order."""
    return [(m.group(1), m.group(2) or "", m.group(3))
            for m in re.finditer(r"```(\w*)(?: ([\w.-]+))?\n(.*?)```", text, re.S)]


def _run(line: str, capsys) -> str:
    argv = shlex.split(line)
    assert argv[:2] == ["python", "-m"], line
    module, args = argv[2], argv[3:]
    main = {"selector": "selector.cli", "harness": "harness.cli", "profiler": "profiler.cli",
            "experiments.run": "experiments.run"}[module]
    import importlib
    code = importlib.import_module(main).main(args)
    out, err = capsys.readouterr()
    assert code == 0, f"{line}: exit {code}: {err}"
    return out


def test_worked_example_runs_as_written(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = _blocks(DOC.read_text())
    files = [(name, body) for lang, name, body in blocks if name]
    assert {n for n, _ in files} >= {"support-bot.yaml", "a100x4.yaml", "requests.csv"}
    for name, body in files:
        (tmp_path / name).write_text(body)
    last = ""
    ran = 0
    for lang, name, body in blocks:
        if lang == "bash":
            last = "".join(_run(line, capsys) for line in body.splitlines() if line.startswith("python -m"))
            ran += 1
        elif lang == "text" and last:
            got = [ln.rstrip() for ln in last.splitlines()]
            for want in body.splitlines():
                if want.strip() and not TIMED.search(want):
                    assert want.rstrip() in got, f"the doc shows {want!r}; the command printed:\n{last}"
            last = ""
    assert ran == 3
    assert (tmp_path / "problem.yaml").exists()
