"""``unused_data_settings``: the data settings a task never reads get no flag, and a recipe that sets one is an error.

python docs/examples/hook_unused_data_settings.py
"""

import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

from ernie_ft import UserError, build_config
from ernie_ft.task import resolve_task, unused_data_settings

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


@dataclass
class SingleTexts(Sentiment):
    unused_data_settings: ClassVar[dict] = {
        "text_pair_column": "reviews are single texts",
        "window_pooling": "the task pools windows as its own --pooling says",
    }


if __name__ == "__main__":
    spec = "docs/examples/hook_unused_data_settings.py:SingleTexts"
    usage = subprocess.run(
        [sys.executable, "-m", "ernie_ft", "--task", spec, "--help"], capture_output=True, text=True, check=True
    ).stdout
    for flag in ("--text-column", "--text-pair-column", "--window-pooling", "--pooling"):
        print(f"{flag} in --help: {flag in usage}")
    recipe = {"data": {"train": "data/sentiment_train.tsv", "text_pair_column": "text_b"}}
    try:
        build_config(recipe, {}, source="recipe.yaml", unused_data=unused_data_settings(SingleTexts))
    except UserError as error:
        print(f"error: {error}")
