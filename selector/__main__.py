import sys

from selector.cli import main

sys.exit(main())
