"""Which student a teacher gets: the distillation its task declares (``TaskHooks.distillation``), asked of the task the
checkpoint recorded (its class and options), never of the task's name. The checkpoints are the committed v0.1
fixtures with their recorded task rewritten; nothing is trained."""

import shutil
import textwrap

import pytest
import yaml
from conftest import ROOT

from ernie_ft.distill import teacher as teachers
from ernie_ft.distill.ner import NerDistillation
from ernie_ft.distill.nested import NestedNerDistillation
from ernie_ft.distill.task import Distillation, student_task
from ernie_ft.errors import UserError

V01 = ROOT / "tests" / "fixtures" / "v0.1"

# Task files outside the checkpoints (code inside a checkpoint is never imported). Their names say nothing of
# classification or NER: what they declare does.
TASKS = """
from dataclasses import dataclass

from ernie_ft.classify.task import Classification


@dataclass
class Intent(Classification):  # a classification task under its own name: it inherits Classification's declarations
    name: str = ""  # named by its spec


class Plain:  # a task that declares nothing: TaskHooks' defaults
    name = ""
    head = "sequence"
    metric = "accuracy"


class Tagger(Plain):  # a task that names the NER student's task as its distillation
    head = "token"
    distillation = "ernie_ft.distill.ner:NerDistillation"
"""


@pytest.fixture
def task_file(tmp_path):
    path = tmp_path / "code" / "my_tasks.py"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(TASKS), encoding="utf-8")
    return path


def checkpoint(tmp_path, source, name: str, task: str | None = None, options: dict | None = None) -> str:
    """A copy of the checkpoint ``source`` whose ernie_ft.yaml records ``task`` (the recorded one if None) and the
    task options ``options`` (the recorded ones if None)."""
    path = tmp_path / name
    shutil.copytree(source, path)
    recorded = yaml.safe_load((path / "ernie_ft.yaml").read_text(encoding="utf-8"))
    recorded["task"] = task or recorded["task"]
    if options is not None:
        recorded["run"]["task"] = options
    (path / "ernie_ft.yaml").write_text(yaml.safe_dump(recorded, allow_unicode=True), encoding="utf-8")
    return str(path)


def test_each_teacher_gets_the_student_its_task_declares(tmp_path, task_file):
    classifier = V01 / "classify" / "best"
    cases = {  # name: (the checkpoint's source, its recorded task (None: as it is), its options, the student)
        "classify": (classifier, None, None, Distillation),
        "multi": (classifier, None, {"multi_label": True}, Distillation),
        "flat": (V01 / "ner", None, {"crf": False}, NerDistillation),
        "nested": (V01 / "ner", None, {"nested": True}, NestedNerDistillation),
        "intent": (classifier, f"{task_file}:Intent", None, Distillation),
        "tagger": (V01 / "ner", f"{task_file}:Tagger", {}, NerDistillation),
    }
    made = {}
    for name, (source, task, options, expected) in cases.items():
        made[name] = directory = checkpoint(tmp_path, source, name, task, options)
        assert teachers.teacher_dir(directory) == directory
        assert teachers.student_class(directory) is expected, name
    # the student's settings follow the class: a multi-label teacher's label sets, an NER student's data settings
    assert student_task({"teacher": made["multi"]}).sets and not student_task({"teacher": made["classify"]}).sets
    assert set(teachers.inherited_data(made["flat"], {})) == {"max_len"}  # the fixture's stride is None; no columns
    assert {"label_column", "window_pooling"} <= set(teachers.inherited_data(made["classify"], {}))
    assert type(student_task({"teacher": made["nested"]})) is NestedNerDistillation


def test_a_task_that_declares_no_distillation_or_a_crf_tagger_is_refused_in_one_line(tmp_path, task_file):
    plain = checkpoint(tmp_path, V01 / "classify" / "best", "plain", task=f"{task_file}:Plain", options={})
    with pytest.raises(UserError, match=rf"^--teacher {plain}: a {task_file}:Plain checkpoint; distill takes .*"
                       r"TaskHooks\.distillation"):  # fmt: skip
        teachers.teacher_dir(plain)
    crf = checkpoint(tmp_path, V01 / "ner", "crf")  # the fixture as it is: a CRF tagger
    with pytest.raises(UserError, match="an NER run trained with --crf; distill takes an NER teacher without --crf"):
        teachers.teacher_dir(crf)
