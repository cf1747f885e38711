"""Extractive-QA scores: the official CMRC 2018 EM/F1 and SQuAD's, as percentages.

CMRC 2018 (``cmrc2018_evaluate.py``, v5 "special" for SQuAD-style data) defines:

- EM: a gold answer equals the prediction after lower-casing, stripping the ends and removing
  the characters of ``CMRC_PUNCTUATION`` (whitespace inside the text still counts);
- F1: both texts are cut by ``mixed_segmentation`` (every Chinese character and every
  punctuation mark of the list is a segment, runs of other characters are split into words
  by NLTK's word tokenizer) with the punctuation removed; precision and recall come from the
  longest common *substring* of the two segment lists, not from a bag of words;
- both are the maximum over the gold answers, averaged over questions, times 100.

The official script calls ``nltk.word_tokenize``; ``word_tokenize`` below is NLTK's Treebank
rules (as ``word_tokenize`` applies them in NLTK 3.3-3.4) without Punkt sentence splitting,
which only matters for a sentence-final period in the middle of a non-Chinese run.

SQuAD (v2.0 script, which extends v1.1's): lower-case, drop ASCII punctuation and the
articles a/an/the, split on whitespace; F1 over the bag of words.

Unanswerable questions (SQuAD v2.0 style, no gold answer) score 1 for an empty prediction and
0 otherwise under both metrics.
"""

from __future__ import annotations

import collections
import difflib
import re
import string

METRICS = ("cmrc2018", "squad")
METRIC_NAMES = {"cmrc2018": "CMRC 2018", "squad": "SQuAD"}

# As listed in the official script; its '……' is two characters and so never matches one.
CMRC_PUNCTUATION = frozenset(
    [
        "-",
        ":",
        "_",
        "*",
        "^",
        "/",
        "\\",
        "~",
        "`",
        "+",
        "=",
        "，",
        "。",
        "：",
        "？",
        "！",
        "“",
        "”",
        "；",
        "’",
        "《",
        "》",
        "……",
        "·",
        "、",
        "「",
        "」",
        "（",
        "）",
        "－",
        "～",
        "『",
        "』",
    ]
)
_CHINESE = re.compile(r"[\u4e00-\u9fa5]")

# NLTK's TreebankWordTokenizer as nltk.word_tokenize sets it up: (pattern, replacement) in order.
# The original rules were compiled without re.UNICODE under Python 2 (ASCII \d \w \s), the
# "improved" quote rules with it.
_A, _U = re.ASCII, 0
_STARTING_QUOTES = [
    (r"([«“‘„]|[`]+)", r" \1 ", _U),
    (r'^"', r"``", _A),
    (r"(``)", r" \1 ", _A),
    (r"([ \(\[{<])(\"|\'{2})", r"\1 `` ", _A),
    (r"(?i)(\')(?!re|ve|ll|m|t|s|d)(\w)\b", r"\1 \2", _U),
]
_PUNCTUATION = [
    (r"([^\.])(\.)([\]\)}>\"\'»”’ ]*)\s*$", r"\1 \2 \3 ", _U),
    (r"([:,])([^\d])", r" \1 \2", _A),
    (r"([:,])$", r" \1 ", _A),
    (r"\.\.\.", r" ... ", _A),
    (r"[;@#$%&]", r" \g<0> ", _A),
    (r"([^\.])(\.)([\]\)}>\"\']*)\s*$", r"\1 \2\3 ", _A),
    (r"[?!]", r" \g<0> ", _A),
    (r"([^'])' ", r"\1 ' ", _A),
    (r"[\]\[\(\)\{\}\<\>]", r" \g<0> ", _A),
    (r"--", r" -- ", _A),
]
_ENDING_QUOTES = [
    (r"([»”’])", r" \1 ", _U),
    (r'"', " '' ", _A),
    (r"(\S)(\'\')", r"\1 \2 ", _A),
    (r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 ", _A),
    (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 ", _A),
]
_CONTRACTIONS = [
    r"(?i)\b(can)(not)\b",
    r"(?i)\b(d)('ye)\b",
    r"(?i)\b(gim)(me)\b",
    r"(?i)\b(gon)(na)\b",
    r"(?i)\b(got)(ta)\b",
    r"(?i)\b(lem)(me)\b",
    r"(?i)\b(mor)('n)\b",
    r"(?i)\b(wan)(na)\s",
    r"(?i) ('t)(is)\b",
    r"(?i) ('t)(was)\b",
]
_BEFORE = [(re.compile(p, f), r) for p, r, f in _STARTING_QUOTES + _PUNCTUATION]
_AFTER = [(re.compile(p, f), r) for p, r, f in _ENDING_QUOTES] + [
    (re.compile(p, _A), r" \1 \2 ") for p in _CONTRACTIONS
]


def word_tokenize(text: str) -> list[str]:
    """English-style words of ``text`` by the Penn Treebank rules ('3.5%' -> ['3.5', '%'])."""
    for pattern, replacement in _BEFORE:
        text = pattern.sub(replacement, text)
    text = f" {text} "
    for pattern, replacement in _AFTER:
        text = pattern.sub(replacement, text)
    return text.split()


def mixed_segmentation(text: str, rm_punc: bool = False) -> list[str]:
    """CMRC segments: each Chinese character and listed punctuation mark alone, other runs as words.

    With ``rm_punc`` the listed marks are skipped without ending the current run, so 'GPT-4'
    becomes the one word 'gpt4', exactly as in the official script.
    """
    segments, run = [], ""
    for char in text.lower().strip():
        if rm_punc and char in CMRC_PUNCTUATION:
            continue
        if _CHINESE.match(char) or char in CMRC_PUNCTUATION:
            if run:
                segments += word_tokenize(run)
                run = ""
            segments.append(char)
        else:
            run += char
    return segments + word_tokenize(run) if run else segments


def remove_punctuation(text: str) -> str:
    """Lower-cased, ends stripped, CMRC's punctuation marks removed (inner whitespace kept)."""
    return "".join(c for c in text.lower().strip() if c not in CMRC_PUNCTUATION)


def longest_common_substring(a: list, b: list) -> int:
    """Length of the longest run of consecutive items that ``a`` and ``b`` share."""
    if not a or not b:
        return 0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b)).size


def cmrc_f1(answers: list[str], prediction: str) -> float:
    """CMRC 2018 F1 of one prediction against its gold answers (0 to 1)."""
    if not answers:
        return float(not prediction)
    predicted = mixed_segmentation(prediction, rm_punc=True)
    best = 0.0
    for answer in answers:
        gold = mixed_segmentation(answer, rm_punc=True)
        common = longest_common_substring(gold, predicted)
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def cmrc_em(answers: list[str], prediction: str) -> float:
    """CMRC 2018 exact match: 1.0 when some gold answer equals the prediction without punctuation."""
    if not answers:
        return float(not prediction)
    return float(any(remove_punctuation(a) == remove_punctuation(prediction) for a in answers))


def normalize_squad(text: str) -> str:
    """SQuAD normalisation: lower case, no ASCII punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def squad_f1(answers: list[str], prediction: str) -> float:
    """SQuAD bag-of-words F1 (0 to 1), the maximum over the gold answers."""
    if not answers:
        return float(not prediction)
    predicted = normalize_squad(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_squad(answer).split()
        if not gold or not predicted:
            best = max(best, float(gold == predicted))
            continue
        common = sum((collections.Counter(gold) & collections.Counter(predicted)).values())
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def squad_em(answers: list[str], prediction: str) -> float:
    if not answers:
        return float(not prediction)
    return float(any(normalize_squad(a) == normalize_squad(prediction) for a in answers))


SCORERS = {"cmrc2018": (cmrc_em, cmrc_f1), "squad": (squad_em, squad_f1)}


def qa_scores(predictions: list[str], golds: list[list[str]], metric: str = "cmrc2018") -> dict:
    """{"em", "f1" (percent), "metric", "questions"} of predicted texts against gold answer lists.

    An empty gold list is an unanswerable question (its right prediction is ""); when there are
    any, "has_ans_em/f1" and "no_ans_em/f1" score the two kinds separately, as SQuAD v2.0 does.
    """
    if metric not in SCORERS:
        raise ValueError(f"unknown QA metric {metric!r}; choose {' or '.join(METRICS)}")
    em_of, f1_of = SCORERS[metric]
    em = [em_of(list(g), p) for g, p in zip(golds, predictions, strict=True)]
    f1 = [f1_of(list(g), p) for g, p in zip(golds, predictions)]

    def mean(values: list[float]) -> float:
        return 100.0 * sum(values) / len(values) if values else 0.0

    scores = {"em": mean(em), "f1": mean(f1), "metric": metric, "questions": len(golds)}
    if any(not g for g in golds):
        for name, keep in (("has_ans", True), ("no_ans", False)):
            chosen = [i for i, g in enumerate(golds) if bool(g) == keep]
            scores[f"{name}_em"] = mean([em[i] for i in chosen])
            scores[f"{name}_f1"] = mean([f1[i] for i in chosen])
            scores[f"{name}_questions"] = len(chosen)
    return scores


def shared_answer_share(contexts: list[str], starts: list) -> tuple[float, int]:
    """(share, questions): of the questions whose context has other questions, the share answered at the same
    start as another question on that context (``None``: no answer, never shared).

    Different questions on one context rarely share an answer (CMRC 2018 dev: 0.1% of them), so a
    prediction share far above the gold one says the model answers the context, not the question.
    """
    groups = collections.defaultdict(list)
    for context, start in zip(contexts, starts, strict=True):
        groups[context].append(start)
    asked = [g for g in groups.values() if len(g) > 1]
    questions = sum(map(len, asked))
    shared = sum(s is not None and g.count(s) > 1 for g in asked for s in g)
    return (shared / questions if questions else 0.0), questions
