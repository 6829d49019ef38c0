"""`python -m cxg ...`: the same command as the `cxg` script (the region's processes run it so)."""

import sys

from cxg.cli import main

sys.exit(main())
