"""Property-based tests (Hypothesis) for every reader: random bytes, random encodings, random structure and
random valid-looking records either parse (and round-trip where a writer exists) or raise one UserError that
names the file; any other exception is a bug.

The suite runs ``FUZZ_EXAMPLES`` cases per property and reader (default 40). The long run, once, not in CI:

    ERNIE_FT_FUZZ_EXAMPLES=2500 ERNIE_FT_FUZZ_REPORT=fuzz.json .venv/bin/python -m pytest tests/test_fuzz.py

writes how many cases each reader took to ``ERNIE_FT_FUZZ_REPORT``.
"""

import collections
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ernie_ft.data.readers import read_examples
from ernie_ft.data.squad import read_qa
from ernie_ft.errors import UserError
from ernie_ft.ner.formats import NerExample, read_ner
from ernie_ft.ner.writers import write_cluener, write_conll, write_spans
from ernie_ft.pretrain.corpus import scan

FUZZ_EXAMPLES = int(os.environ.get("ERNIE_FT_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CASES = collections.Counter()

# reader name -> (file suffix, how the command line reads such a file)
READERS = {
    "tsv": (".tsv", lambda p: read_examples(p, flag="--train")),
    "csv": (".csv", lambda p: read_examples(p, flag="--train")),
    "jsonl": (".jsonl", lambda p: read_examples(p, flag="--train")),
    "txt (prediction)": (".txt", lambda p: read_examples(p, flag="--input", require_label=False)),
    "conll": (".conll", lambda p: read_ner(p, "--train", "conll")),
    "ner auto-detected": (".txt", lambda p: read_ner(p, "--train")),
    "cluener jsonl": (".json", lambda p: read_ner(p, "--train", "cluener")),
    "span jsonl": (".jsonl", lambda p: read_ner(p, "--train", "spans")),
    "squad json": (".json", lambda p: read_qa(p, "--train")),
    "squad jsonl": (".jsonl", lambda p: read_qa(p, "--train")),
    "corpus txt": (".txt", lambda p: [d for _, d in scan(p, "--corpus").iter_documents()]),
    "corpus jsonl": (".jsonl", lambda p: [d for _, d in scan(p, "--corpus").iter_documents()]),
    "corpus squad json": (".json", lambda p: [d for _, d in scan(p, "--corpus").iter_documents()]),
}


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    path = os.environ.get("ERNIE_FT_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"cases": dict(CASES), "total": sum(CASES.values())}, f, ensure_ascii=False, indent=1)


def check(reader: str, content: bytes):
    """Read ``content`` as ``reader`` does: the result, or None after a UserError that names the file."""
    suffix, read = READERS[reader]
    CASES[reader] += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data" + suffix)
        with open(path, "wb") as f:
            f.write(content)
        try:
            return read(path)
        except UserError as e:
            assert path in str(e), f"{reader}: the message does not name the file: {e}"
            assert "\n" not in str(e), f"{reader}: the message is more than one line: {e!r}"
            return None


# ------------------------------------------------------------------ anything at all


@pytest.mark.parametrize("reader", READERS)
@FUZZ
@given(content=st.binary(max_size=400))
def test_random_bytes_parse_or_fail_with_a_user_error(reader, content):
    check(reader, content)


ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "gbk", "gb18030", "big5", "latin-1", "shift_jis"]


@pytest.mark.parametrize("reader", READERS)
@FUZZ
@given(text=st.text(max_size=200), encoding=st.sampled_from(ENCODINGS))
def test_random_text_in_random_encodings_parses_or_fails_with_a_user_error(reader, text, encoding):
    check(reader, text.encode(encoding, errors="replace"))


# Fragments of every format, so that random sequences of them look like the real thing.
FRAGMENTS = [
    "\t",
    ",",
    '"',
    "'",
    "\n",
    "\r\n",
    " ",
    "{",
    "}",
    "[",
    "]",
    ":",
    "text",
    "label",
    "text_a",
    "text_b",
    '"text"',
    '"label"',
    '"entities"',
    '"start"',
    '"end"',
    '"type"',
    '"context"',
    '"question"',
    '"answers"',
    '"answer_start"',
    '"data"',
    '"paragraphs"',
    '"qas"',
    '"id"',
    "null",
    "true",
    "0",
    "1",
    "-1",
    "3.5",
    "1e400",
    "正面",
    "负面",
    "张三",
    "北京",
    "B-PER",
    "I-PER",
    "E-LOC",
    "S-ORG",
    "M-LOC",
    "O",
    "B-",
    "I-",
    "\ufeff",
    "\u2028",
    "\x00",
    "\\",
    '\\"',
    "\\u4e2d",
    "😀",
    "𠀀",
]


@pytest.mark.parametrize("reader", READERS)
@FUZZ
@given(parts=st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=80))
def test_random_structure_parses_or_fails_with_a_user_error(reader, parts):
    check(reader, "".join(parts).encode("utf-8"))


# ------------------------------------------------------------------ valid-looking records round-trip

HANZI = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FA5)
WORDS = st.text(HANZI, min_size=1, max_size=12)
LABELS = st.sampled_from(["正面", "负面", "中性", "1", "0", "体育", "财经"])


@FUZZ
@given(rows=st.lists(st.tuples(WORDS, LABELS), min_size=1, max_size=20))
def test_tsv_and_jsonl_records_read_back_as_written(rows):
    tsv = "text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows)
    jsonl = "".join(json.dumps({"text": t, "label": label}, ensure_ascii=False) + "\n" for t, label in rows)
    for reader, content in (("tsv", tsv), ("jsonl", jsonl)):
        examples = check(reader, content.encode("utf-8"))
        assert [(e.text, e.label) for e in examples] == rows, reader


@st.composite
def ner_examples(draw):
    """Texts with non-overlapping entities of a few types."""
    examples = []
    for line in range(draw(st.integers(1, 6))):
        text = draw(st.text(HANZI, min_size=1, max_size=30))
        cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=6))))
        spans = []
        for start, end in zip(cuts[::2], cuts[1::2]):
            if end > start:
                spans.append((start, end, draw(st.sampled_from(["PER", "LOC", "ORG"]))))
        examples.append(NerExample(text, tuple(spans), line + 1, "x"))
    return examples


@FUZZ
@given(examples=ner_examples(), scheme=st.sampled_from(["bio", "bioes", "bmes"]))
def test_ner_files_from_every_writer_read_back_as_written(examples, scheme):
    expected = [(e.text, tuple(e.entities)) for e in examples]
    for reader, content in (
        ("conll", write_conll(examples, scheme)),
        ("cluener jsonl", write_cluener(examples)),
        ("span jsonl", write_spans(examples)),
    ):
        got = check(reader, content.encode("utf-8"))
        assert [(e.text, tuple(e.entities)) for e in got] == expected, (reader, scheme)


@st.composite
def squad_records(draw):
    records = []
    for i in range(draw(st.integers(1, 5))):
        context = draw(st.text(HANZI, min_size=2, max_size=60))
        start = draw(st.integers(0, len(context) - 1))
        end = draw(st.integers(start + 1, len(context)))
        records.append(
            {
                "id": f"q{i}",
                "context": context,
                "question": draw(WORDS) + "？",
                "answers": {"text": [context[start:end]], "answer_start": [start]},
            }
        )
    return records


@FUZZ
@given(records=squad_records())
def test_squad_json_and_jsonl_read_back_as_written(records):
    squad = {
        "data": [
            {
                "paragraphs": [
                    {
                        "context": r["context"],
                        "qas": [
                            {
                                "id": r["id"],
                                "question": r["question"],
                                "answers": [
                                    {"text": r["answers"]["text"][0], "answer_start": r["answers"]["answer_start"][0]}
                                ],
                            }
                        ],
                    }
                    for r in records
                ]
            }
        ]
    }
    jsonl = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    for reader, content in (("squad json", json.dumps(squad, ensure_ascii=False)), ("squad jsonl", jsonl)):
        examples, _ = check(reader, content.encode("utf-8"))
        assert [(e.id, e.context, e.question) for e in examples] == [
            (r["id"], r["context"], r["question"]) for r in records
        ], reader
