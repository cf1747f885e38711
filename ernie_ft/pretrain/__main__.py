"""``python -m ernie_ft.pretrain``: the same as ``python -m ernie_ft pretrain``."""

import sys

from ernie_ft.cli import main

sys.exit(main(["pretrain", *sys.argv[1:]], prog="python -m ernie_ft.pretrain"))
