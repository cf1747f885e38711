"""``python -m ernie_ft COMMAND ...``: the command table is in ``ernie_ft.cli``."""

import sys

from ernie_ft.cli import main

if __name__ == "__main__":
    sys.exit(main())
