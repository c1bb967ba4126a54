"""Every option of every command line has help text (issue 18 item 3).

Each entry point's ``main`` is called with ``parse_args`` replaced by a catch that hands back the
parser it built, before anything runs; the test then walks that parser and its subcommands.
"""
from __future__ import annotations

import argparse
import importlib

import pytest

ENTRY_POINTS = [
    "selector.cli", "selector.tokens", "harness.cli", "profiler.cli", "experiments.run",
    "experiments.scripts.device_check", "experiments.scripts.pool_real_runs", "experiments.scripts.design_check",
    "harness.servers.torchserve", "experiments.kinds.selector_gap",
]


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _parser_of(module: str, monkeypatch) -> argparse.ArgumentParser:
    def catch(self, args=None, namespace=None):  # noqa: ANN001 - argparse's signature
        raise _Built(self)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", catch)
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:       # device_check needs torch (the test-real extra)
        pytest.skip(f"{module} needs {exc.name}")
    with pytest.raises(_Built) as got:
        mod.main([])
    return got.value.parser


def _undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions if a.help}
            for name, sub in action.choices.items():
                if name not in helped:
                    missing.append(f"{path} {name} (the subcommand)")
                missing += _undocumented(sub, f"{path} {name}")
        elif not action.help or action.help == argparse.SUPPRESS and action.option_strings != ["-h", "--help"]:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_option_has_help(module: str, monkeypatch) -> None:
    parser = _parser_of(module, monkeypatch)
    assert _undocumented(parser, module) == []


def test_the_walk_finds_a_missing_help(monkeypatch) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--a", help="documented")
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("go", help="a subcommand")
    s.add_argument("--b")
    sub.add_parser("bare")
    assert _undocumented(p, "x") == ["x go --b", "x bare (the subcommand)"]
