import subprocess
import sys

import pytest
import yaml

from ernie_ft.args import parse_train_args
from ernie_ft.cli import COMMANDS, main as cli_main
from ernie_ft.config import build_config
from ernie_ft.errors import UserError

PROG = "python -m ernie_ft.classify"


def test_flags_override_recipe_which_overrides_defaults(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"data": {"train": "t.tsv", "max_len": 64}, "train": {"epochs": 5, "lr": 1e-3}}))
    cfg = parse_train_args(["--config", str(recipe), "--epochs", "2", "--no-recompute", "--resume"], PROG, "")
    assert (cfg.data.train, cfg.data.max_len, cfg.train.epochs, cfg.train.lr) == ("t.tsv", 64, 2, 1e-3)
    assert cfg.train.recompute is False and cfg.resume is True and cfg.train.batch_size == 32


@pytest.mark.parametrize("recipe,expected", [
    ({"train": {"epoch": 3}}, "Did you mean epochs?"),
    ({"max_len": 3}, "belongs under 'data:'"),
    ({"trian": {}}, "Did you mean train?"),
])
def test_unknown_recipe_keys_are_errors_with_a_suggestion(recipe, expected):
    with pytest.raises(UserError, match=expected):
        build_config(recipe, {})


@pytest.mark.parametrize("override,message", [
    ({"epochs": "two"}, "--epochs: expected int"),
    ({"amp": "fp8"}, "--amp must be off, fp16 or bf16"),
    ({"stride": 100}, "--stride 100"),
    ({"window_pooling": "median"}, "mean or max"),
])
def test_bad_values_name_the_flag(override, message):
    with pytest.raises(UserError, match=message):
        build_config({}, override)


def test_unknown_flag_suggests_the_closest_and_exits_2():
    proc = subprocess.run([sys.executable, "-m", "ernie_ft.classify", "--train", "x", "--epoch", "3"],
                          capture_output=True, text=True)
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
    check = subprocess.run([sys.executable, "-c", "import sys, ernie_ft.classify, ernie_ft.cli;"
                            "print('paddle' in sys.modules)"], capture_output=True, text=True)
    assert check.stdout.strip() == "False"
