"""Relation extraction (``python -m ernie_ft relation``): readers and their placement rule, bad input, GPLinker's
decode (from the dense scores and from the packed inference output), the triple metric, relations across windows, and
the command line (memorise, resume, predict; exports of both output layouts)."""

import json

import numpy as np
import pytest
import yaml
from conftest import assert_same_weights, exported_predictions, shared

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.errors import UserError
from ernie_ft.relation import decoding
from ernie_ft.relation.formats import RelationExample, read_relations
from ernie_ft.relation.task import Relation

relation = task_command("relation")

SENTENCES = [  # text, [(subject, predicate, object, subject type, object type)]
    ("周杰伦演唱了《七里香》，方文山作词。", [("七里香", "歌手", "周杰伦", "歌曲", "人物"),
                                            ("七里香", "作词", "方文山", "歌曲", "人物")]),
    ("《红楼梦》的作者是曹雪芹。", [("红楼梦", "作者", "曹雪芹", "图书作品", "人物")]),
    ("姚明出生于上海。", [("姚明", "出生地", "上海", "人物", "地点")]),
    ("马云创办了阿里巴巴。", [("阿里巴巴", "创始人", "马云", "企业", "人物")]),
    ("鲁迅的妻子是许广平。", [("鲁迅", "妻子", "许广平", "人物", "人物")]),
    ("刘德华主演了《无间道》。", [("无间道", "主演", "刘德华", "影视作品", "人物")]),
]  # fmt: skip


def duie(sentences=SENTENCES) -> str:
    lines = []
    for text, triples in sentences:
        spo = [
            {"subject": s, "predicate": p, "object": {"@value": o}, "subject_type": st, "object_type": {"@value": ot}}
            for s, p, o, st, ot in triples
        ]
        lines.append(json.dumps({"text": text, "spo_list": spo}, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_duie_placement_rule_and_counts(tmp_path, capsys):
    record = {
        "text": "张三和李四，张三的老师是李四",
        "spo_list": [
            {
                "subject": "张三",
                "predicate": "老师",
                "object": {"@value": "李四", "inWork": "x"},
                "subject_type": "人物",
            },
            {"subject": "王五", "predicate": "老师", "object": "李四"},
        ],
    }
    path = write(tmp_path / "a.jsonl", json.dumps(record, ensure_ascii=False) + "\n")
    [example] = read_relations(path, "--train")
    # the subject's first occurrence (0), the object's occurrence nearest it (3, not 12)
    assert example.triples == (((0, 2, "人物"), "老师 (人物→)", (3, 5, "")),)
    assert example.gold == (("张三", "老师", "李四"), ("王五", "老师", "李四"))  # the unplaced one is still scored
    line = capsys.readouterr().err
    assert "2 triples, 1 placed as spans; 1 of them ambiguously" in line and "1 not placed" in line
    assert "1 object slots other than @value" in line


def test_doccano_label_studio_and_own_jsonl_give_the_same_triples(tmp_path):
    text = "马云创办了阿里巴巴。"
    doccano = {
        "text": text,
        "entities": [{"id": 1, "label": "人物", "start_offset": 0, "end_offset": 2},
                     {"id": 2, "label": "企业", "start_offset": 5, "end_offset": 9}],
        "relations": [{"id": 7, "from_id": 2, "to_id": 1, "type": "创始人"}],
    }  # fmt: skip
    regions = [
        {"id": "a", "type": "labels", "value": {"start": 0, "end": 2, "text": "马云", "labels": ["人物"]}},
        {"id": "b", "type": "labels", "value": {"start": 5, "end": 9, "text": "阿里巴巴", "labels": ["企业"]}},
        {"type": "relation", "from_id": "b", "to_id": "a", "labels": ["创始人"]},
    ]
    studio = [{"id": 3, "data": {"text": text}, "annotations": [{"result": regions}]}]
    own = {
        "text": text,
        "relations": [{"subject": {"text": "阿里巴巴", "start": 5, "end": 9, "type": "企业"}, "predicate": "创始人",
                       "object": {"text": "马云", "start": 0, "end": 2, "type": "人物"}}],
    }  # fmt: skip
    expected = (((5, 9, "企业"), "创始人 (企业→人物)", (0, 2, "人物")),)
    for name, content in (
        ("d.jsonl", json.dumps(doccano)),
        ("s.json", json.dumps(studio)),
        ("o.jsonl", json.dumps(own)),
    ):
        [example] = read_relations(write(tmp_path / name, content + "\n"), "--train")
        assert example.triples == expected and example.gold == (("阿里巴巴", "创始人", "马云"),), name


def test_real_doccano_relation_export_reads_every_relation(capsys):
    examples = read_relations(str(shared("annotation-exports", "doccano_relation_zh.jsonl")), "--train")
    assert len(examples) == 22 and sum(len(e.gold) for e in examples) == 450
    assert "22 texts, 450 triples" in capsys.readouterr().err


def bad(kind):
    text = "马云创办了阿里巴巴。"
    entities = [{"id": 1, "label": "人物", "start_offset": 0, "end_offset": 2},
                {"id": 2, "label": "企业", "start_offset": 5, "end_offset": 9}]  # fmt: skip
    if kind == "outside":
        entities[1]["end_offset"] = 40
        return (
            "d.jsonl",
            json.dumps({"text": text, "entities": entities, "relations": []}),
            ":1: entity '企业' at [5, 40)",
        )
    if kind == "missing end":
        relations = [{"id": 7, "from_id": 2, "to_id": 9, "type": "创始人"}]
        return "d.jsonl", json.dumps({"text": text, "entities": entities, "relations": relations}), ":1: relation"
    if kind == "label studio missing end":
        result = [{"id": "a", "type": "labels", "value": {"start": 0, "end": 2, "labels": ["人物"]}},
                  {"id": "r", "type": "relation", "from_id": "a", "to_id": "zz", "labels": ["创始人"]}]  # fmt: skip
        tasks = [{"id": 5, "data": {"text": text}, "annotations": [{"result": result}]}]
        return "s.json", json.dumps(tasks), ": task 5: relation r names a region"
    subject = {"text": "马化腾", "start": 0, "end": 2, "type": "人物"}  # the text there is 马云
    record = {"text": text, "relations": [{"subject": subject, "predicate": "创始人", "object": subject}]}
    return (
        "o.jsonl",
        json.dumps(record, ensure_ascii=False),
        ":1: entity '马化腾' at [0, 2) but the text there is '马云'",
    )


@pytest.mark.parametrize("kind", ["outside", "missing end", "label studio missing end", "text mismatch"])
def test_bad_input_is_one_error_naming_file_and_line(tmp_path, kind):
    name, content, fragment = bad(kind)
    path = write(tmp_path / name, content + "\n")
    with pytest.raises(UserError) as caught:
        read_relations(path, "--train")
    assert f"--train: {path}" in str(caught.value) and fragment in str(caught.value), str(caught.value)


def test_a_predicate_outside_the_schema_is_an_error_line(tmp_path, capsys):
    schema = [{"predicate": p, "subject_type": st, "object_type": {"@value": ot}} for _, ts in SENTENCES[1:]
              for _, p, _, st, ot in ts]  # fmt: skip
    schema_path = write(tmp_path / "schema.json", json.dumps(schema, ensure_ascii=False))
    train = write(tmp_path / "train.jsonl", duie())
    status = relation(["--train", train, "--schema", schema_path, "--model", "scratch:2x64", "--output", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    expected = f"error: --train: {train}:1: triple (七里香, 作词, 方文山): predicate '作词' is not in --schema"
    assert status == 2 and err[-1].startswith(expected), err


def test_an_entity_type_train_never_had_in_dev_is_an_error_line(tmp_path, capsys):
    """As NER refuses a --dev entity type that training never saw (it was accepted silently); --allow-new-labels
    scores it; a triple without types is no error."""
    train = write(tmp_path / "train.jsonl", duie())
    odd = [("姚明出生于上海。", [("姚明", "出生地", "上海", "人物", "城市")])]
    dev = write(tmp_path / "dev.jsonl", duie(SENTENCES[:2] + odd))
    status = relation(["--train", train, "--dev", dev, "--model", "scratch:2x64", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err[-1].startswith(f"error: {dev}:3: entity type '城市' (--dev) does not occur")
    assert "--allow-new-labels" in err[-1]
    task, labels = Relation(), Relation().fit_labels(read_relations(train, "--train"))
    task.check_labels(read_relations(dev, "--dev"), labels, DataConfig(allow_new_labels=True), "--dev")
    untyped = write(tmp_path / "untyped.jsonl", duie([("姚明出生于上海。", [("姚明", "出生地", "上海", "", "")])]))
    task.check_labels(read_relations(untyped, "--dev"), labels, DataConfig(), "--dev")


def cells(*items):
    return np.array([(h, i, j, logit) for h, i, j, logit in items], dtype="float32").reshape(-1, 4)


LABELS = ["作者 (图书作品→人物)", "出生地 (人物→地点)"]


def one_window(text):
    offsets = [(i, i + 1) for i in range(len(text))]
    return [{"doc": 0, "_window": (0, len(text)), "_offsets": offsets}]


def test_decode_needs_both_pointers_and_keeps_to_the_schema():
    text = "红楼梦作者曹雪芹"  # subject 红楼梦 = positions 1..3 ([CLS] is 0), object 曹雪芹 = 6..8
    n = len(LABELS)
    entities = [(0, 1, 3, 4.0), (1, 6, 8, 3.0)]
    both = cells(*entities, (2 + 0, 1, 6, 2.0), (2 + n + 0, 3, 8, 1.0))
    head_only = cells(*entities, (2 + 0, 1, 6, 2.0), (2 + n + 1, 3, 8, 1.0))  # the tail-tail of another class
    features = one_window(text)
    [(found, triples)] = decoding.decode([both], features, 1, LABELS)
    assert found == {
        (0, 3, "subject"): pytest.approx(1 / (1 + np.exp(-4))),
        (5, 8, "object"): pytest.approx(1 / (1 + np.exp(-3))),
    }
    assert triples == {((0, 3), 0, (5, 8)): pytest.approx(1 / (1 + np.exp(-1.0)))}  # the smallest of the 4 logits
    assert decoding.decode([head_only], features, 1, LABELS)[0][1] == {}
    assert decoding.decode([both], features, 1, LABELS, {"作者": {("图书作品", "人物")}})[0][1] != {}
    assert decoding.decode([both], features, 1, LABELS, {"作者": {("歌曲", "人物")}})[0][1] == {}
    assert decoding.decode([both], features, 1, LABELS, {"出生地": {("人物", "地点")}})[0][1] == {}


def test_an_entity_cut_by_a_window_edge_adds_no_triple_beside_the_whole_one():
    """Two windows over 16 one-character tokens, [0, 12) and [4, 16): the subject (tokens 9-13) is whole in the
    second and cut at the first one's right edge, where its pointers still find the object. Only the whole triple
    is decoded (data.windows.on_cut_edge, as nested NER); an entity on an edge that cuts nothing stays."""
    n = len(LABELS)
    offsets = [(i, i + 1) for i in range(16)]
    features = [{"doc": 0, "_window": w, "_offsets": offsets} for w in ((0, 12), (4, 16))]
    first = cells((0, 10, 12, 5.0), (1, 6, 7, 5.0), (2, 10, 6, 5.0), (2 + n, 12, 7, 5.0))  # subject cut at position 12
    second = cells((0, 6, 10, 5.0), (1, 2, 3, 5.0), (2, 6, 2, 5.0), (2 + n, 10, 3, 5.0))
    [(entities, triples)] = decoding.decode([first, second], features, 1, LABELS)
    assert set(triples) == {((9, 14), 0, (5, 7))}
    assert set(entities) == {(9, 14, "subject"), (5, 7, "object")}
    whole = [{"doc": 0, "_window": (0, 12), "_offsets": offsets[:12]}]  # the text's own end: nothing is cut
    assert set(decoding.decode([first], whole, 1, LABELS)[0][1]) == {((9, 12), 0, (5, 7))}


def test_packed_rows_add_each_bias_on_its_side():
    """The packed layout by hand (L = 3, C = 1): a subject at token 1, an object at token 2; the head-head score of
    (1, 2) is shared(1, 2) + end bias of token 2 + start bias of token 1 (1.75). The biases on the other sides
    (end of token 1, start of token 2) are -5: taken there the cell would score -4.5 and no triple be found."""
    length = 3
    x = np.full((1, length, 4 * length + 4), -9.0, dtype="float32")
    x[0, 1, 1], x[0, 2, length + 2] = 2.0, 3.0  # entity (subject, 1, 1) and (object, 2, 2): row i, column j
    for kind in (0, 1):  # head-head, then tail-tail: shared scores, then (end, start) per token
        x[0, 1, (2 + kind) * length + 2] = 0.5
        bias = 4 * length + 2 * kind
        x[0, :, bias : bias + 2] = [[0, 0], [-5.0, 0.25], [1.0, -5.0]]
    [rows] = decoding.packed_rows(x)
    assert rows.tolist() == [[0, 1, 1, 2.0], [1, 2, 2, 3.0], [2, 1, 2, 1.75], [3, 1, 2, 1.75]]
    [(_, triples)] = decoding.decode([rows], one_window("红楼梦"), 1, LABELS[:1])
    assert triples == {((0, 1), 0, (1, 2)): pytest.approx(1 / (1 + np.exp(-1.75)))}


def test_packed_output_decodes_as_the_dense_scores(tmp_path):
    """A tiny random model's packed output decodes to the triples and scores of its dense scores (the previous
    output) at several thresholds, a tuning floor below them, over two windows of a text and a padded one."""
    import paddle

    from ernie_ft.config import ModelConfig
    from ernie_ft.models import modeling
    from ernie_ft.text.pipeline import TextPipeline
    from ernie_ft.text.scratch import build_vocab, write_vocab

    vocab = str(tmp_path / "vocab.txt")
    write_vocab(build_vocab(["红楼梦作者曹雪芹周杰伦演唱了七里香"]), vocab)
    labels = [f"p{c}" for c in range(4)]
    pipeline = TextPipeline(vocab)
    paddle.seed(3)
    model = modeling.build_model(ModelConfig(model="scratch:1x32"), "pointer", 4, pipeline, Relation.model_class)
    model.eval()
    ids = np.random.default_rng(1).integers(5, 20, size=(3, 12))
    ids[2, 10:] = pipeline.pad_id  # the third window is 8 tokens, [CLS] and [SEP]
    chars = [[(i, i + 1) for i in range(15)], [(i, i + 1) for i in range(8)]]
    features = [
        {"doc": 0, "_window": (0, 10), "_offsets": chars[0]},
        {"doc": 0, "_window": (5, 15), "_offsets": chars[0]},
        {"doc": 1, "_window": (0, 8), "_offsets": chars[1]},
    ]
    with paddle.no_grad():
        ids = paddle.to_tensor(ids)
        hidden, mask = model.ernie(ids)[0], ids != pipeline.pad_id
        dense, packed = model.dense(hidden, mask).numpy(), model(ids).numpy()
    assert packed.shape == (3, 12, 4 * 12 + 4 * 4)
    counts = []
    for floor, threshold in ((0.0, 0.0), (-0.01, 0.0), (0.01, 0.01), (0.015, 0.015)):  # the scores are near 0
        expected = decoding.decode(decoding.sparse_rows(dense, floor), features, 2, labels, threshold=threshold)
        found = decoding.decode(decoding.packed_rows(packed, floor), features, 2, labels, threshold=threshold)
        for (entities, triples), (want_entities, want_triples) in zip(found, expected):
            assert entities == pytest.approx(want_entities, rel=1e-6, abs=1e-7)
            assert triples == pytest.approx(want_triples, rel=1e-6, abs=1e-7)
        counts.append(sum(len(t) for _, t in found))
        assert any(s[0] >= 10 or o[0] >= 10 for s, _, o in found[0][1]) == (counts[-1] > 0)
    assert all(counts) and counts[-1] < counts[0], counts  # several triples, fewer at a higher threshold


def test_the_pointers_loss_is_taken_on_pairs_of_gold_entities(tmp_path):
    """The pointers are trained on the cells decoding reads (pairs of gold entities): the training output holds the
    scores the full output gives those cells, and the loss is the multi-label cross-entropy (summed over heads) of
    the entity scores and of the pointers' scores on those cells alone."""
    import paddle

    from ernie_ft.config import ModelConfig
    from ernie_ft.models import modeling
    from ernie_ft.relation.task import candidate_pairs, training_targets
    from ernie_ft.text.pipeline import TextPipeline
    from ernie_ft.text.scratch import build_vocab, write_vocab

    n, length = len(LABELS), 10
    # 红楼梦 (tokens 1..3) 作者 曹雪芹 (6..8); in row 1 a second subject shares 曹雪芹's first token
    windows = [
        [(0, 1, 3), (1, 6, 8), (2 + 0, 1, 6), (2 + n + 0, 3, 8)],
        [(0, 1, 3), (0, 1, 2), (1, 6, 8), (2 + 1, 1, 6), (2 + n + 1, 2, 8)],
    ]
    assert {tuple(x) for x in np.argwhere(candidate_pairs(windows[0], length))} == {
        *((0, i, j) for i in (1, 6) for j in (1, 6)),
        *((1, i, j) for i in (3, 8) for j in (3, 8)),
    }
    batch = training_targets(windows, length, 2 + 2 * n)
    assert batch["pair_valid"].sum(axis=-1).tolist() == [[4, 4], [4, 9]]  # cells are distinct: (1, 6) once in row 1

    vocab = str(tmp_path / "vocab.txt")
    write_vocab(build_vocab(["红楼梦作者曹雪芹"]), vocab)
    paddle.seed(0)
    model = modeling.build_model(
        ModelConfig(model="scratch:1x32"), "pointer", n, TextPipeline(vocab), Relation.model_class
    )
    model.eval()
    ids = paddle.to_tensor(np.random.default_rng(0).integers(5, 12, size=(2, length)))
    hidden = model.ernie(ids)[0]
    dense = model.dense(hidden, ids != model.config.pad_token_id).numpy()
    out = model(ids, pair_index=paddle.to_tensor(batch["pair_index"]))
    loss = float(Relation().loss(out, {k: paddle.to_tensor(v) for k, v in batch.items()}))

    expected = 0.0  # log(1 + sum over non-gold e^s) + log(1 + sum over gold e^-s) per row and head, on the cells read
    for row, targets in enumerate(windows):
        gold = np.zeros(dense.shape[1:], dtype=bool)
        gold[tuple(np.array(targets).T)] = True
        read = np.ones_like(gold)
        read[2 : 2 + n], read[2 + n :] = candidate_pairs(targets, length)[:, None]
        for head in range(dense.shape[1]):
            scores, positive, cells = dense[row, head], gold[head], read[head] & (dense[row, head] > -1e11)
            expected += np.log1p(np.exp(scores[cells & ~positive]).sum()) + np.log1p(np.exp(-scores[positive]).sum())
    assert loss == pytest.approx(expected / 2, rel=1e-4)


def test_a_tuned_threshold_is_chosen_on_dev_kept_and_used_on_test():
    """--tune-thresholds: on dev the probability of the best triple F1 nearest 0.5 is chosen (a triple whose pointers
    score -0.7, a probability of 0.33, needs 0.30); the task keeps it for the test score; without it the same cells
    decode to nothing. Tuning decodes once at the lowest threshold and filters: each threshold of the grid gives what
    decoding at it gives."""
    import paddle

    from ernie_ft import thresholds

    text, n = "红楼梦作者曹雪芹", len(LABELS)
    triple = (((0, 3, "图书作品"), "作者", (5, 8, "人物")),)
    dev, test = (RelationExample(text, triple, (("红楼梦", "作者", "曹雪芹"),), 1, f) for f in ("dev.jsonl", "t.jsonl"))
    rows = [cells((0, 1, 3, 4.0), (1, 6, 8, 3.0), (2 + 0, 1, 6, -0.7), (2 + n + 0, 3, 8, -0.7), (1, 1, 8, -2.5))]
    data = DataConfig(dev="dev.jsonl")
    task = Relation(tune_thresholds=True)
    assert task.tune(rows, one_window(text), [dev], LABELS, data) == {"threshold": 0.3}
    assert task.learned_options({"threshold": 0.3, "triple_f1": 1.0}) == {"threshold": 0.3}
    metrics = task.evaluate(rows, one_window(text), [test], LABELS, data)
    assert metrics["triple_f1"] == 1.0 and metrics["entity_f1"] == 1.0
    assert Relation().evaluate(rows, one_window(text), [test], LABELS, data)["triple_f1"] == 0.0
    lowest = task.decode(rows, one_window(text), [dev], LABELS, min(thresholds.GRID))
    for p in thresholds.GRID:
        assert decoding.above(lowest, p) == task.decode(rows, one_window(text), [dev], LABELS, p)
    # summarize keeps the cells every tried threshold reads, no lower (0.05: a logit of -2.94)
    summary = task.summarize(paddle.to_tensor(np.full((1, 2, 3, 3), -3.0, dtype="float32")), {})
    assert len(summary[0]) == 0
    assert len(task.summarize(paddle.to_tensor(np.full((1, 2, 3, 3), -2.9, dtype="float32")), {})[0]) == 2 * 6


def test_triple_f1_by_hand():
    # gold: 3 triples over two texts; predicted: 2 right (one after dropping 《》 and case), 1 wrong predicate
    a = RelationExample(
        "《红楼梦》作者曹雪芹", (), (("《红楼梦》", "作者", "曹雪芹"), ("曹雪芹", "出生地", "南京")), 1, "t"
    )
    b = RelationExample("abc的作者是张三", (), (("ABC", "作者", "张三"),), 2, "t")
    decoded = [({}, {((1, 4), 0, (7, 10)): 0.9}), ({}, {((0, 3), 0, (7, 9)): 0.8, ((0, 3), 1, (7, 9)): 0.7})]
    metrics = decoding.relation_metrics([a, b], decoded, LABELS)
    assert metrics["triple_precision"] == pytest.approx(2 / 3) and metrics["triple_recall"] == pytest.approx(2 / 3)
    assert metrics["triple_f1"] == pytest.approx(2 / 3)
    assert metrics["per_predicate"]["出生地"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert "作者" in decoding.predicate_table(metrics)


def test_a_relation_across_windows_is_counted_and_never_predicted(tmp_path, capsys):
    from ernie_ft.text.pipeline import TextPipeline
    from ernie_ft.text.scratch import build_vocab, write_vocab

    far = "甲" * 40
    text = "张三" + far + "的妻子是李四，王五出生于北京。"
    triples = (((0, 2, "人物"), "妻子", (46, 48, "人物")), ((49, 51, "人物"), "出生地", (54, 56, "地点")))
    examples = [RelationExample(text, triples, (), 1, "long")]
    vocab = str(tmp_path / "vocab.txt")
    write_vocab(build_vocab([text]), vocab)
    pipeline = TextPipeline(vocab, exact_spans=True)
    task = Relation()
    labels = ["出生地", "妻子"]
    features = task.featurize(examples, [pipeline.encode(text)], pipeline, labels, DataConfig(max_len=24, stride=8))
    assert len(features) >= 3
    assert "subject and object lie in no common window of --max-len 24 tokens: 1;" in capsys.readouterr().err
    perfect = [cells(*[(h, i, j, 5.0) for h, i, j in f["_targets"]]) for f in features]
    [(_, triples)] = decoding.decode(perfect, features, 1, labels)
    assert {(s, labels[c], o) for s, c, o in triples} == {((49, 51), "出生地", (54, 56))}
    # each end alone is still an entity target in its window
    assert any((0, 1, 2) in f["_targets"] for f in features)


def test_a_texts_answer_does_not_depend_on_its_batch(tmp_path):
    """A model barely trained scores many cells above the threshold, so the cap on the cells a window keeps
    (``thresholds.MAX_PER_TOKEN`` per token) binds: counted on the input's own tokens, not on the padded length of
    the batch it came in, a text's triples and entities are the same alone and batched with longer texts."""
    train = write(tmp_path / "train.jsonl", duie())
    args = ["--train", train, "--model", "scratch:2x64", "--threads", "1", "--max-len", "32", "--epochs", "1",
            "--batch-size", "6", "--lr", "1e-5", "--dropout", "0", "--seed", "2",
            "--output", str(tmp_path / "m")]  # fmt: skip
    assert relation(args) == 0
    answers = []
    for size in ("1", "6"):
        out = tmp_path / f"b{size}.jsonl"
        flags = ["--model", str(tmp_path / "m"), "--input", train, "--output", str(out), "--batch-size", size]
        assert cli(["predict", *flags, "--device", "cpu"]) == 0
        answers.append(out.read_text(encoding="utf-8"))
    assert answers[0] == answers[1]
    assert sum(len(json.loads(line)["entities"]) for line in answers[0].splitlines()) > 6 * 10  # the cap binds


def train_args(train, out, *extra):
    """A scratch 2x64 model on the six sentences, dev = train: it has to memorise them."""
    return [
        "--train", train, "--dev", train, "--model", "scratch:2x64", "--threads", "1", "--max-len", "32",
        "--epochs", "80", "--batch-size", "6", "--lr", "3e-3", "--warmup", "0.05", "--dropout", "0", "--seed", "2",
        "--eval-steps", "10", "--tune-thresholds", "--output", str(out), *extra,
    ]  # fmt: skip


def dense_forward(self, input_ids, token_type_ids=None, position_ids=None, attention_mask=None, **kwargs):
    """The previous version's inference forward: the dense scores [B, 2 + 2C, L, L] as one output."""
    hidden = self.ernie(
        input_ids, token_type_ids=token_type_ids, position_ids=position_ids, attention_mask=attention_mask
    )[0]
    return self.dense(self.dropout(hidden), input_ids != self.config.pad_token_id)


def previous_export_answers(model_dir, texts: str, tmp_path, monkeypatch) -> list[dict]:
    """``predict``'s records from a Paddle Inference export made as the previous version made it (its one output
    the dense scores, checked)."""
    import paddle

    from ernie_ft.inference.static_graph import InferenceModel
    from ernie_ft.relation.model import ErnieForRelationExtraction

    exported, out = tmp_path / "export-previous", tmp_path / "pred-previous.jsonl"
    with monkeypatch.context() as patch:
        patch.setattr(ErnieForRelationExtraction, "forward", dense_forward)
        assert cli(["export", "--model", str(model_dir), "--output", str(exported)]) == 0
    ids = paddle.to_tensor(np.full((1, 5), 7, dtype="int64"))
    assert InferenceModel(str(exported))(ids, paddle.zeros_like(ids)).ndim == 4
    assert cli(["predict", "--model", str(exported), "--input", texts, "--output", str(out)]) == 0
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


KEYS = ("subject", "predicate", "object")
"""What a predicted triple is: both entities (text, start, end, type) and the predicate."""


def test_a_tiny_model_memorises_triples_resumes_exactly_and_predicts(tmp_path, capsys, monkeypatch):
    train = write(tmp_path / "train.jsonl", duie())
    assert relation(train_args(train, tmp_path / "full")) == 0
    metrics = json.loads((tmp_path / "full" / "metrics.json").read_text(encoding="utf-8"))["dev"]
    assert metrics["triple_f1"] >= 0.9 and metrics["entity_f1"] >= 0.9, metrics
    saved = yaml.safe_load((tmp_path / "full" / "best" / "ernie_ft.yaml").read_text(encoding="utf-8"))["run"]["task"]
    assert saved["threshold"] == metrics["threshold"] and saved["tune_thresholds"] is True  # predict decodes with it

    assert relation(train_args(train, tmp_path / "cut", "--stop-after-steps", "15")) == 0
    capsys.readouterr()
    assert relation(train_args(train, tmp_path / "cut", "--resume")) == 0
    assert "resumed at step 15 " in capsys.readouterr().err  # continued from last/, not trained again from the start
    assert_same_weights(tmp_path / "full" / "best", tmp_path / "cut" / "best", head="tails.dense2")

    texts = write(tmp_path / "new.txt", "".join(f"{text}\n" for text, _ in SENTENCES))
    out = tmp_path / "pred.jsonl"
    assert cli(["predict", "--model", str(tmp_path / "full"), "--input", texts, "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [sorted(r) for r in records] == [["entities", "relations", "text"]] * len(SENTENCES)
    right = 0
    for record, (text, triples) in zip(records, SENTENCES):
        for r in record["relations"]:
            assert sorted(r) == ["object", "predicate", "score", "subject"]
            for end in (r["subject"], r["object"]):
                assert (
                    sorted(end) == ["end", "start", "text", "type"] and text[end["start"] : end["end"]] == end["text"]
                )
        found = {
            (r["subject"]["text"], r["predicate"], r["object"]["text"], r["subject"]["type"])
            for r in record["relations"]
        }
        right += found == {(s, p, o, st) for s, p, o, st, _ in triples}
        assert all(sorted(e) == ["end", "role", "score", "start", "text", "type"] for e in record["entities"])
    assert right >= len(SENTENCES) - 1

    # the exported graphs (the efficient pointers' biases, the rotary entity pointer) answer as the dygraph model
    def triples(records):  # every part of a triple: both ends with their types, the predicate
        return [[tuple(tuple(sorted(r[k].items())) if k != "predicate" else r[k] for k in KEYS) for r in x["relations"]]
                for x in records]  # fmt: skip

    exported = exported_predictions(tmp_path / "full", texts, tmp_path)
    exported["previous"] = previous_export_answers(tmp_path / "full", texts, tmp_path, monkeypatch)  # still runs
    for engine, answers in exported.items():
        assert triples(answers) == triples(records), engine
        scores = [
            (r["score"], s["score"]) for x, y in zip(records, answers) for r, s in zip(x["relations"], y["relations"])
        ]
        assert scores and max(abs(a - b) for a, b in scores) < 2e-3, engine
    # int8 (the packed output quantized), chosen for this CPU and for AVX2 (7-bit weights: the same integer products
    # on every CPU): the dygraph model's triples, one flipped by rounding at most
    for target in ("int8", "int8:avx2"):
        int8, again = tmp_path / f"export-{target}", tmp_path / f"pred-{target}.jsonl"
        assert cli(["export", "--model", str(tmp_path / "full"), "--output", str(int8), "--format", "onnx",
                    "--quantize", target]) == 0  # fmt: skip
        assert cli(["predict", "--model", str(int8), "--input", texts, "--output", str(again)]) == 0
        answers = [json.loads(line) for line in again.read_text(encoding="utf-8").splitlines()]
        found = {(i, t) for i, x in enumerate(triples(answers)) for t in x}
        gold = {(i, t) for i, x in enumerate(triples(records)) for t in x}
        assert len(gold) >= 5 and len(found ^ gold) <= 1, (target, found ^ gold)  # measured: none differs

    capsys.readouterr()
    assert cli(["evaluate", "--model", str(tmp_path / "full"), "--input", train]) == 0
    report = capsys.readouterr().out
    assert "predicate" in report and "作词" in report and "all triples" in report
    assert cli(["export", "--model", str(tmp_path / "full"), "--output", str(tmp_path / "hf"), "--format", "hf"]) == 2
    assert "pointer" in capsys.readouterr().err
