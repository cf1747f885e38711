"""``reads_corpus``: the task's data flag is ``--corpus FILE...`` (unlabelled text) instead of ``--train FILE``.

python docs/examples/hook_reads_corpus.py
"""

import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

from ernie_ft import UserError
from ernie_ft.config import DataConfig
from ernie_ft.data.dataset import read_splits
from ernie_ft.task import resolve_task

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


@dataclass
class Lines(Sentiment):
    reads_corpus: ClassVar[bool] = True


if __name__ == "__main__":
    spec = "docs/examples/hook_reads_corpus.py:Lines"
    usage = subprocess.run(
        [sys.executable, "-m", "ernie_ft", "--task", spec, "--help"], capture_output=True, text=True, check=True
    ).stdout
    print(usage.splitlines()[0])
    print(f"--corpus in --help: {'--corpus' in usage}; --train in --help: {'--train ' in usage}")
    try:
        read_splits(Lines(), DataConfig())  # nothing to read: the message names the task's data flag
    except UserError as error:
        print(f"error: {error}")
