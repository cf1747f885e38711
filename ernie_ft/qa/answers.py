"""Extractive QA's answers from the model's (start, end) logits: a question's windows stitched over its context,
candidate spans ranked, the best span (or no answer) cut from the context by character offsets, with the n-best
list and its probabilities."""

from __future__ import annotations

import numpy as np

from ernie_ft.data.windows import window_owner


def stitch(indices: list[int], features: list[dict], logits: list) -> tuple:
    """One question's windows joined over its context tokens: (start logits, end logits, char offsets, owner).

    Each token's logits come from its max-context window (``owner``, BERT's rule: min(tokens left,
    tokens right) + 0.01 x window length, ties to the earlier window), so a span may start in one
    window and end in the next.
    """
    windows = [features[i]["_window"] for i in indices]
    n_tokens = max((e for _, e in windows), default=0)
    owner = window_owner(windows, n_tokens, length_bonus=0.01)
    start, end = np.full(n_tokens, -np.inf), np.full(n_tokens, -np.inf)
    offsets = np.zeros((n_tokens, 2), dtype=np.int64)
    for k, i in enumerate(indices):
        (s, e), first = windows[k], features[i]["_context_start"]
        mine = owner[s:e] == k
        scores = logits[i][first : first + e - s]
        start[s:e][mine], end[s:e][mine] = scores[mine, 0], scores[mine, 1]
        offsets[s:e] = features[i]["_offsets"]
    return start, end, offsets, owner


def ranked_spans(start: np.ndarray, end: np.ndarray, owner: np.ndarray, n_best: int, max_answer_len: int) -> list:
    """Up to ``n_best`` (score, first token, last token) spans, best first, from stitched logits.

    Candidates pair the ``n_best`` highest start and end logits among each window's own tokens;
    reversed spans and spans longer than ``max_answer_len`` tokens are dropped.
    """
    own = [np.flatnonzero(owner == k) for k in range(owner.max() + 1 if len(owner) else 0)]
    starts = np.concatenate([t[np.argsort(-start[t], kind="stable")[:n_best]] for t in own] or [[]]).astype(int)
    ends = np.concatenate([t[np.argsort(-end[t], kind="stable")[:n_best]] for t in own] or [[]]).astype(int)
    length = ends[None, :] - starts[:, None] + 1
    score = np.where((length >= 1) & (length <= max_answer_len), start[starts, None] + end[None, ends], -np.inf)
    order = np.argsort(-score, axis=None, kind="stable")
    order = order[np.isfinite(score.flat[order])]
    return [(float(score.flat[k]), starts[k // len(ends)], ends[k % len(ends)]) for k in order]


def best_answers(
    logits: list,
    features: list[dict],
    contexts: list[str],
    n_best: int,
    max_answer_len: int,
    null_threshold: float | None,
) -> list[dict]:
    """The answer of every question from its windows' (start, end) logits.

    Every context token is scored in the window where it has the most context (``stitch``), and
    spans come from ``ranked_spans``; a span scores start + end logit and its text is cut from
    ``contexts[doc]`` by character offsets (spans with the same text position count once). With a
    ``null_threshold`` the answer is "" when the [CLS] score (its lowest over the windows) beats
    the best span by more than the threshold. Returns per question {"answer", "start",
    "probability", "n_best": [{"text", "start", "start_logit", "end_logit", "probability"}]} with
    probabilities over the n-best list.
    """
    by_doc: list[list[int]] = [[] for _ in contexts]
    for i, f in enumerate(features):
        by_doc[f["doc"]].append(i)
    results = []
    for doc, indices in enumerate(by_doc):
        start, end, offsets, owner = stitch(indices, features, logits)
        entries, seen = [], set()
        for score, a, b in ranked_spans(start, end, owner, n_best, max_answer_len):
            chars = (int(offsets[a, 0]), int(offsets[b, 1]))
            if chars not in seen:
                seen.add(chars)
                entries.append(
                    {
                        "text": contexts[doc][chars[0] : chars[1]],
                        "start": chars[0],
                        "score": score,
                        "start_logit": float(start[a]),
                        "end_logit": float(end[b]),
                    }
                )
            if len(entries) == n_best:
                break
        if null_threshold is not None and indices:  # the no-answer entry is always listed
            cls = min((logits[i][0] for i in indices), key=lambda row: float(row[0] + row[1]))
            entries.append(
                {
                    "text": "",
                    "start": -1,
                    "score": float(cls[0] + cls[1]),
                    "start_logit": float(cls[0]),
                    "end_logit": float(cls[1]),
                }
            )
            entries.sort(key=lambda e: -e["score"])
        if entries:
            values = np.array([e["score"] for e in entries])
            probs = np.exp(values - values.max())
            for e, p in zip(entries, probs / probs.sum()):
                e["probability"] = round(float(p), 6)
        chosen = next((e for e in entries if e["start"] >= 0), None)
        null = next((e for e in entries if e["start"] < 0), None)
        if chosen is None or (null is not None and null["score"] - chosen["score"] > null_threshold):
            chosen = null or {"text": "", "start": -1, "probability": 0.0}
        results.append(
            {
                "answer": chosen["text"],
                "start": chosen["start"],
                "probability": chosen["probability"],
                "n_best": [
                    {k: (round(v, 6) if isinstance(v, float) else v) for k, v in e.items() if k != "score"}
                    for e in entries
                ],
            }
        )
    return results
