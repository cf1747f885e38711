"""``python -m ernie_ft.classify``: the same as ``python -m ernie_ft classify``."""

import sys

from ernie_ft.cli import main

sys.exit(main(["classify", *sys.argv[1:]], prog="python -m ernie_ft.classify"))
