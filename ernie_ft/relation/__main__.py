"""``python -m ernie_ft.relation``: the same as ``python -m ernie_ft relation``."""

import sys

from ernie_ft.cli import main

sys.exit(main(["relation", *sys.argv[1:]], prog="python -m ernie_ft.relation"))
