"""Read extractive-QA data: SQuAD v1.1/v2.0 JSON or JSON Lines, with answers re-located in their context.

SQuAD JSON (CMRC 2018, DRCD and DuReader-robust ship it)::

    {"version": "v2.0", "data": [{"title": ..., "paragraphs": [{"context": "...", "qas": [
        {"id": "q1", "question": "...", "answers": [{"text": "...", "answer_start": 12}],
         "is_impossible": false}]}]}]}

JSON Lines, one question per line (the Hugging Face ``datasets`` layout)::

    {"id": "q1", "context": "...", "question": "...", "answers": {"text": ["..."], "answer_start": [12]}}

A question is unanswerable when ``is_impossible`` is true or it has no answers. An
``answer_start`` that does not point at the answer text is moved to the nearest place where the
text occurs; answers that occur nowhere in the context are not used as training spans (and a
training question left with none is dropped), all counted in ``ReadStats``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ernie_ft.data.sources import Location, check_records, parse_jsonl, read_text_file
from ernie_ft.errors import UserError


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple = ()
    """Gold answer texts as written (what the metrics score against)."""
    spans: tuple = ()
    """(start, end) character offsets in the context of the answers found there (training labels)."""
    impossible: bool = False
    where: str = ""
    """'path:LINE' or 'path: data[i].paragraphs[j].qas[k]', for messages."""


@dataclass
class ReadStats:
    questions: int = 0
    unanswerable: int = 0
    answers: int = 0
    relocated: list = field(default_factory=list)
    """(question id, given answer_start, used start) of answers moved to where their text is."""
    not_found: list = field(default_factory=list)
    """(question id, answer text) of answers that do not occur in their context."""
    dropped: int = 0
    """Training questions left without any answer found in the context."""
    empty_questions: list = field(default_factory=list)
    """Ids of questions whose text is empty (kept)."""

    def notes(self, flag: str, path: str) -> list[str]:
        """Human-readable lines about what was fixed or left out."""
        out = []
        if self.relocated:
            qid, given, used = self.relocated[0]
            out.append(
                f"{flag} {path}: {len(self.relocated)} of {self.answers} answers had an answer_start "
                f"that does not point at their text and were re-located to the nearest occurrence "
                f"(first: {qid}, {given} -> {used})"
            )
        if self.not_found:
            qid, text = self.not_found[0]
            use = (
                "dropped, with the questions left without an answer: " + str(self.dropped)
                if flag == "--train"
                else "still scored as gold texts, as the official scripts do"
            )
            out.append(
                f"{flag} {path}: {len(self.not_found)} of {self.answers} answers do not occur in their "
                f"context ({use}; first: {qid} {text[:30]!r})"
            )
        if self.empty_questions:
            out.append(
                f"{flag} {path}: {len(self.empty_questions)} questions have an empty question text and are "
                f"kept (first: {self.empty_questions[0]})"
            )
        return out


def locate_answer(context: str, text: str, start: int) -> int | None:
    """Where ``text`` occurs in ``context``: at ``start`` if it does, else the nearest occurrence, else None."""
    if start >= 0 and context.startswith(text, start):
        return start
    hits, at = [], context.find(text)
    while at >= 0:
        hits.append(at)
        at = context.find(text, at + 1)
    return min(hits, key=lambda p: (abs(p - start), p)) if hits else None


def read_qa(path: str, flag: str = "--train", labelled: bool = True) -> tuple[list[QAExample], ReadStats]:
    """Questions of a SQuAD JSON or JSONL file and what reading them fixed.

    ``labelled`` requires answers (or an unanswerable mark) on every question; training files
    (``flag == "--train"``) drop questions none of whose answers occur in the context, so that
    no question is mislabelled as unanswerable.
    """
    examples, stats = _questions(((Location(where), record) for where, record in _records(path, flag)), flag, labelled)
    if not stats.questions:
        raise UserError(f"{flag}: {path} holds no questions")
    return examples, stats


def read_qa_records(records: list, flag: str, labelled: bool = False) -> tuple[list[QAExample], ReadStats]:
    """The questions ``read_qa`` gives for a JSON Lines file of ``records`` (dicts in memory, e.g. a served
    request's inputs), each ``where`` naming its item (``inputs[2]``), and what reading them fixed; a bad field
    raises UserError naming it (``inputs[2].context: ...``)."""
    rows = check_records(records, flag, '{"id", "context", "question", "answers"}')
    return _questions(((Location.item(flag, n - 1), record) for n, record in rows), flag, labelled)


def _questions(located, flag: str, labelled: bool) -> tuple[list[QAExample], ReadStats]:
    """The examples of ``(Location, record)`` pairs, and what reading them fixed (see ``read_qa``)."""
    stats, examples, seen = ReadStats(), [], {}
    for at, record in located:
        example = _example(at, record, labelled, stats, len(examples))
        if example.id in seen:
            raise UserError(
                f"{at.field('id')}: question id {example.id!r} is used before at {seen[example.id]}; "
                "give every question its own id"
            )
        seen[example.id] = at.record
        if labelled and flag == "--train" and not example.impossible and not example.spans:
            stats.dropped += 1
            continue
        examples.append(example)
    return examples, stats


def _records(path: str, flag: str):
    """(where, {"id", "question", "context", "answers", "is_impossible"}) per question."""
    text = read_text_file(path, flag)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # several JSON values: JSON Lines
            return _json_lines(path, flag, text, e)
        raise UserError(
            f"{flag}: {path}:{e.lineno}:{e.colno}: invalid JSON ({e.msg}); fix the file there "
            '(SQuAD JSON is one object {"data": [...]}; JSON Lines is one question per line)'
        ) from None
    if isinstance(document, dict) and "data" in document:
        return _squad(path, flag, document)
    if isinstance(document, dict) and ("question" in document or "context" in document):
        return [(f"{path}:1", document)]
    raise UserError(
        f'{flag}: {path} is neither SQuAD JSON ({{"data": [{{"paragraphs": ...}}]}}) nor JSON '
        'Lines ({"id", "context", "question", "answers"} per line)'
    )


def _json_lines(path: str, flag: str, text: str, first_error: json.JSONDecodeError):
    lines = text.split("\n")
    try:
        json.loads(next(line for line in lines if line.strip()))
    except json.JSONDecodeError:  # not JSON Lines after all: report where the one JSON value went wrong
        raise UserError(
            f"{flag}: {path}:{first_error.lineno}:{first_error.colno}: invalid JSON (extra data after "
            "the first value); a SQuAD file is one object, JSON Lines one object per line"
        ) from None
    _, records = parse_jsonl(f"{flag}: {path}", path, lines, '{"id", "context", "question", "answers"}')
    return [(f"{path}:{n}", record) for n, record in records]


def _squad(path: str, flag: str, document: dict):
    if not isinstance(document["data"], list):
        raise UserError(f'{flag}: {path}: "data" must be a list of articles with "paragraphs"')
    for i, article in enumerate(document["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise UserError(f'{flag}: {path}: data[{i}] has no "paragraphs" list')
        for j, paragraph in enumerate(paragraphs):
            qas = paragraph.get("qas", []) if isinstance(paragraph, dict) else None
            if not isinstance(qas, list):
                raise UserError(f'{flag}: {path}: data[{i}].paragraphs[{j}] needs a "qas" list of questions')
            for k, qa in enumerate(qas):
                where = f"{path}: data[{i}].paragraphs[{j}].qas[{k}]"
                if not isinstance(qa, dict):
                    raise UserError(f'{where}: expected an object with "id", "question" and "answers"')
                yield where, {**qa, "context": paragraph.get("context")}


def _example(at: Location, record: dict, labelled: bool, stats: ReadStats, index: int) -> QAExample:
    question, context = record.get("question"), record.get("context")
    qid = str(record["id"]).strip() if record.get("id") not in (None, "") else f"q{index + 1}"
    where = at.record
    if not isinstance(question, str):
        raise UserError(f'{at.field("question")}: question {qid!r} has no "question" text')
    if not question.strip():  # CMRC 2018 trial has two; the context alone still gets an answer
        stats.empty_questions.append(qid)
    if not isinstance(context, str) or not context.strip():
        raise UserError(
            f'{at.field("context")}: question {qid!r} has no context; every question needs the "context" '
            "paragraph its answer is taken from"
        )
    stats.questions += 1
    if not labelled:
        return QAExample(qid, question, context, where=where)
    if "answers" not in record and "is_impossible" not in record:
        raise UserError(
            f'{at.field("answers")}: question {qid!r} has no "answers"; give {{"text": [...], "answer_start": '
            '[...]}, or mark an unanswerable question with "is_impossible": true'
        )
    if record.get("is_impossible") is True:
        stats.unanswerable += 1
        return QAExample(qid, question, context, impossible=True, where=where)
    answers = _answers(at.field("answers"), qid, record.get("answers") or [])
    if not answers:
        stats.unanswerable += 1
        return QAExample(qid, question, context, impossible=True, where=where)
    spans = []
    for text, start in answers:
        stats.answers += 1
        found = locate_answer(context, text, start)
        if found is None:
            stats.not_found.append((qid, text))
            continue
        if found != start:
            stats.relocated.append((qid, start, found))
        spans.append((found, found + len(text)))
    return QAExample(qid, question, context, tuple(t for t, _ in answers), tuple(spans), False, where)


def _answers(where: str, qid: str, value) -> list[tuple[str, int]]:
    """[(text, answer_start)] from [{"text", "answer_start"}, ...] or {"text": [...], "answer_start": [...]}."""
    if isinstance(value, dict):
        texts, starts = value.get("text", []), value.get("answer_start", [])
        if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
            raise UserError(
                f'{where}: question {qid!r}: "answers" needs lists "text" and "answer_start" of the same length'
            )
        value = [{"text": t, "answer_start": s} for t, s in zip(texts, starts)]
    if not isinstance(value, list):
        raise UserError(f'{where}: question {qid!r}: "answers" must be a list of {{"text", "answer_start"}}')
    out = []
    for answer in value:
        text = answer.get("text") if isinstance(answer, dict) else None
        start = answer.get("answer_start", -1) if isinstance(answer, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise UserError(f'{where}: question {qid!r} has an answer without "text"; remove it or fill it in')
        if isinstance(start, bool) or not isinstance(start, int):
            raise UserError(
                f"{where}: question {qid!r}: answer_start {start!r} is not a character offset "
                "(an integer, 0 = the first character of the context)"
            )
        out.append((text, start))
    return out
