"""``python -m ernie_ft.qa``: the same as ``python -m ernie_ft qa``."""

import sys

from ernie_ft.cli import main

sys.exit(main(["qa", *sys.argv[1:]], prog="python -m ernie_ft.qa"))
