"""The task protocol without tricks: a factory's product that is no ``TaskHooks`` gets the hooks' defaults in a
``HookedTask`` that delegates to it (its class is never reassigned), and a task without a ``name`` is named by the
spec it was loaded with."""

import json
import textwrap
from pathlib import Path

import pytest
from conftest import DATA, ROOT

from ernie_ft import build_config, fit, load_model, setup
from ernie_ft.config import DataConfig
from ernie_ft.task import HookedTask, TaskHooks, create_task, load_task

SKELETON = ROOT / "docs" / "examples" / "skeleton.py"

# A task file whose task comes from a factory: a plain class (no TaskHooks base, no name) reusing the skeleton's
# methods, one hook of its own (held_out) and every other hook missing.
FACTORY = f"""
import importlib.util

_spec = importlib.util.spec_from_file_location("skeleton_for_factory", {str(SKELETON)!r})
_skeleton = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_skeleton)
S = _skeleton.Sentiment


class Plain:
    head = "sequence"
    metric = "accuracy"
    read, fit_labels, check_labels, texts = S.read, S.fit_labels, S.check_labels, S.texts
    featurize, loss, probabilities, evaluate, predict = S.featurize, S.loss, S.probabilities, S.evaluate, S.predict

    def __init__(self, pooling="mean"):
        self.pooling = pooling
        self.held_out_calls = 0

    def held_out(self, train, data):  # its own hook: the last 4 examples are the dev set
        self.held_out_calls += 1
        return train[:-4], train[-4:]


def make_task(pooling="mean"):
    return Plain(pooling)


class Named(Plain):
    name = "my-own-name"


def make_named():
    return Named()
"""


@pytest.fixture
def factory_file(tmp_path) -> Path:
    path = tmp_path / "factory_task.py"
    path.write_text(textwrap.dedent(FACTORY), encoding="utf-8")
    return path


def test_a_factory_product_gets_the_hooks_defaults_without_changing_its_class(factory_file):
    spec = f"{factory_file}:make_task"
    task = load_task(spec, {"pooling": "max"})
    product = task.wrapped
    assert isinstance(task, HookedTask) and isinstance(task, TaskHooks)
    assert type(product).__name__ == "Plain" and not isinstance(product, TaskHooks)  # its class is its own
    assert task.name == spec and "name" not in vars(product)  # named by its spec, on the wrapper only
    assert task.pooling == "max" and task.head == "sequence"
    # the hooks' defaults, seeing the task's attributes through the wrapper
    assert task.exact_spans is False and task.model_class is None and task.input_fields == (("text",), ())
    assert task.collate([], None, 0, None) is None and task.summarize(None, {}) is None
    assert task.unused_data_settings == {} and task.bind(None) is None
    # its own hook, bound to the product
    train, dev = task.held_out(list(range(10)), DataConfig())
    assert (train, dev) == (list(range(6)), [6, 7, 8, 9]) and product.held_out_calls == 1
    # read_records's default writes a JSON Lines file for the task's own read
    examples = task.read_records([{"text": "很好吃"}, {"text": "太难吃了"}], DataConfig(), "inputs")
    assert [e.text for e in examples] == ["很好吃", "太难吃了"] and all(e.label is None for e in examples)


def test_a_task_without_a_name_is_named_by_its_spec_and_one_with_a_name_keeps_it(factory_file):
    class Nameless:
        head = "sequence"

    assert create_task(Nameless, name="pkg.mod:Nameless").name == "pkg.mod:Nameless"  # a class: a subclass instance
    assert isinstance(create_task(Nameless, name="x:y"), Nameless)
    assert load_task(f"{factory_file}:make_named").name == "my-own-name"
    assert load_task(f"{factory_file}:Plain").name == f"{factory_file}:Plain"
    sentiment = load_task(f"{SKELETON}:Sentiment")  # a TaskHooks dataclass that names itself
    assert sentiment.name == f"{SKELETON}:Sentiment" and not isinstance(sentiment, HookedTask)


def test_a_factory_task_trains_saves_and_predicts_through_the_trainer(factory_file, tmp_path):
    spec = f"{factory_file}:make_task"
    out = tmp_path / "run"
    config = build_config(
        {
            "data": {"train": str(DATA / "sentiment_train.tsv"), "max_len": 32},
            "model": {"model": "scratch:tiny"},
            "train": {"epochs": 1, "batch_size": 64, "lr": 2e-3},
        },
        {"output": str(out)},
    )
    task = load_task(spec)
    metrics = fit(setup(task, config))
    assert task.wrapped.held_out_calls == 1 and "accuracy" in metrics["dev"]  # its held_out gave the dev set
    recorded = (out / "best" / "ernie_ft.yaml").read_text(encoding="utf-8")
    assert spec in recorded  # the checkpoint names the factory: predict finds the task again
    loaded = load_model(str(out))
    assert isinstance(loaded.task, HookedTask) and loaded.task.name == spec
    labels = json.loads((out / "best" / "labels.json").read_text(encoding="utf-8"))
    assert loaded.labels == labels
    # and predicts through it: the factory's predict hook gives each text its records
    from ernie_ft import Predictor

    texts = ["房间很干净，服务也好", "太吵了，不会再来"]
    records = Predictor(str(out), device="cpu")([{"text": t} for t in texts])
    assert [r["text"] for r in records] == texts
    assert all(set(r["probs"]) == set(labels) and r["label"] == max(r["probs"], key=r["probs"].get) for r in records)
    # and exports for transformers with the declarations' defaults: a softmax over the labels of a sequence head
    from ernie_ft.cli import main

    exported = tmp_path / "hf"
    assert main(["export", "--model", str(out), "--format", "hf", "--output", str(exported)]) == 0
    hf_config = json.loads((exported / "config.json").read_text(encoding="utf-8"))
    assert hf_config["architectures"][0].endswith("ForSequenceClassification")
    assert hf_config["problem_type"] == "single_label_classification" and len(hf_config["id2label"]) == len(labels)
    assert f"--task {spec} --train" in (exported / "README.md").read_text(encoding="utf-8")  # reads no --corpus


def test_what_export_distillation_and_the_collapse_advice_ask_of_a_task_is_declared_with_defaults(factory_file):
    """A task that declares nothing (a factory's product) gets the defaults; the built-in tasks declare theirs."""
    plain = load_task(f"{factory_file}:make_task")
    assert plain.output_kind == "softmax" and plain.takes_class_weights is False and plain.distillation is None
    heads = {"token": "tags", "span": "answer_span", "mlm": "tokens", "graph": "other"}
    for head, kind in heads.items():
        assert create_task(type("Declared", (), {"head": head}), name="x:Declared").output_kind == kind, head
    expected = {  # (spec, options): (output_kind, takes_class_weights, distillation's module)
        ("classify", None): ("softmax", True, "ernie_ft.distill.task"),
        ("classify", (("multi_label", True),)): ("sigmoid", True, "ernie_ft.distill.task"),
        ("classify", (("hierarchy_separator", "-"),)): ("sigmoid", True, "ernie_ft.distill.task"),
        ("ner", None): ("tags", False, "ernie_ft.distill.ner"),
        ("ner", (("nested", True),)): ("span_scores", False, "ernie_ft.distill.nested"),
        ("qa", None): ("answer_span", False, None),
        ("pretrain", None): ("tokens", False, None),
        ("relation", None): ("other", False, None),
    }
    for (spec, options), (kind, weights, module) in expected.items():
        task = load_task(spec, dict(options or ()))
        assert (task.output_kind, task.takes_class_weights) == (kind, weights), spec
        assert (task.distillation and task.distillation.partition(":")[0]) == module, spec
