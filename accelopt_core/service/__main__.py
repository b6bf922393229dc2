"""`python -m accelopt_core.service ...`: the same as `accelopt serve ...`."""

import sys

from .cli import main

sys.exit(main())
