"""``python -m selector``: see selector/cli.py."""
from selector.cli import console

console()
