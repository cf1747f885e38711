"""Every shipped recipe and example task loads; each recipe starts with the command that runs it."""

import pytest
from conftest import ROOT

from ernie_ft.models.modeling import HEADS
from ernie_ft.recipes import build_config, load_recipe
from ernie_ft.task import BUILTIN, load_task, resolve_task, task_options

RECIPES = sorted((ROOT / "tasks").glob("*.yaml"))


def test_there_are_recipes():
    assert {p.name for p in RECIPES} >= {"chnsenticorp.yaml", "sample_sentiment.yaml"}


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_is_valid_and_names_its_command(recipe):
    first = recipe.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# python -m ernie_ft") and f"--config tasks/{recipe.name}" in first
    words = first.split()  # "# python -m ernie_ft.qa ..." or "# python -m ernie_ft --task X ..."
    spec = words[3].split(".", 1)[1] if "." in words[3] else words[words.index("--task") + 1]
    config = build_config(load_recipe(str(recipe)), {}, task_fields=task_options(resolve_task(spec)))
    assert config.data.train
    for path in (config.data.train, config.data.dev, config.data.test, config.model.vocab):
        if path and not path.startswith("../shared"):
            assert (ROOT / path).is_file(), path


EXAMPLE_TASKS = ["tasks/multilabel_intent.py:MultiLabelIntent"]


def test_every_example_task_file_is_covered():
    assert {spec.split(":")[0] for spec in EXAMPLE_TASKS} == {
        str(p.relative_to(ROOT)) for p in (ROOT / "tasks").glob("*.py")
    }


@pytest.mark.parametrize("spec", [*BUILTIN, *EXAMPLE_TASKS])
def test_task_loads_and_follows_the_protocol(spec, monkeypatch):
    monkeypatch.chdir(ROOT)
    task = load_task(spec)
    for attribute in (
        "name",
        "head",
        "metric",
        "read",
        "fit_labels",
        "check_labels",
        "texts",
        "featurize",
        "loss",
        "evaluate",
        "predict",
    ):
        assert hasattr(task, attribute), attribute
    assert task.head in HEADS or task.model_class, "a head without a PaddleNLP class needs the task's model_class"
