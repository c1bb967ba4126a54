"""Suite-wide rules: which tests run in the serial phase of ``make test``, and SIGINT as from a
terminal.

``make test`` runs the suite in two phases (Makefile): the bulk on several pytest-xdist workers, then
the tests marked ``serial`` one at a time. ``serial`` are those that start servers, PostgreSQL or a
local Ray (ports and a machine-wide Ray session), or that time processes and signals against the wall
clock: everything under ``tests/real`` and the files listed here.

A suite launched in the background of a non-interactive shell inherits SIGINT ignored, and so would
every child a test starts: Python then never raises KeyboardInterrupt, and the Ctrl-C tests
(tests/experiments/test_interrupt.py) time out. ``pytest_configure`` gives SIGINT Python's own
handler back; a child's exec resets it to the default action, as from a terminal."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
SERIAL_DIRS = (_HERE / "real",)
SERIAL_FILES = {_HERE / "experiments" / name for name in
                ("test_executor.py", "test_signals.py", "test_interrupt.py")}


def is_serial(path: Path) -> bool:
    """Whether the tests of ``path`` run in the serial phase."""
    path = path.resolve()
    return path in SERIAL_FILES or any(d in path.parents for d in SERIAL_DIRS)


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_serial(Path(item.fspath)):
            item.add_marker(pytest.mark.serial)
