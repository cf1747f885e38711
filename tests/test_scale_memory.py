"""Training's data step on a large file holds the encodings, not whole-file copies beside them (issue 48, item 7):
the Rust tokenizer is given a bounded chunk of texts at a time, and the tokenisation cache is written and read back
a bounded batch of rows at a time, from a mapped file; the encodings are the same either way."""

from __future__ import annotations

import tracemalloc

import pyarrow  # noqa: F401  (imported before anything is traced: its import is not what is measured)
import pytest
from conftest import DATA

from ernie_ft.text import cache, pipeline
from ernie_ft.text.pipeline import TextPipeline
from ernie_ft.text.scratch import build_vocab, write_vocab

ROWS = 1200


def reviews() -> list[str]:
    """ROWS short reviews: data/'s sample reviews, numbered so that no two are the same."""
    lines = (DATA / "sentiment_train.tsv").read_text("utf-8").split("\n")[1:]
    texts = [line.split("\t", 1)[1] for line in lines if "\t" in line]
    return [f"{i} {texts[i % len(texts)]}" for i in range(ROWS)]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return reviews()


@pytest.fixture(scope="module")
def pipe(tmp_path_factory, texts) -> TextPipeline:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(texts), str(path))
    return TextPipeline(str(path))


@pytest.fixture(scope="module")
def expected(pipe, texts) -> list:
    """The encodings as one call over every text gives them (the chunk larger than the input)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "ENCODE_CHUNK", len(texts) + 1)
        return pipe.encode_many(texts, word_ids=False)


class CountingTokenizer:
    """The Rust tokenizer, recording how many texts each batch call was given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.batches = tokenizer, []

    def encode(self, *args, **kwargs):
        return self.tokenizer.encode(*args, **kwargs)

    def encode_batch(self, texts, **kwargs):
        self.batches.append(len(texts))
        return self.tokenizer.encode_batch(texts, **kwargs)


def test_the_tokenizer_gets_a_chunk_at_a_time_and_the_encodings_are_the_same(pipe, texts, expected, monkeypatch):
    counting = CountingTokenizer(pipe._tok)
    monkeypatch.setattr(pipe, "_tok", counting)
    monkeypatch.setattr(pipeline, "ENCODE_CHUNK", 500)
    assert pipe.encode_many(texts, word_ids=False) == expected
    assert counting.batches == [500, 500, 200]  # every text once, in order, 500 at most


def test_the_cache_is_written_and_read_a_batch_at_a_time(pipe, texts, expected, monkeypatch, tmp_path):
    """Python's allocations beyond the encodings while the cache is written do not grow with the file: writing
    four times the rows holds less than a tenth of the encodings' size more (whole-file lists of the columns hold
    several times it; a few tens of KB of Arrow's writer are the same for any file). Reading back holds under a
    tenth of the encodings' own beside them (the file's bytes are more). The file read is one record batch, as a
    cache written before batches is: its rows become encodings one at a time."""
    monkeypatch.setattr(cache, "BATCH_ROWS", 25)
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        encodings = pipe.encode_many(texts, word_ids=False)
        size = tracemalloc.get_traced_memory()[0] - held  # the encodings, and what tokenising left behind
        written_peak = []
        for rows in (encodings, encodings * 4):
            tracemalloc.reset_peak()
            cache.write_table(tmp_path / "c.arrow", rows)
            written_peak.append(tracemalloc.get_traced_memory()[1] - held - size)
        with monkeypatch.context() as one_batch:
            one_batch.setattr(cache, "BATCH_ROWS", ROWS)
            cache.write_table(tmp_path / "one.arrow", encodings)
        del encodings
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        read = cache.read_table(tmp_path / "one.arrow", ROWS)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert read == expected
    assert written_peak[1] - written_peak[0] < size / 10, (written_peak, size)
    assert peak - current < (current - held) / 10, (peak - current, current - held)


def test_a_cache_of_several_batches_is_the_same_cache(pipe, texts, expected, monkeypatch, tmp_path):
    """Written in batches of 100 rows, read back in batches of 64 (a file of another batch size, e.g. one written
    before batches, reads the same); the row count still has to match."""
    monkeypatch.setattr(cache, "BATCH_ROWS", 100)
    assert pipe.encode_many(texts, cache_dir=str(tmp_path), word_ids=False) == expected
    (path,) = tmp_path.glob("*.arrow")
    monkeypatch.setattr(cache, "BATCH_ROWS", 64)
    assert cache.read_table(path, ROWS) == expected
    assert cache.read_table(path, ROWS - 1) is None
    assert pipe.encode_many(texts, cache_dir=str(tmp_path), word_ids=False) == expected and pipe.last_cache_hit


def test_the_encodings_hold_about_twelve_bytes_a_token(pipe, texts):
    """A training file's encodings are held until its last text is featurized: as machine integers (ids, starts,
    ends: 12 bytes a token, plus a few hundred bytes an object), not Python lists of ints and of (start, end)
    tuples (about 100 bytes a token: 30 GB for 10^6 reviews)."""
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        encodings = pipe.encode_many(texts, word_ids=False)
        size = tracemalloc.get_traced_memory()[0] - held
    finally:
        tracemalloc.stop()
    tokens = sum(len(e) for e in encodings)
    assert size < 12 * tokens + 400 * len(texts), (size / tokens, tokens / len(texts))
    assert encodings[0].ids == pipe.encode(texts[0]).ids and isinstance(encodings[0].ids, list)


def test_the_features_hold_their_inputs_as_int32_arrays(tmp_path, texts):
    """The features that training holds for the whole run: each model input an int32 array (4 bytes a token,
    against about 36 for a list of Python ints), which Pad batches as it did the lists."""
    from ernie_ft.cli.train import parse_train_args
    from ernie_ft.data.batching import collate
    from ernie_ft.data.dataset import featurize, read_splits
    from ernie_ft.models import modeling
    from ernie_ft.task import load_task

    source = tmp_path / "train.tsv"
    source.write_text("label\ttext_a\n" + "".join(f"{i % 2}\t{t}\n" for i, t in enumerate(texts)), "utf-8")
    argv = ["--train", str(source), "--model", "scratch:tiny", "--output", str(tmp_path / "out")]
    cfg = parse_train_args(argv + ["--cache-dir", str(tmp_path / "cache")], "classify", "", None)
    task = load_task("classify")
    examples, labels = read_splits(task, cfg.data)
    pipe = modeling.load_pipeline(cfg.model, cfg.data, lambda: task.texts(examples["train"]), task.exact_spans)
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        split = featurize(task, "train", examples["train"], pipe, labels, cfg.data)
        size = tracemalloc.get_traced_memory()[0] - held
    finally:
        tracemalloc.stop()
    tokens = int(split.lengths.sum())
    first = split.features[0]
    assert first["input_ids"].dtype == first["token_type_ids"].dtype == "int32"
    assert size < 8 * tokens + 1000 * len(split.features), (size / tokens, len(split.features))
    batch = collate(split.features[:2], pipe.pad_id)
    assert batch["input_ids"].dtype == "int64" and batch["input_ids"][0, 0] == pipe.cls_id
