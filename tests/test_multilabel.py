"""classify --multi-label, --hierarchy-separator and --class-weights: label sources, bad input, decoding,
metrics, training, predict, resume and weighted losses."""

import json

import numpy as np
import pytest
from conftest import DATA

from ernie_ft.classify import Classification, decoding
from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.data.readers import Example
from ernie_ft.evaluation.multilabel import multilabel_metrics
from ernie_ft.models.hf import MULTI_LABEL
from ernie_ft.training.checkpoint import load_model

classify = task_command("classify")
TAGS = ["--label-column", "tags"]
FAST = ["--model", "scratch:tiny", "--threads", "1", "--max-len", "32"]


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def read(task, path, **data):
    return [(e.text, e.label) for e in task.read(path, DataConfig(**data), "--train")]


def test_each_label_source_parses(tmp_path, capsys):
    jsonl = write(
        tmp_path / "a.jsonl",
        '{"text": "甲", "label": ["体育", "娱乐"]}\n{"text": "乙", "label": []}\n{"text": "丙", "label": "财经"}\n',
    )
    assert read(Classification(multi_label=True), jsonl) == [("甲", ("体育", "娱乐")), ("乙", ()), ("丙", ("财经",))]
    assert "3 texts, 1 with several labels, 1 with none" in capsys.readouterr().err
    tsv = write(tmp_path / "a.tsv", "labels\ttext\n体育|娱乐\t甲\n\t乙\n财经\t丙\n")
    sep = Classification(multi_label=True, label_separator="|")
    assert read(sep, tsv, label_column="labels") == [("甲", ("体育", "娱乐")), ("乙", ()), ("丙", ("财经",))]
    coded = write(tmp_path / "coded.tsv", "labels\ttext\n0|1\t甲\n")  # --label-names names each label
    assert read(sep, coded, label_column="labels", label_names="0=体育,1=娱乐") == [("甲", ("体育", "娱乐"))]
    columns = write(tmp_path / "c.csv", "text,category_体育,category_娱乐,other\n甲,1,1,x\n乙,0,0,y\n丙,0,1,z\n")
    expected = [("甲", ("category_体育", "category_娱乐")), ("乙", ()), ("丙", ("category_娱乐",))]
    assert read(Classification(multi_label=True, label_columns="category_*"), columns) == expected
    named = Classification(multi_label=True, label_columns="category_娱乐, category_体育")
    assert read(named, columns) == [("甲", ("category_娱乐", "category_体育")), ("乙", ()), ("丙", ("category_娱乐",))]
    # paths: every prefix is a node, parents first
    tree = Classification(multi_label=True, label_separator="|", hierarchy_separator="-")
    paths = write(tmp_path / "p.tsv", "labels\ttext\n组织关系-裁员|人生-死亡\t甲\n")
    assert read(tree, paths, label_column="labels") == [("甲", ("组织关系", "组织关系-裁员", "人生", "人生-死亡"))]
    # a JSON list of one label is that label without --multi-label
    one = write(tmp_path / "one.jsonl", '{"text": "甲", "label": ["体育"]}\n{"text": "乙", "label": "财经"}\n')
    assert read(Classification(), one) == [("甲", "体育"), ("乙", "财经")]


def test_a_label_column_without_a_one_stays_a_label_with_a_warning(tmp_path, capsys):
    """A column --label-columns matches that holds no 1 is still a label of the model (it disappeared, and a dev
    file's 1 in it then was a label the model never had), named by the warning as never positive."""
    columns = write(tmp_path / "c.csv", "text,category_a,category_b,category_z\n甲,1,0,0\n乙,0,1,0\n丙,1,1,0\n")
    task = Classification(multi_label=True, label_columns="category_*")
    examples = task.read(columns, DataConfig(label_names="category_z=zed"), "--train")
    capsys.readouterr()
    assert task.fit_labels(examples) == ["category_a", "category_b", "zed"]
    warning = capsys.readouterr().err
    assert "zed 0" in warning and "1 never positive" in warning, warning
    task.check_labels(examples, ["category_a", "category_b", "zed"], DataConfig(label_names="category_z=zed"), "--dev")


@pytest.mark.parametrize(
    "name, content, flags, fragments",
    [
        ("obj.jsonl", '{"text": "甲", "tags": {"a": 1}}\n', ["--multi-label", *TAGS], ["obj.jsonl:1", "JSON object"]),
        ("nest.jsonl", '{"text": "甲", "tags": [["a"]]}\n', ["--multi-label", *TAGS], ["nest.jsonl:1", "list of"]),
        ("n.jsonl", '{"text": "甲", "label": [["a"]]}\n', ["--multi-label"], ["n.jsonl:1"]),  # a doccano layout
        ("list.jsonl", '{"text": "甲", "label": ["a", "b"]}\n', [], ["list.jsonl:1", "--multi-label"]),
        ("c.csv", "text,cat_a,cat_b\n甲,1,0\n乙,0,2\n", ["--multi-label", "--label-columns", "cat_*"], ["c.csv:3"]),
        ("c.csv", "text,cat_a\n甲,1\n", ["--multi-label", "--label-columns", "tag_*"], ["'tag_*' matches no column"]),
        ("c.csv", "text,cat_a\n甲,1\n", ["--multi-label", "--label-columns", "cat_a,cat_z"], ["'cat_z' not found"]),
        ("a.tsv", "label\ttext\na\t甲\n", ["--label-separator", "|"], ["--label-separator", "--multi-label"]),
        ("h.jsonl", '{"text": "甲", "tags": ["a-x", "b-y"]}\n', ["--hierarchy-separator=-", *TAGS], ["--multi-label"]),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, capsys, name, content, flags, fragments):
    path = write(tmp_path / name, content)
    assert classify(["--train", path, *flags, *FAST, "--output", str(tmp_path / "run")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error") or "Traceback" in line]
    assert len(err) == 1 and err[0].startswith("error:"), err  # (a loading line may come before it)
    assert all(f in err[0] for f in fragments), err[0]


def test_a_weights_file_with_an_unknown_label_names_its_line(tmp_path, capsys):
    weights = write(tmp_path / "w.tsv", "正面\t2\n中性\t1\n")
    args = ["--train", str(DATA / "sentiment_train.tsv"), "--class-weights", weights, *FAST]
    assert classify([*args, "--output", str(tmp_path / "run")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error") or "Traceback" in line]
    assert len(err) == 1 and "w.tsv:2" in err[0] and "'中性'" in err[0], err


def test_thresholds_and_top_k_decode():
    probs = np.array([[0.9, 0.6, 0.4], [0.2, 0.1, 0.3]])
    flat = decoding.parents(["a", "b", "c"], None)
    assert decoding.decode(probs, np.full(3, 0.5), flat).tolist() == [[True, True, False], [False, False, False]]
    assert decoding.decode(probs, np.array([0.95, 0.5, 0.35]), flat).tolist() == [[False, True, True], [False] * 3]
    top_one = decoding.decode(probs, np.full(3, 0.05), flat, top_k=1)
    assert top_one.tolist() == [[True, False, False], [False, False, True]]
    task = Classification(multi_label=True, thresholds='{"c": 0.35}', top_k=2)
    assert task.decide(probs, ["a", "b", "c"]).tolist() == [[True, True, False], [False, False, False]]


def test_hierarchy_never_emits_a_child_without_its_parent():
    labels = ["A", "A-x", "A-x-1", "A-y", "B", "B-z"]
    up = decoding.parents(labels, "-")
    # adversarial: children certain, parents not
    probs = np.array([[0.1, 0.99, 0.99, 0.98, 0.2, 0.97], [0.9, 0.2, 0.99, 0.6, 0.1, 0.9]])
    chosen = decoding.decode(probs, np.full(6, 0.5), up)
    assert chosen.tolist() == [[False] * 6, [True, False, False, True, False, False]]
    rng = np.random.default_rng(0)
    random_probs = rng.random((300, len(labels))) ** rng.choice([0.2, 5.0], size=(300, len(labels)))
    for top_k in (0, 1, 2):
        chosen = decoding.decode(random_probs, rng.random(len(labels)), up, top_k)
        child = up >= 0
        assert not (chosen[:, child] & ~chosen[:, up[child]]).any()
        if top_k:
            ends = chosen & ~np.array([[row[up == i].any() for i in range(len(labels))] for row in chosen])
            assert (ends.sum(axis=1) <= top_k).all()
    paths = decoding.decode_paths(probs, up)  # single-label: one path down to a leaf
    assert [[labels[i] for i in np.flatnonzero(row)] for row in paths] == [["B", "B-z"], ["A", "A-y"]]


def test_a_single_label_path_predicts_its_leaf_and_ancestors():
    task = Classification(hierarchy_separator="-")
    labels = ["A", "A-x", "A-y", "B", "B-z"]
    examples = [Example("甲", None, ("A", "A-y"), 1, "t"), Example("乙", None, ("B", "B-z"), 2, "t")]
    logits = np.array([[2.0, -1.0, 1.0, -2.0, 3.0], [-1.0, 4.0, 4.0, 0.5, 0.1]])  # B-z alone is not a path
    features = [{"doc": 0}, {"doc": 1}]
    records = task.predict(logits, features, examples, labels, DataConfig())
    assert [(r["label"], r["labels"]) for r in records] == [("A-y", ["A", "A-y"]), ("B-z", ["B", "B-z"])]
    metrics = task.evaluate(logits, features, examples, labels, DataConfig())
    assert metrics["accuracy"] == 1.0 and metrics["level2_micro_f1"] == 1.0


def test_per_level_metrics_against_a_hand_computed_case():
    names = ["A", "A-x", "A-y", "B", "B-z"]
    gold = np.array([[1, 1, 0, 0, 0], [0, 0, 0, 1, 1], [1, 0, 1, 1, 1]], dtype=bool)
    pred = np.array([[1, 0, 1, 0, 0], [0, 0, 0, 1, 1], [1, 0, 1, 0, 0]], dtype=bool)
    m = multilabel_metrics(gold, pred, names, [1, 2, 2, 1, 2])
    # level 1 (A, B): gold 4, pred 3, tp 3 -> P 1, R 3/4, F1 6/7; level 2: gold 4, pred 3, tp 2 -> F1 4/7
    assert m["level1_micro_f1"] == pytest.approx(6 / 7) and m["level2_micro_f1"] == pytest.approx(4 / 7)
    assert m["micro_f1"] == pytest.approx(2 * 5 / (8 + 6))  # tp 5, gold 8, pred 6
    assert m["subset_accuracy"] == pytest.approx(1 / 3) and m["hamming_loss"] == pytest.approx(4 / 15)
    assert m["per_class"]["A-y"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1}


def test_class_weights_change_the_loss_as_numpy_computes_it():
    import paddle

    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 3)).astype(np.float32)
    multi = Classification(multi_label=True, class_weights="balanced")
    examples = [type("E", (), {"label": labels})() for labels in (("a",), ("a", "b"), ("c",), ())]
    assert multi.fit_labels(examples) == ["a", "b", "c"]
    y = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=np.float32)
    pos_weight = np.array([2 / 2, 3 / 1, 3 / 1])  # negatives / positives
    p = 1 / (1 + np.exp(-logits))
    expected = np.mean(-(pos_weight * y * np.log(p) + (1 - y) * np.log(1 - p)))
    loss = multi.loss(paddle.to_tensor(logits), {"labels": paddle.to_tensor(y)})
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(Classification(multi_label=True).loss(paddle.to_tensor(logits), {"labels": paddle.to_tensor(y)})) != (
        pytest.approx(expected, rel=1e-3)
    )

    single = Classification(class_weights="balanced")
    examples = [type("E", (), {"label": label, "source": "t"})() for label in ("a", "a", "a", "b")]
    assert single.fit_labels(examples) == ["a", "b"]
    targets = np.array([0, 0, 1, 1])
    weights = np.array([4 / (2 * 3), 4 / (2 * 1)])
    two = logits[:, :2]
    log_softmax = two - np.log(np.exp(two).sum(axis=1, keepdims=True))
    picked = -log_softmax[np.arange(4), targets]
    expected = (weights[targets] * picked).sum() / weights[targets].sum()
    loss = single.loss(paddle.to_tensor(two), {"labels": paddle.to_tensor(targets)})
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def train_args(out, *extra):
    train, dev = str(DATA / "news_tags_train.tsv"), str(DATA / "news_tags_train.tsv")  # dev = train: memorising
    return [
        "--train", train, "--dev", dev, "--label-column", "labels", "--multi-label", "--label-separator", "|",
        "--hierarchy-separator", "-", *FAST, "--epochs", "40", "--batch-size", "16", "--lr", "3e-3",
        "--warmup", "0.05", "--dropout", "0", "--tune-thresholds", "--output", str(out), *extra,
    ]  # fmt: skip


def saved_thresholds(out) -> dict:
    """The per-label thresholds the best checkpoint of the run ``out`` decides with."""
    import yaml

    saved = yaml.safe_load((out / "best" / "ernie_ft.yaml").read_text(encoding="utf-8"))["run"]["task"]
    assert saved["multi_label"] is True
    return json.loads(saved["thresholds"])


def test_a_tiny_model_memorises_label_paths_resumes_and_predicts(tmp_path, capsys):
    out = tmp_path / "run"
    assert classify(train_args(out, "--stop-after-steps", "40")) == 0  # stopped with a resumable checkpoint
    assert "thresholds tuned on --dev " in capsys.readouterr().err
    assert set(saved_thresholds(out)) == set(json.loads((out / "best" / "labels.json").read_text(encoding="utf-8")))
    capsys.readouterr()
    assert classify(train_args(out, "--resume")) == 0
    assert "resumed at step 40 " in capsys.readouterr().err  # continued from last/, not trained again from the start
    dev = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["dev"]
    assert dev["micro_f1"] >= 0.95 and dev["level2_micro_f1"] >= 0.9, dev
    assert saved_thresholds(out) == dev["thresholds"]  # the best evaluation's, tuned on dev, decide from now on
    assert all(0 < t < 1 for t in dev["thresholds"].values())

    rows = [line.split("\t") for line in (DATA / "news_tags_train.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    two = next(i for i, (labels, _) in enumerate(rows) if "|" in labels)
    texts = write(tmp_path / "new.txt", f"{rows[0][1]}\n{rows[two][1]}\n")  # memorised: their paths come back
    predictions = tmp_path / "pred.jsonl"
    assert cli(["predict", "--model", str(out), "--input", texts, "--output", str(predictions)]) == 0
    records = [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()]
    labels = json.loads((out / "best" / "labels.json").read_text(encoding="utf-8"))
    assert [sorted(r) for r in records] == [["labels", "probs", "text"]] * 2
    assert all(set(r["probs"]) == set(labels) and isinstance(r["labels"], list) for r in records)
    gold = [{n for path in labels.split("|") for n in (path.split("-")[0], path)} for labels, _ in (rows[0], rows[two])]
    assert set(records[0]["labels"]) == gold[0], records[0]
    assert {n for n in records[1]["labels"] if "-" not in n} == {n for n in gold[1] if "-" not in n}, records[1]
    assert all(label.split("-")[0] in r["labels"] for r in records for label in r["labels"])  # parents always

    report = tmp_path / "report"
    dev_file = str(DATA / "news_tags_dev.tsv")
    assert cli(["evaluate", "--model", str(out), "--input", dev_file, "--output-dir", str(report)]) == 0
    assert "level2_micro_f1" in capsys.readouterr().out and (report / "label_scores.png").stat().st_size > 0

    exported, again = tmp_path / "exported", tmp_path / "again.jsonl"  # Paddle Inference decodes the same sets
    assert cli(["export", "--model", str(out), "--output", str(exported)]) == 0
    assert cli(["predict", "--model", str(exported), "--input", texts, "--output", str(again)]) == 0
    static = [json.loads(line) for line in again.read_text(encoding="utf-8").splitlines()]
    assert [r["labels"] for r in static] == [r["labels"] for r in records]
    assert all(abs(r["probs"][k] - s["probs"][k]) < 1e-4 for r, s in zip(records, static) for k in labels)

    hf_dir = tmp_path / "hf"  # transformers' problem_type out and back in
    assert cli(["export", "--model", str(out), "--output", str(hf_dir), "--format", "hf"]) == 0
    assert json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))["problem_type"] == MULTI_LABEL
    assert load_model(str(hf_dir), weights=False).task.multi_label

    # distill takes such a teacher: tests/test_distill.py (its student reproduces a multi-label teacher's sets)
