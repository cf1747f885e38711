"""The command line as a package of commands: each owns its flags, shared flags are defined once, the
library gets typed options, other toolkits' spellings get ernie_ft's, and a custom task's checkpoint
loads from any directory without ever running code found inside it."""

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import DATA, ROOT

from ernie_ft import cli
from ernie_ft.cli.parsers import OTHER_SPELLINGS

INTENT = "tasks/multilabel_intent.py:MultiLabelIntent"


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


# ---------------------------------------------------------------- each command, its module and its flags


@pytest.mark.parametrize("name", ["predict", "evaluate", "export", "vocab", "serve", "train"])
def test_every_command_has_a_module_with_its_parser_and_handler(name):
    import importlib

    module = importlib.import_module(f"ernie_ft.cli.{name}")
    assert callable(module.build_parser) and callable(module.run)


def test_shared_flag_texts_exist_once_in_the_code():
    sources = [p.read_text(encoding="utf-8") for p in (ROOT / "ernie_ft").rglob("*.py")]
    assert sum(s.count("which can run code") for s in sources) == 1  # --trust-pickle's help: the config field's
    engines = (
        r"""["']auto["'],\s*["']onnxruntime-int8["'],\s*["']onnxruntime["'],\s*["']inference["'],\s*["']dygraph["']"""
    )
    assert sum(len(re.findall(engines, s)) for s in sources) == 1


@pytest.mark.parametrize("command", ["predict", "evaluate", "export", "serve"])
def test_inference_commands_share_the_flag_definitions_and_take_task(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--task SPEC" in text and "which can run code: only for a source you trust" in text
    if command != "export":
        assert "{auto,onnxruntime-int8,onnxruntime,inference,dygraph}" in text and "cpu, gpu, gpu:N, or auto" in text


def test_serve_limit_flags_come_from_the_limits_fields_and_their_docstrings(capsys):
    from ernie_ft.recipes import field_docs
    from ernie_ft.serving.limits import Limits

    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for f in dataclasses.fields(Limits):
        first_words = " ".join(field_docs(Limits)[f.name].split()[:4])
        assert f"--{f.name.replace('_', '-')}" in text and first_words in text
    assert (
        "(0: on a CPU 16 with Paddle, 4 with ONNX Runtime; --max-batch-size on a GPU)" in text
    )  # ``names`` in a docstring read as a user would
    args = cli.serve_command.build_parser("serve").parse_args(["--model", "m", "--max-wait-ms", "2.5"])
    assert args.max_wait_ms == 2.5 and args.max_queue == Limits().max_queue


def test_a_flag_inherited_by_a_task_subclass_keeps_its_docstring_as_help(capsys):
    """distill's student settings are Classification's fields on Distillation, a subclass: their help is the
    docstring under the field where Classification declares it."""
    from ernie_ft.classify.task import Classification
    from ernie_ft.distill.task import Distillation
    from ernie_ft.recipes import field_docs

    assert field_docs(Distillation)["top_k"] == field_docs(Classification)["top_k"] != ""
    assert "Softmax temperature" in field_docs(Distillation)["temperature"]  # the subclass's own fields too
    with pytest.raises(SystemExit):
        cli.main(["distill", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("threshold", "tune_thresholds", "top_k"):
        assert " ".join(field_docs(Classification)[name].split()[2:6]) in text, name  # after "With --multi-label:"


# ---------------------------------------------------------------- typed options at the boundary


@pytest.fixture
def captured(monkeypatch):
    """The options each library function receives from the command line (the functions do not run)."""
    import ernie_ft.inference.evaluate
    import ernie_ft.inference.export
    import ernie_ft.inference.predict

    calls = {}
    monkeypatch.setattr(cli, "check_paths", lambda args: None)  # the paths here are names, not files
    monkeypatch.setattr(ernie_ft.inference.predict, "predict", lambda options: calls.setdefault("predict", options))
    monkeypatch.setattr(ernie_ft.inference.evaluate, "evaluate", lambda options: calls.setdefault("evaluate", options))
    monkeypatch.setattr(ernie_ft.inference.export, "export", lambda *a, **k: calls.setdefault("export", (a, k)) and "x")
    return calls


def test_predict_gets_frozen_options_and_the_command_decides_fill_mask_and_task(captured):
    from ernie_ft.inference.predict import PredictOptions

    assert cli.main(["pretrain", "predict", "--model", "m", "--input", "i.txt", "--top-k", "3"]) == 0
    options = captured.pop("predict")
    assert isinstance(options, PredictOptions) and options.fill_mask and options.top_k == 3 and options.task is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.model = "other"
    assert cli.main(["--task", INTENT, "predict", "--model", "m", "--input", "i.txt"]) == 0
    options = captured.pop("predict")
    assert options.task == INTENT and not options.fill_mask  # a custom task named by the user is the task
    assert cli.main(["predict", "--model", "m", "--input", "i.txt", "--task", "x.py:T", "--batch-size", "8"]) == 0
    assert dataclasses.asdict(captured.pop("predict")) == dataclasses.asdict(
        PredictOptions(model="m", input="i.txt", batch_size=8, task="x.py:T")
    )


def test_evaluate_and_export_get_values_not_a_namespace(captured):
    from ernie_ft.inference.evaluate import EvaluateOptions

    assert cli.main(["evaluate", "--model", "m", "--input", "d.csv", "--allow-new-labels", "--task", "x.py:T"]) == 0
    assert captured["evaluate"] == EvaluateOptions(model="m", input="d.csv", allow_new_labels=True, task="x.py:T")
    assert cli.main(["export", "--model", "m", "--output", "o", "--task", "x.py:T"]) == 0
    export_options = {
        "overwrite": False,
        "trust_pickle": False,
        "task": "x.py:T",
        "format": "paddle",
        "quantize": None,
        "calibration": None,
        "verbose": False,
    }
    assert captured["export"] == (("m", "o"), export_options)


def test_serve_gets_limits_built_from_its_flags_and_the_task(monkeypatch):
    import ernie_ft.serving
    from ernie_ft.serving.limits import Limits

    calls = []
    monkeypatch.setattr(ernie_ft.serving, "serve", lambda *a, **k: calls.append((a, k)) or 0)
    assert cli.main(["serve", "--model", "m", "--task", "x.py:T", "--max-queue", "3", "--port", "9000"]) == 0
    ((args, kwargs),) = calls
    assert args == ("m", "127.0.0.1", 9000, "auto", "auto", Limits(max_queue=3))
    assert kwargs == {
        "export": None, "calibration": None, "workers": 1, "trust_pickle": False, "task": "x.py:T", "name": None,
        "threshold": None,
        "auth": None, "label_studio": None,  # no password, no training from Label Studio: the defaults
    }  # fmt: skip


# ---------------------------------------------------------------- other toolkits' spellings


@pytest.mark.parametrize(
    "flag,ours",
    [
        ("--learning_rate", "--lr"),
        ("--learning-rate", "--lr"),
        ("--num_train_epochs", "--epochs"),
        ("--per_device_train_batch_size", "--batch-size"),
        ("--max_seq_length", "--max-len"),
        ("--output_dir", "--output"),
        ("--model_name_or_path", "--model"),
        ("--warmup_ratio", "--warmup"),
        ("--weight_decay", "--weight-decay"),
        ("--gradient_accumulation_steps", "--grad-accum"),
        ("--fp16", "--amp fp16"),
    ],
)
def test_another_toolkits_spelling_is_told_ernie_fts_flag(flag, ours, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["classify", "--train", "t.tsv", flag, "1"])
    assert stop.value.code == 2
    assert error_lines(capsys) == [f"error: unknown flag {flag}; ernie_ft calls it {ours}. See --help."]


def test_several_foreign_spellings_are_named_in_one_line_and_each_command_maps_to_its_own_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["classify", "--learning_rate=2e-5", "--num_train_epochs", "3"])
    assert error_lines(capsys) == [
        "error: unknown flags --learning_rate, --num_train_epochs; ernie_ft calls them --lr, --epochs. See --help."
    ]
    with pytest.raises(SystemExit):
        cli.main(["evaluate", "--model", "m", "--input", "i", "--output_dir", "e"])
    assert error_lines(capsys) == ["error: unknown flag --output_dir; ernie_ft calls it --output. See --help."]
    with pytest.raises(SystemExit):  # no --lr in predict: a plain unknown flag
        cli.main(["predict", "--model", "m", "--input", "i", "--learning_rate", "1"])
    assert error_lines(capsys) == ["error: unknown flag --learning_rate. See --help."]


def test_every_spelling_in_the_table_leads_to_a_real_flag():
    parsers = [cli.train_command.build_parser("p", ""), cli.predict_command.build_parser("p")]
    flags = {s for parser in parsers for action in parser._actions for s in action.option_strings}
    for theirs, ours in OTHER_SPELLINGS.items():
        assert theirs not in flags and ours.split()[0] in flags, theirs


# ---------------------------------------------------------------- custom tasks from anywhere


def test_a_task_is_recorded_so_that_it_loads_from_any_directory(tmp_path, monkeypatch):
    import ernie_ft.classify.task  # noqa: F401  (imported, as training imports the task it names)
    from ernie_ft.task import recorded_spec

    monkeypatch.chdir(ROOT)
    assert recorded_spec("classify") == "classify"
    assert recorded_spec(INTENT) == f"{ROOT}/{INTENT}"  # a file loaded by path: its absolute path
    assert recorded_spec("ernie_ft.classify.task:Classification") == "ernie_ft.classify.task:Classification"
    project = tmp_path / "project"
    project.mkdir()
    (project / "local_intent.py").write_text("class Intent:\n    pass\n", encoding="utf-8")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))  # as python -m puts the working directory first
    __import__("local_intent")
    assert recorded_spec("local_intent:Intent") == f"{project}/local_intent.py:Intent"  # importable only here


@pytest.fixture(scope="module")
def intent_run(tmp_path_factory):
    """A multi-label intent model trained from the repository's root with the task named relative to it."""
    out = tmp_path_factory.mktemp("intent") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        args = ["--task", INTENT, "--train", "data/intent_train.jsonl", "--model", "scratch:tiny", "--epochs", "1"]
        assert cli.main([*args, "--batch-size", "16", "--lr", "2e-3", "--threads", "1", "--output", str(out)]) == 0
    return out


def predict_records(model, source, out, *extra) -> list[dict]:
    status = cli.main(["predict", "--model", str(model), "--input", str(source), "--output", str(out), *extra])
    assert status == 0
    return [json.loads(line) for line in Path(out).read_text(encoding="utf-8").splitlines()]


def set_task(model_dir: Path, spec: str) -> None:
    meta = yaml.safe_load((model_dir / "ernie_ft.yaml").read_text(encoding="utf-8"))
    (model_dir / "ernie_ft.yaml").write_text(yaml.safe_dump({**meta, "task": spec}, allow_unicode=True), "utf-8")


def test_a_custom_tasks_checkpoint_predicts_from_another_directory_with_or_without_task(
    intent_run, tmp_path, monkeypatch
):
    assert yaml.safe_load((intent_run / "best" / "ernie_ft.yaml").read_text())["task"] == f"{ROOT}/{INTENT}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    source = DATA / "intent_dev.jsonl"
    records = predict_records(intent_run, source, "a.jsonl")
    assert set(records[0]["probs"]) == set(json.loads((intent_run / "best" / "labels.json").read_text()))
    relative = os.path.relpath(ROOT / INTENT.partition(":")[0]) + ":MultiLabelIntent"  # the user points at it
    assert predict_records(intent_run, source, "b.jsonl", "--task", relative) == records
    scored = ["--output", str(tmp_path / "scored"), "--task", f"{ROOT}/{INTENT}"]  # not beside the input, in data/
    assert cli.main(["evaluate", "--model", str(intent_run), "--input", str(source), *scored]) == 0


def test_a_moved_task_file_is_named_with_the_way_out_and_task_finds_it(intent_run, tmp_path, monkeypatch, capsys):
    model = tmp_path / "model"
    shutil.copytree(intent_run / "best", model)
    moved = tmp_path / "gone" / "intent.py"
    set_task(model, f"{moved}:MultiLabelIntent")  # trained from a file that is no longer there
    source = DATA / "intent_dev.jsonl"
    monkeypatch.chdir(tmp_path)
    assert cli.main(["predict", "--model", str(model), "--input", str(source)]) == 2
    (line,) = error_lines(capsys)
    assert f"{moved}:MultiLabelIntent" in line and "pass --task path/to/file.py:Class" in line
    shutil.copy(ROOT / INTENT.partition(":")[0], tmp_path / "intent.py")
    records = predict_records(model, source, "p.jsonl", "--task", "intent.py:MultiLabelIntent")
    assert (
        cli.main(["export", "--model", str(model), "--output", "exported", "--task", "intent.py:MultiLabelIntent"]) == 0
    )
    assert yaml.safe_load((tmp_path / "exported" / "ernie_ft.yaml").read_text())["task"] == (
        f"{tmp_path}/intent.py:MultiLabelIntent"  # the export records the task it was given, found from anywhere
    )
    monkeypatch.chdir(model)
    exported = predict_records(tmp_path / "exported", source, tmp_path / "e.jsonl")
    assert [r["labels"] for r in exported] == [r["labels"] for r in records]


def test_an_old_relative_spec_loads_from_where_it_was_trained_only(intent_run, tmp_path, monkeypatch, capsys):
    model = tmp_path / "model"
    shutil.copytree(intent_run / "best", model)
    set_task(model, INTENT)  # as ernie_ft 0.2 recorded it
    monkeypatch.chdir(ROOT)
    assert predict_records(model, DATA / "intent_dev.jsonl", tmp_path / "p.jsonl")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["predict", "--model", str(model), "--input", str(DATA / "intent_dev.jsonl")]) == 2
    (line,) = error_lines(capsys)
    assert f"the task it was trained with, {INTENT}, is not found" in line and f"relative to {tmp_path}" in line
    assert "--task path/to/file.py:Class" in line


SIDE_EFFECT = 'open(__file__ + ".ran", "w").close()  # what any code in a shared checkpoint could do\n'


def test_task_code_inside_a_checkpoint_is_refused_unless_named_with_task(intent_run, tmp_path, monkeypatch, capsys):
    shared = tmp_path / "shared"
    shutil.copytree(intent_run / "best", shared)
    planted = shared / "intent.py"
    planted.write_text(SIDE_EFFECT + (ROOT / INTENT.partition(":")[0]).read_text(encoding="utf-8"), "utf-8")
    source = str(DATA / "intent_dev.jsonl")
    for spec, cwd in ((f"{planted}:MultiLabelIntent", tmp_path), ("intent.py:MultiLabelIntent", shared)):
        set_task(shared, spec)  # an absolute path into it, or a relative one that resolves into it
        monkeypatch.chdir(cwd)
        assert cli.main(["predict", "--model", str(shared), "--input", source]) == 2
        (line,) = error_lines(capsys)
        assert "is code inside the checkpoint" in line and "a shared checkpoint must not run code" in line
        assert f"--task {planted}:MultiLabelIntent" in line
        assert not Path(f"{planted}.ran").exists()
    monkeypatch.chdir(tmp_path)
    assert predict_records(shared, source, "p.jsonl", "--task", f"{planted}:MultiLabelIntent")  # the user's choice
    assert Path(f"{planted}.ran").exists()


def test_a_module_spec_found_inside_the_checkpoint_is_refused_too(intent_run, tmp_path, monkeypatch, capsys):
    shared = tmp_path / "shared"
    shutil.copytree(intent_run / "best", shared)
    (shared / "planted_task.py").write_text(SIDE_EFFECT, encoding="utf-8")
    set_task(shared, "planted_task:Task")
    monkeypatch.chdir(shared)
    monkeypatch.syspath_prepend(str(shared))  # python -m run inside it puts it first on the path
    assert cli.main(["predict", "--model", ".", "--input", str(DATA / "intent_dev.jsonl")]) == 2
    (line,) = error_lines(capsys)
    assert "planted_task:Task is code inside the checkpoint" in line
    assert not (shared / "planted_task.py.ran").exists()
