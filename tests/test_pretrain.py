"""Pretraining: corpus packing, whole-word masking, the command line end to end, fill-mask, bad input."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import paddle
import pytest
import yaml
from conftest import DATA, ROOT, pretrain_args, saved_weights
from helpers.rounding import ADAM_EPSILON, adam_drift

from ernie_ft.cli import task_command
from ernie_ft.data.readers import read_examples
from ernie_ft.models import bf16
from ernie_ft.pretrain import blocks as blocks_mod
from ernie_ft.pretrain import corpus as corpus_mod
from ernie_ft.pretrain.masking import MASK, RANDOM, block_rng, mask_block, mlm_batch, units
from ernie_ft.pretrain.task import random_ids
from ernie_ft.text.pipeline import TextPipeline
from ernie_ft.text.scratch import build_vocab, write_vocab

main = task_command("pretrain")

SENTENCES = [e.text for e in read_examples(str(DATA / "sentiment_train.tsv"))]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(SENTENCES + ["知识增强大模型"]), str(vocab))
    return TextPipeline(str(vocab))


def pack_texts(pipeline, lines, max_len):
    packer = blocks_mod.Packer(max_len, pipeline.cls_id, pipeline.sep_id)
    encodings = [pipeline.encode(line) for line in lines]
    for enc in encodings:
        packer.add(enc.ids, enc.word_ids)
    packer.flush()
    return encodings, packer.take()


# -- packing --------------------------------------------------------------------------------------------------


def test_packing_puts_every_corpus_token_in_exactly_one_block_in_order(pipeline):
    lines = SENTENCES[:60] + ["很" * 100]  # a line longer than a block: one jieba word cut across blocks
    encodings, blocks = pack_texts(pipeline, lines, max_len=32)
    content = []
    for ids, words in blocks:
        assert len(ids) <= 32 and ids[0] == pipeline.cls_id and ids[-1] == pipeline.sep_id
        inner = ids[1:-1]
        assert inner[0] != pipeline.sep_id and np.all((inner == pipeline.sep_id) == (words[1:-1] == -1))
        content += [t for t in inner.tolist() if t != pipeline.sep_id]
    assert content == [t for enc in encodings for t in enc.ids]
    lengths = np.array([len(ids) for ids, _ in blocks])
    assert 1 - lengths.sum() / (len(blocks) * 32) < 0.1  # packed: little padding


def test_a_line_is_cut_between_jieba_words_when_it_can_be(pipeline):
    line = "这家酒店的服务非常好，房间干净整洁，早餐也很丰富，下次还会再来入住。" * 3
    encodings, blocks = pack_texts(pipeline, [line], max_len=24)
    words = encodings[0].word_ids
    cuts = np.cumsum([len(ids) - 2 for ids, _ in blocks])[:-1]
    assert len(cuts) >= 2 and all(words[c] != words[c - 1] for c in cuts)


def test_corpus_documents_and_a_deterministic_held_out_split(tmp_path):
    one_per_line = tmp_path / "lines.txt"
    one_per_line.write_text("".join(f"第{i}条评论：服务很好。\n" for i in range(400)), encoding="utf-8")
    paragraphs = tmp_path / "docs.txt"
    paragraphs.write_text("第一段。\n第二段。\n\n另一篇文章。\n", encoding="utf-8")
    assert len(corpus_mod.scan(str(one_per_line), "--corpus")) == 400
    docs = corpus_mod.scan(str(paragraphs), "--corpus")
    assert [lines for _, lines in docs.iter_documents()] == [["第一段。", "第二段。"], ["另一篇文章。"]]
    corpus = corpus_mod.scan(str(tmp_path / "*.txt"), "--corpus")  # a glob: both files
    train, dev = corpus.held_out(0.1)
    assert train.documents + dev.documents == 402 and 20 <= dev.documents <= 60
    dev_docs = [tuple(lines) for _, lines in dev.iter_documents()]
    assert len(dev_docs) == dev.documents and dev_docs == [
        tuple(d) for _, d in corpus.held_out(0.1)[1].iter_documents()
    ]
    assert not set(dev_docs) & {tuple(lines) for _, lines in train.iter_documents()}


def test_a_corpus_mixes_text_tsv_jsonl_and_the_contexts_of_squad_json():
    import json as json_lib

    files = [DATA / "sentiment_train.tsv", DATA / "ner_train.jsonl", DATA / "qa_train.json"]
    corpus = corpus_mod.scan(os.pathsep.join(map(str, files)), "--corpus")
    squad = json_lib.loads(files[2].read_text(encoding="utf-8"))["data"]
    contexts = {p["context"] for article in squad for p in article["paragraphs"]}
    texts = {" ".join(lines) for _, lines in corpus.iter_documents()}
    assert contexts <= texts and set(SENTENCES) <= texts
    ner_lines = files[1].read_text(encoding="utf-8").strip().splitlines()
    assert len(corpus) == len(SENTENCES) + len(ner_lines) + len(contexts)


def test_a_sentence_pair_file_gives_both_texts_of_each_record_as_one_document(tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"  # a matching task's training file: task-adaptive pretraining reads both texts
    pairs.write_text("label\ttext_a\ttext_b\n1\t花呗怎么还款\t花呗如何还钱\n0\t今天天气很好\t\n", encoding="utf-8")
    assert [d for _, d in corpus_mod.scan(str(pairs), "--corpus").iter_documents()] == [
        ["花呗怎么还款", "花呗如何还钱"],
        ["今天天气很好"],
    ]
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text(
        '{"sentence1": "借呗能提前还吗", "sentence2": "借呗可以提前还款吗", "note": "转账"}\n', encoding="utf-8"
    )
    assert [d for _, d in corpus_mod.scan(str(jsonl), "--corpus").iter_documents()] == [
        ["借呗能提前还吗", "借呗可以提前还款吗"]
    ]
    named = corpus_mod.scan(str(jsonl), "--corpus", text_column="sentence2", pair_column="note")
    assert [d for _, d in named.iter_documents()] == [["借呗可以提前还款吗", "转账"]]
    assert named.digest != corpus_mod.scan(str(jsonl), "--corpus").digest  # another cache
    expect_error(
        capsys,
        pretrain_args(pairs, tmp_path / "out", "--text-pair-column", "question"),
        str(pairs),
        "'question'",
        "--text-pair-column",
        "label, text_a, text_b",
    )
    assert not (tmp_path / "out").exists()


def test_blocks_are_memory_mapped_from_an_arrow_file_that_datasets_opens(pipeline, texts_file, tmp_path):
    import datasets

    corpus = corpus_mod.scan(str(texts_file), "--corpus")
    blocks, source = blocks_mod.cached_blocks(corpus, pipeline, 48, str(tmp_path))
    again, second = blocks_mod.cached_blocks(corpus, pipeline, 48, str(tmp_path))
    assert (source, second) == ("tokenised", "cache") and len(blocks) == len(again) > 10
    table = datasets.Dataset.from_file(blocks.path)
    assert table[3]["input_ids"] == blocks[3]["input_ids"].tolist() and len(table) == len(blocks)
    assert blocks.lengths.tolist() == [len(b["input_ids"]) for b in blocks]
    expected, path = [b["input_ids"].tolist() for b in blocks], blocks.path
    del blocks, again, table  # nothing maps the file any more: damage it on disk
    with open(path, "r+b") as f:
        f.truncate(1000)
    rebuilt, third = blocks_mod.cached_blocks(corpus, pipeline, 48, str(tmp_path))
    assert third == "tokenised" and [b["input_ids"].tolist() for b in rebuilt] == expected


# -- masking --------------------------------------------------------------------------------------------------


def random_blocks(n, rng):
    """Blocks of 40-128 tokens made of words of 1-4 tokens, with [CLS]/[SEP] (word -1)."""
    for _ in range(n):
        sizes = rng.integers(1, 5, size=rng.integers(15, 40))
        words = np.repeat(np.arange(len(sizes)), sizes)
        half = int(np.searchsorted(words, len(sizes) // 2))  # an inner [SEP] between two words
        words = np.concatenate([[-1], words[:half], [-1], words[half:], [-1]])
        yield rng.integers(10, 1000, size=len(words)), words


@pytest.mark.parametrize("whole_word", [True, False])
def test_masking_rate_80_10_10_whole_words_and_never_special_tokens(whole_word):
    rng, rate = np.random.default_rng(0), 0.15
    chosen_total = maskable_total = masked = swapped = kept = 0
    for block, (ids, words) in enumerate(random_blocks(2000, rng)):
        out, chosen, labels = mask_block(ids, words, block_rng(1, 0, block), rate, 3, np.arange(10, 1000), whole_word)
        assert np.all(words[chosen] >= 0) and np.array_equal(labels, ids[chosen])  # specials never chosen
        if whole_word:  # a word is chosen whole or not at all
            for w in np.unique(words[chosen]):
                assert set(np.flatnonzero(words == w)) <= set(chosen.tolist())
        chosen_total += len(chosen)
        maskable_total += int((words >= 0).sum())
        masked += int((out[chosen] == 3).sum())
        kept += int((out[chosen] == ids[chosen]).sum())
        unchanged = np.setdiff1d(np.arange(len(ids)), chosen)
        assert np.array_equal(out[unchanged], ids[unchanged])
    swapped = chosen_total - masked - kept
    assert abs(chosen_total / maskable_total - rate) < 0.01
    assert abs(masked / chosen_total - MASK) < 0.02
    assert abs(swapped / chosen_total - (RANDOM - MASK)) < 0.02  # a random token may equal the original: rare


def test_masks_are_a_function_of_seed_epoch_and_block():
    ids, words = next(random_blocks(1, np.random.default_rng(3)))

    def draw(seed, epoch, block):
        return mask_block(ids, words, block_rng(seed, epoch, block), 0.15, 3, np.arange(10, 1000))[1].tolist()

    assert draw(1, 0, 5) == draw(1, 0, 5)
    assert len({tuple(draw(1, epoch, 5)) for epoch in range(6)}) > 3  # drawn anew every epoch
    assert draw(1, None, 5) == draw(1, None, 5) != draw(2, None, 5)  # evaluation: fixed masks


def test_user_dictionary_words_and_jieba_words_are_masked_as_units(pipeline, tmp_path):
    user_dict = tmp_path / "dict.txt"
    user_dict.write_text("知识增强大模型 100000 n\n", encoding="utf-8")
    text = "我们发布了知识增强大模型，效果很好。"
    encodings, blocks = pack_texts(pipeline.replace(user_dict=str(user_dict)), [text], 64)
    _, words = blocks[0]
    start = text.index("知识")
    unit = [k for k, (s, _) in enumerate(encodings[0].offsets) if start <= s < start + 7]
    assert len(unit) == 7 and len({words[k + 1] for k in unit}) == 1  # one unit of 7 tokens
    positions, unit_of = units(words, whole_word=True)
    assert len(set(unit_of[np.isin(positions, np.array(unit) + 1)])) == 1
    plain = pack_texts(pipeline, [text], 64)[1][0][1]
    assert len({plain[k + 1] for k in unit}) > 1  # without the dictionary jieba splits it


def test_with_a_vocabulary_extension_a_words_pieces_are_masked_together(pipeline, tmp_path):
    from ernie_ft.text.extension import learn, write

    write(
        str(tmp_path / "ext"),
        learn(pipeline, SENTENCES, 80, min_frequency=2),
        pipeline.vocab_file,
        pipeline.vocab_size,
        {},
    )
    extended = pipeline.replace(vocab_extension=str(tmp_path / "ext"))
    encodings, blocks = pack_texts(extended, SENTENCES[:40], max_len=64)
    pieces = 0
    for ids, words in blocks:
        positions, unit_of = units(words, whole_word=True)
        for k in np.flatnonzero(ids >= pipeline.vocab_size):  # a learned piece
            pieces += 1
            word = words[k]  # every token of its jieba word is in the piece's masking unit
            assert set(unit_of[positions == k]) == set(unit_of[np.isin(positions, np.flatnonzero(words == word))])
    assert pieces > 20


def test_batches_carry_flat_masked_positions_and_equal_block_weights(pipeline):
    _, blocks = pack_texts(pipeline, SENTENCES[:20], max_len=40)
    features = [{"input_ids": ids, "words": words, "doc": i} for i, (ids, words) in enumerate(blocks[:4])]
    batch = mlm_batch(
        features, pipeline.pad_id, pipeline.sep_id, pipeline.mask_id, np.arange(5, 50), 0.15, True, seed=0, epoch=0
    )
    rows, length = batch["input_ids"].shape
    owner = batch["masked_positions"] // length
    flat = np.stack([np.pad(f["input_ids"], (0, length - len(f["input_ids"]))) for f in features]).reshape(-1)
    assert np.array_equal(flat[batch["masked_positions"]], batch["masked_labels"])
    assert np.allclose(np.bincount(owner, weights=batch["masked_weights"]), 1 / rows)
    first = features[0]["input_ids"]
    inner = np.flatnonzero(first[:-1] == pipeline.sep_id)
    if len(inner):  # token types: 1 after the block's first inner [SEP]
        assert batch["token_type_ids"][0, inner[0]] == 0 and batch["token_type_ids"][0, inner[0] + 1] == 1


def test_logits_at_masked_positions_equal_the_full_sequence_logits_there():
    from paddlenlp.transformers import ErnieConfig, ErnieForMaskedLM

    paddle.seed(0)
    model = ErnieForMaskedLM(
        ErnieConfig(
            vocab_size=300,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            use_task_id=False,
        )
    )
    model.eval()
    assert model.cls.predictions.decoder.weight is model.ernie.embeddings.word_embeddings.weight  # tied
    ids = paddle.randint(5, 300, [3, 20])
    positions = paddle.to_tensor([2, 7, 25, 41, 59])
    full = model(input_ids=ids).reshape([-1, 300]).numpy()
    np.testing.assert_allclose(
        model(input_ids=ids, masked_positions=positions).numpy(), full[positions.numpy()], rtol=1e-5, atol=1e-5
    )


def test_summaries_hold_the_loss_the_hits_and_the_top_k_probabilities_of_each_masked_position():
    from ernie_ft.pretrain.task import Pretraining

    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, size=(5, 50)).astype(np.float32)
    batch = {
        "input_ids": paddle.zeros([2, 8], dtype="int64"),
        "masked_positions": paddle.to_tensor([1, 3, 9, 12, 15]),
        "masked_labels": paddle.to_tensor([4, int(logits[1].argmax()), 7, -100, 9]),
    }
    rows = Pretraining(top_k=3).summarize(paddle.to_tensor(logits), batch)
    assert [len(r) for r in rows] == [2, 3]  # positions 1, 3 in row 0; 9, 12, 15 in row 1
    table = np.concatenate(rows)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    labels = np.array([4, logits[1].argmax(), 7, -100, 9])
    known = labels >= 0
    np.testing.assert_allclose(table[known, 0], -np.log(probs[known, labels[known]]), rtol=1e-5)
    assert table[:, 1].tolist() == [float(gold == p) for gold, p in zip(labels, probs.argmax(1))] and table[1, 1] == 1
    assert table[:, 2].tolist() == known.astype(float).tolist() and table[3, 0] == 0
    top = np.argsort(-probs, axis=1)[:, :3]
    assert np.array_equal(table[:, 3:6], top)
    np.testing.assert_allclose(table[:, 6:9], np.take_along_axis(probs, top, axis=1), rtol=1e-5)


def test_electra_summaries_score_the_discriminator_on_real_tokens_against_the_replaced_share():
    from ernie_ft.pretrain.task import Pretraining

    original = np.array([[5, 6, 7, 8], [9, 10, 0, 0]])  # row 1: two tokens, then padding
    replaced = np.array([[5, 11, 7, 12], [13, 10, 14, 0]])  # padding never counts, replaced or not
    scores = np.array([[-2.0, 1.5, 0.5, -0.5], [3.0, -1.0, 9.0, 9.0]], dtype=np.float32)
    task = Pretraining(top_k=2)
    outputs = {
        "generator": paddle.zeros([2, 20]),
        "replaced": paddle.to_tensor(replaced),
        "discriminator": paddle.to_tensor(scores),
    }
    batch = {
        "input_ids": paddle.to_tensor(original),
        "original_ids": paddle.to_tensor(original),
        "token_weights": paddle.to_tensor((original > 0) / 12.0, dtype="float32"),
        "masked_positions": paddle.to_tensor([1, 4]),
        "masked_labels": paddle.to_tensor([6, 9]),
    }
    metrics = task.evaluate(task.summarize(outputs, batch), None, None, None, None)
    real, truth = scores[original > 0], (replaced != original)[original > 0]  # 6 tokens, 3 of them replaced
    bce = np.logaddexp(0, real) - truth * real
    assert metrics["replaced_loss"] == pytest.approx(bce.mean(), rel=1e-5)
    assert metrics["replaced_accuracy"] == pytest.approx(4 / 6)  # 0.5 on an original and -0.5 on a replaced miss
    assert metrics["replaced_share"] == pytest.approx(3 / 6)
    assert metrics["replaced_auc"] == pytest.approx(8 / 9)  # of 9 (replaced, original) pairs, only -0.5 < 0.5 is wrong
    assert metrics["electra_loss"] == pytest.approx(metrics["mlm_loss"] + 50 * metrics["replaced_loss"])


# -- the command line -----------------------------------------------------------------------------------------


def test_pretraining_writes_best_by_dev_mlm_loss_and_its_metrics(pretrained):
    metrics = json.loads((pretrained / "metrics.json").read_text(encoding="utf-8"))["dev"]
    assert {"mlm_loss", "perplexity", "masked_accuracy"} <= set(metrics)
    assert metrics["perplexity"] == pytest.approx(np.exp(metrics["mlm_loss"]), rel=1e-6)
    evaluations = [json.loads(line) for line in (pretrained / "evaluations.jsonl").read_text().splitlines()]
    assert len(evaluations) >= 3 and metrics["mlm_loss"] == min(e["mlm_loss"] for e in evaluations)
    assert evaluations[-1]["mlm_loss"] < evaluations[0]["mlm_loss"]  # it learns


def test_resumed_pretraining_equals_an_uninterrupted_run(pretrained, texts_file, tmp_path):
    assert main(pretrain_args(texts_file, tmp_path / "straight")) == 0
    straight = {k: v.numpy() for k, v in paddle.load(str(tmp_path / "straight" / "last" / "model.pdparams")).items()}
    resumed = {k: v.numpy() for k, v in paddle.load(str(pretrained / "last" / "model.pdparams")).items()}
    assert straight.keys() == resumed.keys()
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)


def test_the_checkpoint_loads_in_paddlenlp_and_its_encoder_arrives_unchanged_in_classify(pretrained, capsys):
    from paddlenlp.transformers import ErnieForMaskedLM, ErnieModel

    from ernie_ft.config import ModelConfig
    from ernie_ft.models.modeling import build_model

    best = pretrained / "best"
    saved = saved_weights(best)
    mlm = ErnieForMaskedLM.from_pretrained(str(best))
    np.testing.assert_array_equal(
        mlm.cls.predictions.decoder.weight.numpy(), saved["ernie.embeddings.word_embeddings.weight"]
    )
    assert ErnieModel.from_pretrained(str(best)).config.hidden_size == 128
    classifier = build_model(ModelConfig(str(best)), "sequence", 3, TextPipeline.from_dir(str(best)))
    for name, value in classifier.state_dict().items():
        if name.startswith("ernie."):
            np.testing.assert_array_equal(value.numpy(), saved[name], err_msg=name)
    note = capsys.readouterr().err
    assert "newly initialised: classifier.*" in note and "not used: cls.predictions.*" in note


def test_evaluate_on_the_dev_file_reproduces_the_dev_metrics(texts_file, tmp_path):
    from ernie_ft.cli import evaluate

    dev = tmp_path / "dev.txt"
    dev.write_text("房间干净，服务热情，早餐丰富。\n物流太慢了，包装也破了。\n这本书值得一读。\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(pretrain_args(texts_file, out, "--dev", str(dev), "--stop-after-steps", "4", "--epochs", "1")) == 0
    assert evaluate(["--model", str(out / "best"), "--input", str(dev), "--output-dir", str(tmp_path / "eval")]) == 0
    expected = [json.loads(line) for line in (out / "evaluations.jsonl").read_text().splitlines()][-1]
    scored = json.loads((tmp_path / "eval" / "metrics.json").read_text(encoding="utf-8"))
    for key in ("mlm_loss", "masked_accuracy", "masked_tokens"):
        assert scored[key] == pytest.approx(expected[key], rel=1e-5), key


def test_fill_mask_predicts_tokens_for_each_mask(pretrained, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("这家酒店的服务很[MASK]。\n质量[MASK][MASK]差了\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert (
        main(["predict", "--model", str(pretrained), "--input", str(source), "--output", str(out), "--top-k", "3"]) == 0
    )
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [len(r["masks"]) for r in records] == [1, 2] and all(len(m) == 3 for r in records for m in r["masks"])
    for r in records:
        assert "[MASK]" not in r["filled"] and r["filled"].startswith(r["text"][:2])
        assert all(m[0]["score"] >= m[1]["score"] >= m[2]["score"] > 0 for m in r["masks"])


def test_a_model_that_memorised_sentences_fills_in_their_masks(tmp_path):
    # 15 one-token characters: with --max-len 17 each line is a block of its own, as a fill-mask input is
    sentences = [
        "今天天气很好，我们去公园散步。",
        "这本书的内容非常精彩值得一读。",
        "火车站离这里不远，走路就能到。",
        "请把窗户关上吧，外面的风很大。",
    ]
    corpus = tmp_path / "memo.txt"
    corpus.write_text("".join(s + "\n" for s in sentences * 4), encoding="utf-8")
    out = tmp_path / "memo"
    assert (
        main(
            [
                "--corpus",
                str(corpus),
                "--model",
                "scratch:tiny",
                "--output",
                str(out),
                "--epochs",
                "150",
                "--batch-size",
                "16",
                "--lr",
                "2e-3",
                "--warmup",
                "0.1",
                "--max-len",
                "17",
                "--threads",
                "1",
                "--dev-fraction",
                "0",
                "--masking",
                "char",
                "--dropout",
                "0",
                "--log-steps",
                "50",
            ]
        )
        == 0
    )
    masked = [s[:k] + "[MASK]" + s[k + 1 :] for s, k in zip(sentences, (11, 5, 4, 3))]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(masked) + "\n", encoding="utf-8")
    result = tmp_path / "out.jsonl"
    assert main(["predict", "--model", str(out), "--input", str(source), "--output", str(result)]) == 0
    records = [json.loads(line) for line in result.read_text(encoding="utf-8").splitlines()]
    assert [r["filled"] for r in records] == sentences
    assert all(r["masks"][0][0]["score"] > 0.5 for r in records)


def test_data_parallel_and_tensor_parallel_processes_equal_one(tmp_path):
    # ELECTRA: its loss is the MLM loss on the same masks plus the replaced-token loss on samples drawn
    # from per-block uniforms, so one run checks the masks, both losses' weighting and the sampling.
    # Lines of 22 one-token characters pack two to a block of 48: 64 lines are 32 blocks, whole global
    # batches of 8 (one process keeps a partial last batch that replicas would drop). The 2 x 2 mesh splits
    # the matrices, keeps the flat masked positions whole on every rank and the head tied to the embeddings.
    hanzi = "".join(c for c in "".join(SENTENCES) if "\u4e00" <= c <= "\u9fff")
    corpus, dev = tmp_path / "even.txt", tmp_path / "dev.txt"
    corpus.write_text("".join(hanzi[i : i + 22] + "\n" for i in range(0, 22 * 64, 22)), encoding="utf-8")
    dev.write_text("".join(hanzi[i : i + 30] + "\n" for i in range(22 * 64, 22 * 64 + 300, 30)), encoding="utf-8")
    common = [
        "--corpus",
        str(corpus),
        "--dev",
        str(dev),
        "--model",
        "scratch:tiny",
        "--epochs",
        "1",
        "--max-len",
        "48",
        "--threads",
        "1",
        "--seed",
        "5",
        "--warmup",
        "0",
        "--dropout",
        "0",
        "--adam-epsilon",
        str(ADAM_EPSILON),
        "--stop-after-steps",
        "4",
        "--eval-steps",
        "2",
        "--objective",
        "electra",
    ]
    assert main([*common, "--output", str(tmp_path / "one"), "--batch-size", "8", "--lr", "2e-3"]) == 0
    for name, layout in (("dp", ("--nproc", "2")), ("mesh", ("--nproc", "4", "--tensor-parallel", "2"))):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ernie_ft.pretrain",
                *common,
                "--output",
                str(tmp_path / name),
                "--batch-size",
                "4",
                "--lr",
                "1e-3",
                *layout,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mesh 2 data-parallel x 2 tensor-parallel" in (tmp_path / "mesh" / "logs" / "workerlog.0").read_text()
    one = paddle.load(str(tmp_path / "one" / "last" / "model.pdparams"))
    evaluations = {}
    for name in ("one", "dp", "mesh"):
        run = paddle.load(str(tmp_path / name / "last" / "model.pdparams"))
        assert run.keys() == one.keys()
        for key in one:  # same global batches, same masks: the same steps
            np.testing.assert_allclose(
                run[key].numpy(), one[key].numpy(), rtol=0, atol=adam_drift(4, 2e-3), err_msg=f"{name}: {key}"
            )
        evaluations[name] = [
            json.loads(line) for line in (tmp_path / name / "evaluations.jsonl").read_text().splitlines()
        ]
    for name in ("dp", "mesh"):  # every dev block scored once, with the evaluation's fixed masks
        assert [e["masked_tokens"] for e in evaluations[name]] == [e["masked_tokens"] for e in evaluations["one"]]
        for got, want in zip(evaluations[name], evaluations["one"]):
            assert got["electra_loss"] == pytest.approx(want["electra_loss"], rel=1e-4)


def test_mixed_precision_and_recompute_pretraining_match_the_fp32_run(texts_file, tmp_path, monkeypatch):
    # On CPU Paddle computes these in fp32: the match is tight, and it checks that the losses, the tied head
    # and the generator's sample go through autocast, the scaler and recomputed layers like the reference.
    # A CPU without bf16 instructions, where --amp bf16 is Paddle's too (tests/test_bf16.py: the real bf16).
    monkeypatch.setattr(bf16, "cpu_supports_bf16", lambda: False)

    def run(name, *extra):
        out = tmp_path / name
        assert (
            main(
                pretrain_args(
                    texts_file, out, "--objective", "electra", "--stop-after-steps", "4", "--dev-fraction", "0", *extra
                )
            )
            == 0
        )
        return {k: v.numpy() for k, v in paddle.load(str(out / "last" / "model.pdparams")).items()}

    reference = run("fp32")
    for name, extra in (("fp16", ("--amp", "fp16", "--recompute")), ("bf16", ("--amp", "bf16", "--amp-level", "O2"))):
        weights = run(name, *extra)
        assert weights.keys() == reference.keys()
        for key in reference:
            np.testing.assert_allclose(
                weights[key].astype("float32"), reference[key], atol=1e-5, err_msg=f"{name}: {key}"
            )


@pytest.fixture(scope="module")
def electra(texts_file, tmp_path_factory):
    """ELECTRA pretraining, stopped halfway and resumed, and the same run uninterrupted."""
    out = tmp_path_factory.mktemp("electra")
    for name, stops in (("resumed", ("--stop-after-steps", "5")), ("straight", ())):
        assert main(pretrain_args(texts_file, out / name, "--objective", "electra", *stops)) == 0
    assert main(pretrain_args(texts_file, out / "resumed", "--objective", "electra", "--resume")) == 0
    return out


def test_electra_resumes_like_an_uninterrupted_run_and_picks_best_by_its_loss(electra):
    straight, resumed = (paddle.load(str(electra / d / "last" / "model.pdparams")) for d in ("straight", "resumed"))
    for name in straight:
        np.testing.assert_array_equal(resumed[name].numpy(), straight[name].numpy(), err_msg=name)
    metrics = json.loads((electra / "resumed" / "metrics.json").read_text(encoding="utf-8"))["dev"]
    evaluations = [json.loads(line) for line in (electra / "resumed" / "evaluations.jsonl").read_text().splitlines()]
    assert metrics["electra_loss"] == min(e["electra_loss"] for e in evaluations)
    assert metrics["electra_loss"] == pytest.approx(metrics["mlm_loss"] + 50 * metrics["replaced_loss"])
    assert 0.5 < metrics["replaced_accuracy"] <= 1 and 0 < metrics["replaced_share"] < 0.5
    assert 0 <= metrics["replaced_auc"] <= 1


def test_the_electra_checkpoint_is_a_discriminator_the_tasks_load(electra, tmp_path):
    from paddlenlp.transformers import ErnieModel

    from ernie_ft.config import ModelConfig
    from ernie_ft.models.electra import ErnieElectra
    from ernie_ft.models.modeling import build_model

    best = electra / "resumed" / "best"
    saved = saved_weights(best)
    model = ErnieElectra.from_pretrained(str(best))
    assert model.generator.ernie.embeddings is model.ernie.embeddings  # shared
    assert model.generator.cls.predictions.decoder.weight is model.ernie.embeddings.word_embeddings.weight
    assert model.generator.config.num_hidden_layers < model.config.num_hidden_layers
    encoder = ErnieModel.from_pretrained(str(best))
    np.testing.assert_array_equal(
        encoder.encoder.layers[1].linear1.weight.numpy(), saved["ernie.encoder.layers.1.linear1.weight"]
    )
    classifier = build_model(ModelConfig(str(best)), "sequence", 2, TextPipeline.from_dir(str(best)))
    for name, value in classifier.state_dict().items():
        if name.startswith("ernie."):
            np.testing.assert_array_equal(value.numpy(), saved[name], err_msg=name)
    source, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("服务很[MASK]\n", encoding="utf-8")  # fill-mask with its generator
    assert main(["predict", "--model", str(best), "--input", str(source), "--output", str(out)]) == 0
    assert len(json.loads(out.read_text(encoding="utf-8"))["masks"][0]) == 5


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_continued_pretraining_with_a_vocabulary_extension_saves_a_model_that_loads(
    objective, pretrained, electra, texts_file, tmp_path
):
    from ernie_ft.text.extension import learn, write

    start = pretrained / "best" if objective == "mlm" else electra / "resumed" / "best"
    base = TextPipeline.from_dir(str(start))
    write(str(tmp_path / "ext"), learn(base, SENTENCES, 40, min_frequency=2), base.vocab_file, base.vocab_size, {})
    out = tmp_path / "grown"
    assert (
        main(
            [
                "--corpus",
                str(texts_file),
                "--model",
                str(start),
                "--vocab-extension",
                str(tmp_path / "ext"),
                "--output",
                str(out),
                "--objective",
                objective,
                "--epochs",
                "1",
                "--batch-size",
                "8",
                "--max-len",
                "48",
                "--threads",
                "1",
                "--stop-after-steps",
                "2",
                "--dev-fraction",
                "0.1",
                "--eval-steps",
                "2",
            ]
        )
        == 0
    )
    saved = saved_weights(out / "best")
    grown = base.vocab_size + 40
    assert {k: v.shape[0] for k, v in saved.items() if "decoder" in k or "word_embeddings" in k} == {
        k: grown for k in saved if "decoder" in k or "word_embeddings" in k
    }  # projection and bias grew with it
    source, result = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("服务很[MASK]\n", encoding="utf-8")
    assert main(["predict", "--model", str(out), "--input", str(source), "--output", str(result)]) == 0
    (top,) = json.loads(result.read_text(encoding="utf-8"))["masks"]  # one [MASK], its 5 likeliest tokens
    pipeline = TextPipeline.from_dir(str(out / "best"))
    scores = [t["score"] for t in top]
    assert len(top) == 5 and all(t["token"] in pipeline.vocab for t in top)
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-5
    if objective == "mlm":  # PaddleNLP's own class reads the grown checkpoint and ranks the same tokens alike
        from paddlenlp.transformers import ErnieForMaskedLM

        net = ErnieForMaskedLM.from_pretrained(str(out / "best"))
        net.eval()
        ids = [pipeline.cls_id, *pipeline.encode("服务很").ids, pipeline.mask_id, pipeline.sep_id]  # as predict
        logits = net(paddle.to_tensor([ids]))[0, ids.index(pipeline.mask_id)].numpy().astype("float64")
        probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        tokens = {i: t for t, i in pipeline.vocab.items()}
        best = np.argsort(-probs)[:5]
        assert [t["token"] for t in top] == [tokens[i] for i in best]
        np.testing.assert_allclose(scores, probs[best], atol=1e-5)


# -- bad input ------------------------------------------------------------------------------------------------


def expect_error(capsys, argv, *fragments):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and all(f in err[-1] for f in fragments), err
    assert not any(line.startswith("Traceback") for line in err)


def test_bad_corpora_are_one_clear_error_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    expect_error(capsys, pretrain_args(empty, out), "--corpus", "no text in", str(empty))
    english = tmp_path / "english.txt"
    english.write_text("just some english text\nand more of it\n", encoding="utf-8")
    expect_error(capsys, pretrain_args(english, out), "no Chinese characters")
    gbk = tmp_path / "gbk.txt"
    gbk.write_bytes("第一行没问题\n".encode() + "这一行是GBK编码的中文\n".encode("gbk"))
    expect_error(capsys, pretrain_args(gbk, out), f"{gbk}:2", "not UTF-8", "iconv -f GB18030")
    expect_error(capsys, pretrain_args(tmp_path / "missing-*.txt", out), "no file matches")
    small = tmp_path / "small.txt"
    small.write_text("只有一行中文。\n", encoding="utf-8")
    expect_error(
        capsys, pretrain_args(small, out, "--dev-fraction", "0.001"), "--dev-fraction 0.001", "holds out no document"
    )
    expect_error(
        capsys,
        pretrain_args(small, out, "--max-len", "4096", "--dev-fraction", "0"),
        "--max-len 4096",
        "position limit",
    )
    assert not out.exists()


def test_fill_mask_needs_masks_and_a_masked_language_model(pretrained, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("没有掩码的句子\n", encoding="utf-8")
    expect_error(capsys, ["predict", "--model", str(pretrained), "--input", str(source)], f"{source}:1", "[MASK]")
    classifier = tmp_path / "classifier"
    shutil.copytree(pretrained / "best", classifier)  # the same weights, saved as a classifier would be
    meta = yaml.safe_load((classifier / "ernie_ft.yaml").read_text(encoding="utf-8"))
    meta["task"], meta["run"]["task"] = "classify", {}
    (classifier / "ernie_ft.yaml").write_text(yaml.safe_dump(meta, allow_unicode=True), encoding="utf-8")
    (classifier / "labels.json").write_text('["好", "坏"]', encoding="utf-8")
    source.write_text("很[MASK]\n", encoding="utf-8")
    expect_error(
        capsys,
        ["predict", "--model", str(classifier), "--input", str(source)],
        "classify checkpoint",
        "python -m ernie_ft.pretrain",
    )


def load_script(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_count_tables_keep_the_most_frequent_follower_and_break_ties_by_smaller_id():
    probe = load_script("probe_mlm")
    first = np.array([5, 5, 5, 7, 7, 9])
    second = np.array([1, 2, 2, 4, 3, 0])
    assert probe.commonest_after(first, second, vocab=10) == {5: 2, 7: 3, 9: 0}


def test_the_order_probe_reproduces_the_runs_dev_accuracy_and_its_unigram_floor(pretrained, capsys):
    probe = load_script("probe_mlm")
    assert probe.main(["--model", str(pretrained / "best")]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    metrics = json.loads((pretrained / "metrics.json").read_text(encoding="utf-8"))["dev"]
    # the same dev blocks and masks as the run's evaluation, so the model scores what the run reported
    assert report["masked_tokens"] == metrics["masked_tokens"]
    assert report["model"] == pytest.approx(metrics["masked_accuracy"], abs=1e-4)
    assert 0 <= report["model, shuffled"] <= 1
    assert report["order gap"] == pytest.approx(report["model"] - report["model, shuffled"], abs=2e-4)
    assert report["order gap, standard error"] >= 0
    # the unigram floor, recomputed here: the commonest training token, scored on the dev masks
    pipeline = TextPipeline.from_dir(str(pretrained / "best"))
    run = yaml.safe_load((pretrained / "best" / "ernie_ft.yaml").read_text(encoding="utf-8"))["run"]
    train, dev = corpus_mod.scan(run["data"]["train"], "--corpus").held_out(0.1)
    cache = str(pretrained / "probe-cache")
    train_blocks = blocks_mod.cached_blocks(train, pipeline, 48, cache)[0]
    tokens = np.concatenate([np.asarray(b["input_ids"])[np.asarray(b["words"]) >= 0] for b in train_blocks])
    dev_blocks = list(blocks_mod.cached_blocks(dev, pipeline, 48, cache)[0])
    labels = mlm_batch(
        dev_blocks, pipeline.pad_id, pipeline.sep_id, pipeline.mask_id, random_ids(pipeline), 0.15, True, 3, None
    )["masked_labels"]  # the fixture's seed 3; evaluation's masks
    assert report["unigram"] == pytest.approx(float((labels == np.bincount(tokens).argmax()).mean()), abs=1e-4)


def test_the_pretraining_curve_of_a_continued_run_starts_where_its_base_checkpoint_was_saved(pretrained, tmp_path):
    gain = load_script("pretrain_gain")
    per_step = 8 * 48 / 1e6  # pretrain_args: batch 8 of 48 tokens, millions of tokens per step
    base = tmp_path / "base"
    shutil.copytree(pretrained / "best", base / "best")
    records = [json.loads(line) for line in (pretrained / "evaluations.jsonl").read_text().splitlines()]
    records = [r for r in records if "masked_accuracy" in r]
    best = min(records, key=lambda r: r["mlm_loss"])
    records.append({**best, "step": records[-1]["step"] + 8, "mlm_loss": best["mlm_loss"] + 1})  # a worse last one
    (base / "evaluations.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")
    assert gain.pretraining_curve(str(base / "best")) == [
        pytest.approx((r["step"] * per_step, r["masked_accuracy"])) for r in records
    ]
    # a run that continued from best/: its steps count from the tokens best/ had seen (its lowest dev loss)
    continued = tmp_path / "continued"
    shutil.copytree(base / "best", continued / "best")
    saved = yaml.safe_load((continued / "best" / "ernie_ft.yaml").read_text(encoding="utf-8"))
    saved["run"]["model"]["model"] = str(base / "best")
    (continued / "best" / "ernie_ft.yaml").write_text(yaml.safe_dump(saved), encoding="utf-8")
    (continued / "evaluations.jsonl").write_text(json.dumps({"step": 4, "mlm_loss": 1.0, "masked_accuracy": 0.5}))
    assert gain.pretraining_curve(str(continued / "best")) == [pytest.approx(((best["step"] + 4) * per_step, 0.5))]
    # a copy of best/ taken while the run was stopped by --stop-after-steps: its curve ends there
    saved["run"]["train"]["stop_after_steps"] = 3
    (continued / "best-stopped").mkdir()
    (continued / "best-stopped" / "ernie_ft.yaml").write_text(yaml.safe_dump(saved), encoding="utf-8")
    with open(continued / "evaluations.jsonl", "a") as f:
        f.write("\n" + json.dumps({"step": 2, "mlm_loss": 1.5, "masked_accuracy": 0.4}))
    assert gain.pretraining_curve(str(continued / "best-stopped")) == [
        pytest.approx(((best["step"] + 2) * per_step, 0.4))
    ]
    assert len(gain.pretraining_curve(str(continued / "best"))) == 2
    assert gain.pretraining_curve(str(tmp_path / "no-run")) == []


def test_the_gain_table_keeps_every_seed_of_calls_run_side_by_side(tmp_path):
    gain = load_script("pretrain_gain")
    path = str(tmp_path / "results.json")

    def cell(lr, seeds):
        return {"lr": lr, "seeds": seeds, "dev f1": [float(s) for s in seeds], "dev em": [-float(s) for s in seeds]}

    gain.merge_results(path, {"mlm": {"model": "a", "cmrc2018": cell("1e-3", ["42", "43"])}})
    gain.merge_results(path, {"random": {"cluener": cell("2e-3", ["42"])}})
    table = gain.merge_results(path, {"mlm": {"model": "a", "cmrc2018": cell("1e-3", ["44", "42"])}})
    assert table["mlm"]["cmrc2018"] == cell("1e-3", ["42", "43", "44"])  # seed 43 kept, seed order
    assert table["random"]["cluener"] == cell("2e-3", ["42"])  # another row's cell untouched
    assert gain.table_cell("cmrc2018", table["mlm"]["cmrc2018"]) == (
        "dev f1 43.00 (42.00-44.00), dev em -43.00 (-44.00--42.00) (lr 1e-3, seeds 42,43,44)"
    )
    # a new learning rate picked for the first seed: the cell is replaced, not mixed across rates
    table = gain.merge_results(path, {"mlm": {"cmrc2018": cell("5e-4", ["42"])}})
    assert table["mlm"]["cmrc2018"] == cell("5e-4", ["42"])
    assert json.loads((tmp_path / "results.json").read_text()) == table
