"""Nothing silent: the results a user could take for right get a warning that says what to try (issue #47): a
relation model that predicts no triple or none right, labels never predicted right on dev, labels with few training
examples, relation entities widened to whole tokens."""

import json

import pytest

from ernie_ft.classify import Classification
from ernie_ft.config import DataConfig
from ernie_ft.data.readers import Example
from ernie_ft.label_set import FEW_EXAMPLES
from ernie_ft.ner import NER
from ernie_ft.relation.formats import RelationExample
from ernie_ft.relation.task import Relation
from ernie_ft.training.runlog import collapsed


def relation_metrics(predicted: int, right: int, gold: int) -> dict:
    from ernie_ft.relation import decoding

    p, r = (right / predicted if predicted else 0.0), (right / gold if gold else 0.0)
    return {**{f"triple_{k}": v for k, v in decoding.prf(right, predicted, gold).items()}, "predicted_triples":
            predicted, "gold_triples": gold, "entity_f1": 0.5, "triple_precision": p, "triple_recall": r}  # fmt: skip


def test_a_relation_model_that_finds_no_triple_or_none_right_is_warned_about():
    assert "no triple was predicted" in collapsed(relation_metrics(0, 0, 12))
    assert "--tune-thresholds" in collapsed(relation_metrics(0, 0, 12))
    assert "none of the 40 predicted triples is right" in collapsed(relation_metrics(40, 0, 12))
    assert collapsed(relation_metrics(40, 1, 12)) is None
    assert collapsed(relation_metrics(0, 0, 0)) is None  # a split without triples: nothing to find
    assert "--tune-thresholds" not in collapsed({**relation_metrics(0, 0, 12), "threshold": 0.05})  # it tuned


def test_labels_never_predicted_right_on_dev_are_named():
    def row(precision, recall, support):
        return {"precision": precision, "recall": recall, "f1": 0.0, "support": support}

    per_class = {"体育": row(0.9, 0.8, 10), "娱乐": row(0.0, 0.0, 6), "财经": row(0.0, 0.0, 4), "教育": row(0, 0, 0)}
    what = collapsed({"micro_f1": 0.6, "per_class": per_class})
    assert what.startswith("2 of the 3 labels in the split were never predicted right (F1 0: 娱乐, 财经")
    per_class["娱乐"] = per_class["财经"] = row(0.5, 0.5, 5)
    assert collapsed({"micro_f1": 0.6, "per_class": per_class}) is None


@pytest.mark.parametrize("multi_label", [False, True])
def test_labels_with_few_training_examples_are_named(capsys, multi_label):
    many, few = FEW_EXAMPLES, FEW_EXAMPLES - 1
    labels = ["正面"] * many + ["负面"] * many + ["中性"] * few + ["其他"]

    def example(i, label):
        return Example(f"文本{i}", None, (label,) if multi_label else label, i + 1, "train.tsv")

    task = Classification(multi_label=multi_label)
    task.fit_labels([example(i, label) for i, label in enumerate(labels)])
    err = capsys.readouterr().err
    assert (
        f"warning: train.tsv: 2 of 4 labels have fewer than {FEW_EXAMPLES} training examples (其他 1, 中性 {few})"
        in err
    )
    task.fit_labels([example(i, label) for i, label in enumerate(labels[: 2 * many])])
    assert "warning" not in capsys.readouterr().err


def test_entity_types_and_relation_classes_with_few_examples_are_named(capsys):
    from ernie_ft.ner.formats import NerExample

    NER().fit_labels([NerExample("张三在北京", ((0, 2, "人物"), (3, 5, "地点")), 1, "ner.json")])
    assert "warning: ner.json: 2 of 2 entity types have fewer than" in capsys.readouterr().err
    triple = (((0, 2, "人物"), "出生地 (人物→地点)", (5, 7, "地点")),)
    Relation().fit_labels([RelationExample("张三出生于北京", triple, (), 1, "duie.jsonl")])
    assert "warning: duie.jsonl: 1 of 1 relation classes have fewer than" in capsys.readouterr().err


def test_relation_entities_widened_to_whole_tokens_are_counted(tmp_path, capsys):
    """An entity whose edge falls inside a token (part of a Latin word piece) is learnt as the whole token: a note
    counts and shows them, as NER's does."""
    from ernie_ft.text.pipeline import TextPipeline

    text = "马云创办了Alibaba公司"
    triples = (((0, 2, "人物"), "创始人 (企业→人物)", (5, 10, "企业")),)  # "Aliba": a part of the word
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"马云创办了公司", "alibaba"]) + "\n")
    pipeline = TextPipeline(str(vocab), exact_spans=True)
    encoding = pipeline.encode(text)
    assert any(b - a > 1 for a, b in encoding.offsets)  # a token longer than a character holds "Alibaba"
    example = RelationExample(text, triples, (), 3, "rel.jsonl")
    Relation().featurize([example], [encoding], pipeline, ["创始人 (企业→人物)"], DataConfig(max_len=32))
    err = capsys.readouterr().err
    assert "note: rel.jsonl: 1 entities start or end inside a token" in err and "line 3: 'Aliba' [5, 10)" in err
    whole = (((0, 2, "人物"), "创始人 (企业→人物)", (5, 12, "企业")),)
    Relation().featurize([RelationExample(text, whole, (), 3, "r")], [encoding], pipeline, ["创始人 (企业→人物)"],
                         DataConfig(max_len=32))  # fmt: skip
    assert "inside a token" not in capsys.readouterr().err


def test_a_triple_given_twice_is_kept_once_and_counted(tmp_path, capsys):
    from ernie_ft.relation.formats import read_relations

    spo = {"subject": "姚明", "predicate": "出生地", "object": "上海", "subject_type": "人物", "object_type": "地点"}
    path = tmp_path / "twice.jsonl"
    path.write_text(json.dumps({"text": "姚明出生于上海。", "spo_list": [spo, spo]}, ensure_ascii=False) + "\n")
    [example] = read_relations(str(path), "--train")
    assert len(example.triples) == 1
    assert "1 triples given twice in a text (kept once)" in capsys.readouterr().err
