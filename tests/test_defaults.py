"""Defaults that learn and say so: the learning rate by the model's kind (and --lr or a recipe's over it), a warning
when predictions collapse to one label, smoothed loss curves, scratch:LxH shapes, a student vocabulary cut to the
training texts' tokens, and a wrong input refused before Paddle is imported."""

import subprocess
import sys

import numpy as np
import pytest
from conftest import DATA, ROOT

from ernie_ft.cli import main
from ernie_ft.config import PRETRAINED_LR, SCRATCH_LR, learning_rate
from ernie_ft.errors import UserError
from ernie_ft.recipes import build_config

TRAIN, DEV = str(DATA / "sentiment_train.tsv"), str(DATA / "sentiment_dev.tsv")


def lr_of(recipe: dict, **flags) -> tuple:
    return learning_rate(build_config(recipe, flags))


def test_the_default_lr_depends_on_the_models_kind_and_a_recipe_or_lr_wins(tmp_path):
    assert lr_of({}) == (SCRATCH_LR, "a randomly initialised model")  # scratch:tiny, the default model
    assert lr_of({}, model="scratch:2x128")[0] == SCRATCH_LR
    assert lr_of({}, model="ernie-3.0-medium-zh") == (PRETRAINED_LR, "a pretrained model")
    assert lr_of({}, model=str(tmp_path))[0] == PRETRAINED_LR  # a checkpoint directory
    assert SCRATCH_LR != PRETRAINED_LR
    assert lr_of({"train": {"lr": 3e-4}}) == (3e-4, None)  # the recipe's
    assert lr_of({"train": {"lr": 3e-4}}, lr="7e-4") == (7e-4, None)  # the flag over the recipe
    assert lr_of({"model": {"model": "ernie-3.0-medium-zh"}}, lr="1e-3") == (1e-3, None)
    with pytest.raises(UserError, match="--lr must be greater than 0"):
        lr_of({}, lr="0")


def test_the_lr_line_says_where_the_rate_comes_from():
    from ernie_ft.training.run import describe_lr

    assert describe_lr(1e-3, 1e-3, "a randomly initialised model", "linear") == (
        "lr 0.001 (the default for a randomly initialised model; --lr to change)"
    )
    assert describe_lr(2e-3, 1e-3, "a randomly initialised model", "linear", 2) == (
        "lr 0.002 (the default for a randomly initialised model, 0.001 scaled linear; --lr to change)"
    )
    assert describe_lr(1e-4, 5e-5, None, "linear", 2) == "lr 0.0001 (--lr 5e-05 scaled linear)"


@pytest.mark.parametrize(
    "replicas,accum,settings,expected",
    [
        (1, 1, {}, "lr 0.002 (--lr)"),  # one process: nothing was scaled, so nothing says so
        (1, 1, {"lr_scaling": "sqrt"}, "lr 0.002 (--lr)"),
        (2, 1, {}, "lr 0.004 (--lr 0.002 scaled linear)"),
        (4, 1, {"lr_scaling": "sqrt"}, "lr 0.004 (--lr 0.002 scaled sqrt)"),
        (2, 1, {"lr_scaling": "none"}, "lr 0.002 (--lr 0.002 not scaled for 2 replicas (--lr-scaling none))"),
        (1, 2, {}, "lr 0.002 (--lr)"),  # accumulation scales only with --scale-lr-with-accum
        (1, 2, {"scale_lr_with_accum": True}, "lr 0.004 (--lr 0.002 scaled linear)"),
    ],
)
def test_the_lr_line_says_scaled_only_when_the_replicas_or_accumulation_changed_the_rate(
    replicas, accum, settings, expected
):
    """The rate as ``setup`` computes it (``ParallelConfig.lr_factor``) for one process and for several."""
    from ernie_ft.config import ParallelConfig
    from ernie_ft.training.run import describe_lr

    parallel = ParallelConfig(**settings)
    lr = 2e-3 * parallel.lr_factor(replicas, accum)
    assert describe_lr(lr, 2e-3, None, parallel.lr_scaling, replicas) == expected


def train(tmp_path, capsys, name, *flags):
    """Run classify (the sample reviews); (exit status, stderr)."""
    capsys.readouterr()
    status = main(["classify", "--output", str(tmp_path / name), "--threads", "1", "--log-steps", "100", *flags])
    return status, capsys.readouterr().err


def test_a_collapsed_run_is_warned_with_what_to_try_and_an_explicit_lr_wins(tmp_path, capsys):
    status, err = train(tmp_path, capsys, "collapsed", "--train", TRAIN, "--dev", DEV, "--epochs", "3", "--lr", "1e-9")
    assert status == 0, err
    assert "lr 1e-09 (--lr)" in err  # one process: nothing scaled
    warnings = [line for line in err.splitlines() if line.startswith("warning: dev @ step")]
    assert "dev @ step 8: accuracy" in err  # the first evaluation is left alone: it is not the last
    assert [w.split(":")[1] for w in warnings] == [" dev @ step 16", " dev @ step 24"]
    assert "every text got the label" in warnings[0]
    assert "a higher --lr" in warnings[0] and "--class-weights balanced" in warnings[0] and "--epochs" in warnings[0]
    assert "try" not in warnings[1]  # the advice once


def test_a_run_that_learned_is_not_warned_and_the_recipes_lr_wins(tmp_path, capsys):
    recipe = str(ROOT / "tasks" / "sample_sentiment.yaml")
    status, err = train(tmp_path, capsys, "learned", "--config", recipe, "--epochs", "3", "--eval-steps", "45")
    assert status == 0, err
    assert "lr 0.002 (--lr)" in err
    assert "dev @ step 45: accuracy" in err and "warning:" not in err


def test_the_default_lr_is_printed_for_a_scratch_lxh_model(tmp_path, capsys):
    flags = ["--train", TRAIN, "--model", "scratch:1x64", "--stop-after-steps", "1"]
    status, err = train(tmp_path, capsys, "default", *flags)
    assert status == 0, err
    assert "lr 0.001 (the default for a randomly initialised model; --lr to change)" in err


def test_collapse_is_found_in_classification_and_ner_metrics():
    from ernie_ft.evaluation.classification import classification_metrics
    from ernie_ft.training.runlog import collapse_advice, collapsed

    gold = ["a", "b", "a", "c"]
    assert "every text got the label 'a'" in collapsed(classification_metrics(gold, ["a"] * 4, ["a", "b", "c"]))
    two = collapsed(classification_metrics(gold, ["a", "a", "a", "b"], ["a", "b", "c"]))  # two labels: no collapse,
    assert "every text" not in two and "2 of the 3 labels" in two and "F1 0: b, c;" in two  # but b, c never right
    assert collapsed(classification_metrics(gold, gold, ["a", "b", "c"])) is None
    assert collapsed(classification_metrics(["a", "a"], ["a", "a"], ["a", "b"])) is None  # dev holds one label
    ner = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 12, "predicted": 0}
    assert "no entity was predicted" in collapsed(ner)
    assert collapsed({**ner, "predicted": 3}) is None and collapsed({"em": 0.0, "f1": 0.0}) is None
    assert "pretrained --model" in collapse_advice(1e-3, scratch=True, class_weights=False)
    assert "pretrained --model" not in collapse_advice(5e-5, scratch=False, class_weights=True)


def test_the_loss_curve_is_an_ema_debiased_from_the_first_value():
    from ernie_ft.evaluation.plots import smooth, smoothing_span

    assert np.allclose(smooth([3.0, 3.0, 3.0, 3.0], span=5), 3.0)  # a constant stays itself
    assert smooth([22.0, 62.0], span=3)[0] == 22.0  # the first point is the first value
    w = 2 / (3 + 1)  # span 3: weight 0.5 on each new value
    assert smooth([22.0, 62.0], span=3)[1] == pytest.approx((w * (1 - w) * 22 + w * 62) / (1 - (1 - w) ** 2))
    noisy = np.array([22.0, 62.0] * 50)
    assert np.ptp(smooth(noisy, smoothing_span(len(noisy)))[20:]) < 0.2 * np.ptp(noisy)
    assert smoothing_span(3) == 2 and smoothing_span(1000) == 100


def test_scratch_lxh_shapes_follow_the_stated_rule():
    from ernie_ft.models.model_source import SCRATCH, scratch_config

    assert scratch_config("scratch:2x128") == {**SCRATCH["tiny"]}  # tiny is 2 x 128: 2 heads, FFN 512
    one = scratch_config("scratch:1x64")
    assert (one["num_hidden_layers"], one["hidden_size"], one["num_attention_heads"], one["intermediate_size"]) == (
        1,
        64,
        1,
        256,
    )
    assert scratch_config("scratch:2x200")["num_attention_heads"] == 2  # 200 // 64 = 3 does not divide 200
    for wrong in ("scratch:0x64", "scratch:2x4", "scratch:2by128", "scratch:tiniest"):
        with pytest.raises(UserError, match="scratch:LxH"):
            scratch_config(wrong)


def test_a_cut_student_vocabulary_keeps_the_training_tokens_and_the_students_predictions(tmp_path):
    """The cut vocabulary holds the special tokens and the training texts' tokens; through it the training texts
    get the same tokens, and a model whose embedding keeps those rows predicts what the full one does."""
    import paddle

    from ernie_ft.distill.vocab import teacher_ids, used_tokens
    from ernie_ft.models.model_source import scratch_config
    from ernie_ft.text.pipeline import TextPipeline
    from ernie_ft.text.scratch import build_vocab, write_vocab
    from ernie_ft.text.vocab_files import SPECIAL_TOKENS

    rows = [line.split("\t")[1] for line in open(TRAIN, encoding="utf-8").read().splitlines()[1:]]
    others = [line.split("\t")[1] for line in open(DEV, encoding="utf-8").read().splitlines()[1:]]
    write_vocab(build_vocab(rows + others), str(tmp_path / "full.txt"))
    full = TextPipeline(str(tmp_path / "full.txt"))
    train = rows[:40]
    tokens = used_tokens(full, train)
    used = {i for e in full.encode_many(train) for i in e.ids}
    assert len(tokens) == len(used | {full.vocab[t] for t in SPECIAL_TOKENS}) < full.vocab_size
    write_vocab(tokens, str(tmp_path / "vocab.txt"))
    cut = full.replace(vocab_file=str(tmp_path / "vocab.txt"))
    assert cut.vocab_size == len(tokens) and all(t in cut.vocab for t in SPECIAL_TOKENS)

    def pieces(pipeline, text):
        names = {i: t for t, i in pipeline.vocab.items()}
        return [names[i] for i in pipeline.encode(text).ids]

    assert all(pieces(cut, t) == pieces(full, t) for t in train)
    unseen = next(t for t in others if any(c not in "".join(train) for c in t))
    assert "[UNK]" in pieces(cut, unseen) and "[UNK]" not in pieces(full, unseen)

    paddle.seed(3)
    from paddlenlp.transformers import ErnieConfig, ErnieForSequenceClassification

    def model(vocab_size):
        config = ErnieConfig(vocab_size=vocab_size, num_labels=2, **scratch_config("scratch:1x64"))
        return ErnieForSequenceClassification(config).eval()

    big, small = model(full.vocab_size), model(cut.vocab_size)
    state = big.state_dict()
    rows_kept = paddle.to_tensor(teacher_ids(cut, full))
    state["ernie.embeddings.word_embeddings.weight"] = paddle.gather(
        state["ernie.embeddings.word_embeddings.weight"], rows_kept
    )
    small.set_state_dict(state)

    def logits(net, pipeline, text):
        ids = [pipeline.cls_id, *pipeline.encode(text).ids, pipeline.sep_id]
        return net(paddle.to_tensor([ids])).numpy()

    for text in train[:10]:
        assert np.allclose(logits(small, cut, text), logits(big, full, text), atol=1e-6)
    # the teacher (full vocabulary) reads the student's ids (the cut one) through the id map of --transfer and NER
    from ernie_ft.distill.transfer import teacher_batch

    for text in train[:3]:
        ids = paddle.to_tensor([[cut.cls_id, *cut.encode(text).ids, cut.sep_id]])
        mapped = teacher_batch({"input_ids": ids}, rows_kept)["input_ids"]
        assert np.allclose(big(mapped).numpy(), logits(big, full, text), atol=1e-6)


def test_a_wrong_input_fails_before_paddle_is_imported(tmp_path):
    """A missing or empty training file, a wrong --model and a missing --input: one error line, exit 2, and
    Paddle never imported."""
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    probe = (
        "import sys\nfrom ernie_ft.cli import main\nstatus = main(sys.argv[1:])\n"
        "print('paddle imported' if 'paddle' in sys.modules else 'no paddle', status)"
    )
    cases = [
        ["classify", "--train", str(tmp_path / "missing.tsv"), "--output", str(tmp_path / "o")],
        ["classify", "--train", str(empty), "--output", str(tmp_path / "o")],
        ["classify", "--train", TRAIN, "--model", "scratch:3y64", "--output", str(tmp_path / "o")],
        ["predict", "--model", str(tmp_path / "no-model"), "--input", TRAIN],
        ["evaluate", "--model", str(tmp_path), "--input", str(tmp_path / "missing.tsv")],
        ["distill", "--teacher", str(tmp_path / "no-teacher"), "--train", TRAIN, "--output", str(tmp_path / "d")],
    ]
    for argv in cases:
        done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True)
        assert done.stdout.strip() == "no paddle 2", (argv, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
