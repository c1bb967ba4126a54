"""``python -m selector.tokens --data DIR`` reads its trace CSVs through the one bounded reader
(issue 28 item 2): a FIFO in place of a trace is refused with one line and exit 2, never read."""
import os

from selector.tokens import FILES, main


def test_a_fifo_trace_is_refused_not_read(tmp_path, capsys) -> None:
    os.mkfifo(tmp_path / FILES["code"])
    assert main(["--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FIFO" in err[0] and err[0].startswith("error: --data:")
