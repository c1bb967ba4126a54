"""What every command-line face shares (``python -m selector | harness | profiler``,
``python -m experiments.run``, the benchmarks and the console scripts).

Exit statuses: 0 done (an infeasible problem is an answer), 2 a user error (one line on standard
error naming the field or file, long values cut), 130 interrupted (Ctrl-C: one line
``interrupted``), 143 terminated (SIGTERM, handled as Ctrl-C is: ``finally`` blocks run, one line
``terminated``), 141 standard output closed early (``| head``: quiet), 1 an internal error (one
line; ``FLOWMAKER_DEBUG=1`` shows the traceback). Progress bars are drawn only on a terminal.
Library code reports through :mod:`logging`; :func:`run` shows its records on standard error
(``warning: ...`` for warnings, plain text for information).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from flowmaker import __version__

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143      # 128 + SIGTERM
EXIT_PIPE = 141            # 128 + SIGPIPE, what a shell reports for a writer whose reader left
#: the longest error line printed; longer messages keep their head and tail
MAX_LINE = 1000            # an unknown name's error lists every known one (30-odd experiment configs)
DEBUG_ENV = "FLOWMAKER_DEBUG"


def one_line(text: object, limit: int = MAX_LINE) -> str:
    """``text`` on one line (runs of whitespace, newlines included, become one space), at most
    about ``limit`` characters: a 20 MB value in a message keeps its head and tail only."""
    s = str(text)
    if len(s) > 64 * limit:                 # do not split a huge string into words
        s = s[:32 * limit] + s[-32 * limit:]
    flat = " ".join(s.split())
    if len(flat) <= limit:
        return flat
    keep = max(8, (limit - 30) // 2)
    return f"{flat[:keep]} ...[{len(str(text)) - 2 * keep} characters cut]... {flat[-keep:]}"


class UserError(Exception):
    """A mistake in the user's input (an option, a file, a name), raised by a command-line face:
    :func:`run`'s callers print it as one line (``error: ...``) and exit with status 2. The one
    such type of every command (``python -m selector | harness | profiler``, experiments)."""


#: the console scripts of pyproject.toml, by the module ``python -m`` runs
SCRIPTS = {"selector": "flowmaker-select", "harness": "flowmaker-harness", "profiler": "flowmaker-profiler",
           "experiments.run": "flowmaker-experiment"}


def command_name(module: str) -> str:
    """How the user calls ``module``'s command: its console script (``flowmaker-select``) when a
    console script is what runs (an installed copy), else ``python -m module``: help text and
    messages name the commands the user has."""
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if script in SCRIPTS.values() and module in SCRIPTS:
        return SCRIPTS[module]
    return f"python -m {module}"


def doc(name: str) -> str:
    """Where the page ``docs/<name>`` can be read: the installed copy (package data
    ``flowmaker_docs``, setup.py) or the source checkout's, as a path; else the project's docs
    folder name (a page not shipped)."""
    try:
        from importlib.resources import files
        path = Path(str(files("flowmaker_docs"))) / name
        if path.is_file():
            return str(path)
    except (ImportError, TypeError, ValueError, OSError):  # not installed, or an odd loader
        pass
    src = Path(__file__).resolve().parents[1] / "docs" / name
    return str(src) if src.is_file() else f"docs/{name}"


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line (``prog: error: ...``) and exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {one_line(message)}\n")
        raise SystemExit(EXIT_USAGE)


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version``: the installed flowmaker version."""
    parser.add_argument("--version", action="version", version=f"%(prog)s (flowmaker) {__version__}",
                        help="print the flowmaker version and exit")


def show_progress(disabled: bool = False) -> bool:
    """Whether to draw progress bars: never when asked not to, and only when standard error is a
    terminal (piped or redirected output gets no bars)."""
    if disabled:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.levelno >= logging.ERROR:
            return f"error: {msg}"
        if record.levelno >= logging.WARNING:
            return f"warning: {msg}"
        return msg


class _Stderr(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (tests capture it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except (OSError, ValueError):
            pass


PROJECT_LOGGERS = ("selector", "solvers", "profiler", "harness", "orchestrator", "experiments", "flowmaker")


def setup_logging(level: int = logging.INFO) -> None:
    """Show the project's log records on standard error (idempotent; other libraries' loggers are
    left alone)."""
    h = _Stderr()
    h.setFormatter(_Format())
    for name in PROJECT_LOGGERS:
        lg = logging.getLogger(name)
        if not any(isinstance(x, _Stderr) for x in lg.handlers):
            lg.addHandler(h)
        lg.setLevel(level)
        lg.propagate = False


def _quiet_stdout() -> None:
    """Standard output's reader is gone: point it at /dev/null so the interpreter's final flush
    raises nothing (Python's documented recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be, so that everything that stops
    cleanly on Ctrl-C (``finally`` blocks, worker pools, kept cells) does on SIGTERM too."""


def _terminated(exc: BaseException) -> bool:
    # a library may turn the signal's exception into a plain KeyboardInterrupt (Ray's wait does)
    return isinstance(exc, Terminated) or _Sigint.seen is Terminated


def interrupt_word(exc: BaseException) -> str:
    """``terminated`` for SIGTERM, ``interrupted`` for Ctrl-C: the start of the one line printed."""
    return "terminated" if _terminated(exc) else "interrupted"


def interrupt_status(exc: BaseException) -> int:
    """143 for SIGTERM, 130 for Ctrl-C."""
    return EXIT_TERMINATED if _terminated(exc) else EXIT_INTERRUPTED


def signalled() -> KeyboardInterrupt | None:
    """The interrupt this process received (Ctrl-C or SIGTERM) as an exception, or None: for a
    handler that meets it surfaced as another exception (:class:`_Sigint`)."""
    return None if _Sigint.seen is None else _Sigint.seen()


class _Sigint:
    """Ctrl-C raises KeyboardInterrupt as usual, SIGTERM :class:`Terminated`, and either is
    remembered: an interrupt that lands inside a C extension's import surfaces as another
    exception (``ImportError: initialization failed``), which is still reported as one."""

    seen: type[KeyboardInterrupt] | None = None

    @classmethod
    def install(cls) -> None:
        import signal
        import threading
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):  # noqa: ANN001 - signal's signature
            cls.seen = Terminated if signum == signal.SIGTERM else KeyboardInterrupt
            raise cls.seen

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):
                pass


def run(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> NoReturn:
    """Call ``main(argv)`` and exit with the statuses of the module docstring; never a traceback
    (unless ``FLOWMAKER_DEBUG`` is set)."""
    setup_logging()
    _Sigint.install()
    try:
        code = main(argv)
        sys.stdout.flush()
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        _stderr_line(interrupt_word(exc))
        code = interrupt_status(exc)
    except BrokenPipeError:
        _quiet_stdout()
        code = EXIT_PIPE
    except (RecursionError, MemoryError) as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        _stderr_line(f"error: input too large or too deeply nested ({type(exc).__name__})")
        code = EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, not a traceback
        if (sig := signalled()) is not None:
            _stderr_line(interrupt_word(sig))
            sys.exit(interrupt_status(sig))
        if os.environ.get(DEBUG_ENV):
            raise
        _stderr_line(f"internal error: {one_line(f'{type(exc).__name__}: {exc}')} "
                     f"(set {DEBUG_ENV}=1 for the traceback; please report it)")
        code = 1
    sys.exit(0 if code is None else code)


def _stderr_line(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
