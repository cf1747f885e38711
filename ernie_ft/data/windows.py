"""Sliding windows over long token sequences (texts and text pairs cut into model inputs), and pooling
window outputs back per document."""

from __future__ import annotations

import sys

import numpy as np

from ernie_ft.config import DataConfig


def window_spans(n_tokens: int, size: int, stride: int) -> list[tuple[int, int]]:
    """Token ranges [start, end) of at most ``size`` tokens covering ``range(n_tokens)``.

    Consecutive windows share ``stride`` tokens; the last window ends at ``n_tokens`` (it is
    shifted left rather than left short, so every window is as full as the text allows).
    """
    if size <= stride:
        raise ValueError(f"window size {size} must exceed the overlap {stride}")
    if n_tokens <= size:
        return [(0, n_tokens)]
    spans, start, step = [], 0, size - stride
    while True:
        end = start + size
        if end >= n_tokens:
            spans.append((n_tokens - size, n_tokens))
            return spans
        spans.append((start, end))
        start += step


def window_owner(
    windows: list[tuple[int, int]], n_tokens: int, *, open_ends: bool = False, length_bonus: float = 0.0
) -> np.ndarray:
    """For each of ``n_tokens`` token positions, the index into ``windows`` of the window that owns it.

    Of the windows [start, end) covering a token, the owner is the one where the token has most
    context: min(tokens before it, tokens after it) in the window, plus ``length_bonus`` x the
    window's length; ties go to the earlier window, and a token no window covers gets -1. With
    ``open_ends`` a window edge at the text's own start or end (0 or ``n_tokens``) cuts nothing,
    so it counts as unlimited context. BERT's max-context rule is ``length_bonus=0.01``; on the
    windows of ``window_spans`` it and ``open_ends`` choose the same owners.
    """
    owner = np.full(n_tokens, -1)
    best = np.full(n_tokens, -np.inf)
    for k, (start, end) in enumerate(windows):
        position = np.arange(start, end)
        left, right = (position - start).astype(float), (end - 1 - position).astype(float)
        if open_ends and start == 0:
            left[:] = np.inf
        if open_ends and end >= n_tokens:
            right[:] = np.inf
        score = np.minimum(left, right) + length_bonus * (end - start)
        better = score > best[start:end]
        owner[start:end][better], best[start:end][better] = k, score[better]
    return owner


def pack_inputs(first: list[int], second: list[int] | None, cls_id: int, sep_id: int) -> tuple[list[int], list[int]]:
    """[CLS] first [SEP] (second [SEP]) as (input_ids, token_type_ids)."""
    ids = [cls_id, *first, sep_id]
    types = [0] * len(ids)
    if second is not None:
        ids += [*second, sep_id]
        types += [1] * (len(second) + 1)
    return ids, types


def token_windows(ids: list[int], pipeline, data: DataConfig):
    """(start, end, input_ids, token_type_ids) of each window over a text's token ``ids``: --max-len tokens with
    [CLS] and [SEP], consecutive windows sharing --stride (at most half a window). The one way NER, nested NER and
    relation extraction cut a text; ``on_cut_edge`` says which spans a window may have cut short."""
    budget = data.max_len - 2
    for start, end in window_spans(len(ids), budget, min(data.overlap(), budget // 2)):
        yield (start, end, *pack_inputs(ids[start:end], None, pipeline.cls_id, pipeline.sep_id))


def on_cut_edge(first, last, window: tuple[int, int], n_tokens: int) -> np.ndarray:
    """Whether each span (``first``, ``last``: arrays of window positions, [CLS] being 0) of a ``token_windows``
    window [start, end) of a text of ``n_tokens`` tokens touches an edge of the window that cuts the text: such a span
    may be cut short, and the neighbouring window, which overlaps it, holds it whole."""
    start, end = window
    first, last = np.asarray(first), np.asarray(last)
    return ((start > 0) & (first <= 1)) | ((end < n_tokens) & (last >= end - start))


def pool_windows(logits: np.ndarray, docs: np.ndarray, n_docs: int, how: str = "mean") -> np.ndarray:
    """Combine per-window outputs ``logits[i]`` of document ``docs[i]`` into one row per document."""
    docs = np.asarray(docs)
    out = np.zeros((n_docs,) + logits.shape[1:], dtype=np.float64)
    if how == "mean":
        np.add.at(out, docs, logits)
        counts = np.bincount(docs, minlength=n_docs).reshape((n_docs,) + (1,) * (logits.ndim - 1))
        return (out / np.maximum(counts, 1)).astype(logits.dtype)
    if how == "max":
        out[:] = -np.inf
        np.maximum.at(out, docs, logits)
        return out.astype(logits.dtype)
    raise ValueError(f"unknown pooling {how!r}")


def windowed_inputs(
    first: list[int], second: list[int] | None, max_len: int, stride: int, cls_id: int, sep_id: int
) -> tuple[list[tuple[list[int], list[int]]], bool]:
    """Model inputs for one text (or pair) that never exceed ``max_len`` tokens.

    A long first text becomes overlapping windows; a second text is kept whole in every window
    unless it would take more than half of ``max_len``, in which case it is cut to that half.
    Returns ([(input_ids, token_type_ids), ...], whether the second text was cut).
    """
    cut = False
    if second is None:
        budget = max_len - 2
    else:
        limit = (max_len - 3) // 2
        cut = len(second) > limit
        second = second[:limit]
        budget = max_len - 3 - len(second)
    spans = window_spans(len(first), budget, min(stride, budget // 2))
    return [pack_inputs(first[s:e], second, cls_id, sep_id) for s, e in spans], cut


def text_windows(examples: list, encodings: list, pipeline, data: DataConfig) -> list[dict]:
    """Windowed model inputs per example: 'input_ids', 'token_type_ids' and 'doc' (example index).

    ``encodings`` holds the encodings of every example's text, then of every text pair, as
    ``pair_texts`` orders them.
    """
    n = len(examples)
    pairs = iter(encodings[n:])
    features, cut = [], 0
    for doc, (example, first) in enumerate(zip(examples, encodings[:n])):
        second = next(pairs).ids if example.text_pair is not None else None
        windows, was_cut = windowed_inputs(
            first.ids, second, data.max_len, data.overlap(), pipeline.cls_id, pipeline.sep_id
        )
        cut += was_cut
        features += [{"input_ids": ids, "token_type_ids": types, "doc": doc} for ids, types in windows]
    if cut:
        print(
            f"note: {cut} second texts were longer than half of --max-len {data.max_len} and were cut", file=sys.stderr
        )
    return features


def pair_texts(examples: list) -> list[str]:
    """Every example's text, then every text pair: the order ``text_windows`` reads encodings in."""
    return [e.text for e in examples] + [e.text_pair for e in examples if e.text_pair is not None]
