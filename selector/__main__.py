import sys

try:
    from selector.cli import main

    sys.exit(main())
except KeyboardInterrupt:          # Ctrl-C: one line and the shell's convention, not a traceback
    print("interrupted", file=sys.stderr)
    sys.exit(130)
