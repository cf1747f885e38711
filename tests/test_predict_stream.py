"""``predict`` over a file chunk by chunk: the same answers as the file read whole, memory that does not grow with
the input, every complete answer kept on Ctrl-C or SIGTERM, ``--resume`` that continues to the uninterrupted run's
output and refuses another model or input, Parquet in and out."""

import csv
import dataclasses
import datetime
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
from ernie_ft.errors import Interrupted, UserError
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
    whole = whole_file_answers(model, DATA / source)
    assert [{key: answer[key] for key in expected} for answer, expected in zip(streamed, whole)] == whole
    assert len(streamed) == len(whole)  # the input's other columns (a gold label) follow each answer


def test_a_bad_record_in_a_later_chunk_is_named_by_its_file_line(tmp_path, capsys):
    lines = [json.dumps({"text": t}, ensure_ascii=False) for t in TEXTS[:12]]
    lines[9] = '{"text": ["好"]}'
    path = write_lines(tmp_path / "bad.jsonl", ["", *lines])  # a blank first line: line numbers are not positions
    predict(CLASSIFIER, path, tmp_path / "out.jsonl", "--chunk-size", "4", status=2)
    err = capsys.readouterr().err
    assert f"error: --input: {path}:11: " in err, err
    assert f"8 of 13 predictions are in {tmp_path / 'out.jsonl'}" in err  # the blank line's answer first
    lines[9] = '{"text": "好"'  # not JSON: the whole-file reader's message
    write_lines(path, lines)
    predict(CLASSIFIER, path, tmp_path / "out.jsonl", "--chunk-size", "4", status=2)
    assert f"error: --input: {path}:10:13: invalid JSON" in capsys.readouterr().err


def test_a_task_that_reads_whole_files_says_so_and_answers_as_before(tmp_path, capsys):
    path = DATA / "ner_test_bio.conll"  # CoNLL: a text over several lines
    assert predict(TAGGER, path, tmp_path / "out.jsonl") == whole_file_answers(TAGGER, path)
    assert "is read whole: it looks like CoNLL" in capsys.readouterr().err


def test_parquet_in_and_out_with_the_other_columns_beside_each_answer(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "in.parquet"
    ids, stamps = list(range(len(TEXTS))), [datetime.datetime(2024, 5, 1, i % 24) for i in range(len(TEXTS))]
    pq.write_table(pa.table({"id": ids, "text": TEXTS, "at": stamps}), source, row_group_size=16)
    answers = predict(CLASSIFIER, DATA / "sentiment_test.jsonl", tmp_path / "expected.jsonl")
    gold = json.loads((DATA / "sentiment_test.jsonl").read_text("utf-8").splitlines()[0])["label"]
    assert answers[0]["input_label"] == gold  # an input column named as an answer's field: prefixed
    beside = [{"id": i, "at": str(at)} for i, at in zip(ids, stamps)]  # a timestamp: its text
    expected = [{**{k: v for k, v in a.items() if k != "input_label"}, **b} for a, b in zip(answers, beside)]
    assert predict(CLASSIFIER, source, tmp_path / "out.jsonl", "--chunk-size", "5") == expected
    assert cli.main(["predict", "--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(source),
                     "--output", str(tmp_path / "out.parquet"), "--chunk-size", "5"]) == 0  # fmt: skip
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.schema.field("id").type == pa.int64()  # joins back by key
    assert [{**row, "probs": json.loads(row["probs"])} for row in table.to_pylist()] == expected


def blank_inputs(folder, texts) -> dict:
    """The same five rows, the second and fourth without a text, in each format predict streams."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [(1, texts[0]), (2, ""), (3, texts[1]), (4, None), (5, texts[2])]
    write_lines(folder / "in.txt", [text or " " * (n == 4) for n, text in rows])
    write_lines(folder / "one.csv", ["text", *(f'"{text}"' if text else "" for _, text in rows)])
    with open(folder / "two.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([("id", "text"), *((n, text or "") for n, text in rows)])
    write_lines(folder / "in.jsonl", (json.dumps({"id": n, "text": text}, ensure_ascii=False) for n, text in rows))
    pq.write_table(pa.table({"id": [n for n, _ in rows], "text": [text for _, text in rows]}), folder / "in.parquet")
    return {name: folder / name for name in ("in.txt", "one.csv", "two.csv", "in.jsonl", "in.parquet")}


def test_every_input_row_is_answered_in_its_place(tmp_path, capsys):
    texts = TEXTS[:3]
    expected = predict(CLASSIFIER, write_lines(tmp_path / "texts.txt", texts), tmp_path / "texts.jsonl")
    for name, path in blank_inputs(tmp_path, texts).items():
        capsys.readouterr()
        out = predict(CLASSIFIER, path, tmp_path / f"{name}.out.jsonl", "--chunk-size", "2")
        assert [{k: a[k] for k in ("text", "label", "probs")} for a in out if "label" in a] == expected, name
        blank = [i for i, answer in enumerate(out) if "label" not in answer]
        assert blank == [1, 3], (name, out)  # in its place, with no prediction
        assert all(not (out[i]["text"] or "").strip() for i in blank), (name, out)
        if name not in ("in.txt", "one.csv"):  # the id beside each answer, a blank record's too
            assert [str(answer["id"]) for answer in out] == ["1", "2", "3", "4", "5"], (name, out)
        first = "row 2" if name.endswith(".parquet") else "line 3" if name.endswith(".csv") else "line 2"
        assert f"note: 2 records of --input {path} have an empty text (the first at {first})" in (
            capsys.readouterr().err
        ), name
    doccano = predict(CLASSIFIER, tmp_path / "in.txt", tmp_path / "doccano.jsonl", "--format", "doccano")
    assert [record["label"] != [] for record in doccano] == [True, False, True, False, True]  # a task, no label
    args = ["predict", "--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(tmp_path / "in.txt")]
    assert cli.main([*args, "--format", "label-studio", "--output", str(tmp_path / "tasks.json")]) == 0
    tasks = json.loads((tmp_path / "tasks.json").read_text("utf-8"))
    assert ["predictions" in task for task in tasks] == [True, False, True, False, True]


def test_parquet_columns_wait_for_an_answer_past_chunks_without_text_and_resume_keeps_them(tmp_path, monkeypatch):
    from ernie_ft.inference import stream

    source = write_lines(tmp_path / "in.txt", ["", " ", "", *TEXTS[:3]])
    args = ["predict", "--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(source)]
    assert cli.main([*args, "--chunk-size", "2", "--output", str(tmp_path / "whole.parquet")]) == 0
    rows = answers(tmp_path / "whole.parquet")
    assert [row["text"] for row in rows] == ["", " ", "", *TEXTS[:3]]
    assert [row["label"] is None for row in rows] == [True, True, True, False, False, False]
    answer_chunk, made = stream.answer_chunk, []

    def stopped_in_the_second_chunk(*given):
        made.append(1)
        if len(made) == 2:
            raise Interrupted(signal.SIGINT)
        return answer_chunk(*given)

    monkeypatch.setattr(stream, "answer_chunk", stopped_in_the_second_chunk)
    out = tmp_path / "out.parquet"
    assert cli.main([*args, "--chunk-size", "2", "--output", str(out)]) == 130
    monkeypatch.undo()
    assert answers(out) == [{"text": ""}, {"text": " "}]  # the blank chunk alone: its own columns
    assert cli.main([*args, "--chunk-size", "2", "--output", str(out), "--resume"]) == 0
    assert answers(out) == rows


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_resume_after_another_input_stopped_at_its_first_write_keeps_none_of_its_answers(
    suffix, tmp_path, monkeypatch, capsys
):
    from ernie_ft.inference import stream

    short = write_lines(tmp_path / "short.txt", TEXTS[:4])
    long = write_lines(tmp_path / "long.txt", TEXTS[10:19])
    out = tmp_path / f"out{suffix}"
    run = ["predict", "--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--output", str(out)]
    assert cli.main([*run, "--input", str(short)]) == 0
    assert cli.main([*run, "--input", str(long), "--output", str(tmp_path / f"whole{suffix}")]) == 0

    def stopped(*args, **kwargs):  # Ctrl-C before the first answer is written
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(stream, "stream", stopped)
    assert cli.main([*run, "--input", str(long)]) == 130
    monkeypatch.undo()
    assert cli.main([*run, "--input", str(long), "--resume"]) == 0
    assert "continuing after them" not in capsys.readouterr().err
    assert answers(out) == answers(tmp_path / f"whole{suffix}")


def answers(path) -> list:
    import pyarrow.parquet as pq

    if str(path).endswith(".parquet"):
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in Path(path).read_text("utf-8").splitlines()]


def test_a_second_writer_of_an_output_is_refused_until_the_first_ends_killed_too(tmp_path, capsys):
    source, out = write_lines(tmp_path / "in.txt", TEXTS[:3]), tmp_path / "out.parquet"
    hold = (
        f"import sys\nfrom ernie_ft.inference.progress import held\nwith held({str(out)!r}):\n"
        "    print('held', flush=True)\n    sys.stdin.read()"
    )
    first = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "held\n"
        args = ["predict", "--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(source)]
        assert cli.main([*args, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"error: --output {out}: another predict is writing it (it holds {out}.lock)" in err, err
        assert not out.exists() and not Path(f"{out}.progress.json").exists()  # nothing touched
        assert cli.main(["merge", "--output", str(out), str(source)]) == 2  # merge takes the same lock
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert cli.main([*args, "--output", str(out)]) == 0  # the killed holder's lock went with it
    assert len(answers(out)) == 3 and not Path(f"{out}.lock").exists()
    capsys.readouterr()
    assert cli.main([*args, "--output", str(tmp_path / "none" / "out.jsonl")]) == 2  # no such directory: one line
    assert f"error: --output {tmp_path / 'none' / 'out.jsonl'}: cannot be written in " in capsys.readouterr().err


def test_parquet_parts_merge_into_the_whole_input_answers(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(23)], "text": TEXTS[:23]}), source)
    args = ["predict", "--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(source)]
    assert cli.main([*args, "--output", str(tmp_path / "whole.parquet"), "--chunk-size", "4"]) == 0
    parts = [str(tmp_path / f"part{k}.parquet") for k in (1, 2, 3)]
    for k, part in enumerate(parts, 1):
        assert cli.main([*args, "--output", part, "--chunk-size", "4", "--shard", f"{k}/3"]) == 0
    assert cli.main(["merge", "--output", str(tmp_path / "all.parquet"), parts[1], parts[2], parts[0]]) == 0
    assert [len(answers(part)) for part in parts] == [7, 8, 8]
    assert answers(tmp_path / "all.parquet") == answers(tmp_path / "whole.parquet")


def test_every_option_says_whether_it_changes_an_answer_and_resume_checks_those_that_do():
    from ernie_ft.inference import progress
    from ernie_ft.inference.predict import PredictOptions

    fields = dataclasses.fields(PredictOptions)
    assert [f.name for f in fields if "answers" not in f.metadata] == []  # a new option must say
    options = PredictOptions(model="m", input="i")
    wrote = {"rows": progress.ROWS, "model": "m", "model_files": {}, "input": "i", "input_size": 1,
             "input_mtime_ns": 1, "options": options.answer_settings()}  # fmt: skip
    changes = {"threshold": 0.3, "text_column": "review", "format": "doccano", "shard": "1/2", "engine": "inference"}
    for name, value in changes.items():
        now = {**wrote, "options": dataclasses.replace(options, **{name: value}).answer_settings()}
        with pytest.raises(UserError, match=f"was written with --{name.replace('_', '-')} "):
            progress.check_resumable("out.jsonl", wrote, now)
    same = dataclasses.replace(options, batch_size=8, chunk_size=3, nproc=2, device="cpu", resume=True)
    progress.check_resumable("out.jsonl", wrote, {**wrote, "options": same.answer_settings()})


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
    before = line_count(out)
    return signal_when(args, lambda: line_count(out) >= before + lines_before, signum, tmp_path)


def signal_when(args, ready, signum, tmp_path, status=None, group=False) -> str:
    """Start predict, send ``signum`` once ``ready()`` (``group``: to its process group, as a terminal's Ctrl-C
    reaches the command and its workers), and return its standard error after it exits ``status`` (128 +
    ``signum`` unless given)."""
    err = open(tmp_path / "err.txt", "w+", encoding="utf-8")
    job = subprocess.Popen([sys.executable, "-m", "ernie_ft", "predict", *args], stdout=subprocess.DEVNULL, stderr=err,
                           process_group=0 if group else None)  # fmt: skip
    deadline = time.monotonic() + 300
    try:
        while not ready():
            assert job.poll() is None, "predict ended before the signal"
            assert time.monotonic() < deadline, "predict wrote nothing"
            time.sleep(0.05)
        (os.killpg if group else os.kill)(job.pid, signum)
        job.wait(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    err.seek(0)
    text = err.read()
    assert job.returncode == (128 + signum if status is None else status), text[-3000:]
    return text


def line_count(path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


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


def size(path) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def test_parquet_resume_after_a_sigkill_gives_the_uninterrupted_rows(tmp_path, monkeypatch):
    from ernie_ft.inference import stream

    source = write_lines(tmp_path / "in.txt", (TEXTS[i % len(TEXTS)] for i in range(1_000)))
    args = ["--model", CLASSIFIER, "--trust-pickle", "--device", "cpu", "--input", str(source), "--chunk-size", "16"]
    assert cli.main(["predict", *args, "--output", str(tmp_path / "whole.parquet")]) == 0
    expected, out = answers(tmp_path / "whole.parquet"), tmp_path / "out.parquet"
    answer_chunk, made = stream.answer_chunk, []

    def stopped_in_the_third_chunk(*given):  # as Ctrl-C there leaves the output
        made.append(1)
        if len(made) == 3:
            raise Interrupted(signal.SIGINT)
        return answer_chunk(*given)

    monkeypatch.setattr(stream, "answer_chunk", stopped_in_the_third_chunk)
    assert cli.main(["predict", *args, "--output", str(out)]) == 130
    monkeypatch.undo()
    assert answers(out) == expected[:32]
    before = size(out)  # the resumed run copies these rows into OUTPUT.partial, then adds its own
    signal_when([*args, "--output", str(out), "--resume"], lambda: size(f"{out}.partial") > before + 8_000,
                signal.SIGKILL, tmp_path, status=-signal.SIGKILL)  # fmt: skip
    assert answers(out) == expected[:32]  # the killed run's rows were never moved in
    assert cli.main(["predict", *args, "--output", str(out), "--resume"]) == 0
    assert answers(out) == expected  # nothing dropped, nothing twice
