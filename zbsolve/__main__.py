"""``python -m zbsolve``: the same command line as ``zbsolve``."""

import sys

from zbsolve.cli import main

sys.exit(main())
