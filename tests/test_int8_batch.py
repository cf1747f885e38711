"""One text, one answer, whatever the batch (issue 58, item 3): an int8 export (``--quantize int8``, static: each
activation quantized with the range calibrated at export) gives a text the same probabilities alone (batch 1) and
among others of other lengths (batch 64, padded to the longest), for a classifier, a tagger and a relation model."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from test_relation import SENTENCES, duie, write

from ernie_ft import Predictor
from ernie_ft.cli import task_command

TOLERANCE = 1e-5
"""How far a probability or score of batch 1 may be from batch 64's."""


def assert_close(a, b, where: str = "answers") -> None:
    """``a`` and ``b`` (answers: dicts, lists, strings, numbers) equal, their floats within ``TOLERANCE``."""
    if isinstance(a, float) or isinstance(b, float):
        assert abs(a - b) <= TOLERANCE, (where, a, b)
    elif isinstance(a, (dict, list)):
        assert type(a) is type(b) and len(a) == len(b), (where, a, b)
        pairs = [(k, a[k], b[k]) for k in a] if isinstance(a, dict) else list(zip(range(len(a)), a, b))
        for key, x, y in pairs:
            assert_close(x, y, f"{where}[{key!r}]")
    else:
        assert a == b, (where, a, b)


def sample_texts(task: str) -> list[str]:
    """Texts of many lengths: the sample dev files, the relation sentences once, twice and three times over."""
    if task == "classify":
        lines = (DATA / "sentiment_dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
        return [line.split("\t")[1] for line in lines]
    if task == "ner":
        lines = (DATA / "ner_dev.jsonl").read_text(encoding="utf-8").splitlines()
        return [json.loads(line)["text"] for line in lines if line.strip()]
    return [text * n for n in (1, 2, 3) for text, _ in SENTENCES]


def probabilities(outputs) -> list:
    """Each window's softmax over its last axis (a classifier's labels, a tagger's tags per token)."""
    import numpy as np

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return [softmax(np.asarray(window, dtype=np.float64)) for window in outputs]


# relation: barely trained (lr 1e-5), so that many cells pass the threshold and are answered with their scores
TRAINING = {"classify": [], "ner": [], "relation": ["--lr", "1e-5", "--dropout", "0", "--batch-size", "6"]}


@pytest.mark.parametrize("task", ["classify", "ner", "relation"])
def test_an_int8_texts_probabilities_do_not_depend_on_its_batch(task, tmp_path):
    """Static int8's activations have fixed ranges: batch 1 and batch 64 answer alike, and a classifier's and a
    tagger's probabilities of every window agree within ``TOLERANCE`` (dynamic int8, planted as what --quantize int8
    writes, moved them by up to 2.7e-5 in the answers, rounded to 6 decimals, and more in the outputs: failed)."""
    from ernie_ft.inference.export import export

    train = {"classify": DATA / "sentiment_train.tsv", "ner": DATA / "ner_train.jsonl"}.get(task)
    train = train or write(tmp_path / "train.jsonl", duie())
    run = tmp_path / "run"
    args = ["--train", str(train), "--model", "scratch:2x64", "--max-len", "32", "--epochs", "1", "--threads", "1",
            "--seed", "1", "--output", str(run), *TRAINING[task]]  # fmt: skip
    assert task_command(task)(args) == 0
    exported = export(str(run), str(tmp_path / "int8"), format="onnx", quantize="int8")
    texts = sample_texts(task)
    assert len({len(text) for text in texts}) > 5  # batch 64 pads most of them
    alone, batched = (Predictor(exported, "onnxruntime-int8", "cpu", batch_size=size) for size in (1, 64))
    assert_close(alone(texts), batched(texts))
    if task != "relation":  # its outputs are summarised per window (the cells above its threshold)
        _, features = alone.prepare(texts)
        for one, many in zip(*(probabilities(p.logits(features, p.batch_size)) for p in (alone, batched))):
            assert abs(one - many).max() <= TOLERANCE
