"""Placeholder until the profiler lands (replaced below)."""
from __future__ import annotations

import argparse


def add_resolve_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("task")


def resolve_cli(args: argparse.Namespace) -> int:
    raise NotImplementedError
