"""Hugging Face transformers checkpoints in and out.

The references are not ours: tests/fixtures/hf holds tiny BERT and ERNIE checkpoints that transformers saved and
the outputs transformers gave on them (tests/fixtures/make_hf_fixture.py, run once with torch); tests/fixtures/hf_export
holds an ernie_ft checkpoint, its ``export --format hf`` and what transformers answered when it loaded that export
(the other direction, checked on every run without torch). With ERNIE_FT_TORCH_PYTHON naming a Python that has torch
and transformers, today's exports are also loaded by transformers itself (benchmarks/baselines/hf_reference.py).
"""

import importlib.util
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from conftest import DATA, ROOT

from ernie_ft import cli
from ernie_ft.models import hf

FIXTURES = ROOT / "tests" / "fixtures" / "hf"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))["kinds"]
TEXTS = ["这家酒店的服务很好", "房间太小了，不推荐。"]  # the fixture's first texts (tests/fixtures/make_hf_fixture.py)
TORCH_PYTHON = os.environ.get("ERNIE_FT_TORCH_PYTHON")


_spec = importlib.util.spec_from_file_location("hf_outputs", ROOT / "benchmarks" / "baselines" / "hf_outputs.py")
HF_OUTPUTS = importlib.util.module_from_spec(_spec)
"""benchmarks/baselines/hf_outputs.py, what ``hf_parity.py`` compares: the same kinds, outputs and measure here."""
_spec.loader.exec_module(HF_OUTPUTS)
CLASSES, outputs, max_difference = HF_OUTPUTS.CLASSES, HF_OUTPUTS.outputs, HF_OUTPUTS.max_difference


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


# ---------------------------------------------------------------- in: transformers checkpoints load and answer alike


@pytest.mark.parametrize("kind", list(CLASSES))
def test_each_checkpoint_kind_gives_transformers_outputs(kind, capsys):
    import paddlenlp.transformers as pt

    cls_name, head = CLASSES[kind]
    net, loading = hf.load(getattr(pt, cls_name), str(FIXTURES / kind), head)
    assert loading is None  # every tensor read, none left over (legacy gamma/beta and position_ids included)
    assert max_difference(outputs(net, EXPECTED[kind]), EXPECTED[kind]) < 1e-4


def test_layer_norm_epsilon_follows_the_config():
    """ERNIE 3.0's transformers ports use 1e-5, BERT 1e-12; PaddleNLP sets every LayerNorm to 1e-12."""
    import paddle
    import paddlenlp.transformers as pt

    net, _ = hf.load(pt.ErnieForSequenceClassification, str(FIXTURES / "ernie-seq"), "sequence")
    eps = {layer._epsilon for layer in net.sublayers() if isinstance(layer, paddle.nn.LayerNorm)}
    assert eps == {1e-5}
    for layer in net.sublayers():  # with PaddleNLP's 1e-12 the answers move past the bound
        if isinstance(layer, paddle.nn.LayerNorm):
            layer._epsilon = 1e-12
    assert max_difference(outputs(net, EXPECTED["ernie-seq"]), EXPECTED["ernie-seq"]) > 1e-4


def test_tensor_names_round_trip_exactly():
    for kind, (_, head) in CLASSES.items():
        config = json.loads((FIXTURES / kind / "config.json").read_text(encoding="utf-8"))
        stored = hf.read_weights(str(FIXTURES / kind))
        paddle_state, unused = hf.to_paddle(stored, config, head)
        assert unused == []
        back = hf.to_hf(paddle_state, config["model_type"], config["num_hidden_layers"], head)
        original = {hf.legacy_name(n): v for n, v in stored.items() if not hf.IGNORED.fullmatch(n)}
        if head is None:  # a bare encoder's names carry no prefix in transformers
            back = {n.removeprefix(config["model_type"] + "."): v for n, v in back.items()}
        assert set(back) == set(original), kind
        assert all(np.array_equal(back[n], original[n]) for n in back), kind


def test_predict_with_a_classifier_from_transformers(tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("这家酒店的服务很好\n房间太小了，不推荐。\n", encoding="utf-8")
    out = tmp_path / "predictions.jsonl"
    assert (
        cli.main(["predict", "--model", str(FIXTURES / "bert-seq"), "--input", str(texts), "--output", str(out)]) == 0
    )
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    logits = np.array(EXPECTED["bert-seq"]["logits"][:2])
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    labels = ["负面", "正面"]  # the checkpoint's id2label
    assert [row["label"] for row in rows] == [labels[i] for i in probs.argmax(-1)]
    assert np.allclose([[row["probs"][label] for label in labels] for row in rows], probs, atol=1e-4)


def test_serve_answers_with_a_transformers_classifier():
    from test_serve import client_for

    with client_for(str(FIXTURES / "bert-seq")) as client:
        info = client.get("/v1/info").json()
        answer = client.post("/v1/predict", json={"inputs": [{"text": TEXTS[0]}, {"text": TEXTS[1]}]})
    assert answer.status_code == 200, answer.text
    assert info["model"] == "bert-seq" and info["task"] == "classify"
    logits = np.array(EXPECTED["bert-seq"]["logits"][:2])
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    served = [[p["probs"]["负面"], p["probs"]["正面"]] for p in answer.json()["predictions"]]
    assert np.allclose(served, probs, atol=1e-4)


def test_predict_with_token_and_span_heads_from_transformers(tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("我在上海工作\n", encoding="utf-8")
    out = tmp_path / "ner.jsonl"
    assert (
        cli.main(["predict", "--model", str(FIXTURES / "bert-token"), "--input", str(texts), "--output", str(out)]) == 0
    )
    # the fixture's fourth text: transformers' logits tag every character B-PER (margins over 1.1), so each is an
    # entity of its own; predict must give those, not merely some entities
    entities = json.loads(out.read_text(encoding="utf-8"))["entities"]
    token = EXPECTED["bert-token"]
    id2label = json.loads((FIXTURES / "bert-token" / "config.json").read_text(encoding="utf-8"))["id2label"]
    tags = [id2label[str(i)] for i in np.argmax(token["logits"][3], axis=-1)[1:7]]  # [CLS] 我在上海工作 [SEP]
    assert all(tag.startswith("B-") for tag in tags), tags
    assert [(e["start"], e["end"], e["type"]) for e in entities] == [(i, i + 1, t[2:]) for i, t in enumerate(tags)]
    questions = tmp_path / "qa.jsonl"
    questions.write_text(
        json.dumps({"question": "谁在上海工作", "context": "我在上海工作"}, ensure_ascii=False) + "\n", "utf-8"
    )
    out = tmp_path / "qa_out.jsonl"
    assert (
        cli.main(["predict", "--model", str(FIXTURES / "bert-qa"), "--input", str(questions), "--output", str(out)])
        == 0
    )
    answer = json.loads(out.read_text(encoding="utf-8"))
    # the fixture's first question, [CLS] question [SEP] context [SEP]: the context's 6 tokens at positions 8 to 13
    qa = EXPECTED["bert-qa"]
    assert qa["input_ids"][0][8:14] == token["input_ids"][3][1:7]  # 我在上海工作
    starts, ends = (np.array(qa[name][0][8:14]) for name in ("start_logits", "end_logits"))
    i, j = max(((i, j) for i in range(6) for j in range(i, 6)), key=lambda span: starts[span[0]] + ends[span[1]])
    assert (answer["answer"], answer["start"]) == ("我在上海工作"[i : j + 1], i)  # transformers' best span
    best = answer["n_best"][0]
    assert abs(best["start_logit"] - starts[i]) < 1e-4 and abs(best["end_logit"] - ends[j]) < 1e-4


def test_fine_tune_from_a_transformers_encoder_and_from_another_head(tmp_path, capsys):
    base = ["--train", str(DATA / "sentiment_train.tsv"), "--dev", str(DATA / "sentiment_dev.tsv"), "--epochs", "1"]
    base += ["--batch-size", "16", "--max-len", "64"]
    out = tmp_path / "from-encoder"
    assert cli.main(["classify", "--model", str(FIXTURES / "bert-base"), "--output", str(out), *base]) == 0
    err = capsys.readouterr().err
    assert (
        "39 of 41 weights loaded from the transformers checkpoint; newly initialised: classifier.* (2 tensors)" in err
    )
    assert (out / "best" / "model.safetensors").is_file()
    # ERNIE with 3 labels fine-tuned on 2: its classifier does not fit and is said to be new
    out = tmp_path / "from-head"
    assert cli.main(["classify", "--model", str(FIXTURES / "ernie-seq"), "--output", str(out), *base]) == 0
    assert "newly initialised: classifier.* (2 tensors)" in capsys.readouterr().err
    config = json.loads((out / "best" / "config.json").read_text(encoding="utf-8"))
    assert config["layer_norm_eps"] == 1e-5 and config["use_task_id"] is True


# ---------------------------------------------------------------- refusals: one error line, exit 2


def test_a_pytorch_pickle_is_refused_with_the_command_that_converts_it(tmp_path, capsys):
    model = tmp_path / "bert-pickle"
    shutil.copytree(FIXTURES / "bert-seq", model)
    (model / "model.safetensors").unlink()
    (model / "pytorch_model.bin").write_bytes(b"not opened")
    texts = tmp_path / "t.txt"
    texts.write_text("很好\n", encoding="utf-8")
    assert cli.main(["predict", "--model", str(model), "--input", str(texts), "--output", str(tmp_path / "o")]) == 2
    (line,) = error_lines(capsys)
    assert "pytorch_model.bin" in line and "safe_serialization=True" in line and "BertForSequenceClassification" in line
    assert not (tmp_path / "o").exists()
    args = [
        "classify",
        "--model",
        str(model),
        "--train",
        str(DATA / "sentiment_train.tsv"),
        "--output",
        str(tmp_path / "r"),
    ]
    assert cli.main(args) == 2
    assert "pytorch_model.bin" in error_lines(capsys)[0]


def test_an_encoder_without_head_is_refused_by_predict(tmp_path, capsys):
    texts = tmp_path / "t.txt"
    texts.write_text("很好\n", encoding="utf-8")
    assert cli.main(["predict", "--model", str(FIXTURES / "bert-base"), "--input", str(texts)]) == 2
    (line,) = error_lines(capsys)
    assert "without a task head" in line and "python -m ernie_ft.classify --model" in line


def test_an_activation_paddlenlp_cannot_run_is_named(tmp_path, capsys):
    model = tmp_path / "bert-tanh-gelu"
    shutil.copytree(FIXTURES / "bert-seq", model)
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    config["hidden_act"] = "gelu_new"
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    texts = tmp_path / "t.txt"
    texts.write_text("很好\n", encoding="utf-8")
    assert cli.main(["predict", "--model", str(model), "--input", str(texts)]) == 2
    assert "hidden_act 'gelu_new'" in error_lines(capsys)[0]


# ---------------------------------------------------------------- out: export --format hf


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf-out") / "run"
    args = ["classify", "--model", str(FIXTURES / "ernie-seq"), "--output", str(out), "--epochs", "1"]
    args += ["--train", str(DATA / "sentiment_train.tsv"), "--dev", str(DATA / "sentiment_dev.tsv"), "--max-len", "64"]
    assert cli.main(args) == 0
    return out


def test_export_hf_writes_what_transformers_writes_and_predicts_alike(trained, tmp_path, capsys):
    out = tmp_path / "hf"
    assert cli.main(["export", "--model", str(trained), "--format", "hf", "--output", str(out)]) == 0
    files = set(os.listdir(out))
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "README.md"} <= files
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    reference = json.loads((FIXTURES / "ernie-seq" / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "ernie" and config["architectures"] == ["ErnieForSequenceClassification"]
    labels = json.loads((trained / "best" / "labels.json").read_text(encoding="utf-8"))
    assert config["layer_norm_eps"] == 1e-5 and config["id2label"] == {str(i): x for i, x in enumerate(labels)}
    assert set(hf.read_weights(str(out))) == set(hf.read_weights(str(FIXTURES / "ernie-seq")))
    assert {k: config[k] for k in ("use_task_id", "type_vocab_size", "hidden_act")} == {
        k: reference[k] for k in ("use_task_id", "type_vocab_size", "hidden_act")
    }
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "sentiment_train.tsv" in card and "python -m ernie_ft.classify" in card and "accuracy" in card
    # loaded back as a transformers checkpoint, it answers as the run it came from
    texts = DATA / "sentiment_dev.tsv"
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert cli.main(["predict", "--model", str(trained), "--input", str(texts), "--output", str(a)]) == 0
    assert cli.main(["predict", "--model", str(out), "--input", str(texts), "--output", str(b)]) == 0
    ours = [json.loads(line) for line in a.read_text(encoding="utf-8").splitlines()]
    theirs = [json.loads(line) for line in b.read_text(encoding="utf-8").splitlines()]
    assert [r["label"] for r in ours] == [r["label"] for r in theirs]
    assert max(abs(r["probs"][k] - s["probs"][k]) for r, s in zip(ours, theirs) for k in r["probs"]) < 1e-5


def test_export_hf_refuses_a_crf_tagger(tmp_path, capsys):
    out = tmp_path / "ner"
    args = ["ner", "--model", str(FIXTURES / "bert-base"), "--train", str(DATA / "ner_train.jsonl"), "--crf"]
    args += ["--output", str(out), "--epochs", "1", "--max-len", "64"]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(["export", "--model", str(out), "--format", "hf", "--output", str(tmp_path / "x")]) == 2
    (line,) = error_lines(capsys)
    assert "CRF" in line and "--crf" in line
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.tmp").exists()


@pytest.mark.skipif(not TORCH_PYTHON, reason="set ERNIE_FT_TORCH_PYTHON to a Python with torch and transformers")
def test_transformers_loads_the_export_and_gives_our_outputs(trained, tmp_path):
    out = tmp_path / "hf"
    assert cli.main(["export", "--model", str(trained), "--format", "hf", "--output", str(out)]) == 0
    texts = [line.split("\t")[-1] for line in (DATA / "sentiment_dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    (tmp_path / "texts.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    command = [
        TORCH_PYTHON,
        str(ROOT / "benchmarks" / "baselines" / "hf_reference.py"),
        "--model",
        str(out),
        "--texts",
        str(tmp_path / "texts.json"),
    ]
    theirs = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    from ernie_ft.training.checkpoint import load_model

    loaded = load_model(str(trained))
    encodings = loaded.pipeline.encode_many(texts, word_ids=False)
    for row, encoding in zip(theirs["input_ids"], encodings):
        ids = [i for i in row if i != loaded.pipeline.pad_id]
        kept = encoding.ids[: len(row) - 2]  # transformers truncates to model_max_length (the run's --max-len)
        assert ids == [loaded.pipeline.cls_id, *kept, loaded.pipeline.sep_id]
    record = {"input_ids": theirs["input_ids"], "token_type_ids": np.zeros_like(theirs["input_ids"]).tolist()}
    assert np.abs(outputs(loaded.model, record)["logits"] - np.array(theirs["logits"])).max() < 1e-4


EXPORT = ROOT / "tests" / "fixtures" / "hf_export"


def test_export_hf_writes_the_bytes_transformers_was_seen_to_read_as_our_model(tmp_path):
    """The export direction against transformers, without torch: tests/fixtures/hf_export/exported is what
    ``export --format hf`` wrote for the checkpoint ``source``, and transformers.json what transformers 4.57.6 answered
    when it loaded it (tests/fixtures/make_hf_fixture.py says how both were made). Today's export must write what
    transformers read then: the same tensors bit for bit (names, transposes), the same vocabulary, every setting of the
    config and tokenizer files as it was (a key added since is allowed; the model card is not read by transformers);
    and transformers' ids and logits must be our model's."""
    out = tmp_path / "exported"
    assert cli.main(["export", "--model", str(EXPORT / "source"), "--format", "hf", "--output", str(out)]) == 0
    committed = EXPORT / "exported"
    regenerate = "if the export changed on purpose, remake tests/fixtures/hf_export (tests/fixtures/make_hf_fixture.py)"
    ours, reference = hf.read_weights(str(out)), hf.read_weights(str(committed))
    assert sorted(ours) == sorted(reference), regenerate
    for name, value in reference.items():
        assert ours[name].dtype == value.dtype and np.array_equal(ours[name], value), f"{name}: {regenerate}"
    assert (out / "vocab.txt").read_bytes() == (committed / "vocab.txt").read_bytes(), regenerate
    for name in ("config.json", "tokenizer_config.json", "special_tokens_map.json"):
        today, then = (json.loads((d / name).read_text(encoding="utf-8")) for d in (out, committed))
        assert {k: today.get(k) for k in then} == then, f"{name}: {regenerate}"
    theirs = json.loads((EXPORT / "transformers.json").read_text(encoding="utf-8"))
    texts = json.loads((EXPORT / "texts.json").read_text(encoding="utf-8"))
    from ernie_ft.training.checkpoint import load_model

    loaded = load_model(str(EXPORT / "source"))
    assert theirs["architecture"] == "ErnieForSequenceClassification" and theirs["tokenizer"] == "BertTokenizerFast"
    assert list(theirs["id2label"].values()) == loaded.labels
    for row, encoding in zip(theirs["input_ids"], loaded.pipeline.encode_many(texts, word_ids=False), strict=True):
        ids = [i for i in row if i != loaded.pipeline.pad_id]
        kept = encoding.ids[: len(row) - 2]  # transformers truncates to model_max_length (the run's --max-len 64)
        assert ids == [loaded.pipeline.cls_id, *kept, loaded.pipeline.sep_id]
    record = {"input_ids": theirs["input_ids"], "token_type_ids": np.zeros_like(theirs["input_ids"]).tolist()}
    reference = np.array(theirs["logits"])
    # two float32 implementations of one network: 4.5e-8 measured here (benchmarks/baselines/hf_parity.py: 5e-6 at
    # most over every kind); the first query weight transposed moves these logits (at most 0.09) by 7e-2
    assert np.abs(outputs(loaded.model, record)["logits"] - reference).max() < 1e-5
    # negative control: the two layers' feed-forward weights swapped (9e-2 measured), the comparison fails
    layers = loaded.model.ernie.encoder.layers
    first = layers[0].linear1.weight.numpy().copy()
    layers[0].linear1.weight.set_value(layers[1].linear1.weight.numpy())
    layers[1].linear1.weight.set_value(first)
    assert np.abs(outputs(loaded.model, record)["logits"] - reference).max() > 1e-3


def test_the_docs_show_the_name_table_the_code_uses():
    page = (ROOT / "docs" / "huggingface.md").read_text(encoding="utf-8")
    section = page.split("## The name table")[1].split("\n## ")[0]
    rows = [line.split("|")[1:4] for line in section.splitlines() if line.startswith("| `")]
    shown = [(a.strip().strip("`"), b.strip().strip("`"), t.strip() == "yes") for a, b, t in rows]
    assert shown == list(hf.NAMES)


def test_tokenization_rules_follow_the_checkpoints_origin(tmp_path, monkeypatch, tiny_checkpoint):
    """transformers checkpoints tokenize as BertTokenizer, PaddleNLP names and directories as ErnieTokenizer, scratch
    models and ernie_ft checkpoints saved before rules were recorded as ever."""
    import paddlenlp.transformers as pt

    from ernie_ft.config import DataConfig, ModelConfig
    from ernie_ft.models.modeling import load_pipeline
    from ernie_ft.text.pipeline import TextPipeline

    vocab = str(FIXTURES / "bert-seq" / "vocab.txt")
    monkeypatch.setattr(pt.AutoTokenizer, "from_pretrained", lambda name, **kw: pt.ErnieTokenizer(vocab))
    data = DataConfig(cache_dir=str(tmp_path))

    def rules(model, **kw):
        return load_pipeline(ModelConfig(model=model, **kw), data, lambda: TEXTS).rules

    assert rules(str(FIXTURES / "bert-seq")) == "bert"
    assert rules("ernie-3.0-nano-zh") == "paddlenlp"
    assert rules("scratch:tiny", vocab=vocab) == "ernie_ft"
    assert rules(tiny_checkpoint) == "paddlenlp"  # saved by PaddleNLP's save_pretrained
    assert TextPipeline.from_dir(str(ROOT / "tests" / "fixtures" / "v0.1" / "classify" / "best")).rules == "ernie_ft"


def test_evaluate_a_transformers_classifier_and_fine_tune_qa_and_pretraining_from_an_encoder(tmp_path, capsys):
    dev = str(DATA / "sentiment_dev.tsv")  # its labels are the fixture's id2label: 负面, 正面
    assert (
        cli.main(
            ["evaluate", "--model", str(FIXTURES / "bert-seq"), "--input", dev, "--output-dir", str(tmp_path / "e")]
        )
        == 0
    )
    metrics = json.loads((tmp_path / "e" / "metrics.json").read_text(encoding="utf-8"))
    # scored on the checkpoint's own labels: per label, the share of its texts predict gives it (this random
    # classifier gives every text 负面: recall 1 and 0, where labels taken in another order give 0 and 1)
    predicted = tmp_path / "dev.jsonl"
    assert cli.main(["predict", "--model", str(FIXTURES / "bert-seq"), "--input", dev, "--output", str(predicted)]) == 0
    gold = [line.split("\t")[0] for line in (DATA / "sentiment_dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    labels = [json.loads(line)["label"] for line in predicted.read_text(encoding="utf-8").splitlines()]
    assert len(labels) == len(gold) and set(gold) == set(metrics["per_class"]) == {"负面", "正面"}
    for label in set(gold):
        ours = [p for p, g in zip(labels, gold) if g == label]
        assert metrics["per_class"][label]["recall"] == pytest.approx(ours.count(label) / len(ours)), label
    assert metrics["accuracy"] == pytest.approx(sum(p == g for p, g in zip(labels, gold)) / len(gold))
    encoder = str(FIXTURES / "bert-base")
    qa = ["qa", "--model", encoder, "--train", str(DATA / "qa_train.json"), "--output", str(tmp_path / "qa")]
    assert cli.main([*qa, "--epochs", "1", "--max-len", "64", "--batch-size", "16"]) == 0
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS * 20) + "\n", encoding="utf-8")
    pretrain = ["pretrain", "--model", encoder, "--corpus", str(corpus), "--output", str(tmp_path / "pt")]
    assert cli.main([*pretrain, "--epochs", "1", "--max-len", "32", "--batch-size", "8"]) == 0
    err = capsys.readouterr().err
    assert "39 of 41 weights loaded from the transformers checkpoint; newly initialised: classifier.*" in err  # qa
    assert "39 of 46 weights loaded from the transformers checkpoint; newly initialised: cls.predictions.*" in err
