"""Real Chinese data from ../shared/data (skipped when it is absent)."""

import json

from conftest import shared

from ernie_ft.cli import task_command

main = task_command("classify")


def test_chnsenticorp_scratch_model_learns_well_above_chance(tmp_path):
    train, test = shared("chnsenticorp", "train.tsv"), shared("chnsenticorp", "test.tsv")
    vocab = shared("ernie-3.0-vocab", "vocab.txt")
    lines = train.read_text(encoding="utf-8").splitlines()
    small_train = tmp_path / "train.tsv"
    small_train.write_text("\n".join(lines[:2401]) + "\n", encoding="utf-8")  # header + 2400 reviews
    small_test = tmp_path / "test.tsv"
    small_test.write_text("\n".join(test.read_text(encoding="utf-8").splitlines()[:401]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    args = [
        "--train",
        str(small_train),
        "--test",
        str(small_test),
        "--model",
        "scratch:tiny",
        "--vocab",
        str(vocab),
        "--output",
        str(out),
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--lr",
        "1e-3",
        "--max-len",
        "128",
        "--stride",
        "32",
    ]  # 0.79 here, in 25 s on 2 cores (2 epochs of 64-token windows: 0.82 in 60 s)
    assert main(args) == 0
    accuracy = json.loads((out / "metrics.json").read_text())["test"]["accuracy"]
    assert accuracy > 0.70, accuracy  # chance is about 0.5; TF-IDF + LR on the full train split gets 0.93


def test_pretraining_on_a_corpus_slice_predicts_masked_tokens_well_above_the_unigram_baseline(tmp_path):
    import numpy as np

    from ernie_ft.cli import task_command
    from ernie_ft.pretrain import Pretraining, blocks, corpus

    pretrain = task_command("pretrain")
    from ernie_ft.text.pipeline import TextPipeline

    lines = []
    for name in ("news_xwlb.txt", "review_shopping.txt"):
        with open(shared("corpus", name), encoding="utf-8") as f:
            lines += [line for _, line in zip(range(1500), f)]
    source = tmp_path / "slice.txt"
    source.write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    assert (
        pretrain(
            [
                "--corpus",
                str(source),
                "--model",
                "scratch:tiny",
                "--output",
                str(out),
                "--epochs",
                "6",
                "--stop-after-steps",
                "450",
                "--eval-steps",
                "450",
                "--batch-size",
                "16",
                "--max-len",
                "64",
                "--lr",
                "1e-3",
                "--warmup",
                "0.02",
                "--dropout",
                "0",
                "--masking",
                "char",
                "--dev-fraction",
                "0.05",
                "--log-steps",
                "100",
            ]
        )
        == 0
    )
    accuracy = json.loads((out / "evaluations.jsonl").read_text().splitlines()[-1])["masked_accuracy"]
    # the unigram baseline: always the most frequent training token, scored on the same dev masks
    pipeline, task = TextPipeline.from_dir(str(out / "best")), Pretraining(masking="char")
    train, dev = corpus.scan(str(source), "--corpus").held_out(0.05)
    cache = str(tmp_path / "cache")
    train_blocks = blocks.cached_blocks(train, pipeline, 64, cache)[0]
    tokens = np.concatenate([b["input_ids"][b["words"] >= 0] for b in train_blocks])
    commonest = np.bincount(tokens).argmax()
    dev_blocks = blocks.cached_blocks(dev, pipeline, 64, cache)[0]
    labels = task.collate(list(dev_blocks), pipeline, 42, None)["masked_labels"]
    unigram = float((labels == commonest).mean())
    assert accuracy > 1.5 * unigram, (accuracy, unigram)
