"""Every user mistake: one clear message naming the file, line or flag, exit status 2, nothing lost."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import DATA

from ernie_ft.cli import task_command

main = task_command("classify")

TRAIN, DEV = str(DATA / "sentiment_train.tsv"), str(DATA / "sentiment_dev.tsv")


def run(capsys, *args):
    code = main(list(args))
    err = capsys.readouterr().err
    return code, err


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding))
    return str(path)


def base(out, train=TRAIN, *extra):
    return [
        "--train",
        train,
        "--model",
        "scratch:tiny",
        "--output",
        str(out),
        "--epochs",
        "1",
        "--threads",
        "1",
        *extra,
    ]


@pytest.mark.parametrize(
    "name,content,expected",
    [
        ("missing.tsv", None, ["--train", "missing.tsv", "not found"]),
        ("empty.tsv", "\n\n", ["empty.tsv", "empty"]),
        ("short_row.tsv", "label\ttext_a\n正面\t很好\n负面\n", ["short_row.tsv:3", "expected 2 fields"]),
        ("empty_text.tsv", "label\ttext_a\n正面\t很好\n负面\t  \n", ["empty_text.tsv:3", "empty text"]),
        ("gbk.tsv", ("label\ttext_a\n正面\t房间很干净\n负面\t服务太差\n", "gbk"), ["not UTF-8", "GBK", "iconv"]),
        ("one_label.tsv", "label\ttext_a\n正面\t很好\n正面\t不错\n", ["one_label.tsv", "at least two labels"]),
    ],
)
def test_bad_training_files(tmp_path, capsys, name, content, expected):
    path = tmp_path / name
    if content is not None:
        text, encoding = content if isinstance(content, tuple) else (content, "utf-8")
        write(path, text, encoding)
    code, err = run(capsys, *base(tmp_path / "out", str(path)))
    assert code == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for fragment in expected:
        assert fragment in err
    assert not (tmp_path / "out").exists()  # nothing was created for a run that could not start


def test_missing_column_lists_the_columns_found(tmp_path, capsys):
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--text-column", "review"))
    assert code == 2 and "--text-column" in err and "review" in err and "text_a" in err and "label" in err


def test_unknown_dev_label_is_an_error_unless_allowed(tmp_path, capsys):
    dev = write(tmp_path / "dev.tsv", "label\ttext_a\n正面\t很好\n中性\t还行吧\n")
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--dev", dev))
    assert code == 2 and "dev.tsv:3" in err and "中性" in err and "--allow-new-labels" in err
    code, _ = run(capsys, *base(tmp_path / "out", TRAIN, "--dev", dev, "--allow-new-labels"))
    assert code == 0


def test_max_len_above_the_models_position_limit(tmp_path, capsys, tiny_checkpoint):
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--model", tiny_checkpoint, "--max-len", "300"))
    assert code == 2 and "--max-len 300" in err and "256" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "model,expected",
    [
        ("./no/such/dir", ["directory not found"]),
        ("scratch:huge", ["unknown scratch preset", "scratch:tiny"]),
    ],
)
def test_models_that_cannot_be_had(tmp_path, capsys, model, expected):
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--model", model))
    assert code == 2
    for fragment in expected:
        assert fragment in err


HUB_DOWN = "planted by the test: the hub cannot be reached"


@pytest.fixture
def unreachable_hub(tmp_path, monkeypatch):
    """PaddleNLP's home under the test's directory and every HTTP request it makes failing as the test says: the
    URLs asked for, in order. Nothing is downloaded, with or without a network, and nothing is left in ~/.paddlenlp.
    PaddleNLP reads PPNLP_HOME once, when it is imported (paddlenlp.utils.env), so the modules that copied its
    MODEL_HOME get the test's one too."""
    import importlib

    import requests

    modules = ("paddlenlp.utils.env", "paddlenlp.utils.download.bos_download", "paddlenlp.transformers.utils")

    home = tmp_path / "paddlenlp"
    monkeypatch.setenv("PPNLP_HOME", str(home))
    for module in modules:  # the package re-exports a function named bos_download: import the module by its path
        monkeypatch.setattr(importlib.import_module(module), "MODEL_HOME", str(home / "models"))
    asked = []

    def refuse(session, method, url, *args, **kwargs):
        asked.append(url)
        raise requests.exceptions.ConnectionError(HUB_DOWN)

    monkeypatch.setattr(requests.Session, "request", refuse)
    return home, asked


def test_a_model_name_the_hub_cannot_give_is_one_line_with_the_copy_command(tmp_path, capsys, unreachable_hub):
    home, asked = unreachable_hub
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--model", "ernie-3.0-medium-zh"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    # PaddleNLP's reason, whole: our failure reached it through its real download path (vocab.txt first)
    assert err.startswith(
        "error: --model ernie-3.0-medium-zh: could not load it (Can't load the model for 'ernie-3.0-medium-zh'."
    ), err
    assert asked and asked[0].endswith("ernie_3.0_medium_zh_vocab.txt") and "bcebos.com" in asked[0]
    assert "AutoModel.from_pretrained('ernie-3.0-medium-zh').save_pretrained('ernie-3.0-medium-zh', " in err
    assert "safe_serialization=True" in err and err.rstrip().endswith("--model ./ernie-3.0-medium-zh")
    assert (home / "models" / "ernie-3.0-medium-zh").is_dir()  # PaddleNLP's cache went where the test put it
    assert not (tmp_path / "out").exists()


def broken_copy(checkpoint, tmp_path, name, breaks) -> str:
    copy = tmp_path / name
    shutil.copytree(checkpoint, copy)
    breaks(copy)
    return str(copy)


def truncate_weights(directory):
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def widen_config(directory):
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    config["intermediate_size"] *= 2
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")


@pytest.mark.parametrize(
    "breaks,reason",
    [
        (truncate_weights, "(SafeTensorError::"),
        (widen_config, "(Error(s) in loading state_dict"),
    ],
)
def test_a_broken_checkpoint_is_one_line_naming_it(tmp_path, capsys, tiny_checkpoint, breaks, reason):
    model = broken_copy(tiny_checkpoint, tmp_path, "broken", breaks)
    code, err = run(capsys, *base(tmp_path / "out", TRAIN, "--model", model))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: --model {model}: cannot load the checkpoint {reason}"), err


def test_a_bug_while_loading_a_checkpoint_keeps_its_traceback(tmp_path, capsys, tiny_checkpoint, monkeypatch):
    """Only what the user's files cause becomes one error line; a bug of ours (here a TypeError planted in the
    loader, after PaddleNLP read the files) reaches the user as a traceback, not as "cannot load the checkpoint"."""
    from ernie_ft.models import weights

    def planted(net):
        raise TypeError("planted bug")

    monkeypatch.setattr(weights, "apply_layer_norm_eps", planted)
    with pytest.raises(TypeError, match="planted bug"):
        main(base(tmp_path / "out", TRAIN, "--model", tiny_checkpoint))
    assert "error:" not in capsys.readouterr().err


def test_an_existing_output_is_never_overwritten_silently(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    code, err = run(capsys, *base(out))
    assert code == 2 and "--resume" in err and "--overwrite" in err
    assert (out / "precious.txt").read_text() == "keep me"
    code, err = run(capsys, *base(out, TRAIN, "--resume"))
    assert code == 2 and "no resumable checkpoint" in err


def test_no_traceback_reaches_the_user_from_the_real_command(tmp_path):
    bad = write(tmp_path / "bad.tsv", "label\ttext_a\n正面\t房间很干净\n", "gbk")
    proc = subprocess.run(
        [sys.executable, "-m", "ernie_ft.classify", *base(tmp_path / "o", bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "GBK" in proc.stderr
