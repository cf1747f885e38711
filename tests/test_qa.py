"""Extractive QA: reading and answer re-location, windows and labels, post-processing, the command line."""

import importlib.util
import json

import numpy as np
import pytest
import yaml
from conftest import DATA, ROOT, shared

from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.data.squad import QAExample, locate_answer, read_qa
from ernie_ft.errors import UserError
from ernie_ft.evaluation.squad import shared_answer_share
from ernie_ft.qa.answers import best_answers
from ernie_ft.qa.task import QA

main = task_command("qa")

TRAIN, DEV, DEV_JSONL, V2 = (str(DATA / n) for n in ("qa_train.json", "qa_dev.json", "qa_dev.jsonl", "qa_v2.json"))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """A WordPiece pipeline whose vocabulary has every character of the sample QA files."""
    from ernie_ft.text.pipeline import TextPipeline
    from ernie_ft.text.scratch import build_vocab, write_vocab

    texts = [t for path in (TRAIN, DEV, V2) for e in read_qa(path, "--dev")[0] for t in (e.context, e.question)]
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(texts + ["第一二三四五六七八九十段句"]), str(vocab))
    return TextPipeline(str(vocab))


def featurize(task, examples, pipeline, max_len):
    encodings = [pipeline.encode(t) for t in task.texts(examples)]
    return task.featurize(examples, encodings, pipeline, task.fit_labels(examples), DataConfig(max_len=max_len))


# ---------------------------------------------------------------- reading


def test_squad_json_and_jsonl_give_the_same_questions():
    json_examples, _ = read_qa(DEV, "--dev")
    jsonl_examples, _ = read_qa(DEV_JSONL, "--dev")
    strip = lambda e: (e.id, e.question, e.context, e.answers, e.spans, e.impossible)  # noqa: E731
    assert [strip(e) for e in json_examples] == [strip(e) for e in jsonl_examples] and len(json_examples) == 22
    v2, stats = read_qa(V2, "--train")
    assert sum(e.impossible for e in v2) == stats.unanswerable == 5
    assert QA().fit_labels(v2) == ["span", "no_answer"] and QA().fit_labels(json_examples) == ["span"]


def test_locate_answer_moves_a_wrong_start_to_the_nearest_occurrence():
    context = "苹果和香蕉都是水果，苹果很甜。"  # 苹果 at 0 and 10
    assert locate_answer(context, "苹果", 10) == 10
    assert locate_answer(context, "苹果", 9) == 10
    assert locate_answer(context, "苹果", 3) == 0
    assert locate_answer(context, "苹果", 500) == 10  # outside the context
    assert locate_answer(context, "西瓜", 0) is None


def squad_file(path, qas, context="苹果和香蕉都是水果，苹果很甜。"):
    path.write_text(
        json.dumps(
            {"version": "v1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]},
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    return str(path)


def test_wrong_offsets_are_counted_and_unfindable_answers_never_become_labels(tmp_path):
    path = squad_file(
        tmp_path / "d.json",
        [
            {"id": "ok", "question": "什么很甜？", "answers": [{"text": "苹果", "answer_start": 10}]},
            {"id": "off", "question": "有什么水果？", "answers": [{"text": "香蕉", "answer_start": 4}]},
            {"id": "far", "question": "什么很甜呢？", "answers": [{"text": "很甜", "answer_start": 99}]},
            {"id": "gone", "question": "西瓜呢？", "answers": [{"text": "西瓜", "answer_start": 0}]},
        ],
    )
    train, stats = read_qa(path, "--train")
    assert [e.id for e in train] == ["ok", "off", "far"] and stats.dropped == 1
    assert [e.spans for e in train] == [((10, 12),), ((3, 5),), ((12, 14),)]
    assert [r[0] for r in stats.relocated] == ["off", "far"] and stats.not_found == [("gone", "西瓜")]
    notes = " ".join(stats.notes("--train", path))
    assert "2 of 4 answers had an answer_start" in notes and "1 of 4 answers do not occur" in notes
    dev, _ = read_qa(path, "--dev")  # evaluation keeps the question: its gold text is still scored
    assert dev[-1].id == "gone" and dev[-1].answers == ("西瓜",) and dev[-1].spans == ()


@pytest.mark.parametrize(
    "name,content,expected",
    [
        (
            "broken.json",
            '{\n "data": [\n  {"paragraphs": []}\n  {"paragraphs": []}\n ]\n}',
            "broken.json:4:3: invalid JSON",
        ),
        (
            "broken.jsonl",
            '{"id": "a", "context": "天很蓝", "question": "天什么颜色", "answers": {"text": ["很蓝"], '
            '"answer_start": [1]}}\n{"id": "b", "context": }\n',
            "broken.jsonl:2:",
        ),
        (
            "no_context.jsonl",
            '{"id": "a", "context": " ", "question": "天什么颜色", "answers": []}\n',
            "has no context",
        ),
        ("no_answers.jsonl", '{"id": "a", "context": "天很蓝", "question": "天什么颜色"}\n', 'no "answers"'),
        (
            "start.jsonl",
            '{"id": "a", "context": "天很蓝", "question": "天什么颜色", "answers": {"text": ["很蓝"], '
            '"answer_start": ["1"]}}\n',
            "answer_start '1' is not a character offset",
        ),
        (
            "twice.jsonl",
            '{"id": "a", "context": "天很蓝", "question": "天?", "answers": []}\n'
            '{"id": "a", "context": "天很蓝", "question": "天?", "answers": []}\n',
            "used before at",
        ),
        ("other.json", '{"text": "天很蓝", "label": "1"}', "neither SQuAD JSON"),
    ],
)
def test_bad_files_name_the_file_and_position(tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError) as error:
        read_qa(str(path), "--train")
    assert expected in str(error.value) and str(path) in str(error.value)


def test_prediction_input_needs_no_answers_or_ids(tmp_path):
    path = tmp_path / "ask.jsonl"
    path.write_text(
        '{"context": "天很蓝。", "question": "天是什么颜色？"}\n'
        '{"context": "草很绿。", "question": "草是什么颜色？"}\n',
        encoding="utf-8",
    )
    examples, _ = read_qa(str(path), "--input", labelled=False)
    assert [(e.id, e.context, e.answers) for e in examples] == [("q1", "天很蓝。", ()), ("q2", "草很绿。", ())]
    with pytest.raises(UserError, match='no "answers"'):
        read_qa(str(path), "--dev")


def test_the_command_line_turns_bad_input_into_one_error_line(tmp_path, capsys):
    path = squad_file(
        tmp_path / "bad.json", [{"id": "a", "question": "什么很甜？", "answers": [{"text": "苹果"}]}], context=""
    )
    assert main(["--train", path, "--model", "scratch:tiny", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "data[0].paragraphs[0].qas[0]" in err and "Traceback" not in err
    assert main(["--train", TRAIN, "--output", str(tmp_path / "o"), "--qa-metric", "bleu"]) == 2
    assert "--qa-metric must be cmrc2018 or squad" in capsys.readouterr().err


# ---------------------------------------------------------------- windows and labels

LONG = "".join(f"第{n}段说的是一件事。" for n in "一二三四五六七八九十" * 2)  # 200 characters


def test_windows_cover_a_long_context_and_label_the_answer_only_where_it_fits(pipeline):
    answer_at = LONG.index("第八段说的是") + 3  # "说的是一件事" of the 8th sentence
    examples = [
        QAExample("a", "说的是什么", LONG, ("说的是一件事",), ((answer_at, answer_at + 6),), where="x"),
        QAExample("b", "说的是什么", LONG, impossible=True, where="x"),
    ]
    task = QA(doc_stride=8)
    features = featurize(task, examples, pipeline, max_len=32)
    question = pipeline.encode("说的是什么").ids
    windows = [f["_window"] for f in features if f["doc"] == 0]
    assert windows[0][0] == 0 and windows[-1][1] == len(pipeline.encode(LONG).ids) and len(windows) > 5
    for (s1, e1), (s2, _) in zip(windows, windows[1:]):
        assert e1 - s2 >= 8 and s2 > s1  # consecutive windows share --doc-stride tokens (the last is shifted left)
    labelled = 0
    for f in features:
        ids, first = f["input_ids"], f["_context_start"]
        assert (
            len(ids) <= 32
            and ids[:first] == [pipeline.cls_id, *question, pipeline.sep_id]
            and ids[-1] == pipeline.sep_id
        )
        assert f["token_type_ids"] == [0] * first + [1] * (len(ids) - first)
        start, end = f["start_positions"], f["end_positions"]
        holds = f["_offsets"][0, 0] <= answer_at and answer_at + 6 <= f["_offsets"][-1, 1]
        if f["doc"] == 0 and holds:
            labelled += 1
            assert LONG[f["_offsets"][start - first, 0] : f["_offsets"][end - first, 1]] == "说的是一件事"
        else:
            assert start == end == 0  # [CLS]: not in this window, or unanswerable
    assert labelled >= 1


def test_long_questions_are_cut_and_an_input_without_room_for_context_is_an_error(pipeline, capsys):
    long_question = "说的是什么" * 8
    example = QAExample("a", long_question, LONG, ("第一段",), ((0, 3),), where="f.json: data[0]")
    features = featurize(QA(max_query_len=10), [example], pipeline, max_len=32)
    assert all(f["_context_start"] == 12 for f in features)
    assert "1 questions were longer than --max-query-len 10" in capsys.readouterr().err
    with pytest.raises(UserError, match=r"f.json: data\[0\].*no room for the context.*--max-query-len"):
        featurize(QA(max_query_len=30), [example], pipeline, max_len=32)


# ---------------------------------------------------------------- post-processing


def hand_made(windows, question_len=2, offsets=None):
    """Features of one question over a context of one character per token (or ``offsets``), and zero logits."""
    n = max(e for _, e in windows)
    offsets = np.array([(i, i + 1) for i in range(n)] if offsets is None else offsets)
    context = "".join(chr(0x4E00 + i) for i in range(offsets[-1][1]))
    first = question_len + 2
    features = [{"doc": 0, "_window": (s, e), "_context_start": first, "_offsets": offsets[s:e]} for s, e in windows]
    logits = [np.zeros((first + e - s + 1, 2), dtype=np.float32) for s, e in windows]
    return context, features, logits


def put(logits, features, k, token, start=None, end=None):
    s, first = features[k]["_window"][0], features[k]["_context_start"]
    if start is not None:
        logits[k][first + token - s, 0] = start
    if end is not None:
        logits[k][first + token - s, 1] = end


def test_a_span_across_a_window_boundary_is_scored_where_each_token_has_most_context():
    context, features, logits = hand_made([(0, 10), (5, 15)])
    put(logits, features, 0, 4, start=5)  # the start is only in window 0
    put(logits, features, 0, 9, end=6)  # window 0 would end the answer at its last token ...
    put(logits, features, 1, 11, end=5)  # ... but token 9 has more context in window 1, which ends it at 11
    put(logits, features, 1, 6, start=8)  # token 6 sits at window 1's edge: window 0 (start 0 there) decides
    [answer] = best_answers(logits, features, [context], n_best=5, max_answer_len=20, null_threshold=None)
    assert answer["answer"] == context[4:12] and answer["start"] == 4
    [short] = best_answers(logits, features, [context], n_best=5, max_answer_len=7, null_threshold=None)
    assert short["answer"] != context[4:12] and len(short["answer"]) <= 7


def test_reversed_too_long_and_question_spans_are_never_answers():
    context, features, logits = hand_made([(0, 12)])
    logits[0][1] = 100  # a question token
    put(logits, features, 0, 1, start=10)
    put(logits, features, 0, 8, end=10)
    put(logits, features, 0, 6, start=4, end=4)
    put(logits, features, 0, 10, start=30)  # the highest start, but every end is before it
    pick = lambda **kw: best_answers(logits, features, [context], **kw)[0]["answer"]  # noqa: E731
    assert pick(n_best=5, max_answer_len=8, null_threshold=None) == context[1:9]
    assert pick(n_best=5, max_answer_len=5, null_threshold=None) == context[6:9]


def test_spans_of_the_same_characters_are_listed_once():
    # '…' is normalised to '...': three tokens with the offsets of one character
    context, features, logits = hand_made([(0, 5)], offsets=[(0, 1), (1, 2), (1, 2), (1, 2), (2, 3)])
    for token in (1, 2, 3):
        put(logits, features, 0, token, start=5, end=5)
    [answer] = best_answers(logits, features, [context], n_best=3, max_answer_len=5, null_threshold=None)
    assert [e["text"] for e in answer["n_best"]] == [context[1]]  # nine token pairs, one text


def test_null_threshold_and_the_n_best_list():
    context, features, logits = hand_made([(0, 8), (4, 12)])
    for k in (0, 1):
        logits[k][0] = (3.0, 3.0) if k == 0 else (4.0, 4.0)  # null score: the lowest over the windows, 6
    put(logits, features, 0, 2, start=3, end=0)
    put(logits, features, 0, 3, end=2)  # best span 2..3, score 5
    run = lambda threshold: best_answers(logits, features, [context], 4, 10, threshold)[0]  # noqa: E731
    always = run(None)
    assert always["answer"] == context[2:4] and all(e["text"] for e in always["n_best"])
    assert run(0.0)["answer"] == "" and run(2.0)["answer"] == context[2:4]
    for result in (always, run(0.0)):
        probabilities = [e["probability"] for e in result["n_best"]]
        assert abs(sum(probabilities) - 1) < 1e-4 and probabilities == sorted(probabilities, reverse=True)
        assert len({e["text"] for e in result["n_best"]}) == len(result["n_best"]) <= 5
    assert "" in [e["text"] for e in run(0.0)["n_best"]]


def test_perfect_logits_give_back_every_gold_answer_cut_from_the_original_text(pipeline):
    """Windows, labels, offsets and post-processing agree: full-width digits and case survive."""
    task = QA(max_answer_len=64)
    examples = read_qa(TRAIN, "--train")[0] + read_qa(V2, "--train")[0]
    features = featurize(task, examples, pipeline, max_len=32)
    logits = []
    for f in features:
        example, row = examples[f["doc"]], np.zeros((len(f["input_ids"]), 2), dtype=np.float32)
        row[0] = 5  # the [CLS] score of an unanswerable question beats any span
        for start, end in example.spans[:1]:
            for t, (a, b) in enumerate(f["_offsets"]):
                row[f["_context_start"] + t] += (10 * (a <= start < b), 10 * (a < end <= b))
        logits.append(row)
    answers = task.answers(logits, features, examples, ["span", "no_answer"])
    assert [a["answer"] for a in answers] == [e.answers[0] if e.answers else "" for e in examples]
    by_id = {e.id: a["answer"] for e, a in zip(examples, answers)}
    assert by_id["TRAIN_23_1"] == "The Three-Body Problem" and by_id["TRAIN_24_1"] == "２０２２年"


# ---------------------------------------------------------------- the command line


def test_the_loss_is_the_mean_of_the_start_and_end_cross_entropies():
    """Against numpy on one batch: start targets scored on the start logits (channel 0), end on the end ones; logits
    with a different winner per channel, so swapped targets or channels change the loss."""
    import paddle
    from helpers.rounding import U

    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, size=(4, 16, 2)).astype("float32")
    starts, ends = np.array([1, 5, 0, 9]), np.array([3, 5, 0, 14])
    batch = {"start_positions": paddle.to_tensor(starts), "end_positions": paddle.to_tensor(ends)}
    loss = float(QA().loss(paddle.to_tensor(logits), batch))

    def cross_entropy(scores, targets):  # mean over the batch of -log softmax at the target, in float64
        scores = scores.astype("float64")
        top = scores.max(axis=1, keepdims=True)
        log_norm = np.log(np.exp(scores - top).sum(axis=1)) + top[:, 0]
        return float(np.mean(log_norm - scores[np.arange(len(targets)), targets]))

    expected = (cross_entropy(logits[:, :, 0], starts) + cross_entropy(logits[:, :, 1], ends)) / 2
    # float32 log-softmax over 16 positions: each term is off by at most ~(16 + 2) u of its magnitude (<= 20 here)
    assert loss == pytest.approx(expected, rel=0, abs=18 * U * 20)
    swapped = (cross_entropy(logits[:, :, 0], ends) + cross_entropy(logits[:, :, 1], starts)) / 2
    assert abs(swapped - expected) > 0.1  # the negative control: the check can tell the two apart


MEMORISE = [  # short contexts (one window at --max-len 64), answers of 2 to 6 characters
    ("白沙角灯塔建于1903年，塔高三十六米，至今仍在使用。", "灯塔是哪一年建成的？", "1903年"),
    ("青石镇距离省城约八十公里，坐火车两个小时就能到。", "青石镇距离省城有多远？", "约八十公里"),
    ("老街的路面用青色石板铺成，两旁都是木结构的老房子。", "老街的路面是用什么铺成的？", "青色石板"),
    ("竹编节每年农历三月举办，吸引了很多外地游客。", "竹编节在什么时候举办？", "每年农历三月"),
    ("新图书馆在2021年9月开放，古籍修复室在五层。", "新图书馆是什么时候开放的？", "2021年9月"),
    ("明前茶是在清明节之前采摘的茶叶，产量少，价格高。", "明前茶是在什么时候采摘的？", "清明节之前"),
    ("王老师在东湖中学教了二十年数学，学生都很喜欢他。", "王老师教什么科目？", "数学"),
    ("这座大桥全长一千二百米，连接了江的南北两岸。", "大桥全长多少米？", "一千二百米"),
]


def test_qa_training_memorises_a_small_set(tmp_path):
    """8 questions trained on and evaluated on: exact match from 0 after the first step to (nearly) all. Every answer
    is at least 2 tokens, so a span whose start and end targets were swapped is reversed and never an answer (that
    plant kept EM at 0 at every evaluation; this run reaches 100 by step 9 of 12)."""
    paragraphs = [
        {"context": c, "qas": [{"id": f"m{i}", "question": q, "answers": [{"text": a, "answer_start": c.index(a)}]}]}
        for i, (c, q, a) in enumerate(MEMORISE)
    ]
    data = tmp_path / "memorise.json"
    data.write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}, ensure_ascii=False), "utf-8")
    out = tmp_path / "run"
    args = ["--train", str(data), "--dev", str(data), "--model", "scratch:tiny", "--output", str(out)]
    args += ["--epochs", "12", "--batch-size", "8", "--lr", "3e-3", "--max-len", "64", "--threads", "1"]
    assert main([*args, "--seed", "1", "--eval-steps", "1", "--log-steps", "50"]) == 0
    rows = [json.loads(line) for line in (out / "evaluations.jsonl").read_text(encoding="utf-8").splitlines()]
    em = [row["em"] for row in rows]
    assert len(em) == 12 and em[0] <= 12.5, em  # after one step: at most one question by chance
    assert max(em) == 100.0 and em[-1] >= 87.5, em


def train_args(model, out, train, dev, *extra):
    return [
        "--train",
        train,
        "--dev",
        dev,
        "--model",
        model,
        "--output",
        str(out),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--lr",
        "2e-3",
        "--max-len",
        "64",
        "--doc-stride",
        "16",
        "--threads",
        "1",
        "--log-steps",
        "50",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("qa") / "out"
    assert main(train_args(tiny_checkpoint, out, TRAIN, DEV, "--test", V2)) == 0
    return out


def test_training_writes_the_qa_metrics_of_dev_and_test(trained):
    metrics = json.loads((trained / "metrics.json").read_text(encoding="utf-8"))
    dev, test = metrics["dev"], metrics["test"]
    # how good the answers are is not this run's claim (2 epochs of a random 2 x 32 model): that QA training learns
    # is test_qa_training_memorises_a_small_set's
    assert dev["metric"] == "cmrc2018" and dev["questions"] == 22
    assert test["questions"] == 17 and test["has_ans_questions"] == 12 and test["no_ans_questions"] == 5
    assert test["no_ans_em"] == 0.0  # trained without unanswerable questions: it always answers
    for name in ("em", "f1"):  # the whole split's score is its two kinds' scores weighted by their counts
        assert test[name] == pytest.approx((12 * test[f"has_ans_{name}"] + 5 * test[f"no_ans_{name}"]) / 17)
    assert json.loads((trained / "best" / "labels.json").read_text()) == ["span"]
    assert yaml.safe_load((trained / "best" / "ernie_ft.yaml").read_text())["run"]["task"] == {"doc_stride": 16}
    from paddlenlp.transformers import ErnieForQuestionAnswering

    assert ErnieForQuestionAnswering.from_pretrained(str(trained / "best")).classifier.weight.shape[1] == 2


def test_evaluate_reproduces_dev_metrics_from_json_and_jsonl(trained, tmp_path, capsys):
    from ernie_ft.cli import evaluate

    dev = json.loads((trained / "metrics.json").read_text(encoding="utf-8"))["dev"]
    for source in (DEV, DEV_JSONL):
        out = tmp_path / source.rsplit(".", 1)[1]
        assert evaluate(["--model", str(trained), "--input", source, "--output-dir", str(out)]) == 0
        scored = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        assert scored["em"] == pytest.approx(dev["em"]) and scored["f1"] == pytest.approx(dev["f1"])
        predictions = json.loads((out / "predictions.json").read_text(encoding="utf-8"))
        assert sorted(predictions) == sorted(e.id for e in read_qa(DEV, "--dev")[0])
    printed = capsys.readouterr().out
    assert f"CMRC 2018 metric (metrics.json): EM {dev['em']:.2f} F1 {dev['f1']:.2f}" in printed
    assert "SQuAD metric (for comparison)" in printed
    # the questions answered where another question on their context was, against the gold answers' share
    examples = read_qa(DEV, "--dev")[0]
    nbest = json.loads((tmp_path / "jsonl" / "nbest_predictions.json").read_text(encoding="utf-8"))
    contexts = [e.context for e in examples]
    share, asked = shared_answer_share(
        contexts,
        [
            next((a["start"] for a in nbest[e.id] if a["text"] == predictions[e.id] and predictions[e.id]), None)
            for e in examples
        ],
    )
    gold = shared_answer_share(contexts, [e.spans[0][0] for e in examples])[0]
    assert asked > 0 and gold < 0.5
    assert (
        f"answered at the same place as another question on the same context: {100 * share:.1f}% of the "
        f"{asked} questions that share a context (gold answers: {100 * gold:.1f}%)"
    ) in printed


def test_predict_cuts_answers_from_the_context_with_an_n_best_list(trained, tmp_path):
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "--model", str(trained), "--input", V2, "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    examples = read_qa(V2, "--input", labelled=False)[0]
    assert [r["id"] for r in records] == [e.id for e in examples]
    for record, example in zip(records, examples):
        assert record["answer"] and example.context[record["start"] :].startswith(record["answer"])
        assert record["answer"] == record["n_best"][0]["text"]
        assert abs(sum(e["probability"] for e in record["n_best"]) - 1) < 1e-3


def test_unanswerable_training_data_enables_the_null_answer(tiny_checkpoint, tmp_path):
    out = tmp_path / "v2"
    args = train_args(
        tiny_checkpoint, out, V2, V2, "--epochs", "1", "--null-threshold", "-1000", "--qa-metric", "squad"
    )
    assert main(args) == 0
    assert json.loads((out / "best" / "labels.json").read_text()) == ["span", "no_answer"]
    dev = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["dev"]
    assert dev["metric"] == "squad" and dev["no_ans_em"] == 100.0 and dev["has_ans_em"] == 0.0
    assert dev["em"] == pytest.approx(100 * 5 / 17)


def test_baseline_answers_with_the_sentence_sharing_most_characters(capsys):
    spec = importlib.util.spec_from_file_location("baseline_qa", ROOT / "benchmarks" / "baselines" / "baseline_qa.py")
    baseline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(baseline)
    context = "茶馆开业于1936年。茶馆每天早上六点开门！老茶客在这里下棋。"
    assert baseline.best_sentence("茶馆每天几点开门？", context) == "茶馆每天早上六点开门！"
    assert baseline.main(["--input", DEV]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["metric"] == "cmrc2018" and scores["questions"] == 22 and 0 < scores["f1"] < 100


# ---------------------------------------------------------------- real data


def test_cmrc2018_offsets_are_relocated_as_documented_and_a_short_run_works(tmp_path):
    trial_path, dev_path = shared("cmrc2018", "cmrc2018_trial.json"), shared("cmrc2018", "cmrc2018_dev.json")
    vocab = shared("ernie-3.0-vocab", "vocab.txt")
    trial, stats = read_qa(str(trial_path), "--train")
    assert (stats.answers, len(stats.relocated), len(stats.not_found), len(trial)) == (1002, 5, 0, 1002)
    _, stats = read_qa(str(dev_path), "--dev")
    assert stats.answers == 9657 and len(stats.relocated) + len(stats.not_found) == 200
    assert (len(stats.relocated), len(stats.not_found)) == (7, 193)

    def head(source, articles, name):  # the first articles of a split, as SQuAD JSON
        document = json.loads(source.read_text(encoding="utf-8"))
        document["data"] = document["data"][:articles]
        (tmp_path / name).write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        return str(tmp_path / name), sum(len(p["qas"]) for a in document["data"] for p in a["paragraphs"])

    out = tmp_path / "run"
    (train, _), (dev_file, questions) = head(trial_path, 6, "train.json"), head(dev_path, 4, "dev.json")
    args = [
        "--train",
        train,
        "--dev",
        dev_file,
        "--model",
        "scratch:tiny",
        "--vocab",
        str(vocab),
        "--output",
        str(out),
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--lr",
        "1e-3",
        "--max-len",
        "128",
        "--threads",
        "1",
    ]
    assert main(args) == 0
    dev = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["dev"]
    assert dev["metric"] == "cmrc2018" and dev["questions"] == questions
    # what the run answers on the real data: text cut from each question's own context, scored as the run scored it
    from ernie_ft.cli import evaluate

    assert evaluate(["--model", str(out), "--input", dev_file, "--output-dir", str(tmp_path / "scored")]) == 0
    answers = json.loads((tmp_path / "scored" / "predictions.json").read_text(encoding="utf-8"))
    contexts = {e.id: e.context for e in read_qa(dev_file, "--dev")[0]}
    assert sorted(answers) == sorted(contexts) and all(a and a in contexts[i] for i, a in answers.items())
    scored = json.loads((tmp_path / "scored" / "metrics.json").read_text(encoding="utf-8"))
    assert (scored["em"], scored["f1"]) == pytest.approx((dev["em"], dev["f1"]))
