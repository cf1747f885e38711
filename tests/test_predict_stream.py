"""``predict`` over a file chunk by chunk: the same answers as the file read whole, memory that does not grow with
the input, every complete answer kept on Ctrl-C or SIGTERM, ``--resume`` that continues to the uninterrupted run's
output and refuses another model or input, Parquet in and out."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA

from ernie_ft import cli
from ernie_ft.inference.predict import load_for_inference, run_inference

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v0.1"
CLASSIFIER, TAGGER = str(FIXTURES / "classify"), str(FIXTURES / "ner")
TEXTS = [json.loads(line)["text"] for line in (DATA / "sentiment_test.jsonl").read_text("utf-8").splitlines()]


def predict(model, path, out, *extra, status=0) -> list[dict]:
    args = ["predict", "--model", model, "--trust-pickle", "--device", "cpu", "--input", str(path)]
    assert cli.main([*args, "--output", str(out), *extra]) == status
    return [json.loads(line) for line in Path(out).read_text("utf-8").splitlines()] if status == 0 else []


def whole_file_answers(model, path) -> list[dict]:
    """The answers of the whole-file path ``predict`` took for every input before it streamed."""
    loaded, data = load_for_inference(model, "cpu", {}, trust_pickle=True)
    examples, features, logits = run_inference(loaded, data, str(path), "--input", False, 64)
    return loaded.task.predict(logits, features, examples, loaded.labels, data)


def write_lines(path, lines) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "model, source",
    [(CLASSIFIER, "sentiment_test.jsonl"), (CLASSIFIER, "sentiment_test.csv"), (CLASSIFIER, "sentiment_dev.tsv"),
     (CLASSIFIER, "predict.txt"), (TAGGER, "ner_dev.jsonl")],
    ids=["classify-jsonl", "classify-csv", "classify-tsv", "classify-txt", "ner-jsonl"],
)  # fmt: skip
def test_streamed_answers_equal_the_whole_file_ones(model, source, tmp_path, capsys):
    streamed = predict(model, DATA / source, tmp_path / "out.jsonl", "--chunk-size", "7")
    assert "is read whole" not in capsys.readouterr().err  # it did stream
    assert streamed == whole_file_answers(model, DATA / source)


def test_a_bad_record_in_a_later_chunk_is_named_by_its_file_line(tmp_path, capsys):
    lines = [json.dumps({"text": t}, ensure_ascii=False) for t in TEXTS[:12]]
    lines[9] = '{"text": "  "}'
    path = write_lines(tmp_path / "bad.jsonl", ["", *lines])  # a blank first line: line numbers are not positions
    predict(CLASSIFIER, path, tmp_path / "out.jsonl", "--chunk-size", "4", status=2)
    err = capsys.readouterr().err
    assert f"error: --input: {path}:11: empty text" in err, err
    assert f"8 of 12 predictions are in {tmp_path / 'out.jsonl'}" in err
    lines[9] = '{"text": "好"'  # not JSON: the whole-file reader's message
    write_lines(path, lines)
    predict(CLASSIFIER, path, tmp_path / "out.jsonl", "--chunk-size", "4", status=2)
    assert f"error: --input: {path}:10:13: invalid JSON" in capsys.readouterr().err


def test_a_task_that_reads_whole_files_says_so_and_answers_as_before(tmp_path, capsys):
    path = DATA / "ner_test_bio.conll"  # CoNLL: a text over several lines
    assert predict(TAGGER, path, tmp_path / "out.jsonl") == whole_file_answers(TAGGER, path)
    assert "is read whole: it looks like CoNLL" in capsys.readouterr().err


def test_parquet_in_and_out(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": list(range(len(TEXTS))), "text": TEXTS}), source, row_group_size=16)
    expected = predict(CLASSIFIER, DATA / "sentiment_test.jsonl", tmp_path / "expected.jsonl")
    assert predict(CLASSIFIER, source, tmp_path / "out.jsonl", "--chunk-size", "5") == expected
    assert cli.main(["predict", "--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(source),
                     "--output", str(tmp_path / "out.parquet"), "--chunk-size", "5"]) == 0  # fmt: skip
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [{**row, "probs": json.loads(row["probs"])} for row in rows] == expected


# ------------------------------------------------------------------------------- in its own process: memory, signals


def peak_rss(args) -> int:
    """The peak resident memory (KiB) of ``python -m ernie_ft ARGS``, measured around it by a fresh process."""
    code = (
        "import resource, subprocess, sys; status = subprocess.run(sys.argv[1:]).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if status == 0 else -1)"
    )
    command = [sys.executable, "-c", code, sys.executable, "-m", "ernie_ft", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.stdout.strip() != "-1", done.stderr[-3000:]
    return int(done.stdout)


def test_memory_does_not_grow_with_the_input(tmp_path):
    # the whole-file path grew 332 MB from 4,000 to 40,000 of these lines (604 to 936 MB: 9 KB a line, so about
    # 150 MB for the 16,000 more here); streamed, 0.2 % (about 1 MB)
    small = write_lines(tmp_path / "small.txt", (TEXTS[i % len(TEXTS)] for i in range(4_000)))
    large = write_lines(tmp_path / "large.txt", (TEXTS[i % len(TEXTS)] for i in range(20_000)))
    memory = {}
    for path in (small, large):
        args = ["predict", "--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(path)]
        memory[path.name] = peak_rss([*args, "--output", str(tmp_path / "out.jsonl"), "--chunk-size", "64"])
    assert memory["large.txt"] - memory["small.txt"] < 40 * 1024, memory  # KiB


def start(args, err):
    return subprocess.Popen([sys.executable, "-m", "ernie_ft", "predict", *args], stdout=subprocess.DEVNULL, stderr=err)


def interrupt(args, out, signum, lines_before: int, tmp_path) -> str:
    """Start predict, send ``signum`` once ``out`` holds ``lines_before`` lines more than now, and return its
    standard error after it exits 128 + ``signum``."""
    before = len(out.read_bytes().splitlines()) if out.exists() else 0
    err = open(tmp_path / "err.txt", "w+", encoding="utf-8")
    job = start(args, err)
    deadline = time.monotonic() + 300
    try:
        while not (out.exists() and len(out.read_bytes().splitlines()) >= before + lines_before):
            assert job.poll() is None, "predict ended before the signal"
            assert time.monotonic() < deadline, "predict wrote nothing"
            time.sleep(0.05)
        os.kill(job.pid, signum)
        job.wait(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    err.seek(0)
    text = err.read()
    assert job.returncode == 128 + signum, text[-3000:]
    return text


def test_a_signal_keeps_every_complete_answer_and_resume_ends_as_an_uninterrupted_run(tmp_path):
    source = write_lines(tmp_path / "in.txt", (TEXTS[i % len(TEXTS)] for i in range(4_000)))
    args = ["--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(source), "--chunk-size", "32"]
    whole = tmp_path / "whole.jsonl"
    assert start([*args, "--output", str(whole)], subprocess.DEVNULL).wait(timeout=900) == 0
    expected = whole.read_text("utf-8").splitlines()

    out = tmp_path / "out.jsonl"
    err = interrupt([*args, "--output", str(out)], out, signal.SIGINT, 64, tmp_path)
    kept = out.read_text("utf-8").splitlines()
    assert 64 <= len(kept) < len(expected) and kept == expected[: len(kept)]  # complete answers, in order
    assert f"{len(kept)} of 4000 predictions are in {out}; run the same command with --resume" in err, err
    with open(out, "a", encoding="utf-8") as f:
        f.write('{"text": "cut off by a kil')  # a line torn by a SIGKILL: dropped on resume
    err = interrupt([*args, "--output", str(out), "--resume"], out, signal.SIGTERM, 64, tmp_path)
    assert "its last line was cut off" in err and f"--resume: {len(kept)} predictions in" in err, err
    kept = out.read_text("utf-8").splitlines()
    assert kept == expected[: len(kept)]
    assert start([*args, "--output", str(out), "--resume"], subprocess.DEVNULL).wait(timeout=900) == 0
    assert out.read_text("utf-8").splitlines() == expected


def test_resume_refuses_another_model_input_or_flag(tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", TEXTS[:10])
    out = tmp_path / "out.jsonl"
    predict(CLASSIFIER, source, out)
    predict(TAGGER, source, out, "--resume", status=2)
    assert f"error: --resume: {out} was written by --model {os.path.realpath(CLASSIFIER)}/best; this is " in (
        capsys.readouterr().err
    )
    predict(CLASSIFIER, source, out, "--resume", "--text-column", "text", status=2)
    assert "was written with --text-column None, not text" in capsys.readouterr().err
    other = write_lines(tmp_path / "other.txt", TEXTS[:10])
    predict(CLASSIFIER, other, out, "--resume", status=2)
    assert f"was written from --input {source}; this input is another file" in capsys.readouterr().err
    write_lines(source, TEXTS[:11])
    predict(CLASSIFIER, source, out, "--resume", status=2)
    assert "this input is changed since" in capsys.readouterr().err
    os.remove(f"{out}.progress.json")
    predict(CLASSIFIER, source, out, "--resume", status=2)
    assert "has no " in capsys.readouterr().err
    assert len(predict(CLASSIFIER, source, out)) == 11  # without --resume: written again
