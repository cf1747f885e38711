"""The jieba + BPE vocabulary extension: learning, encoding, saving, the embedding rows, a task run."""

import json
import re

import numpy as np
import pytest
from conftest import DATA, saved_weights, shared

from ernie_ft.cli import vocab as vocab_main
from ernie_ft.config import DataConfig, ModelConfig
from ernie_ft.data.readers import read_examples
from ernie_ft.errors import UserError
from ernie_ft.text.extension import CJK_WORD, learn, write
from ernie_ft.text.pipeline import TextPipeline
from ernie_ft.text.scratch import build_vocab, write_vocab

SENTIMENT = [e.text for e in read_examples(str(DATA / "sentiment_train.tsv"))]
# '我们' + '的' are separate jieba words, so the pair '们的' (as frequent as '我们') must never be merged.
BOUNDARY_CORPUS = [f"我们的{w}很好，南京市长江大桥" for w in ("酒店", "房间", "服务", "早餐", "老师", "同学")] * 5
MIXED = "我在Apple Store买了iPhone15，花了６９９９元😀！酒店房间很不错，服务也好。南京市长江大桥 room 1208号"


def _extension(tmp_path, vocab, texts, size=40, name="ext", **kwargs):
    base = TextPipeline(vocab, **kwargs)
    learned = learn(base, texts, size, min_frequency=2)
    write(str(tmp_path / name), learned, vocab, base.vocab_size, {})
    return base, str(tmp_path / name), learned


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(SENTIMENT + BOUNDARY_CORPUS + [MIXED]), str(path))
    return str(path)


@pytest.fixture(scope="module")
def sentiment_extension(vocab, tmp_path_factory):
    """(base pipeline, extension directory) learned from the sample reviews."""
    base, directory, _ = _extension(tmp_path_factory.mktemp("ext"), vocab, SENTIMENT, size=150)
    return base, directory


def _inverse(pipe):
    tokens = {i: t.removeprefix("##") for t, i in pipe.vocab.items()}
    tokens.update((pipe.extension.base_size + i, p) for i, p in enumerate(pipe.extension.pieces))
    return tokens


def test_learned_merges_never_cross_a_jieba_word_boundary(vocab, tmp_path):
    base, directory, learned = _extension(tmp_path, vocab, BOUNDARY_CORPUS, size=30)
    words = {w for t in BOUNDARY_CORPUS for w in base.normalized_words(t)}
    assert "我们" in words and "的" in words and "们的" in "".join(BOUNDARY_CORPUS)
    assert learned["pieces"] and "我们" in learned["pieces"]
    for piece in learned["pieces"]:
        assert CJK_WORD.fullmatch(piece) and any(piece in w for w in words), piece
        assert "们的" not in piece and "的" not in piece  # '的' is a word of its own
    for left, right in learned["merges"]:
        assert any(left + right in w for w in words)
    # ids follow the base vocabulary, in merge order
    pipe = TextPipeline(vocab, vocab_extension=directory)
    assert pipe.vocab_size == base.vocab_size + len(learned["pieces"])
    assert pipe.extension.ids[learned["pieces"][0]] == base.vocab_size
    # a pair seen once stays unmerged with min_frequency 2
    once = learn(base, ["我们的酒店很好"], 10, min_frequency=2)
    assert once["pieces"] == []


def test_offsets_round_trip_on_mixed_text(vocab, sentiment_extension, tmp_path):
    _, directory = sentiment_extension
    base, mixed_dir, _ = _extension(tmp_path, vocab, SENTIMENT + [MIXED] * 3, size=150, name="mixed")
    for pipe in (TextPipeline(vocab, vocab_extension=directory), TextPipeline(vocab, vocab_extension=mixed_dir)):
        tokens = _inverse(pipe)
        enc = pipe.encode(MIXED)
        words = pipe.words(MIXED)
        assert any(i >= pipe.extension.base_size for i in enc.ids)
        assert len(enc.ids) < len(base.encode(MIXED).ids)
        decoded = []
        for tid, (s, e), w in zip(enc.ids, enc.offsets, enc.word_ids):
            assert words[w][0] <= s < e <= words[w][1]  # inside its jieba word
            piece = pipe.normalize(MIXED[s:e])[0].lower()
            assert piece == ("😀" if tid == pipe.unk_id else tokens[tid]), (tid, MIXED[s:e])
            decoded.append(piece)
        assert "".join(decoded) == re.sub(r"\s", "", pipe.normalize(MIXED)[0].lower())
        assert [s for s, _ in enc.offsets] == sorted(s for s, _ in enc.offsets)
        # pieces replace exactly the base character tokens under them: expanding them gives the base encoding
        expanded_ids, expanded_offsets = [], []
        for tid, (s, e) in zip(enc.ids, enc.offsets):
            if tid >= pipe.extension.base_size:
                expanded_ids += [pipe.vocab[c] for c in MIXED[s:e]]
                expanded_offsets += [(i, i + 1) for i in range(s, e)]
            else:
                expanded_ids.append(tid)
                expanded_offsets.append((s, e))
        reference = base.encode(MIXED)
        assert (expanded_ids, expanded_offsets) == (reference.ids, reference.offsets)


def test_exact_spans_keeps_base_ids_and_every_boundary(vocab, tmp_path):
    base, directory, learned = _extension(tmp_path, vocab, BOUNDARY_CORPUS, size=30)
    assert "南京市" in learned["pieces"] or "长江大桥" in learned["pieces"]
    text = "我们的酒店在南京市长江大桥旁边"
    entity = (text.index("南京"), text.index("南京") + 2)  # an entity edge inside the word 南京市
    pieces, exact = (TextPipeline(vocab, vocab_extension=directory, exact_spans=flag) for flag in (False, True))
    assert entity[1] not in {e for _, e in pieces.encode(text).offsets}  # pieces would move the boundary
    assert entity[1] in {e for _, e in exact.encode(text).offsets}
    assert exact.encode(text) == base.encode(text) and exact.vocab_size == pieces.vocab_size > base.vocab_size
    assert len({base.fingerprint, pieces.fingerprint, exact.fingerprint}) == 3
    exact.save(str(tmp_path / "ckpt"))
    assert TextPipeline.from_dir(str(tmp_path / "ckpt")).exact_spans
    # the rule: token and span heads encode characters unless the task says otherwise
    from dataclasses import dataclass

    from ernie_ft.models.modeling import load_pipeline
    from ernie_ft.task import create_task

    @dataclass
    class Heads:  # a task class that does not subclass TaskHooks: it gets the default rule when created
        head: str = "sequence"

    @dataclass
    class CharsOff(Heads):
        exact_spans: bool = False

    assert [create_task(Heads, {"head": h}).exact_spans for h in ("sequence", "token", "span")] == [False, True, True]
    assert not create_task(CharsOff, {"head": "token"}).exact_spans
    config = ModelConfig(vocab=vocab, vocab_extension=directory)
    for task in (create_task(Heads, {"head": "token"}), create_task(Heads, {"head": "span"})):
        pipe = load_pipeline(config, DataConfig(), None, exact_spans=task.exact_spans)
        assert pipe.encode(text) == base.encode(text)


def test_saved_and_reloaded_extension_gives_identical_ids(vocab, sentiment_extension, tmp_path):
    _, directory = sentiment_extension
    pipe = TextPipeline(vocab, vocab_extension=directory)
    texts = SENTIMENT[:40] + [MIXED, ""]
    expected = [pipe.encode(t) for t in texts]
    pipe.save(str(tmp_path / "ckpt"))
    restored = TextPipeline.from_dir(str(tmp_path / "ckpt"))
    assert restored.extension.directory == str(tmp_path / "ckpt" / "vocab_extension")
    assert restored.fingerprint == pipe.fingerprint and restored.vocab_size == pipe.vocab_size
    assert [restored.encode(t) for t in texts] == expected
    assert restored.encode_many(texts, num_proc=2) == expected
    cache = str(tmp_path / "cache")
    TextPipeline(vocab).encode_many(texts, cache_dir=cache)
    assert restored.encode_many(texts, cache_dir=cache) == expected and not restored.last_cache_hit
    assert pipe.encode_many(texts, cache_dir=cache) == expected and pipe.last_cache_hit


def test_user_errors(vocab, sentiment_extension, tmp_path):
    _, directory = sentiment_extension
    other = tmp_path / "other.txt"
    write_vocab(build_vocab(["完全不同的词表"]), str(other))
    with pytest.raises(UserError, match="learned on a base vocabulary"):
        TextPipeline(str(other), vocab_extension=directory)
    with pytest.raises(UserError, match="not a vocabulary extension"):
        TextPipeline(vocab, vocab_extension=str(tmp_path))
    from ernie_ft.models.modeling import load_pipeline

    with pytest.raises(UserError, match="--vocab-extension .*directory not found"):
        load_pipeline(ModelConfig(vocab=vocab, vocab_extension=str(tmp_path / "missing")), DataConfig(), None)


def test_learn_command_reports_and_refuses_bad_input(vocab, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTIMENT) + "\n", encoding="utf-8")
    out = tmp_path / "ext"
    args = [
        "learn",
        "--corpus",
        str(corpus),
        str(DATA / "sentiment_dev.tsv"),
        "--base",
        vocab,
        "--size",
        "100",
        "--output",
        str(out),
    ]
    assert vocab_main(args) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "extension.json").read_text(encoding="utf-8"))["report"]
    assert report["new_pieces"] == 100 == len((out / "pieces.txt").read_text(encoding="utf-8").splitlines())
    assert report["tokens_per_char_after"] < report["tokens_per_char_before"]
    assert f"{report['tokens_per_char_before']:.3f} -> {report['tokens_per_char_after']:.3f}" in printed
    assert report["top_pieces"][0][0] in printed
    assert vocab_main(args) == 2  # the output directory is taken
    assert "--output" in capsys.readouterr().err
    bad = [
        [
            "learn",
            "--corpus",
            str(tmp_path / "missing.txt"),
            "--base",
            vocab,
            "--size",
            "10",
            "--output",
            str(tmp_path / "a"),
        ],
        ["learn", "--corpus", str(corpus), "--base", vocab, "--size", "0", "--output", str(tmp_path / "b")],
        [
            "learn",
            "--corpus",
            str(corpus),
            "--base",
            str(tmp_path / "nowhere"),
            "--size",
            "5",
            "--output",
            str(tmp_path / "c"),
        ],
    ]
    for argv in bad:
        assert vocab_main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1, err


def test_embedding_rows_start_as_the_mean_of_their_characters(tiny_checkpoint, tmp_path):
    from paddlenlp.transformers import ErnieForSequenceClassification

    from ernie_ft.models.modeling import build_model, load_pipeline

    base, directory, learned = _extension(tmp_path, f"{tiny_checkpoint}/vocab.txt", SENTIMENT, size=60)
    original = saved_weights(tiny_checkpoint)
    original = next(v for k, v in original.items() if k.endswith("word_embeddings.weight"))
    config = ModelConfig(model=tiny_checkpoint, vocab_extension=directory)
    pipe = load_pipeline(config, DataConfig(), None)
    net = build_model(config, "sequence", 2, pipe)
    grown = net.get_input_embeddings().weight.numpy()
    assert grown.shape[0] == net.config.vocab_size == pipe.vocab_size == base.vocab_size + 60
    np.testing.assert_array_equal(grown[: original.shape[0]], original)  # base rows untouched
    for i, piece in enumerate(learned["pieces"]):
        rows = [base.vocab[c] for c in piece]
        np.testing.assert_allclose(grown[base.vocab_size + i], original[rows].mean(axis=0), rtol=1e-6)
    # saved with its pipeline, the checkpoint loads as is and is not grown or re-initialised again
    grown[base.vocab_size :] += 1.0
    net.get_input_embeddings().weight.set_value(grown)
    net.save_pretrained(str(tmp_path / "ckpt"), safe_serialization=True)
    pipe.save(str(tmp_path / "ckpt"))
    assert ErnieForSequenceClassification.from_pretrained(str(tmp_path / "ckpt")).config.vocab_size == pipe.vocab_size
    again_config = ModelConfig(model=str(tmp_path / "ckpt"), vocab_extension=directory)
    again_pipe = load_pipeline(again_config, DataConfig(), None)
    again = build_model(again_config, "sequence", 2, again_pipe)
    np.testing.assert_array_equal(again.get_input_embeddings().weight.numpy(), grown)
    assert again_pipe.encode(MIXED) == pipe.encode(MIXED)
    other, other_dir, _ = _extension(tmp_path, f"{tiny_checkpoint}/vocab.txt", SENTIMENT, size=20, name="other")
    with pytest.raises(UserError, match="already has a different vocabulary extension"):
        load_pipeline(ModelConfig(model=str(tmp_path / "ckpt"), vocab_extension=other_dir), DataConfig(), None)


def test_classification_with_an_extension_trains_resumes_and_predicts(tiny_checkpoint, tmp_path):
    from ernie_ft.cli import task_command

    main = task_command("classify")

    _, directory, _ = _extension(tmp_path, f"{tiny_checkpoint}/vocab.txt", SENTIMENT, size=80)
    args = [
        "--train",
        str(DATA / "sentiment_train.tsv"),
        "--dev",
        str(DATA / "sentiment_dev.tsv"),
        "--model",
        tiny_checkpoint,
        "--vocab-extension",
        directory,
        "--output",
        str(tmp_path / "run"),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--lr",
        "2e-3",
        "--max-len",
        "48",
        "--threads",
        "1",
    ]
    assert main([*args, "--stop-after-steps", "4"]) == 0
    assert main([*args, "--resume"]) == 0
    best = tmp_path / "run" / "best"
    assert (best / "vocab_extension" / "pieces.txt").read_bytes() == (tmp_path / "ext" / "pieces.txt").read_bytes()
    assert json.loads((best / "config.json").read_text())["vocab_size"] == TextPipeline.from_dir(str(best)).vocab_size
    source = tmp_path / "in.txt"
    source.write_text("酒店房间很不错，服务也好\n质量太差了，再也不买\n", encoding="utf-8")
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "--model", str(tmp_path / "run"), "--input", str(source), "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2 and all(abs(sum(r["probs"].values()) - 1) < 1e-4 for r in records)
    from ernie_ft.training.checkpoint import load_model

    loaded = load_model(str(tmp_path / "run"))
    assert loaded.pipeline.extension is not None and not loaded.pipeline.exact_spans
    assert max(loaded.pipeline.encode("酒店房间很不错").ids) >= loaded.pipeline.extension.base_size


def test_real_vocab_chnsenticorp_gets_shorter(tmp_path):
    train = shared("chnsenticorp", "train.tsv")
    vocab = str(shared("ernie-3.0-vocab", "vocab.txt"))
    texts = [e.text for e in read_examples(str(train))][:400]
    base, directory, learned = _extension(tmp_path, vocab, texts, size=300)
    pipe = TextPipeline(vocab, vocab_extension=directory)
    before = sum(len(base.encode(t).ids) for t in texts)
    after = sum(len(pipe.encode(t).ids) for t in texts)
    assert after < 0.85 * before
    from paddlenlp.transformers import ErnieTokenizer

    reference = ErnieTokenizer(vocab)
    exact = pipe.replace(exact_spans=True)
    for text in [t for t in texts if not re.search("[０-９Ａ-Ｚａ-ｚ]", t)][:50]:  # exact spans keep PaddleNLP's ids
        assert exact.encode(text).ids == reference.convert_tokens_to_ids(reference.tokenize(text))
