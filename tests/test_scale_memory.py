"""Training's data step on a large file holds the encodings, not whole-file copies beside them (issue 48, item 7):
the Rust tokenizer is given a bounded chunk of texts at a time, and the tokenisation cache is written and read back
a bounded batch of rows at a time, from a mapped file; the encodings are the same either way."""

from __future__ import annotations

import tracemalloc

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
    """Python's allocations beyond the encodings, while the cache is written and while it is read back, stay
    under a tenth of the encodings' own (whole-file lists of the columns, or the file's bytes, are more). The file
    read is one record batch, as a cache written before batches is: it is still turned into lists 25 rows a time."""
    monkeypatch.setattr(cache, "BATCH_ROWS", 25)
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        encodings = pipe.encode_many(texts, word_ids=False)
        size = tracemalloc.get_traced_memory()[0] - held  # the encodings, and what tokenising left behind
        tracemalloc.reset_peak()
        cache.write_table(tmp_path / "c.arrow", encodings)
        written_peak = tracemalloc.get_traced_memory()[1] - held - size
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
    assert written_peak < size / 10, (written_peak, size)
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
