"""``exact_spans``: with a vocabulary extension, encode characters (True) or the learned word pieces (False).

    python docs/examples/hook_exact_spans.py [WORK_DIR]

The default is True for token and span heads (an entity or answer edge inside a piece could not be
predicted) and False for a sequence head. The model gets the extension's rows either way.
"""

import os
import sys
import tempfile
from dataclasses import dataclass

from ernie_ft.config import DataConfig, ModelConfig
from ernie_ft.models.modeling import load_pipeline
from ernie_ft.task import resolve_task
from ernie_ft.text import extension
from ernie_ft.text.pipeline import TextPipeline
from ernie_ft.text.scratch import build_vocab, write_vocab

Sentiment = resolve_task("docs/examples/skeleton.py:Sentiment")


@dataclass
class CharacterSentiment(Sentiment):
    @property
    def exact_spans(self) -> bool:
        return True  # e.g. a task that will point at character spans of the text later


def main(work: str) -> None:
    os.makedirs(work, exist_ok=True)
    texts = Sentiment().texts(Sentiment().read("data/sentiment_train.tsv", DataConfig(), "--train"))
    vocab = os.path.join(work, "vocab.txt")
    write_vocab(build_vocab(texts), vocab)
    pieces = os.path.join(work, "pieces")  # what python -m ernie_ft vocab learn --size 200 writes
    base = TextPipeline(vocab)
    extension.write(pieces, extension.learn(base, texts, size=200), vocab, base.vocab_size, {})
    model = ModelConfig(model="scratch:tiny", vocab=vocab, vocab_extension=pieces)
    review = "这家酒店的服务很热情，房间也很干净"
    for task in (Sentiment(), CharacterSentiment()):
        pipeline = load_pipeline(model, DataConfig(cache_dir=work), lambda: texts, exact_spans=task.exact_spans)
        ids = pipeline.encode(review).ids
        print(f"{type(task).__name__}: exact_spans={task.exact_spans}, {len(ids)} tokens for {len(review)} characters")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
