"""`python3 -m xdl_trace ...`: the xdl-trace command line (see xdl_trace/cli.py)."""

import sys

from .cli import main

sys.exit(main())
