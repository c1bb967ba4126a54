"""The README answers a newcomer's first questions (issue 18 items 3 and 8): how long each
experiment takes here, and what every column of the summaries means."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _experiment_configs() -> list[str]:
    """The committed experiment configs (a fresh clone's); the folder's files outside a checkout."""
    r = subprocess.run(["git", "ls-files", "configs/experiments/*.yaml"], cwd=ROOT, capture_output=True, text=True)
    names = r.stdout.split() if r.returncode == 0 and r.stdout.strip() else \
        [str(p.relative_to(ROOT)) for p in (ROOT / "configs" / "experiments").glob("*.yaml")]
    return sorted(Path(n).name for n in names)


def test_every_experiment_has_a_measured_duration() -> None:
    rows = {}
    for line in README.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith(".yaml`"):
            rows[cells[0].strip("`")] = cells[2]
    missing = [c for c in _experiment_configs() if c not in rows]
    assert missing == [], "README's experiment table lacks these configs (with their wall time here)"
    vague = {c: t for c, t in rows.items() if not re.search(r"\d+(\.\d+)? ?(s|min)\b", t)}
    assert vague == {}, "a wall time in seconds or minutes"


def test_summary_columns_are_defined_in_the_readme() -> None:
    from experiments.kinds.quickstart import GLOSSARY
    from experiments.kinds.selector_gap import COLUMNS as GAP
    from experiments.kinds.selector_scaling import COLUMNS as SCALING
    assert "## Output columns" in README
    for text in (GLOSSARY, GAP, SCALING):
        assert _flat(text) in _flat(README)
    for name in ("cost_gb_s", "select_s", "reserved_gb_s", "gpu_s_held", "usd", "docs/metrics.md"):
        assert f"`{name}`" in README or name in README
