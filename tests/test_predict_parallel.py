"""``predict`` on several processes and machines: ``--nproc 2`` writes one process's file byte for byte, and after a
SIGINT keeps every complete answer in order and resumes to it; a worker that dies is an error, not a hang; the parts
of ``--shard K/N`` merged equal one process's file, and ``merge`` refuses a missing, foreign or unfinished part;
``--gpus`` on a CPU-only Paddle is one error; a pickled ``Predictor`` answers in a spawned process as its parent, and
takes the batches Ray Data and Spark hand it."""

import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from test_predict_stream import CLASSIFIER, TEXTS, line_count, signal_when, start, write_lines

from ernie_ft import cli

BASE = ["--model", CLASSIFIER, "--trust-pickle", "--device", "cpu"]


def run(*args, status=0):
    assert cli.main(["predict", *BASE, *map(str, args)]) == status


def merge(output, *parts, status=0):
    assert cli.main(["merge", "--output", str(output), *map(str, parts)]) == status


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    """A 200-line input and one process's answers to it, as bytes."""
    folder = tmp_path_factory.mktemp("parallel")
    source = write_lines(folder / "in.txt", (TEXTS[i % len(TEXTS)] for i in range(200)))
    run("--input", source, "--output", folder / "one.jsonl", "--chunk-size", "8")
    return source, (folder / "one.jsonl").read_bytes()


def test_two_processes_write_one_process_file(lines, tmp_path, capsys):
    source, expected = lines
    run("--input", source, "--output", tmp_path / "two.jsonl", "--chunk-size", "8", "--nproc", "2")
    assert "on 2 processes of 1 thread each" in capsys.readouterr().err
    assert (tmp_path / "two.jsonl").read_bytes() == expected


def test_shards_merged_equal_one_process_and_merge_refuses_wrong_parts(lines, tmp_path, capsys):
    source, expected = lines
    parts = [tmp_path / f"part{k}.jsonl" for k in (1, 2, 3)]
    for k, part in enumerate(parts, 1):  # 67, 66, 67 records: the chunks of 8 are cut at the edges
        run("--input", source, "--output", part, "--chunk-size", "8", "--shard", f"{k}/3")
    sizes = [len(part.read_bytes().splitlines()) for part in parts]
    assert sizes == [66, 67, 67], sizes
    merge(tmp_path / "all.jsonl", parts[2], parts[0], parts[1])  # any order: merged in K order
    assert (tmp_path / "all.jsonl").read_bytes() == expected
    capsys.readouterr()

    merge(tmp_path / "bad.jsonl", parts[0], parts[2], status=2)
    assert "error: merge: part 2/3 is missing: give the --output of predict --shard 2/3 too" in capsys.readouterr().err
    other = write_lines(tmp_path / "other.txt", TEXTS[:30])  # another input's part 2/3
    run("--input", other, "--output", tmp_path / "foreign.jsonl", "--shard", "2/3")
    capsys.readouterr()
    merge(tmp_path / "bad.jsonl", parts[0], tmp_path / "foreign.jsonl", parts[2], status=2)
    assert f"error: merge: {tmp_path / 'foreign.jsonl'} is a part of another input" in capsys.readouterr().err
    progress = Path(f"{parts[1]}.progress.json")
    wrote = json.loads(progress.read_text("utf-8"))
    progress.write_text(json.dumps({**wrote, "finished": False}), "utf-8")  # as a run stopped by a signal leaves it
    merge(tmp_path / "bad.jsonl", *parts, status=2)
    assert f"error: merge: {parts[1]} (--shard 2/3) is unfinished; run its predict command again with --resume" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "bad.jsonl").exists()
    run("--input", source, "--output", parts[0], "--shard", "0/3", status=2)
    assert "error: --shard 0/3: K counts from 1 (1/3 to 3/3)" in capsys.readouterr().err


def test_gpus_on_a_cpu_only_paddle_is_one_error(lines, capsys):
    run("--input", lines[0], "--gpus", "0,1", status=2)
    err = capsys.readouterr().err
    assert err.startswith("error: --gpus 0,1: this Paddle build has no CUDA support"), err
    assert len(err.splitlines()) == 1


def test_a_signal_during_two_processes_keeps_complete_answers_and_resume_completes(tmp_path):
    source = write_lines(tmp_path / "in.txt", (TEXTS[i % len(TEXTS)] for i in range(1_500)))
    whole = tmp_path / "whole.jsonl"
    run("--input", source, "--output", whole, "--chunk-size", "32")
    expected = whole.read_text("utf-8").splitlines()

    out = tmp_path / "out.jsonl"
    args = [*BASE, "--input", str(source), "--chunk-size", "32", "--nproc", "2", "--output", str(out)]
    err = signal_when(args, lambda: line_count(out) >= 64, signal.SIGINT, tmp_path, group=True)  # Ctrl-C in a terminal
    kept = out.read_text("utf-8").splitlines()
    assert 64 <= len(kept) < len(expected) and kept == expected[: len(kept)], err[-2000:]
    assert f"{len(kept)} of 1500 predictions are in {out}; run the same command with --resume" in err, err
    assert start([*args, "--resume"], subprocess.DEVNULL).wait(timeout=600) == 0
    assert out.read_text("utf-8").splitlines() == expected


def workers_of(pid: int) -> list[int]:
    """The spawned workers among the children of ``pid`` (not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = []
    for child in map(int, children):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"spawn_main" in command:
            found.append(child)
    return found


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the workers through /proc (Linux)")
def test_a_worker_that_dies_is_an_error_naming_it(tmp_path):
    # far more lines than the workers answer while the test finds and kills one: with 1,500 a quiet machine finished
    # them first now and then (exit 0), since the workers no longer start by importing PaddleNLP
    source = write_lines(tmp_path / "in.txt", (TEXTS[i % len(TEXTS)] for i in range(20_000)))
    out = tmp_path / "out.jsonl"
    err = open(tmp_path / "err.txt", "w+", encoding="utf-8")
    job = start([*BASE, "--input", str(source), "--chunk-size", "32", "--nproc", "2", "--output", str(out)], err)
    deadline = time.monotonic() + 300
    try:
        while not (out.exists() and len(out.read_bytes().splitlines()) >= 64):
            assert job.poll() is None and time.monotonic() < deadline, "predict ended or wrote nothing"
            time.sleep(0.05)
        victim = workers_of(job.pid)[0]
        os.kill(victim, signal.SIGKILL)
        assert job.wait(timeout=120) == 2
    finally:
        if job.poll() is None:
            job.kill()
    err.seek(0)
    text = err.read()
    assert f"(pid {victim}) was killed by SIGKILL" in text and "error: --nproc: predict worker" in text, text[-2000:]
    assert "of 20000 predictions are in" in text and "Traceback" not in text, text[-2000:]


def test_a_pickled_predictor_answers_in_a_spawned_process_and_takes_batches():
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from ernie_ft import Predictor

    predictor = Predictor(CLASSIFIER, engine="dygraph", device="cpu", trust_pickle=True, batch_size=4)
    texts = TEXTS[:10]
    expected = predictor(texts)
    weights = Path(CLASSIFIER) / "best" / "model_state.pdparams"
    assert len(pickle.dumps(predictor)) < os.path.getsize(weights)  # without the model
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(predictor, texts).result() == expected  # the predictor itself is pickled to the child

    labels, probs = [a["label"] for a in expected], [a["probs"] for a in expected]
    frame = predictor(pd.DataFrame({"id": range(10), "text": texts}))
    assert list(frame.columns) == ["id", "text", "label", "probs"]
    assert frame["label"].tolist() == labels and frame["probs"].tolist() == probs
    table = predictor(pa.table({"text": texts}))
    assert table.column_names == ["text", "label", "probs"] and table.column("label").to_pylist() == labels
    assert table.column("probs").to_pylist() == probs
    columns = predictor({"text": np.array(texts)})  # Ray's numpy batch format: arrays in, arrays out
    assert isinstance(columns["label"], np.ndarray) and columns["label"].tolist() == labels
    assert list(columns["probs"]) == probs
