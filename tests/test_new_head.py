"""Fine-tuning a fine-tuned checkpoint on another label set: without --new-head one error line that names the flag
(it was Paddle's state-dict error, cut off after its first line); with it the head starts from random weights and
the encoder from the checkpoint, whatever the head's shape."""

import numpy as np
import pytest
from conftest import DATA, saved_weights

from ernie_ft.cli import task_command
from ernie_ft.config import ModelConfig
from ernie_ft.errors import UserError
from ernie_ft.models.modeling import build_model
from ernie_ft.training.checkpoint import load_model

classify = task_command("classify")
TINY = ["--threads", "1", "--max-len", "32", "--epochs", "1", "--seed", "3"]


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory) -> str:
    """A tiny classifier of two labels (正面, 负面)."""
    out = tmp_path_factory.mktemp("sentiment")
    assert classify(["--train", str(DATA / "sentiment_train.tsv"), "--model", "scratch:2x64", *TINY, "--output",
                     str(out)]) == 0  # fmt: skip
    return str(out / "best")


def test_another_label_set_without_new_head_is_one_line_naming_it(sentiment, tmp_path, capsys):
    three = tmp_path / "three.tsv"
    three.write_text("text\tlabel\n好\tA\n坏\tB\n中\tC\n还行\tA\n差\tB\n一般\tC\n", encoding="utf-8")
    assert classify(["--train", str(three), "--model", sentiment, *TINY, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error") or "Traceback" in line]
    assert errors == [
        f"error: --model {sentiment}: its task head was trained on 2 labels (正面, 负面), this run learns 3; to "
        "fine-tune it on another label set, pass --new-head (the head starts from random weights, the encoder from "
        "the checkpoint)"
    ], err
    assert classify(["--train", str(three), "--model", sentiment, *TINY, "--new-head", "--output",
                     str(tmp_path / "run")]) == 0  # fmt: skip
    assert "newly initialised: classifier.* (2 tensors)" in capsys.readouterr().err


@pytest.mark.parametrize("labels", [3, 2])
def test_new_head_starts_the_head_afresh_and_the_encoder_from_the_checkpoint(sentiment, labels):
    """Also with as many labels as the checkpoint's, where the old head would load without a word."""
    pipeline, stored = load_model(sentiment, weights=False).pipeline, saved_weights(sentiment)
    net = build_model(ModelConfig(model=sentiment, new_head=True), "sequence", labels, pipeline)
    weights = {name: value.numpy() for name, value in net.state_dict().items()}
    encoder = [name for name in weights if name.startswith("ernie.")]
    assert encoder and all(np.array_equal(weights[name], stored[name]) for name in encoder)
    assert weights["classifier.weight"].shape == (64, labels) and not weights["classifier.bias"].any()
    assert not np.allclose(weights["classifier.weight"][:, :2], stored["classifier.weight"])


def test_new_head_with_a_scratch_model_is_an_error():
    with pytest.raises(UserError, match="--new-head is for a --model checkpoint"):
        ModelConfig(model="scratch:2x64", new_head=True)


def test_only_a_head_that_differs_asks_for_a_new_head():
    """PaddleNLP names a skipped encoder weight without the model's prefix: the checkpoint's own names tell it from
    a head weight, so a config that does not fit the encoder's weights is not taken for another label set."""
    from ernie_ft.models.weights import head_mismatch

    def skipped(*names):
        return "".join(
            f"\tSkip loading for {n}. {n} receives a shape [2], but the expected shape is [3].\n" for n in names
        )

    full = {"ernie.encoder.layers.0.linear1.weight", "ernie.embeddings.word_embeddings.weight", "classifier.weight"}
    assert "--new-head" in str(head_mismatch("m", skipped("classifier.weight"), "ernie", None, 3, full))
    assert (
        head_mismatch("m", skipped("encoder.layers.0.linear1.weight", "classifier.weight"), "ernie", None, 3, full)
        is None
    )
    encoder_only = {"encoder.layers.0.linear1.weight", "embeddings.word_embeddings.weight"}
    assert head_mismatch("m", skipped("encoder.layers.0.linear1.weight"), "ernie", None, 3, encoder_only) is None
