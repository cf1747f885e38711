"""Extractive question answering (SQuAD, CMRC 2018, DRCD, DuReader-robust): ``python -m ernie_ft.qa``.

Each question with its context becomes ``[CLS] question [SEP] context window [SEP]`` inputs; a
context longer than fits is split into overlapping windows. The model scores every token as the
answer's start and end; the answer is the best-scoring span over all windows, cut from the
original context by character offsets.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ernie_ft.data.squad import read_qa, read_qa_records
from ernie_ft.data.windows import pack_inputs, window_spans
from ernie_ft.errors import UserError
from ernie_ft.evaluation.squad import METRIC_NAMES, METRICS, qa_scores, shared_answer_share
from ernie_ft.qa.answers import best_answers
from ernie_ft.task import TaskHooks

NO_ANSWER = "no_answer"


def unique_contexts(examples: list) -> tuple[list[str], list[int]]:
    """Distinct contexts in first-seen order, and each example's index into them."""
    index: dict[str, int] = {}
    of = [index.setdefault(e.context, len(index)) for e in examples]
    return list(index), of


def token_span(offsets: np.ndarray, start: int, end: int) -> tuple[int, int, bool] | None:
    """(first, last) tokens covering characters [start, end), and whether both ends fall on token edges."""
    if not len(offsets):
        return None
    first = int(np.searchsorted(offsets[:, 1], start, side="right"))  # first token ending after start
    last = int(np.searchsorted(offsets[:, 0], end, side="left")) - 1  # last token starting before end
    if first > last or first >= len(offsets) or last < 0:
        return None
    return first, last, bool(offsets[first, 0] == start and offsets[last, 1] == end)


@dataclass
class QA(TaskHooks):
    """Answer spans cut from a context, from SQuAD-style JSON or JSONL data."""

    name: str = "qa"
    head: str = "span"
    metric: str = "f1"
    input_fields: ClassVar[tuple] = (("question", "context"), ("id",))
    max_query_len: int = 64
    """Question tokens kept in every input; longer questions are cut (and counted)."""
    doc_stride: Optional[int] = None
    """Context tokens shared by consecutive windows of a long context (the overlap, as PaddleNLP's and
    Hugging Face's stride; at most half the context room). Default: --stride, else a quarter of --max-len."""
    max_answer_len: int = 30
    """Longest answer, in tokens, that post-processing considers."""
    n_best: int = 20
    """Start and end candidates per window, and the length of the n-best list written per question."""
    null_threshold: Optional[float] = None
    """Answer nothing when the [CLS] score beats the best span's score by more than this (SQuAD v2.0).
    Default: 0 when the training data has unanswerable questions, else an answer is always given."""
    qa_metric: str = "cmrc2018"
    """cmrc2018 (the official CMRC 2018 EM/F1: characters, longest common substring) or squad (SQuAD's
    bag of words)."""
    unused_data_settings: ClassVar[dict] = {
        "label_names": "QA has no label set: answers are spans of the context",
        **dict.fromkeys(
            ("text_column", "text_pair_column", "label_column"),
            "QA reads SQuAD-style JSON or JSONL (question, context, answers; see data/README.md), not columns",
        ),
        "allow_new_labels": "QA has no label set: answers are spans of the context",
        "window_pooling": "QA takes the best-scoring span over all of a context's windows",
        **dict.fromkeys(("header", "sheet"), "QA reads SQuAD-style JSON or JSONL, not tables"),
        "predictions_as_labels": "QA reads SQuAD-style JSON or JSONL, not annotation-tool exports",
    }
    """Data settings QA never reads: no flag, and a recipe that sets one is an error."""

    def __post_init__(self):
        for flag, value in (
            ("--max-query-len", self.max_query_len),
            ("--max-answer-len", self.max_answer_len),
            ("--n-best", self.n_best),
        ):
            if value < 1:
                raise UserError(f"{flag} must be at least 1")
        if self.doc_stride is not None and self.doc_stride < 0:
            raise UserError("--doc-stride must be 0 or more (tokens shared by consecutive windows)")
        if self.qa_metric not in METRICS:
            raise UserError(f"--qa-metric must be {' or '.join(METRICS)}, not {self.qa_metric!r}")
        self._announced = False

    def read(self, path, data, flag, labelled=True):
        examples, stats = read_qa(path, flag, labelled)
        for note in stats.notes(flag, path):
            print(f"note: {note}", file=sys.stderr)
        if not examples:
            raise UserError(f"{flag}: {path}: no question has an answer that occurs in its context")
        return examples

    def read_records(self, records, data, flag):
        """The questions ``read`` gives for a JSON Lines file of ``records``, without its notes (an empty question
        text is kept, as there)."""
        return read_qa_records(records, flag)[0]

    def fit_labels(self, train):
        """The model's outputs: a span, and 'no_answer' when the training data has unanswerable questions."""
        return ["span", NO_ANSWER] if any(e.impossible for e in train) else ["span"]

    def check_labels(self, examples, labels, data, flag):
        unanswerable = sum(e.impossible for e in examples)
        if unanswerable and self.threshold(labels) is None:
            print(
                f"note: {flag} has {unanswerable} unanswerable questions but the training data had none: the "
                "model always answers (set --null-threshold to allow no answer)",
                file=sys.stderr,
            )

    def threshold(self, labels) -> float | None:
        if self.null_threshold is not None:
            return self.null_threshold
        return 0.0 if NO_ANSWER in labels else None

    def texts(self, examples):
        contexts, _ = unique_contexts(examples)
        return contexts + [e.question for e in examples]

    def featurize(self, examples, encodings, pipeline, labels, data):
        contexts, context_of = unique_contexts(examples)
        offsets = [np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2) for enc in encodings[: len(contexts)]]
        wanted = self.doc_stride if self.doc_stride is not None else data.overlap()
        counts, features = collections.Counter(), []
        for doc, (example, question) in enumerate(zip(examples, encodings[len(contexts) :])):
            query = question.ids[: self.max_query_len]
            counts["cut"] += len(question.ids) > len(query)
            room = data.max_len - 3 - len(query)
            if room < 1:
                raise UserError(
                    f"{example.where}: the question takes {len(query)} tokens and leaves no room for the "
                    f"context in --max-len {data.max_len}; lower --max-query-len (now "
                    f"{self.max_query_len}) or raise --max-len"
                )
            context_ids, context_offsets = encodings[context_of[doc]].ids, offsets[context_of[doc]]
            overlap = min(wanted, room // 2)
            counts["capped"] += overlap < wanted and len(context_ids) > room
            span = next(filter(None, (token_span(context_offsets, a, b) for a, b in example.spans)), None)
            counts["inside_token"] += span is not None and not span[2]
            counts["no_token"] += bool(example.spans) and span is None
            windows = window_spans(len(context_ids), room, overlap)
            counts["unheld"] += span is not None and not any(s <= span[0] and span[1] < e for s, e in windows)
            for s, e in windows:
                ids, types = pack_inputs(query, context_ids[s:e], pipeline.cls_id, pipeline.sep_id)
                first = len(query) + 2
                inside = span is not None and s <= span[0] and span[1] < e
                features.append(
                    {
                        "input_ids": ids,
                        "token_type_ids": types,
                        "doc": doc,
                        "start_positions": span[0] - s + first if inside else 0,
                        "end_positions": span[1] - s + first if inside else 0,
                        "_offsets": context_offsets[s:e],
                        "_context_start": first,
                        "_window": (s, e),
                    }
                )
        notes = {
            "cut": f"questions were longer than --max-query-len {self.max_query_len} tokens and were cut",
            "capped": f"questions left too little room for windows overlapping by {wanted} tokens "
            "(--doc-stride); their windows overlap by half the room",
            "inside_token": "answers begin or end inside a token; their labels cover the whole token",
            "no_token": "answers cover no token and are labelled as no answer",
            "unheld": "answers are longer than fits in one window (raise --max-len or --doc-stride); every "
            "window labels them as no answer",
        }
        source = examples[0].where.split(":")[0] if examples else ""
        for key, count in counts.items():
            if count:
                print(f"note: {source}: {count} {notes[key]}", file=sys.stderr)
        return features

    def loss(self, logits, batch):
        import paddle.nn.functional as F

        start = F.cross_entropy(logits[:, :, 0], batch["start_positions"])
        end = F.cross_entropy(logits[:, :, 1], batch["end_positions"])
        return (start + end) / 2

    def answers(self, logits, features, examples, labels) -> list[dict]:
        return best_answers(
            logits, features, [e.context for e in examples], self.n_best, self.max_answer_len, self.threshold(labels)
        )

    def evaluate(self, logits, features, examples, labels, data):
        predicted = [a["answer"] for a in self.answers(logits, features, examples, labels)]
        if not self._announced:
            print(
                f"note: EM/F1 are the {METRIC_NAMES[self.qa_metric]} definitions (--qa-metric "
                f"{self.qa_metric}), in percent",
                file=sys.stderr,
            )
            self._announced = True
        return qa_scores(predicted, [list(e.answers) for e in examples], self.qa_metric)

    def predict(self, logits, features, examples, labels, data):
        return [
            {"id": e.id, "question": e.question, **a}
            for e, a in zip(examples, self.answers(logits, features, examples, labels))
        ]

    def report(self, logits, features, examples, labels, data, out_dir: str) -> str:
        """Both metrics as text; predictions.json (id -> answer) and nbest_predictions.json in ``out_dir``."""
        answers = self.answers(logits, features, examples, labels)
        paths = {}
        for name, content in (
            ("predictions.json", {e.id: a["answer"] for e, a in zip(examples, answers)}),
            ("nbest_predictions.json", {e.id: a["n_best"] for e, a in zip(examples, answers)}),
        ):
            paths[name] = os.path.join(out_dir, name)
            with open(paths[name], "w", encoding="utf-8") as f:
                json.dump(content, f, ensure_ascii=False, indent=1)
        golds, predicted = [list(e.answers) for e in examples], [a["answer"] for a in answers]
        lines = []
        for metric in sorted(METRICS, key=lambda m: m != self.qa_metric):
            scores = qa_scores(predicted, golds, metric)
            split = "".join(
                f", {k[:-3]} EM {scores[k]:.2f} F1 {scores[k[:-3] + '_f1']:.2f}"
                for k in ("has_ans_em", "no_ans_em")
                if k in scores
            )
            label = "metrics.json" if metric == self.qa_metric else "for comparison"
            lines.append(
                f"{METRIC_NAMES[metric]} metric ({label}): EM {scores['em']:.2f} F1 {scores['f1']:.2f} "
                f"(percent, {len(examples)} questions{split})"
            )
        contexts = [e.context for e in examples]
        shared, asked = shared_answer_share(contexts, [a["start"] if a["answer"] else None for a in answers])
        if asked:
            gold, _ = shared_answer_share(contexts, [e.spans[0][0] if e.spans else None for e in examples])
            lines.append(
                f"answered at the same place as another question on the same context: {100 * shared:.1f}% "
                f"of the {asked} questions that share a context (gold answers: {100 * gold:.1f}%)"
                + (
                    "; far above the gold share: the model answers the context more than the question"
                    if shared > 2 * gold + 0.1
                    else ""
                )
            )
        return "\n".join(
            lines
            + [
                f"predictions: {paths['predictions.json']} (id -> answer, the input of the "
                f"official evaluation scripts); n-best: {paths['nbest_predictions.json']}"
            ]
        )
