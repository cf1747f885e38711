"""python -m ernie_ft select: the pool's texts the model is least sure of, written with its predictions as a Label
Studio or doccano import (issue 49, item 3)."""

import inspect
import json
import math

import pytest
from conftest import DATA

from ernie_ft.cli import main as cli
from ernie_ft.cli import task_command
from ernie_ft.config import DataConfig
from ernie_ft.inference.selection import choose, uncertainty
from ernie_ft.task import load_task


def softmax(text, **probs):
    return {"text": text, "label": max(probs, key=probs.get), "probs": probs}


def test_each_strategy_ranks_the_unsure_texts_first():
    sure, torn, three = softmax("a", 正面=0.95, 负面=0.05), softmax("b", 正面=0.55, 负面=0.45), None
    three = softmax("c", 正面=0.4, 负面=0.35, 中性=0.25)
    assert uncertainty(sure, "least-confidence") == pytest.approx(0.05)
    assert uncertainty(torn, "margin") == pytest.approx(0.9) and uncertainty(three, "margin") == pytest.approx(0.95)
    assert uncertainty(three, "entropy") == pytest.approx(-sum(p * math.log(p) for p in (0.4, 0.35, 0.25)))
    assert choose([sure, torn, three], 2, "margin") == [2, 1]
    assert choose([sure, torn, three], 3, "least-confidence") == [2, 1, 0]
    labels = {"text": "d", "labels": ["体育"], "probs": {"体育": 0.9, "娱乐": 0.52}}  # a sigmoid per label
    assert uncertainty(labels, "margin") == pytest.approx(1 - 2 * 0.02)
    spans = {"text": "e", "entities": [{"start": 0, "end": 1, "type": "PER", "score": 0.97},
                                       {"start": 2, "end": 3, "type": "LOC", "score": 0.6}]}  # fmt: skip
    assert uncertainty(spans, "least-confidence") == pytest.approx(1 - 2 * 0.1)
    assert uncertainty({"text": "f", "entities": []}, "entropy") == 0.0
    shuffled = choose([sure, torn, three], 3, "random", seed=4)
    assert sorted(shuffled) == [0, 1, 2] and shuffled == choose([sure, torn, three], 3, "random", seed=4)


def test_margin_and_least_confidence_centre_on_the_models_threshold():
    labels = {"text": "a", "labels": ["体育"], "probs": {"体育": 0.9, "娱乐": 0.32}}  # 娱乐 just above its 0.3
    other = {"text": "b", "labels": [], "probs": {"体育": 0.52, "娱乐": 0.1}}  # 体育 just above 0.5
    at = {"体育": 0.5, "娱乐": 0.3}.get
    for strategy in ("margin", "least-confidence"):
        assert uncertainty(labels, strategy, at) == pytest.approx(1 - 0.02 / 0.7)  # (1 - p) / (1 - t) above t
        assert uncertainty(other, strategy, at) == pytest.approx(1 - 0.02 / 0.5)
        assert choose([other, labels], 2, strategy, threshold_of=at) == [1, 0]
        assert choose([other, labels], 2, strategy) == [0, 1]  # without the model's thresholds: 0.5 for both
    spans = {"text": "c", "entities": [{"start": 0, "end": 1, "type": "PER", "score": 0.82}]}
    assert uncertainty(spans, "least-confidence", lambda output: 0.8) == pytest.approx(1 - 0.02 / 0.2)
    below = {"text": "d", "labels": [], "probs": {"体育": 0.15}}
    assert uncertainty(below, "margin", lambda output: 0.3) == pytest.approx(0.5)  # p / t below it
    assert uncertainty(below, "margin", lambda output: None) == pytest.approx(0.3)  # no threshold: 0.5


def test_the_thresholds_select_centres_on_are_the_models_own():
    from ernie_ft.thresholds import DEFAULT

    tuned = load_task("classify", {"multi_label": True, "threshold": 0.4, "thresholds": '{"体育": 0.3}'})
    assert (tuned.threshold_of("体育"), tuned.threshold_of("娱乐")) == (0.3, 0.4)
    assert load_task("relation", {"threshold": 0.7}).threshold_of("作者") == 0.7
    assert load_task("ner", {"nested": True}).threshold_of("PER") == DEFAULT
    assert load_task("classify").threshold_of("正面") is None and load_task("ner").threshold_of("PER") is None
    tuned.use_threshold(0.6)  # --threshold replaces what the run learned
    assert tuned.threshold_of("体育") == 0.6


@pytest.mark.parametrize("strategy", ["entropy", "margin", "least-confidence", "random"])
def test_a_text_given_twice_in_the_pool_is_chosen_once(strategy):
    pool = [softmax(f"第{k}条评论", 正面=0.5 + k / 50, 负面=0.5 - k / 50) for k in range(10)]
    records = [dict(r) for r in pool for _ in (0, 1)]  # each line twice, as a pool joined from two exports
    chosen = choose(records, 20, strategy, seed=3)
    assert len(chosen) == 10 and len({records[i]["text"] for i in chosen}) == 10
    pairs = [{**softmax("同一个问题", 正面=0.5, 负面=0.5), "text_pair": p} for p in ("甲", "乙", "甲")]
    chosen = choose(pairs, 3, strategy)
    assert len(chosen) == 2 and {pairs[i]["text_pair"] for i in chosen} == {"甲", "乙"}  # a pair: both texts repeat


def test_diverse_compares_a_pair_by_both_texts():
    pair = lambda second: {**softmax("酸奶过期一天还能喝吗", 正面=0.5, 负面=0.5), "text_pair": second}  # noqa: E731
    records = [pair("酸奶要放冰箱吗"), pair("去机场坐地铁方便吗"), pair("酸奶要放冰箱吗？")]
    assert choose(records, 3, "margin", diverse=True) == [0, 1]  # the first text alone would keep only one


def test_diverse_skips_near_duplicates():
    records = [
        softmax("这家酒店的房间很干净", 正面=0.5, 负面=0.5),
        softmax("这家酒店的房间很干净！", 正面=0.51, 负面=0.49),
        softmax("早餐种类太少了", 正面=0.6, 负面=0.4),
    ]
    assert choose(records, 2, "margin") == [0, 1]
    assert choose(records, 2, "margin", diverse=True) == [0, 2]


def test_select_writes_the_least_sure_texts_with_their_predictions(tmp_path, capsys, monkeypatch):
    model = tmp_path / "run"
    train = ["--train", str(DATA / "sentiment_train.tsv"), "--model", "scratch:2x64", "--threads", "1", "--epochs",
             "1", "--max-len", "32", "--output", str(model)]  # fmt: skip
    assert task_command("classify")(train) == 0
    pool = str(DATA / "predict.txt")
    predictions = tmp_path / "all.jsonl"
    assert cli(["predict", "--model", str(model), "--input", pool, "--output", str(predictions)]) == 0
    records = [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()]
    least = sorted(range(len(records)), key=lambda i: (max(records[i]["probs"].values()), i))[:3]
    out = tmp_path / "next.json"
    capsys.readouterr()
    args = ["select", "--model", str(model), "--input", pool, "--size", "3", "--strategy", "least-confidence"]
    assert cli([*args, "--output", str(out)]) == 0
    assert f"chose 3 of {len(records)} texts by least-confidence" in capsys.readouterr().err
    tasks = json.loads(out.read_text(encoding="utf-8"))
    assert [t["data"]["text"] for t in tasks] == [records[i]["text"] for i in least]
    back = load_task("classify").read(str(out), DataConfig(predictions_as_labels=True), "--train")
    assert [e.label for e in back] == [records[i]["label"] for i in least]
    doccano = tmp_path / "next.jsonl"
    assert cli([*args, "--output", str(doccano), "--format", "doccano"]) == 0
    lines = [json.loads(line) for line in doccano.read_text(encoding="utf-8").splitlines()]
    assert lines == [{"text": records[i]["text"], "label": [records[i]["label"]]} for i in least]
    assert cli([*args[:-4], "--size", "0", "--output", str(out)]) == 2
    from ernie_ft.inference import predict

    loads, load = [], predict.load_for_inference
    bound = lambda *a, **k: inspect.signature(load).bind(*a, **k).arguments  # noqa: E731 (by name, not position)
    monkeypatch.setattr(predict, "load_for_inference", lambda *a, **k: loads.append(bound(*a, **k)) or load(*a, **k))
    assert cli([*args, "--output", str(out), "--threads", "1"]) == 0  # its model on one thread, as training's
    assert [arguments["threads"] for arguments in loads] == [1]
