"""``held_out``: a dev split taken from the training data when no ``--dev`` is given.

python docs/examples/hook_held_out.py
"""

from dataclasses import dataclass

from ernie_ft.config import DataConfig
from ernie_ft.data.dataset import read_splits
from ernie_ft.task import resolve_task

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


@dataclass
class EveryFifthIsDev(Sentiment):
    def held_out(self, train, data):
        """Every fifth example is dev: the same ones on every run."""
        return [e for i, e in enumerate(train) if i % 5], train[::5]


if __name__ == "__main__":
    examples, labels = read_splits(EveryFifthIsDev(), DataConfig(train="data/sentiment_train.tsv"))
    print({name: len(split) for name, split in examples.items()}, "labels:", labels)
    examples, _ = read_splits(
        EveryFifthIsDev(), DataConfig(train="data/sentiment_train.tsv", dev="data/sentiment_dev.tsv")
    )
    print("with --dev:", {name: len(split) for name, split in examples.items()})
