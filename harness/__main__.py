"""``python -m harness``: see harness/cli.py."""
from harness.cli import console

console()
