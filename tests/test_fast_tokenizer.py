"""The fast path, encode_many(word_ids=False): jieba does not run, and ids and offsets equal the reference.

The reference restates the pipeline as it was before the fast path: every character normalised on its
own (``_normalize_char``, the vocabulary's characters kept), the pipeline's Rust WordPiece on the
normalised text, offsets mapped back through the per-character index. Encodings carry no token types:
windows make them from the ids (``pack_inputs``), checked here on text pairs.

Texts: every string of the repo's data/ files and hand-made edge cases, and when ../shared/data is there
every text of ChnSentiCorp (train, dev, test), CLUENER (train, dev) and CMRC (dev and trial, contexts
and questions), 29,416 texts. Their normalisation is compared on every one; whole encodings on the 144
that normalisation changes and on ChnSentiCorp dev and CLUENER dev in full: where normalisation changes
nothing, both paths give tokenizers the same string, so comparing the rest would only run tokenizers twice
(all 29,416 matched once, in about 30 s on 2 busy cores; this file takes about 15 s there).
"""

import csv
import json

import pytest
from conftest import DATA, shared

from ernie_ft.config import DataConfig
from ernie_ft.data.readers import read_examples
from ernie_ft.data.windows import pair_texts, text_windows
from ernie_ft.ner.formats import read_ner
from ernie_ft.text.extension import learn, write
from ernie_ft.text.pipeline import TextPipeline, normalize_text
from ernie_ft.text.rules import _UNCHANGED, _normalize_char
from ernie_ft.text.scratch import build_vocab, write_vocab

EDGE_CASES = [
    "",
    "   ",
    "ＡＢＣ１２３ｘｙｚ，买了６９９９元的ｉＰｈｏｎｅ１５",  # full-width letters and digits
    "①②③⑩⑳ 第⑤条",  # circled digits: '⑩' is two characters after NFKC
    "4～6天，7〜8点 ~~",  # full-width and wave-dash tildes
    "好评😀👍🏻👨\u200d👩\u200d👧！",  # emoji, a skin-tone modifier, zero-width joiners (Cf: dropped)
    "控\x00制\x07字\x1b符\u200b\u200e\ufeff\x7f结束",  # control and format characters
    "a\tb\nc\r\nd\x0be\x0cf\x85g\u2028h\u2029i",  # tabs, newlines and other line breaks
    "Café naïve Ångström İstanbul Straße ﬁne e\u0301 o\u0308",  # accents, precomposed and combining
    "a" * 150 + " " + "超长" * 80 + " " + "1234567890" * 15,  # words past max_input_chars_per_word
    "  开头\u3000\u3000中间\u00a0\u2003结尾  \t\n ",  # whitespace runs, ideographic and no-break spaces
    "生僻字𠀀𪚥\ue000\U000e0001\ud800 和 [UNK] [CLS] [SEP]",  # unknown, private-use, tag, lone surrogate
    "m² x³ ½ ™ … ㎏ ℃ № ㈱ ｶﾀｶﾅ カタカナ ひらがな 한국어 αβγ Привет ʃʒ µ Ø ŋ",  # NFKC and other scripts
    "豈更車 1.5kg 3.14% $100 ＄５ e-mail: a_b@c.com http://x.cn/?q=1&r=2",  # compatibility ideographs
    "我在Apple Store买了iPhone15，花了６９９９元😀！南京市长江大桥 room 1208号",
]


def _strings(value):
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def repo_texts() -> list[str]:
    """Every string of every record of the repo's data/ files."""
    texts = []
    for path in sorted(DATA.iterdir()):
        if path.suffix == ".jsonl":
            lines = path.read_text(encoding="utf-8").splitlines()
            texts += [s for line in lines if line.strip() for s in _strings(json.loads(line))]
        elif path.suffix == ".json":
            texts += list(_strings(json.loads(path.read_text(encoding="utf-8"))))
        elif path.suffix in (".tsv", ".csv"):
            with open(path, encoding="utf-8", newline="") as f:
                texts += [
                    cell for row in csv.reader(f, delimiter="\t" if path.suffix == ".tsv" else ",") for cell in row
                ]
        elif path.suffix == ".conll":
            texts += [e.text for e in read_ner(str(path), "--test")]
        elif path.suffix == ".txt":
            texts += path.read_text(encoding="utf-8").splitlines()
    return texts


def shared_texts() -> dict[str, list[str]]:
    """Every ChnSentiCorp, CLUENER and CMRC text by set; skips without them."""

    def reviews(name):
        lines = shared("chnsenticorp", name).read_text(encoding="utf-8").splitlines()[1:]
        return [line.split("\t", 1)[1] for line in lines]

    def sentences(name):
        return [
            json.loads(line)["text"] for line in shared("cluener2020", name).read_text(encoding="utf-8").splitlines()
        ]

    def squad(name):
        texts = []
        for article in json.loads(shared("cmrc2018", name).read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                texts += [paragraph["context"], *(q["question"] for q in paragraph["qas"])]
        return texts

    return {
        "ChnSentiCorp dev": reviews("dev.tsv"),
        "CLUENER dev": sentences("dev.json"),
        "ChnSentiCorp train and test": reviews("train.tsv") + reviews("test.tsv"),
        "CLUENER train": sentences("train.json"),
        "CMRC": squad("cmrc2018_dev.json") + squad("cmrc2018_trial.json"),
    }


def reference_normalize(text: str, keep: frozenset) -> tuple[str, list[int]]:
    """Each character kept, or replaced by _normalize_char's output unless the vocabulary has it."""
    new = {c: c if (r := _normalize_char(c)) == c or (c in keep and r.strip()) else r for c in set(text)}
    if all(c == r for c, r in new.items()):
        return text, list(range(len(text)))
    pieces = [new[c] for c in text]
    return "".join(pieces), [i for i, piece in enumerate(pieces) for _ in piece]


def reference(pipe: TextPipeline, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    norm, index = reference_normalize(text, pipe._keep)
    enc = pipe._tok.encode(norm, add_special_tokens=False)
    return enc.ids, [(index[a], index[b - 1] + 1) for a, b in enc.offsets]


def assert_fast_equals_reference(pipe: TextPipeline, texts: list[str]) -> None:
    fast = pipe.encode_many(texts, word_ids=False)
    assert len(fast) == len(texts)
    for text, enc in zip(texts, fast):
        assert enc.word_ids is None
        assert (enc.ids, enc.offsets) == reference(pipe, text), text


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory) -> str:
    """A scratch vocabulary of the repo's data/ texts (no full-width or circled characters: they normalise)."""
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(repo_texts()), str(path))
    return str(path)


@pytest.fixture(scope="module")
def small_pipe(small_vocab) -> TextPipeline:
    """One pipeline for the tests where jieba runs: each pipeline loads jieba's dictionary once (seconds)."""
    return TextPipeline(small_vocab)


@pytest.fixture(scope="module")
def real_vocab() -> str:
    return str(shared("ernie-3.0-vocab", "vocab.txt"))


def test_characters_skipped_by_normalisation_never_change():
    ranges = [(0x20, 0x7E), (0x3400, 0x4DBF), (0x4E00, 0x9FFF)]
    skipped = [chr(i) for lo, hi in ranges for i in range(lo, hi + 1)]
    assert _UNCHANGED.fullmatch("".join(skipped))
    assert not _UNCHANGED.search("\x1f\x7f\u33ff\u4dc0\uf900\uff01\u3000")
    assert [c for c in skipped if _normalize_char.__wrapped__(c) != c] == []


def test_normalize_text_equals_the_reference(small_pipe):
    for text in EDGE_CASES + repo_texts():
        assert normalize_text(text, small_pipe._keep) == reference_normalize(text, small_pipe._keep), text
    assert normalize_text("好①～Ａ", frozenset("①～")) == ("好①～A", [0, 1, 2, 3])


def test_fast_path_on_edge_cases_and_repo_data(small_pipe):
    texts = EDGE_CASES + repo_texts()
    assert_fast_equals_reference(small_pipe, texts)
    assert_fast_equals_reference(small_pipe.replace(lowercase=False), texts)
    slow = small_pipe.encode_many(texts)  # with word ids: jieba runs; ids and offsets are the same
    fast = small_pipe.encode_many(texts, word_ids=False)
    assert [(e.ids, e.offsets) for e in slow] == [(e.ids, e.offsets) for e in fast]
    assert all(len(e.word_ids) == len(e.ids) for e in slow)


@pytest.mark.parametrize("lowercase", [True, False])
def test_fast_path_with_the_ernie_vocabulary_on_edge_cases(real_vocab, lowercase):
    pipe = TextPipeline(real_vocab, lowercase=lowercase)
    assert_fast_equals_reference(pipe, EDGE_CASES + repo_texts())
    enc = pipe.encode_many(["好评😀！⑩"], word_ids=False)[0]
    assert pipe.unk_id in enc.ids and enc.offsets[-1] == (4, 5)  # '⑩' is an ERNIE token: kept, not '10'


def test_fast_path_on_the_shared_data(real_vocab):
    pipe = TextPipeline(real_vocab)
    sets = shared_texts()
    changed = []
    for text in (t for texts in sets.values() for t in texts):
        norm, index = reference_normalize(text, pipe._keep)
        assert normalize_text(text, pipe._keep) == (norm, index), text
        if norm != text or index != list(range(len(text))):
            changed.append(text)
    assert sum(map(len, sets.values())) == 29416 and changed
    assert_fast_equals_reference(pipe, changed + sets["ChnSentiCorp dev"] + sets["CLUENER dev"])


def test_the_fast_path_runs_no_jieba(small_pipe, monkeypatch, tmp_path):
    texts = EDGE_CASES[2:6]
    expected = small_pipe.encode_many(texts)
    with monkeypatch.context() as patch:
        patch.setattr(small_pipe, "_spans", lambda norm: pytest.fail("jieba ran"))
        for kwargs in ({}, {"num_proc": 2}, {"cache_dir": str(tmp_path)}, {"cache_dir": str(tmp_path)}):
            fast = small_pipe.encode_many(texts, word_ids=False, **kwargs)
            assert [(e.ids, e.offsets, e.word_ids) for e in fast] == [(e.ids, e.offsets, None) for e in expected]
        assert small_pipe.last_cache_hit  # the second cached call read the file the first one wrote
    assert small_pipe.encode_many(texts, cache_dir=str(tmp_path)) == expected  # with word ids: not that cache
    assert not small_pipe.last_cache_hit


def test_token_types_of_text_pairs_are_the_same(small_pipe):
    examples = read_examples(str(DATA / "pairs_dev.tsv"), text_column="text_a", pair_column="text_b")
    texts = pair_texts(examples)
    data = DataConfig(max_len=16)  # short windows: long first texts are cut into several
    fast = text_windows(examples, small_pipe.encode_many(texts, word_ids=False), small_pipe, data)
    assert fast == text_windows(examples, small_pipe.encode_many(texts), small_pipe, data)
    assert any(1 in f["token_type_ids"] for f in fast)


def test_an_extension_still_segments_and_exact_spans_does_not(small_pipe, small_vocab, tmp_path, monkeypatch):
    texts = [e.text for e in read_examples(str(DATA / "sentiment_train.tsv"))]
    write(str(tmp_path / "ext"), learn(small_pipe, texts, 60), small_vocab, small_pipe.vocab_size, {})
    extended = small_pipe.replace(vocab_extension=str(tmp_path / "ext"))
    fast = extended.encode_many(texts + EDGE_CASES, word_ids=False)
    assert any(i >= small_pipe.vocab_size for e in fast for i in e.ids)  # pieces placed on jieba's words
    slow = extended.encode_many(texts + EDGE_CASES)
    assert [(e.ids, e.offsets) for e in fast] == [(e.ids, e.offsets) for e in slow]
    exact = extended.replace(exact_spans=True)
    monkeypatch.setattr(exact, "_spans", lambda norm: pytest.fail("jieba ran"))
    base = [(e.ids, e.offsets) for e in small_pipe.encode_many(texts, word_ids=False)]
    assert [(e.ids, e.offsets) for e in exact.encode_many(texts, word_ids=False)] == base
