"""``python -m composer_lab run``: the command line."""

import sys

from composer_lab.cli import main

sys.exit(main())
