"""NER: alignment through character offsets, window stitching, the CRF, the metric, and the command line."""

import itertools
import json
import random
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from conftest import DATA, saved_weights, shared

from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.evaluation.entities import entity_errors, entity_metrics
from ernie_ft.ner.formats import NerExample, read_ner
from ernie_ft.ner.tags import parse_tag, spans_to_tags, tags_to_spans
from ernie_ft.ner.task import NER

main = task_command("ner")

TRAIN, DEV = str(DATA / "ner_train.jsonl"), str(DATA / "ner_dev.jsonl")
TEST_BIO, TEST_BIOES = str(DATA / "ner_test_bio.conll"), str(DATA / "ner_test_bioes.conll")
VOCAB = [
    "[PAD]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "[UNK]",
    *"我在买了和个，张三李四去上班.",
    "starbucks",
    "iphone",
    "##13",
    "30",
    "google",
]
MIXED = "我在Starbucks买了iPhone13和３０个🍎，张三…李四去Ｇｏｏｇｌｅ上班"
MIXED_ENTITIES = ((2, 11, "ORG"), (13, 21, "MISC"), (25, 26, "MISC"), (27, 29, "PER"), (30, 32, "PER"), (33, 39, "ORG"))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    from ernie_ft.text.pipeline import TextPipeline

    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return TextPipeline(str(path))


def featurize(task, examples, pipeline, labels, **data):
    data = DataConfig(**data)
    return task.featurize(examples, pipeline.encode_many(task.texts(examples)), pipeline, labels, data), data


def perfect_logits(features, n_labels, spoil=lambda f, position: False):
    """Logits a model that knew the gold tags would give; ``spoil`` positions get O instead."""
    logits = []
    for f in features:
        rows = np.zeros((len(f["input_ids"]), n_labels), dtype="float32")
        for i, label in enumerate(f["labels"]):
            rows[i, 0 if label < 0 or spoil(f, i) else label] = 10.0
        logits.append(rows)
    return logits


def test_alignment_on_mixed_chinese_english_digits_emoji_and_full_width_text(pipeline, capsys):
    task = NER()
    example = NerExample(MIXED, MIXED_ENTITIES, 1, "mixed")
    assert [MIXED[s:e] for s, e, _ in MIXED_ENTITIES] == ["Starbucks", "iPhone13", "🍎", "张三", "李四", "Ｇｏｏｇｌｅ"]
    labels = task.fit_labels([example])
    assert labels == ["O", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    encoding = pipeline.encode(MIXED)
    tokens = [VOCAB[i] for i in encoding.ids]
    assert tokens == [
        "我",
        "在",
        "starbucks",
        "买",
        "了",
        "iphone",
        "##13",
        "和",
        "30",
        "个",
        "[UNK]",
        "，",
        "张",
        "三",
        ".",
        ".",
        ".",
        "李",
        "四",
        "去",
        "google",
        "上",
        "班",
    ]
    [feature], data = featurize(task, [example], pipeline, labels)
    expected = [
        "O",
        "O",
        "B-ORG",
        "O",
        "O",
        "B-MISC",
        None,
        "O",
        "O",
        "O",
        "B-MISC",
        "O",
        "B-PER",
        "I-PER",
        "O",
        None,
        None,
        "B-PER",
        "I-PER",
        "O",
        "B-ORG",
        "O",
        "O",
    ]  # None: continuation or nothing new
    assert feature["labels"] == [-100, *[-100 if t is None else labels.index(t) for t in expected], -100]
    assert "inside a token" not in capsys.readouterr().err
    logits = perfect_logits([feature], len(labels))
    assert task.evaluate(logits, [feature], [example], labels, data)["f1"] == 1.0
    [record] = task.predict(logits, [feature], [example], labels, data)
    assert [(e["start"], e["end"], e["type"], e["text"]) for e in record["entities"]] == [
        (s, e, k, MIXED[s:e]) for s, e, k in MIXED_ENTITIES
    ]


def test_entities_that_cannot_be_tagged_exactly_are_reported_and_never_shifted_silently(pipeline, capsys):
    task = NER()
    hidden = NerExample(MIXED, ((13, 19, "MISC"),), 7, "mixed.jsonl")  # 'iPhone' inside the word 'iPhone13'
    invisible = NerExample("李\u200b四在上班", ((0, 3, "PER"),), 8, "mixed.jsonl")  # zero-width space: no token
    labels = ["O", "B-MISC", "I-MISC", "B-PER", "I-PER"]
    features, data = featurize(task, [hidden, invisible], pipeline, labels)
    err = capsys.readouterr().err
    assert "1 entities start or end inside a token" in err and "line 7: 'iPhone' [13, 19) MISC" in err
    metrics = task.evaluate(perfect_logits(features, len(labels)), features, [hidden, invisible], labels, data)
    assert metrics["per_type"]["MISC"]["recall"] == 0.0 and metrics["per_type"]["PER"]["f1"] == 1.0
    assert entity_errors(MIXED, hidden.entities, [(13, 21, "MISC")]) == [
        ("boundary", "iPhone [13, 19) MISC -> predicted iPhone13 [13, 21) MISC")
    ]


def test_types_unknown_to_train_are_errors_unless_allowed_and_then_count_as_missed(pipeline):
    from ernie_ft.errors import UserError

    task, labels = NER(), ["O", "B-PER", "I-PER"]
    dev = [
        NerExample("张三去上班", ((0, 2, "PER"),), 1, "dev.jsonl"),
        NerExample("李四在上班", ((0, 2, "PER"), (3, 5, "GPE")), 2, "dev.jsonl"),
    ]
    with pytest.raises(UserError, match=r"dev.jsonl:2: entity type 'GPE' \(--dev\).*--allow-new-labels"):
        task.check_labels(dev, labels, DataConfig(), "--dev")
    task.check_labels(dev, labels, DataConfig(allow_new_labels=True), "--dev")
    features, data = featurize(task, dev, pipeline, labels, allow_new_labels=True)
    metrics = task.evaluate(perfect_logits(features, len(labels)), features, dev, labels, data)
    assert metrics["per_type"]["GPE"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 0}
    assert metrics["recall"] == pytest.approx(2 / 3) and metrics["precision"] == 1.0


def test_windows_are_stitched_where_each_token_is_farthest_from_a_cut(pipeline):
    from ernie_ft.ner.task import stitch

    features = [{"doc": 0, "_window": w} for w in [(0, 10), (6, 16), (10, 20)]]
    logits = [np.full((12, 1), k, dtype="float32") for k in range(3)]
    [rows] = stitch(logits, features, 1)
    assert rows[:, 0].tolist() == [0] * 8 + [1] * 5 + [2] * 7


@pytest.mark.parametrize("options", [{"constrained": False}, {}, {"crf": True}], ids=["argmax", "softmax", "crf"])
def test_no_entity_is_lost_or_doubled_at_window_boundaries(pipeline, options, monkeypatch):
    import paddle

    import ernie_ft.ner.task as ner

    task = NER(**options)
    examples = [e for e in read_ner(DEV, "--dev") if len(e.text) > 100]
    labels = task.fit_labels(read_ner(TRAIN, "--train"))
    task.bind(SimpleNamespace(crf_transitions=paddle.zeros([len(labels)] * 2)))
    features, data = featurize(task, examples, pipeline, labels, max_len=16, stride=6)
    assert len(features) > 5 * len(examples)
    n_tokens = {f["doc"]: f["_window"][1] for f in features}

    def near_a_cut(f, i):  # a context-starved model: wrong within 2 tokens of a window edge that cuts the text
        start, end = f["_window"]
        return (start > 0 and i - 1 < 2) or (end < n_tokens[f["doc"]] and end - start - i < 2)

    logits = perfect_logits(features, len(labels), near_a_cut)
    spoiled = sum(near_a_cut(f, i) and label > 0 for f in features for i, label in enumerate(f["labels"]))
    assert spoiled > 10  # entities do straddle the cuts
    assert task.evaluate(logits, features, examples, labels, data)["f1"] == 1.0

    def last_window_wins(logits, features, n_docs):
        rows = [np.zeros((n_tokens[d], len(labels)), dtype="float32") for d in range(n_docs)]
        for f, window in zip(features, logits):
            start, end = f["_window"]
            rows[f["doc"]][start:end] = window[1 : 1 + end - start]
        return rows

    monkeypatch.setattr(ner, "stitch", last_window_wins)
    assert task.evaluate(logits, features, examples, labels, data)["f1"] < 0.95


def test_softmax_decode_is_constrained_unless_asked_for_the_repaired_argmax(pipeline):
    labels = ["O", "B-PER", "I-PER"]
    example = NerExample("我张三", (), 1, "in.txt")
    features, data = featurize(NER(), [example], pipeline, labels)
    logits = np.array([[0, 0, 0], [9, 0, 0], [5, -5, 6], [0, 1, 9], [0, 0, 0]], dtype="float32")  # [CLS] 我 张 三 [SEP]
    argmax = NER(constrained=False)
    assert argmax.decode([logits], features, [example], labels)[0][0][0][:3] == (1, 3, "PER")  # I- repaired as B-
    assert argmax.decode([logits], features, [example], labels)[1] == 1
    [[(start, end, kind, score)]], repaired = NER().decode([logits], features, [example], labels)
    assert (start, end, kind, repaired) == (2, 3, "PER", 0)  # O O B-PER beats O B-PER I-PER: B- at 张 is unlikely
    assert score == pytest.approx(np.exp(1) / (1 + np.exp(1) + np.exp(9)))


def valid_bio(path, labels):
    previous = "O"
    for i in path:
        tag = labels[i]
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            return False
        previous = tag
    return True


def test_crf_decode_yields_the_best_valid_sequence():
    from ernie_ft.models.viterbi import viterbi

    labels = ["O", "B-A", "I-A", "B-B", "I-B"]
    rng = np.random.default_rng(0)
    emissions = [rng.normal(0, 3, (n, 5)).astype("float32") for n in [1, 2, 3, 4, 5, 5, 5, 5] * 4]
    transitions = rng.normal(0, 2, (5, 5)).astype("float32")
    paths = viterbi(emissions, transitions, labels)
    assert sum(not valid_bio(e.argmax(axis=1), labels) for e in emissions) > 5  # the constraint matters
    for e, path in zip(emissions, paths):
        assert valid_bio(path, labels)

        def score(p, e=e):
            return e[np.arange(len(p)), p].sum() + sum(transitions[a, b] for a, b in zip(p, p[1:]))

        best = max((p for p in itertools.product(range(5), repeat=len(e)) if valid_bio(p, labels)), key=score)
        assert score(path) == pytest.approx(score(best), abs=1e-4)


def test_crf_loss_is_the_likelihood_over_labelled_tokens_only():
    import paddle

    from ernie_ft.models.crf import crf_loss

    rng = np.random.default_rng(1)
    transitions = rng.normal(size=(3, 3)).astype("float32")
    logits = rng.normal(size=(3, 6, 3)).astype("float32")
    labels = np.array([[-100, 1, -100, 2, 0, -100], [-100, 2, 2, -100, -100, -100], [-100] * 6])

    def nll(e, gold):  # brute force: every tag path, transitions[from, to]
        def score(p):
            return e[np.arange(len(p)), p].sum() + sum(transitions[a, b] for a, b in zip(p, p[1:]))

        return np.log(sum(np.exp(score(p)) for p in itertools.product(range(3), repeat=len(gold)))) - score(gold)

    expected = np.mean([nll(logits[0][[1, 3, 4]], [1, 2, 0]), nll(logits[1][[1, 2]], [2, 2])])  # row 3: no labels
    loss = crf_loss(paddle.to_tensor(transitions), paddle.to_tensor(logits), paddle.to_tensor(labels))
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_entity_metric_against_hand_computed_counts():
    gold = [[(0, 2, "PER"), (3, 5, "LOC")], [(0, 3, "ORG")], []]
    pred = [[(0, 2, "PER"), (3, 5, "ORG")], [(0, 2, "ORG"), (5, 6, "LOC")], [(1, 2, "PER")]]
    m = entity_metrics(gold, pred, ["LOC", "ORG", "PER"])
    # 1 exact hit of 3 gold and 5 predicted entities
    p, r = 1 / 5, 1 / 3
    assert (m["precision"], m["recall"], m["f1"]) == pytest.approx((p, r, 2 * p * r / (p + r)))
    assert m["per_type"]["PER"] == {
        "precision": 0.5,
        "recall": 1.0,
        "f1": pytest.approx(2 / 3),
        "support": 1,
        "predicted": 2,
    }
    assert m["per_type"]["ORG"]["f1"] == 0.0 and m["per_type"]["LOC"]["support"] == 1
    assert entity_errors("张三在北京大学", gold[0], pred[0]) == [
        ("wrong type", "北京 [3, 5) LOC -> predicted 北京 [3, 5) ORG")
    ]
    assert entity_errors("北京大学，李", gold[1], pred[1]) == [
        ("boundary", "北京大 [0, 3) ORG -> predicted 北京 [0, 2) ORG"),
        ("spurious", "李 [5, 6) LOC"),
    ]
    assert entity_errors("张三", [(0, 2, "PER")], []) == [("missed", "张三 [0, 2) PER")]


def test_entity_metric_equals_seqeval_strict_mode():
    seqeval = pytest.importorskip("seqeval.metrics")
    from seqeval.scheme import IOB2

    rng = random.Random(5)
    gold_tags, pred_tags, gold, pred = [], [], [], []
    for _ in range(300):
        n = rng.randint(1, 12)
        spans = [
            sorted({(s, min(n, s + rng.randint(1, 3)), rng.choice("XYZ")) for s in rng.sample(range(n), k)})
            for k in (rng.randint(0, n // 3), rng.randint(0, n // 3))
        ]
        spans = [[s for j, s in enumerate(group) if all(s[0] >= t[1] for t in group[:j])] for group in spans]
        for tags, out, group in ((gold_tags, gold, spans[0]), (pred_tags, pred, spans[1])):
            tags.append(spans_to_tags(n, group, "bio"))
            out.append(tags_to_spans([parse_tag(t, "") for t in tags[-1]])[0])
    m = entity_metrics(gold, pred, [])
    kwargs = dict(mode="strict", scheme=IOB2)
    assert m["precision"] == pytest.approx(seqeval.precision_score(gold_tags, pred_tags, **kwargs))
    assert m["recall"] == pytest.approx(seqeval.recall_score(gold_tags, pred_tags, **kwargs))
    assert m["f1"] == pytest.approx(seqeval.f1_score(gold_tags, pred_tags, **kwargs))


def cli(out, model, *extra):
    return [
        "--train",
        TRAIN,
        "--dev",
        DEV,
        "--model",
        model,
        "--output",
        str(out),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--lr",
        "3e-3",
        "--max-len",
        "48",
        "--stride",
        "12",
        "--threads",
        "1",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained_crf(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("ner") / "crf"
    assert main(cli(out, tiny_checkpoint, "--test", TEST_BIO, "--crf")) == 0
    return out


def test_cli_trains_a_crf_tagger_and_writes_entity_metrics(trained_crf):
    metrics = json.loads((trained_crf / "metrics.json").read_text(encoding="utf-8"))
    for split in ("dev", "test"):
        assert set(metrics[split]["per_type"]) == {"LOC", "ORG", "PER"}
        for m in [metrics[split], *metrics[split]["per_type"].values()]:
            assert 0 <= m["precision"] <= 1 and 0 <= m["recall"] <= 1 and 0 <= m["f1"] <= 1
    assert metrics["test"]["support"] == sum(len(e.entities) for e in read_ner(TEST_BIO, "--test"))
    best = trained_crf / "best"
    assert json.loads((best / "labels.json").read_text()) == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert yaml.safe_load((best / "ernie_ft.yaml").read_text())["run"]["task"]["crf"] is True
    assert saved_weights(best)["crf_transitions"].shape == (7, 7)


def test_predict_writes_character_spans_with_types_and_scores(trained_crf, tmp_path):
    source = tmp_path / "in.txt"
    long_text = "王芳昨天去杭州参加了华为的年会。" * 8  # beyond --max-len 48: stitched windows
    source.write_text(f"{MIXED}\n{long_text}\n张伟在北京大学工作\n", encoding="utf-8")
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "--model", str(trained_crf), "--input", str(source), "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in records] == [MIXED, long_text, "张伟在北京大学工作"]
    for r in records:
        previous_end = 0
        for e in r["entities"]:
            assert previous_end <= e["start"] < e["end"] <= len(r["text"])
            assert e["text"] == r["text"][e["start"] : e["end"]]
            assert e["type"] in ("LOC", "ORG", "PER") and 0 < e["score"] <= 1
            previous_end = e["end"]


def test_evaluate_scores_both_conll_schemes_alike_and_lists_the_errors(trained_crf, tmp_path, capsys):
    from ernie_ft.cli import evaluate

    expected = json.loads((trained_crf / "metrics.json").read_text(encoding="utf-8"))["test"]
    for source in (TEST_BIO, TEST_BIOES):
        out_dir = tmp_path / source[-5:]
        assert evaluate(["--model", str(trained_crf), "--input", source, "--output-dir", str(out_dir)]) == 0
        scored = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
        assert scored["f1"] == pytest.approx(expected["f1"], abs=1e-9) and scored["per_type"] == expected["per_type"]
        blocks = (out_dir / "errors.txt").read_text(encoding="utf-8").split("\n\n")[1:]
        errors = sum(len(block.splitlines()) - 1 for block in blocks)
        misses = expected["support"] - round(expected["recall"] * expected["support"])
        assert errors >= misses  # every missed gold entity appears (as missed, wrong type or boundary)
        lines = {f"{e.source}:{e.line}": e.text for e in read_ner(source, "--input")}
        for block in blocks:  # each block names a real example by file:line, then its text
            where, text = block.splitlines()[0].split("\t")
            assert lines[where] == text
    printed = capsys.readouterr().out
    assert "micro avg" in printed and "PER" in printed and "errors.txt" in printed


def test_softmax_tagger_checkpoint_loads_in_plain_paddlenlp(tiny_checkpoint, tmp_path):
    from paddlenlp.transformers import ErnieForTokenClassification

    out = tmp_path / "softmax"
    assert main(cli(out, tiny_checkpoint, "--epochs", "1")) == 0
    model = ErnieForTokenClassification.from_pretrained(str(out / "best"))
    assert model.num_labels == 7 and "crf_transitions" not in model.state_dict()
    # it loads as the tagger that was trained: PaddleNLP's class gives ernie_ft's logits, and their tags
    import paddle

    from ernie_ft.training.checkpoint import load_model

    loaded = load_model(str(out))
    ids = [loaded.pipeline.cls_id, *loaded.pipeline.encode("吴敏昨天去苏州参加了年会").ids, loaded.pipeline.sep_id]
    model.eval()
    loaded.model.eval()
    theirs, ours = (net(paddle.to_tensor([ids])).numpy()[0] for net in (model, loaded.model))
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-5)
    assert theirs.argmax(-1).tolist() == ours.argmax(-1).tolist() and np.ptp(ours) > 1e-3  # not a constant output


@pytest.mark.parametrize(
    "dev,extra,fragments",
    [
        (
            '{"text": "张三在北京", "entities": [{"start": 0, "end": 2, "type": "PER"}, '
            '{"start": 3, "end": 5, "type": "GPE"}]}',
            [],
            ["dev.jsonl:1", "'GPE'", "--allow-new-labels"],
        ),
        (
            '{"text": "北京大学", "entities": [{"start": 0, "end": 4, "type": "ORG"}, '
            '{"start": 0, "end": 2, "type": "LOC"}]}',
            [],
            ["dev.jsonl:1", "overlaps", "--overlapping keep-longest"],
        ),
        ('{"text": "张三", "entities": []}', ["--format", "xml"], ["--format", "conll", "xml"]),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_status_2(tmp_path, capsys, dev, extra, fragments):
    path = tmp_path / "dev.jsonl"
    path.write_text(dev + "\n", encoding="utf-8")
    args = ["--train", TRAIN, "--dev", str(path), "--model", "scratch:tiny", "--output", str(tmp_path / "out"), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err
    assert not (tmp_path / "out").exists()


def test_cluener_subset_reaches_an_entity_f1_well_above_zero(tmp_path):
    train, dev = shared("cluener2020", "train.json"), shared("cluener2020", "dev.json")
    small_train, small_dev = tmp_path / "train.json", tmp_path / "dev.json"
    small_train.write_text("".join(open(train, encoding="utf-8").readlines()[:1500]), encoding="utf-8")
    small_dev.write_text("".join(open(dev, encoding="utf-8").readlines()[:300]), encoding="utf-8")
    out = tmp_path / "cluener"
    assert (
        main(
            [
                "--train",
                str(small_train),
                "--dev",
                str(small_dev),
                "--model",
                "scratch:tiny",
                "--output",
                str(out),
                "--epochs",
                "3",
                "--batch-size",
                "16",
                "--lr",
                "2e-3",
                "--max-len",
                "64",
                "--threads",
                "1",
                "--crf",
                "--overlapping",
                "keep-longest",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())["dev"]
    assert metrics["f1"] > 0.1 and len(metrics["per_type"]) == 10


def test_crf_transitions_train_under_data_parallelism_like_one_process(tmp_path):
    import subprocess
    import sys

    import paddle
    from helpers.rounding import ADAM_EPSILON, adam_drift, assert_same_gradients, step_gradients

    small = tmp_path / "train.jsonl"
    small.write_text("".join(open(TRAIN, encoding="utf-8").readlines()[:64]), encoding="utf-8")
    # One step: the replicas' averaged gradients, CRF transitions included, are one process's up to rounding.
    assert_same_gradients(*step_gradients(tmp_path / "step", "ner-crf", small, 16, 256, 3))
    # Four steps through the CLI: the weights drift apart by no more than that rounding can explain.
    common = [
        "--train",
        str(small),
        "--model",
        "scratch:tiny",
        "--epochs",
        "1",
        "--max-len",
        "256",
        "--crf",
        "--dropout",
        "0",
        "--threads",
        "1",
        "--seed",
        "3",
        "--lr",
        "2e-3",
        "--lr-scaling",
        "none",
        "--adam-epsilon",
        str(ADAM_EPSILON),
    ]
    assert main([*common, "--output", str(tmp_path / "one"), "--batch-size", "16"]) == 0  # in this process
    launched = [*common, "--output", str(tmp_path / "two"), "--batch-size", "8", "--nproc", "2"]
    proc = subprocess.run(
        [sys.executable, "-m", "ernie_ft.ner", *launched], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = (paddle.load(str(tmp_path / name / "last" / "model.pdparams")) for name in ("one", "two"))
    assert np.abs(one["crf_transitions"].numpy()).max() > 1e-3  # the transitions did learn
    for name in one:
        np.testing.assert_allclose(two[name].numpy(), one[name].numpy(), rtol=0, atol=adam_drift(4, 2e-3), err_msg=name)


def test_dictionary_baseline_tags_the_longest_training_entity_and_skips_mostly_plain_words(capsys):
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("baseline_ner", ROOT / "benchmarks" / "baselines" / "baseline_ner.py")
    baseline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(baseline)
    train = [
        NerExample("北京大学在北京", ((0, 4, "ORG"), (5, 7, "LOC")), 1, "t"),
        NerExample("北京大学很大", ((0, 4, "ORG"),), 2, "t"),
        NerExample("大学生和大学生去大学", ((8, 10, "ORG"),), 3, "t"),
    ]  # 大学: 1 of 3 labelled
    dictionary = baseline.build_dictionary(train, 0.5)
    assert dictionary == {"北京大学": "ORG", "北京": "LOC"}
    assert baseline.tag("我在北京大学和北京", dictionary, 4) == [(2, 6, "ORG"), (7, 9, "LOC")]
    assert baseline.main(["--train", TRAIN, "--dev", DEV]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["dictionary"] > 0 and 0 < scores["f1"] <= 1 and scores["support"] > 0
