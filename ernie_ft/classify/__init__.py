"""Text classification (single texts or sentence pairs): ``python -m ernie_ft.classify``."""

from ernie_ft.classify.task import Classification, read_labelled
from ernie_ft.data.windows import pair_texts, text_windows

__all__ = ["Classification", "pair_texts", "read_labelled", "text_windows"]
