"""Cloze questions from unlabelled text: extractive-QA training data where there is none.

    python scripts/cloze_qa.py --corpus ../shared/data/corpus/news_xwlb.txt ... --output runs/cloze.jsonl \
        [--questions 16000] [--dev 500] [--seed 0]

A small labelled QA set (CMRC 2018's trial split: 1,002 questions) is too little for a small model
to learn where answers are; unlabelled text can teach it first (Lewis et al., *Unsupervised Question
Answering by Cloze Translation*, 2019). Consecutive lines of a corpus file make a passage of
``--min-context`` to ``--max-context`` characters; a sentence of it becomes a question by replacing
one part with a question word, and that part, where it stands in the passage, is the answer:

- a jieba entity, time or number (posseg ``nr``/``ns``/``nt``/``nz``/``t``/``m``; a number runs on
  through its unit words, 3 月 5 日 is one answer) -> 谁 / 哪里 / 哪个机构 / 什么 / 什么时候 / 多少;
- or a whole clause between commas (CMRC's answers average 31 characters, often a clause) -> 什么.

Example: passage ``……国务院总理李强3月5日在北京作政府工作报告……``, question
``国务院总理李强什么时候在北京作政府工作报告？``, answer ``3月5日``. The output is JSON Lines in the
layout ``python -m ernie_ft.qa`` reads (``--train``), and a held-out ``--dev`` file beside it
(``OUTPUT`` with ``.dev`` before the suffix). Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

from ernie_ft.data.sources import read_text_file
from ernie_ft.errors import UserError

SENTENCE_END = re.compile(r"(?<=[。！？；])")
QUESTION_WORDS = {"nr": "谁", "ns": "哪里", "nt": "哪个机构", "nz": "什么", "t": "什么时候", "m": "多少"}
NUMBER_UNITS = {"m", "q", "t"}  # a number continues through these (3 / 月 / 5 / 日, 5 / 亿 / 元)


def passages(lines: list[str], min_chars: int, max_chars: int):
    """Runs of consecutive lines joined into passages of ``min_chars`` to ``max_chars`` characters."""
    current, size = [], 0
    for line in lines:
        line = line.strip()
        if not line or len(line) > max_chars:
            current, size = [], 0
            continue
        if size + len(line) > max_chars:
            current, size = [], 0
        current.append(line)
        size += len(line)
        if size >= min_chars:
            yield "".join(current)
            current, size = [], 0


def entity_answers(sentence: str) -> list[tuple[int, int, str]]:
    """(start, end, question word) of every entity, time or number in ``sentence`` (jieba posseg)."""
    import jieba.posseg

    words = [(w.word, w.flag) for w in jieba.posseg.cut(sentence)]
    found, offset, i = [], 0, 0
    while i < len(words):
        word, flag = words[i]
        kind = flag[:2] if flag[:2] in QUESTION_WORDS else flag[:1] if flag[:1] in ("m", "t") else None
        end, j = offset + len(word), i + 1
        if kind in ("m", "t"):  # a number or time runs on through its units: 3 月 5 日, 5 亿 元
            while j < len(words) and words[j][1][:1] in NUMBER_UNITS:
                end += len(words[j][0])
                j += 1
            if any(words[k][1][:1] == "t" for k in range(i, j)) or sentence[end - 1] in "年月日时":
                kind = "t"  # 3 月 5 日 is a time, though jieba tags each piece a number
        if kind and 2 <= end - offset <= 12:
            found.append((offset, end, QUESTION_WORDS[kind]))
        offset, i = end, j
    return found


def clause_answers(sentence: str) -> list[tuple[int, int, str]]:
    """(start, end, 什么) of each comma-delimited clause of 6-40 characters that is not the first."""
    found, start = [], 0
    for part in re.split(r"(，)", sentence):
        length = len(part.rstrip("。！？；"))
        if part != "，" and start > 0 and 6 <= length <= 40:
            found.append((start, start + length, "什么"))
        start += len(part)
    return found


def cloze(passage: str, rng: random.Random) -> dict | None:
    """One question on ``passage``, or None when no sentence of it has a usable answer."""
    sentences, starts, offset = [], [], 0
    for s in SENTENCE_END.split(passage):
        if s:
            sentences.append(s)
            starts.append(offset)
            offset += len(s)
    order = list(range(len(sentences)))
    rng.shuffle(order)
    for k in order:
        sentence = sentences[k]
        if not 10 <= len(sentence) <= 80:
            continue
        candidates = entity_answers(sentence) + (clause_answers(sentence) if rng.random() < 0.6 else [])
        if not candidates:
            continue
        start, end, word = rng.choice(candidates)
        question = (sentence[:start] + word + sentence[end:]).rstrip("。！？；，")
        answer = sentence[start:end]
        if answer not in question:  # an answer the question still spells out teaches nothing
            return {
                "context": passage,
                "question": question + "？",
                "answers": {"text": [answer], "answer_start": [starts[k] + start]},
            }
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", nargs="+", required=True, help="text files, one document or paragraph per line")
    p.add_argument("--output", required=True, help="JSONL to write; the held-out questions go to OUTPUT.dev.jsonl")
    p.add_argument("--questions", type=int, default=16000, help="training questions (default 16000)")
    p.add_argument("--dev", type=int, default=500, help="held-out questions (default 500)")
    p.add_argument("--min-context", type=int, default=300)
    p.add_argument("--max-context", type=int, default=600)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    import jieba

    jieba.setLogLevel(60)
    rng = random.Random(args.seed)
    pool = []
    for path in args.corpus:
        try:
            text = read_text_file(path, "--corpus")
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        pool.extend(passages(text.splitlines(), args.min_context, args.max_context))
    rng.shuffle(pool)
    records = []
    for passage in pool:
        record = cloze(passage, rng)
        if record:
            records.append({"id": f"cloze-{len(records)}", **record})
            if len(records) == args.questions + args.dev:
                break
    if len(records) < args.questions + args.dev:
        print(
            f"error: --corpus gave {len(records)} questions, fewer than --questions {args.questions} + --dev "
            f"{args.dev}; add text or ask for fewer",
            file=sys.stderr,
        )
        return 2
    out = Path(args.output)
    dev = out.with_name(out.stem + ".dev" + out.suffix)
    for path, part in ((out, records[args.dev :]), (dev, records[: args.dev])):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for record in part:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"{len(records) - args.dev} questions in {out}, {args.dev} in {dev} (from {len(pool)} passages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
