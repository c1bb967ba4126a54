"""What every benchmark kind (``bench_*``) writes: the lines it prints, as ``summary.md``, and its
rows, as ``results.parquet`` (one row per measured case; columns as the kind's docstring names
them), in the run folder of ``python -m experiments.run``."""
from __future__ import annotations

from typing import Any

import pandas as pd

from experiments.context import RunContext, atomic_write_parquet, atomic_write_text


class Report:
    """Lines printed as they come (a benchmark's progress is its output) and rows kept for the table."""

    def __init__(self, ctx: RunContext, title: str) -> None:
        self.ctx, self.lines, self.rows = ctx, [f"# {title}", ""], []

    def line(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)

    def row(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def write(self, *, code_block: bool = True) -> None:
        """``summary.md`` (the printed lines, in a code block unless they are markdown) and
        ``results.parquet`` when there are rows."""
        head, body = self.lines[:2], self.lines[2:]
        text = "\n".join(head + (["```", *body, "```"] if code_block else body)) + "\n"
        atomic_write_text(self.ctx.run_dir / "summary.md", text)
        if self.rows:
            atomic_write_parquet(self.ctx.run_dir / "results.parquet", pd.DataFrame(self.rows))
