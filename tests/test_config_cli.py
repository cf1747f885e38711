import dataclasses
import re
import subprocess
import sys

import pytest
import yaml

from ernie_ft.cli import COMMANDS
from ernie_ft.cli import main as cli_main
from ernie_ft.cli.train import parse_train_args
from ernie_ft.errors import UserError
from ernie_ft.recipes import build_config

PROG = "python -m ernie_ft.classify"


def test_flags_override_recipe_which_overrides_defaults(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"data": {"train": "t.tsv", "max_len": 64}, "train": {"epochs": 5, "lr": 1e-3}}))
    cfg = parse_train_args(["--config", str(recipe), "--epochs", "2", "--no-recompute", "--resume"], PROG, "")
    assert (cfg.data.train, cfg.data.max_len, cfg.train.epochs, cfg.train.lr) == ("t.tsv", 64, 2, 1e-3)
    assert cfg.train.recompute is False and cfg.resume is True and cfg.train.batch_size == 32


@pytest.mark.parametrize(
    "recipe,expected",
    [
        ({"train": {"epoch": 3}}, "Did you mean epochs?"),
        ({"max_len": 3}, "belongs under 'data:'"),
        ({"trian": {}}, "Did you mean train?"),
    ],
)
def test_unknown_recipe_keys_are_errors_with_a_suggestion(recipe, expected):
    with pytest.raises(UserError, match=expected):
        build_config(recipe, {})


@pytest.mark.parametrize(
    "override,message",
    [
        ({"epochs": "two"}, "--epochs: expected int"),
        ({"amp": "fp8"}, "--amp must be off, fp16 or bf16"),
        ({"stride": 100}, "--stride 100"),
        ({"window_pooling": "median"}, "mean or max"),
    ],
)
def test_bad_values_name_the_flag(override, message):
    with pytest.raises(UserError, match=message):
        build_config({}, override)


def test_unknown_flag_suggests_the_closest_and_exits_2():
    proc = subprocess.run(
        [sys.executable, "-m", "ernie_ft.classify", "--train", "x", "--epoch", "3"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "unknown flag --epoch. Did you mean --epochs?" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_answers_help(command, capsys):
    with pytest.raises(SystemExit) as stop:
        cli_main([command, "--help"])
    assert stop.value.code == 0 and "usage:" in capsys.readouterr().out


def test_help_lists_the_flags_without_importing_paddle():
    proc = subprocess.run([sys.executable, "-m", "ernie_ft.classify", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--max-len" in proc.stdout and "predict --model DIR" in proc.stdout
    check = subprocess.run(
        [sys.executable, "-c", "import sys, ernie_ft.classify, ernie_ft.cli;print('paddle' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == "False"


def test_every_unused_data_setting_is_a_real_one():
    from ernie_ft.config import DataConfig
    from ernie_ft.task import BUILTIN, resolve_task, unused_data_settings

    fields = {f.name for f in dataclasses.fields(DataConfig)}
    for name in BUILTIN:
        assert set(unused_data_settings(resolve_task(name))) <= fields, name


@pytest.mark.parametrize(
    "command,absent,present",
    [
        (
            "pretrain",
            ["--label-column", "--allow-new-labels", "--stride", "--window-pooling", "--train"],
            ["--corpus", "--text-column", "--text-pair-column", "--max-len", "--user-dict"],
        ),
        (
            "ner",
            ["--text-column", "--text-pair-column", "--label-column", "--window-pooling"],
            ["--train", "--stride", "--allow-new-labels", "--format"],
        ),
        (
            "qa",
            ["--text-column", "--text-pair-column", "--label-column", "--allow-new-labels", "--window-pooling"],
            ["--train", "--stride", "--doc-stride"],
        ),
        (
            "classify",
            [],
            ["--train", "--text-column", "--label-column", "--stride", "--window-pooling", "--allow-new-labels"],
        ),
    ],
)
def test_help_lists_only_the_settings_the_task_reads(command, absent, present, capsys):
    with pytest.raises(SystemExit):
        cli_main([command, "--help"])
    flags = set(re.findall(r"(--[a-z-]+)", capsys.readouterr().out))
    assert not flags & set(absent) and set(present) <= flags


@pytest.mark.parametrize(
    "command,argv,expected",
    [
        (
            "pretrain",
            ["--corpus", "c.txt", "--label-column", "y"],
            "--label-column does not apply to python -m ernie_ft pretrain (a pretraining corpus is unlabelled)",
        ),
        (
            "pretrain",
            ["--train", "c.txt"],
            "--train does not apply to python -m ernie_ft pretrain (its text comes from --corpus",
        ),
        (
            "ner",
            ["--train", "t.json", "--text-column=content"],
            "--text-column does not apply to python -m ernie_ft ner (NER files are read by --format",
        ),
        (
            "qa",
            ["--train", "t.json", "--window-pooling", "max"],
            "--window-pooling does not apply to python -m ernie_ft qa (",
        ),
    ],
)
def test_a_flag_the_task_never_reads_is_one_error_line_and_nothing_written(command, argv, expected, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli_main([command, *argv, "--output", str(tmp_path / "out")])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert stop.value.code == 2 and len(errors) == 1 and expected in errors[0] and errors[0].endswith("See --help.")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command,data,key",
    [
        ("pretrain", {"train": ["c.txt"], "stride": 16}, "data.stride"),
        ("ner", {"train": "t.json", "label_column": "tags"}, "data.label_column"),
        ("qa", {"train": "t.json", "allow_new_labels": True}, "data.allow_new_labels"),
    ],
)
def test_a_recipe_setting_the_task_never_reads_is_an_error_naming_it(command, data, key, tmp_path):
    from ernie_ft.task import resolve_task

    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"data": data}))
    with pytest.raises(
        UserError,
        match=rf"--config {re.escape(str(recipe))}: '{key}' does not apply to this command "
        r"\(.+\); remove it",
    ):
        parse_train_args(["--config", str(recipe)], f"python -m ernie_ft.{command}", "", resolve_task(command))
