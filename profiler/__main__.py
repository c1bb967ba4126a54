"""`python -m profiler ...`: see profiler/cli.py."""

import sys

from profiler.cli import main

sys.exit(main())
