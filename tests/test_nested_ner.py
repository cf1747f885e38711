"""Nested NER (``ner --nested``): the GlobalPointer head and its loss, readers, decoding, and the command line."""

import json

import numpy as np
import pytest
from conftest import assert_same_weights, exported_predictions, shared

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.models.global_pointer import MASKED, EfficientGlobalPointer, GlobalPointer, global_pointer_loss
from ernie_ft.ner.nested import NestedNER
from ernie_ft.ner.task import NER


def numpy_loss(logits: np.ndarray, targets: np.ndarray, sum_heads: bool = False) -> float:
    """The multi-label categorical cross-entropy written out per row and head: log(1 + sum_neg e^s) +
    log(1 + sum_pos e^-s), over the positions that are not masked; averaged over rows and heads, or (``sum_heads``)
    summed over heads and averaged over rows."""
    width = logits.shape[-2] * logits.shape[-1]
    losses = []
    for scores, gold in zip(logits.reshape(-1, width), targets.reshape(-1, width)):
        unmasked = scores > MASKED / 2
        negative, positive = scores[unmasked & (gold == 0)], scores[unmasked & (gold == 1)]
        losses.append(np.log1p(np.exp(negative).sum()) + np.log1p(np.exp(-positive).sum()))
    return float(np.sum(losses) / len(logits)) if sum_heads else float(np.mean(losses))


def small_pointer(seed=0, heads=3, rope=True, layer=GlobalPointer):
    import paddle

    paddle.seed(seed)
    pointer = layer(16, heads, head_size=8, rope=rope)
    hidden = paddle.randn([2, 6, 16])
    mask = paddle.to_tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    return pointer, hidden, mask


def test_global_pointer_loss_equals_numpy_and_rewards_gold_spans():
    import paddle

    pointer, hidden, mask = small_pointer()
    logits = pointer(hidden, mask)
    assert logits.shape == [2, 3, 6, 6] and str(logits.dtype).endswith("float32")
    targets = np.zeros((2, 3, 6, 6), dtype="float32")
    targets[0, 1, 0, 2] = targets[0, 1, 1, 2] = targets[0, 2, 0, 2] = targets[1, 0, 1, 3] = 1  # nested, two types
    loss = float(global_pointer_loss(logits, paddle.to_tensor(targets)))
    assert loss == pytest.approx(numpy_loss(logits.numpy(), targets), rel=1e-5)
    summed = float(global_pointer_loss(logits, paddle.to_tensor(targets), sum_heads=True))
    assert summed == pytest.approx(numpy_loss(logits.numpy(), targets, sum_heads=True), rel=1e-5)
    assert summed == pytest.approx(3 * loss, rel=1e-5)  # 3 heads
    # the gold spans' logits raised by 5: the loss drops; the non-gold ones raised instead: it grows
    up = paddle.to_tensor(targets * 5.0)
    assert float(global_pointer_loss(logits + up, paddle.to_tensor(targets))) < loss
    others = paddle.to_tensor((1 - targets) * 5.0 * (logits.numpy() > MASKED / 2))
    assert float(global_pointer_loss(logits + others, paddle.to_tensor(targets))) > loss


@pytest.mark.parametrize("layer", [GlobalPointer, EfficientGlobalPointer])
@pytest.mark.parametrize("rope", [True, False])
def test_masked_positions_never_win(rope, layer):
    pointer, hidden, mask = small_pointer(seed=3, rope=rope, layer=layer)
    logits = pointer(hidden * 50.0, mask).numpy()  # large hidden states: large scores either way
    lower = np.tril(np.ones((6, 6), dtype=bool), -1)
    padded = ~np.outer(mask.numpy()[1], mask.numpy()[1]).astype(bool)
    assert (logits[:, :, lower] == MASKED).all()
    assert (logits[1][:, padded] == MASKED).all()
    open_ = logits[logits > MASKED]
    assert np.abs(open_).max() < 1e9 and (open_ > 0).any()  # some span wins at threshold 0, never a masked one


@pytest.mark.parametrize("rope", [True, False])
def test_efficient_scores_are_paddlenlps_efficient_global_pointer(rope):
    """EfficientGlobalPointer is PaddleNLP's with its own rotary and masks: with the same weights, the open spans
    score the same and the masked ones are masked in both."""
    from paddlenlp.layers.globalpointer import GlobalPointer as PaddleNLPGlobalPointer

    pointer, hidden, mask = small_pointer(seed=7, rope=rope, layer=EfficientGlobalPointer)
    reference = PaddleNLPGlobalPointer(16, 3, head_size=8, RoPE=rope)
    reference.set_state_dict(pointer.state_dict())
    ours = pointer(hidden, mask).numpy()
    theirs = reference(hidden, mask.astype("float32")).numpy()
    open_ = ours > MASKED / 2
    assert open_.sum() == 3 * (21 + 10)  # per head: the 21 spans of row 0 (6 tokens), 10 of row 1 (4 and padding)
    np.testing.assert_allclose(ours[open_], theirs[open_], rtol=1e-4, atol=1e-4)
    assert (theirs[~open_] < MASKED / 2).all()


@pytest.mark.parametrize("layer", [GlobalPointer, EfficientGlobalPointer])
def test_rotary_scores_depend_on_relative_positions_only(layer):
    """With RoPE, q_i . k_j depends on i - j: the same token repeated scores the same at every equal offset."""
    import paddle

    pointer, _, _ = small_pointer(seed=5, heads=1, layer=layer)
    hidden = paddle.tile(paddle.randn([1, 1, 16]), [1, 6, 1])
    logits = pointer(hidden, paddle.ones([1, 6])).numpy()[0, 0]
    for offset in range(6):
        diagonal = np.diagonal(logits, offset)
        assert np.allclose(diagonal, diagonal[0], atol=1e-4)
    assert not np.allclose(np.diagonal(logits, 0)[0], np.diagonal(logits, 3)[0])


ner = task_command("ner")

# (text, [(entity, type, which occurrence)]): nested entities, a span with two types, a Latin word inside one
SENTENCES = [
    ("儿童SARST细胞亚群的检测。", [("儿童SARST细胞亚群", "bod", 0), ("细胞", "bod", 0), ("检测", "pro", 0)]),
    ("急性胰腺炎引起腹痛。", [("急性胰腺炎", "dis", 0), ("胰腺", "bod", 0), ("腹痛", "sym", 0)]),
    ("肺部感染可用青霉素治疗。", [("肺部感染", "dis", 0), ("肺部", "bod", 0), ("青霉素", "dru", 0)]),
    ("头痛伴呕吐。", [("头痛", "sym", 0), ("头痛", "dis", 0), ("呕吐", "sym", 0)]),
    ("胃镜检查发现胃溃疡。", [("胃镜检查", "pro", 0), ("胃镜", "equ", 0), ("胃溃疡", "dis", 0), ("胃", "bod", 1)]),
    ("糖尿病足需要清创。", [("糖尿病足", "dis", 0), ("糖尿病", "dis", 0), ("清创", "pro", 0)]),
]


def spans_of(text, entities):
    """(start, end_exclusive, type) of each (entity, type, nth occurrence)."""
    out = []
    for name, kind, nth in entities:
        start = -1
        for _ in range(nth + 1):
            start = text.index(name, start + 1)
        out.append((start, start + len(name), kind))
    return sorted(out)


def cmeee(sentences=SENTENCES, mutate=None):
    """The sentences as CBLUE ships CMeEE: a pretty-printed JSON array, end_idx inclusive."""
    records = []
    for text, entities in sentences:
        items = [
            {"start_idx": s, "end_idx": e - 1, "type": k, "entity": text[s:e]} for s, e, k in spans_of(text, entities)
        ]
        records.append({"text": text, "entities": items})
    if mutate:
        mutate(records)
    return json.dumps(records, ensure_ascii=False, indent=1)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_cmeee_reads_inclusive_ends_nesting_and_two_types_on_one_span(tmp_path):
    path = write(tmp_path / "train.json", cmeee())
    examples = NER(nested=True).read(path, DataConfig(), "--train")
    assert isinstance(NER(nested=True), NestedNER) and type(NER()) is NER
    assert [e.text for e in examples] == [text for text, _ in SENTENCES]
    for example, (text, entities) in zip(examples, SENTENCES):
        assert list(example.entities) == spans_of(text, entities)
    assert examples[0].entities[0] == (0, 11, "bod") and examples[0].text[0:11] == "儿童SARST细胞亚群"
    assert {(s, e) for s, e, k in examples[3].entities if k in ("sym", "dis")} >= {(0, 2)}
    starts = [n for n, line in enumerate(cmeee().splitlines(), 1) if line == " {"]
    assert [e.line for e in examples] == starts  # the line each record of the array starts on
    # the flat tagger refuses the nested file and names --nested
    with pytest.raises(Exception, match="--nested"):
        NER().read(path, DataConfig(), "--train")


def test_doccano_overlapping_spans_and_span_jsonl_are_kept_with_nested(tmp_path):
    doccano = write(
        tmp_path / "doccano.jsonl",
        json.dumps(
            {"text": "北京大学医院", "label": [[0, 4, "ORG"], [0, 2, "LOC"], [0, 6, "ORG"]]}, ensure_ascii=False
        ),
    )
    spans = write(
        tmp_path / "spans.jsonl",
        json.dumps(
            {
                "text": "北京大学",
                "entities": [{"start": 0, "end": 4, "type": "ORG"}, {"start": 0, "end": 2, "type": "LOC"}],
            },
            ensure_ascii=False,
        ),
    )
    task = NER(nested=True)
    assert task.read(doccano, DataConfig(), "--train")[0].entities == ((0, 2, "LOC"), (0, 4, "ORG"), (0, 6, "ORG"))
    assert task.read(spans, DataConfig(), "--train")[0].entities == ((0, 2, "LOC"), (0, 4, "ORG"))


def break_offsets(records):
    records[1]["entities"][0]["end_idx"] = 40


def break_text(records):
    records[2]["entities"][0]["entity"] = "肺炎"


@pytest.mark.parametrize(
    "mutate,fragments",
    [(break_offsets, [1, "outside the text"]), (break_text, [2, "'肺炎'", "inclusive"])],
    ids=["offsets-outside-the-text", "entity-text-mismatch"],
)
def test_bad_cmeee_lines_are_one_error_naming_file_and_line(tmp_path, capsys, mutate, fragments):
    train = write(tmp_path / "train.json", cmeee())
    dev = write(tmp_path / "dev.json", cmeee(mutate=mutate))
    args = ["--nested", "--train", train, "--dev", dev, "--model", "scratch:tiny", "--output", str(tmp_path / "out")]
    assert ner(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    record, *fragments = fragments
    line = [n for n, text in enumerate(cmeee().splitlines(), 1) if text == " {"][record]
    for fragment in [f"dev.json:{line}", *fragments]:
        assert fragment in err, err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    from ernie_ft.text.pipeline import TextPipeline

    chars = sorted({c for text, _ in SENTENCES for c in text if not c.isascii()})
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *chars, "sarst"]) + "\n", encoding="utf-8")
    return TextPipeline(str(path))


def examples_and_features(pipeline, examples=None, **data):
    from ernie_ft.ner.formats import NerExample

    task = NER(nested=True)
    if examples is None:
        examples = [NerExample(text, tuple(spans_of(text, e)), n, "mem") for n, (text, e) in enumerate(SENTENCES, 1)]
    labels = task.fit_labels(examples)
    data = DataConfig(**data)
    features = task.featurize(examples, pipeline.encode_many(task.texts(examples)), pipeline, labels, data)
    return task, examples, labels, features


def perfect_scores(features, heads, spoil=None):
    """Each window's scores [n, heads, n] (as summarize gives them) from its gold spans: +5 gold, -5 not, MASKED
    below the diagonal; ``spoil(feature, scores[heads, n, n])`` may change them."""
    rows = []
    for f in features:
        n = len(f["input_ids"])
        scores = np.full((heads, n, n), -5.0, dtype="float32")
        scores[:, np.tril(np.ones((n, n), dtype=bool), -1)] = MASKED
        for k, i, j in f["_spans"]:
            scores[k, i, j] = 5.0
        if spoil:
            spoil(f, scores)
        rows.append(scores.transpose(1, 0, 2))
    return rows


def test_decode_keeps_nested_overlapping_and_two_typed_spans_as_character_offsets(pipeline):
    task, examples, labels, features = examples_and_features(pipeline)
    assert len(features) == len(examples) and labels == ["bod", "dis", "dru", "equ", "pro", "sym"]
    ids = features[0]["input_ids"]  # [CLS] 儿 童 sarst 细 胞 亚 群 的 检 测 。 [SEP]: SARST is one token
    assert len(ids) == 13 and ids[3] == pipeline.vocab["sarst"]
    predicted, repaired = task.decode(perfect_scores(features, len(labels)), features, examples, labels)
    assert repaired == 0
    assert [[p[:3] for p in ps] for ps in predicted] == [list(e.entities) for e in examples]
    assert all(score == pytest.approx(1 / (1 + np.exp(-5.0))) for ps in predicted for *_, score in ps)
    records = task.predict(perfect_scores(features, len(labels)), features, examples, labels, DataConfig())
    assert records[0]["entities"][0] == {
        "start": 0,
        "end": 11,
        "type": "bod",
        "text": "儿童SARST细胞亚群",
        "score": 0.9933,
    }
    assert {(e["text"], e["type"]) for e in records[3]["entities"]} == {
        ("头痛", "sym"),
        ("头痛", "dis"),
        ("呕吐", "sym"),
    }


def test_decode_threshold_is_zero(pipeline):
    task, examples, labels, features = examples_and_features(pipeline)

    def spoil(f, scores):
        if f["doc"] == 1:  # 急性胰腺炎引起腹痛。: the gold 腹痛 just below 0, 引起 (not gold) just above
            k, i, j = next(s for s in f["_spans"] if labels[s[0]] == "sym")
            scores[k, i, j] = -0.01
            scores[labels.index("sym"), 6, 7] = 0.01

    predicted, _ = task.decode(perfect_scores(features, len(labels), spoil), features, examples, labels)
    assert [p[:3] for p in predicted[1]] == [(0, 5, "dis"), (2, 4, "bod"), (5, 7, "sym")]


def test_windows_find_each_entity_once_and_never_take_spans_cut_by_an_edge(pipeline):
    from ernie_ft.ner.formats import NerExample

    text = "".join(t for t, _ in SENTENCES)
    entities, offset = [], 0
    for t, e in SENTENCES:
        entities += [(s + offset, end + offset, k) for s, end, k in spans_of(t, e)]
        offset += len(t)
    long = [NerExample(text, tuple(sorted(entities)), 1, "long")]
    task, examples, labels, features = examples_and_features(pipeline, long, max_len=18, stride=8)
    assert len(features) >= 4 and all(f["doc"] == 0 for f in features)
    assert sum(len(f["_spans"]) for f in features) > len(entities)  # entities in overlaps: in two windows

    def spoil(f, scores):  # every span from a cutting edge scores high: a cut-short entity would look like this
        n = scores.shape[-1]
        if f["_window"][0] > 0:
            scores[0, 1, 1 : n - 1] = 5.0
        if f["_window"][1] < f["_n_tokens"]:
            scores[0, 1 : n - 1, n - 2] = 5.0

    predicted, _ = task.decode(perfect_scores(features, len(labels), spoil), features, examples, labels)
    assert [p[:3] for p in predicted[0]] == sorted(entities)


def train_args(train, out, *extra):
    """A scratch 2x64 model on the six sentences, dev = train: it has to memorise them."""
    return [
        "--nested", "--train", train, "--dev", train, "--model", "scratch:2x64", "--threads", "1", "--max-len", "32",
        "--epochs", "30", "--batch-size", "6", "--lr", "5e-3", "--warmup", "0.05", "--dropout", "0", "--seed", "2",
        "--eval-steps", "10", "--output", str(out), *extra,
    ]  # fmt: skip


def test_a_tiny_model_memorises_nested_entities_resumes_exactly_and_predicts(tmp_path, capsys):
    train = write(tmp_path / "train.json", cmeee())
    assert ner(train_args(train, tmp_path / "full")) == 0
    metrics = json.loads((tmp_path / "full" / "metrics.json").read_text(encoding="utf-8"))["dev"]
    assert metrics["f1"] >= 0.95, metrics
    assert set(metrics["per_type"]) == {"bod", "dis", "dru", "equ", "pro", "sym"}

    # stopped halfway, then resumed: the weights of the uninterrupted run
    assert ner(train_args(train, tmp_path / "cut", "--stop-after-steps", "12")) == 0
    capsys.readouterr()
    assert ner(train_args(train, tmp_path / "cut", "--resume")) == 0
    assert "resumed at step 12 " in capsys.readouterr().err  # continued from last/, not trained again from the start
    assert_same_weights(tmp_path / "full" / "best", tmp_path / "cut" / "best", head="global_pointer.")

    texts = write(tmp_path / "new.txt", "".join(f"{text}\n" for text, _ in SENTENCES))
    out = tmp_path / "pred.jsonl"
    assert cli(["predict", "--model", str(tmp_path / "full"), "--input", texts, "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [sorted(r) for r in records] == [["entities", "text"]] * len(SENTENCES)
    for record, (text, entities) in zip(records, SENTENCES):
        assert all(sorted(e) == ["end", "score", "start", "text", "type"] for e in record["entities"])
        assert all(text[e["start"] : e["end"]] == e["text"] and e["score"] > 0.5 for e in record["entities"])
        found = sorted((e["start"], e["end"], e["type"]) for e in record["entities"])
        assert found == spans_of(text, entities) or record is not records[0], found
    assert (
        sum(
            sorted((e["start"], e["end"], e["type"]) for e in r["entities"]) == spans_of(t, e)
            for r, (t, e) in zip(records, SENTENCES)
        )
        >= len(SENTENCES) - 1
    )

    # the exported graphs answer as the dygraph model does (Paddle Inference once computed RoPE wrongly); no hf export
    for engine, answers in exported_predictions(tmp_path / "full", texts, tmp_path).items():
        assert [[(e["start"], e["end"], e["type"]) for e in r["entities"]] for r in answers] == [
            [(e["start"], e["end"], e["type"]) for e in r["entities"]] for r in records
        ], engine
        scores = [
            (e["score"], f["score"]) for r, a in zip(records, answers) for e, f in zip(r["entities"], a["entities"])
        ]
        assert max(abs(x - y) for x, y in scores) < 2e-3, engine


def test_hf_export_of_a_nested_model_is_one_error_line(tmp_path, capsys):
    train = write(tmp_path / "train.json", cmeee())
    args = train_args(train, tmp_path / "run")
    args[args.index("--epochs") + 1] = "1"
    assert ner(args) == 0
    capsys.readouterr()
    assert cli(["export", "--model", str(tmp_path / "run"), "--output", str(tmp_path / "hf"), "--format", "hf"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and "GlobalPointer" in err[0] and "onnx" in err[0], err


def test_cmeee_as_cblue_ships_it_reads_whole_with_its_nesting():
    """The real CMeEE-V2 train split: every record read, nesting kept; a flat reader would drop 3,580 entities."""
    from ernie_ft.ner.tags import check_spans

    path = str(shared("cmeee-v2", "train.json"))
    examples = NER(nested=True).read(path, DataConfig(), "--train")
    assert len(examples) == 4000 and sum(len(e.entities) for e in examples) == 20710
    assert all(e.text[s:t] for e in examples for s, t, _ in e.entities)
    dropped = sum(len(check_spans(list(e.entities), e.text, "x", "keep-longest")[1]) for e in examples)
    assert dropped == 3580
    inside = sum(
        any(o[0] <= a[0] and a[1] <= o[1] and o[:2] != a[:2] for o in e.entities) for e in examples for a in e.entities
    )
    assert inside > 1000  # entities inside another one, kept
