"""``python -m ernie_ft.ner``: the same as ``python -m ernie_ft ner``."""

import sys

from ernie_ft.cli import main

sys.exit(main(["ner", *sys.argv[1:]], prog="python -m ernie_ft.ner"))
