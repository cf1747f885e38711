"""``--calibrate FILE``, the texts static int8 calibrates on (issue 58): export's flag, also serve's with ``--export
int8``; ``--calibration``, its first spelling, is an alias. A file that cannot be read is one ``error:`` line naming the
flag and the file, exit 2, and nothing written."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest
from conftest import DATA

from ernie_ft.cli import main, task_command

TEXTS = "房间很干净，服务也好\n太差了，不会再来\n早餐一般，位置不错\n"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> str:
    run = tmp_path_factory.mktemp("calibrate") / "run"
    args = ["--train", str(DATA / "sentiment_train.tsv"), "--model", "scratch:2x64", "--max-len", "32", "--epochs",
            "1", "--threads", "1", "--seed", "1", "--output", str(run)]  # fmt: skip
    assert task_command("classify")(args) == 0
    return str(run)


@pytest.mark.parametrize("command,needs", [("export", ["--quantize", "int8"]), ("serve", ["--export", "int8"])])
def test_calibrate_is_the_flag_and_calibration_its_alias(command, needs, capsys):
    """Both spellings set one setting; --help names --calibrate only (planted: the alias left out: failed)."""
    parser = importlib.import_module(f"ernie_ft.cli.{command}").build_parser(command)
    base = ["--model", "m", *(["--output", "o"] if command == "export" else []), *needs]
    for flag in ("--calibrate", "--calibration"):
        assert parser.parse_args([*base, flag, "texts.txt"]).calibrate == "texts.txt"
    with pytest.raises(SystemExit):
        main([command, "--help"])
    usage = capsys.readouterr().out
    assert "--calibrate FILE" in usage and "--calibration" not in usage and needs[0] in usage


def bad_files(tmp_path) -> dict:
    """A file for each way a --calibrate file cannot be read, and what its error line says."""
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "folder").mkdir()
    return {
        "missing.txt": "no such file",
        "folder": "a directory",
        "empty.txt": "empty",
        "blank.txt": "is empty",  # the task's reader says so
    }


def refused(argv, match: str, written: list, capsys) -> None:
    """``argv`` exits 2 with one ``error:`` line holding ``match``, and none of ``written`` exists."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: --calibrate") and match in err, err
    assert not [path for path in written if os.path.exists(path)]


def test_export_refuses_a_calibration_file_it_cannot_read(classifier, tmp_path, capsys, monkeypatch):
    """Missing, a directory, empty (or blank), unreadable: one line naming --calibrate and the file; no output."""
    out = tmp_path / "out"
    base = ["export", "--model", classifier, "--output", str(out), "--format", "onnx", "--quantize", "int8"]
    for name, match in bad_files(tmp_path).items():
        path = str(tmp_path / name)
        named = f"{path}: {match}" if name != "blank.txt" else f"{path} {match}"  # the reader's: --calibrate: PATH is
        refused([*base, "--calibrate", path], named, [out, f"{out}.tmp"], capsys)
        refused([*base, "--calibration", path], named, [out, f"{out}.tmp"], capsys)
    import ernie_ft.inference.export as exporting

    def unreadable(path, *args, **kwargs):  # root reads a file whatever its mode: the error open raises otherwise
        raise PermissionError(13, "Permission denied", path)

    (tmp_path / "secret.txt").write_text(TEXTS)
    monkeypatch.setattr(exporting, "open", unreadable, raising=False)
    path = str(tmp_path / "secret.txt")
    refused([*base, "--calibrate", path], f"{path}: cannot be read (Permission denied)", [out], capsys)


def test_serve_refuses_them_alike_before_serving(classifier, tmp_path, capsys, monkeypatch):
    """serve --export int8 --calibrate: the same errors, exit 2, no DIR-int8 beside the checkpoint; --calibrate
    without --export int8 is refused, not ignored."""
    import ernie_ft.serving
    from ernie_ft.training.checkpoint import checkpoint_dir

    def served(host, port):  # a model that got this far would be served: no socket is opened for it
        raise AssertionError("serve went on to listen")

    monkeypatch.setattr(ernie_ft.serving, "listen", served)

    exported = checkpoint_dir(classifier).path.rstrip("/") + "-int8"
    base = ["serve", "--model", classifier, "--port", "0", "--export", "int8"]
    for name, match in bad_files(tmp_path).items():
        written = [exported, f"{exported}.tmp"]
        refused([*base, "--calibrate", str(tmp_path / name)], match, written, capsys)
    texts = tmp_path / "texts.txt"
    texts.write_text(TEXTS, encoding="utf-8")
    for other in (["--export", "onnx"], []):  # only an int8 export calibrates
        argv = ["serve", "--model", classifier, "--port", "0", *other, "--calibrate", str(texts)]
        refused(argv, "is for static int8: add --export int8", [exported], capsys)


def test_serve_exports_int8_calibrated_on_the_named_file_and_reuses_it_only_for_that_file(classifier, tmp_path, capsys):
    """DIR-int8 records the file it was calibrated on; a later start with the same file reuses it, with another
    file exports again, without --calibrate takes it as it is (planted: exported_model not passing the file on:
    calibrated on sentiment_train.tsv, failed; planted: reuse whatever the file: the second file's export kept the
    first's calibration, failed)."""
    from ernie_ft.serving import exported_model

    files = []
    for name in ("first.txt", "second.txt"):
        files.append(tmp_path / name)
        files[-1].write_text(TEXTS, encoding="utf-8")

    def calibrated_on(directory) -> str:
        return json.loads((directory / "onnx.json").read_text())["files"]["model.int8.onnx"]["calibration"]

    exported = exported_model(classifier, False, None, "int8", str(files[0]))
    assert calibrated_on(Path(exported)) == "3 windows of first.txt" and "exporting" in capsys.readouterr().out
    assert exported_model(classifier, False, None, "int8", str(files[0])) == exported
    assert "using the export in" in capsys.readouterr().out
    assert exported_model(classifier, False, None, "int8", str(files[1])) == exported
    assert "exporting" in capsys.readouterr().out and calibrated_on(Path(exported)).endswith("second.txt")
    assert exported_model(classifier, False, None, "int8") == exported
    assert "using the export in" in capsys.readouterr().out
    # an int8 export keeps no weights to calibrate again
    with pytest.raises(Exception, match="is an int8 export already"):
        exported_model(exported, False, None, "int8", str(files[0]))
