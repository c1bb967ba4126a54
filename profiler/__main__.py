"""`python -m profiler ...`: see profiler/cli.py."""
from profiler.cli import console

console()
