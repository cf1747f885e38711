"""``python -m ernie_ft COMMAND ...``: the command table is in ``ernie_ft.cli``."""

import sys

from ernie_ft.cli import main

sys.exit(main())
