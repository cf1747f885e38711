"""Tokenization that follows the checkpoint's origin: rules "bert" against transformers' BertTokenizer (ids recorded
by tests/fixtures/make_tokenizer_fixture.py, since CI has no transformers), rules "paddlenlp" against PaddleNLP's
ErnieTokenizer (called here), rules "ernie_ft" unchanged; offsets, transformers tokenizer directories, repeated
vocabulary lines and save_hf."""

import hashlib
import json
import shutil
import unicodedata
from pathlib import Path

import jieba
import pytest
import tokenizers
from conftest import SHARED
from tokenizers import Tokenizer, models, normalizers

from ernie_ft.errors import UserError
from ernie_ft.text.pipeline import PIPELINE_VERSION, SPECIAL_TOKENS, TextPipeline, is_hf_tokenizer_dir
from ernie_ft.text.rules import _PUNCTUATION_SCAN_END, _basic_unit, _dropped

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tokenizer_origin"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
VOCAB = str(FIXTURE / "vocab.txt")
REAL_VOCAB = SHARED / "ernie-3.0-vocab" / "vocab.txt"
CASES = EXPECTED["cases"]
TEXTS = [case["text"] for case in CASES]
KWARGS = {  # the fixture's BertTokenizer settings as TextPipeline keywords
    name: {
        "lowercase": config["do_lower_case"],
        "strip_accents": config.get("strip_accents"),
        "tokenize_chinese_chars": config.get("tokenize_chinese_chars", True),
    }
    for name, config in EXPECTED["configs"].items()
}
needs_shared = pytest.mark.skipif(not REAL_VOCAB.is_file(), reason=f"no ERNIE 3.0 vocab at {REAL_VOCAB}")


def bert(name: str = "lower", vocab: str = VOCAB, **kwargs) -> TextPipeline:
    return TextPipeline(vocab, rules="bert", segment=False, **KWARGS[name], **kwargs)


def ids(pipe: TextPipeline, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in pipe.encode_many(texts, word_ids=False)]


def digest(token_ids: list[int]) -> str:
    return hashlib.sha1(",".join(map(str, token_ids)).encode()).hexdigest()[:12]


def shared_sets() -> dict[str, list[str]]:
    """The texts the fixture's digests cover; skips without ../shared/data."""
    if not REAL_VOCAB.is_file() or EXPECTED["shared"] is None:
        pytest.skip("no ../shared/data, or a fixture made without it")

    def reviews(name):
        lines = (SHARED / "chnsenticorp" / name).read_text(encoding="utf-8").splitlines()[1:]
        return [line.split("\t", 1)[1] for line in lines]

    cluener = (SHARED / "cluener2020" / "dev.json").read_text(encoding="utf-8").splitlines()
    return {
        "chnsenticorp/dev.tsv": reviews("dev.tsv"),
        "chnsenticorp/test.tsv": reviews("test.tsv"),
        "cluener2020/dev.json": [json.loads(line)["text"] for line in cluener],
    }


@pytest.fixture(scope="module")
def ernie_tokenizers(tmp_path_factory):
    """PaddleNLP's ErnieTokenizer as a model named by PaddleNLP gets it (from_pretrained: special tokens written
    in a text are those tokens), per vocabulary and casing."""
    from paddlenlp.transformers import ErnieTokenizer

    made = {}

    def get(vocab: str, lowercase: bool):
        if (vocab, lowercase) not in made:
            directory = tmp_path_factory.mktemp("ernie")
            ErnieTokenizer(vocab, do_lower_case=lowercase).save_pretrained(str(directory))
            made[vocab, lowercase] = ErnieTokenizer.from_pretrained(str(directory))
        return made[vocab, lowercase]

    return get


@pytest.mark.parametrize("name", list(EXPECTED["configs"]))
def test_bert_rules_equal_transformers_bert_tokenizer(name):
    cases = [case for case in CASES if name in case["ids"]]
    assert ids(bert(name), [case["text"] for case in cases]) == [case["ids"][name] for case in cases]
    # The fixture tells the two transformers tokenizers apart: where they differ, the slow one is followed.
    assert name not in ("lower", "cased") or sum(name in case["fast"] for case in cases) >= 10


def test_bert_rules_on_the_shared_data_digests():
    pipe = bert(vocab=str(REAL_VOCAB)) if REAL_VOCAB.is_file() else None
    for name, texts in shared_sets().items():
        recorded = EXPECTED["shared"]["sets"][name]["digests"]
        assert hashlib.sha1(REAL_VOCAB.read_bytes()).hexdigest() == EXPECTED["shared"]["vocab_sha1"]
        assert [digest(i) for i in ids(pipe, texts)] == recorded, name


@pytest.mark.parametrize("lowercase", [True, False])
def test_paddlenlp_rules_equal_ernie_tokenizer_on_the_fixture_texts(ernie_tokenizers, lowercase):
    reference = ernie_tokenizers(VOCAB, lowercase)
    pipe = TextPipeline(VOCAB, rules="paddlenlp", lowercase=lowercase, segment=False)
    assert ids(pipe, TEXTS) == [reference.convert_tokens_to_ids(reference.tokenize(t)) for t in TEXTS]


@pytest.mark.parametrize("vocab", ["small", pytest.param("ernie", marks=needs_shared)])
def test_paddlenlp_rules_equal_ernie_tokenizer_on_the_shared_data(ernie_tokenizers, vocab):
    vocab = VOCAB if vocab == "small" else str(REAL_VOCAB)
    texts = [t for group in shared_sets().values() for t in group] + TEXTS
    reference = ernie_tokenizers(vocab, True)
    pipe = TextPipeline(vocab, rules="paddlenlp", segment=False)
    assert ids(pipe, texts) == [reference.convert_tokens_to_ids(reference.tokenize(t)) for t in texts]


def test_ernie_ft_rules_are_unchanged():
    pipe = TextPipeline(VOCAB)
    assert pipe.rules == "ernie_ft" and pipe.fingerprint == TextPipeline(VOCAB, rules="ernie_ft").fingerprint
    # The fingerprint (every tokenisation cache's key) is the one it was before rules existed.
    old = hashlib.sha1(f"{PIPELINE_VERSION}|True|True|{jieba.__version__}|{tokenizers.__version__}|".encode())
    old.update((FIXTURE / "vocab.txt").read_bytes())
    assert pipe.fingerprint == old.hexdigest()
    fingerprints = {pipe.fingerprint, bert().fingerprint, TextPipeline(VOCAB, rules="paddlenlp").fingerprint}
    assert len(fingerprints | {bert("cased").fingerprint, bert("lower_keep_accents").fingerprint}) == 5
    inverse = {i: t for t, i in pipe.vocab.items()}
    # ernie_ft splits '～' from everything and makes full-width letters ASCII; BertTokenizer does neither.
    assert [inverse[i] for i in pipe.encode("～～～～ ～10 ＡＢＣ").ids] == ["～"] * 5 + ["10", "[UNK]"]
    assert [inverse[i] for i in bert().encode("～～～～ ～10 ＡＢＣ").ids] == [
        "[UNK]",
        "～",
        "##10",
        "ａ",
        "##ｂ",
        "##ｃ",
    ]


def normalized_by_rule(pipe: TextPipeline, piece: str) -> str:
    norm = pipe.normalize(piece)[0]
    return (pipe._tok.normalizer.normalize_str(norm) if pipe._tok.normalizer else norm).strip()


@pytest.mark.parametrize("rules", ["bert", "paddlenlp", "ernie_ft"])
@pytest.mark.parametrize("lowercase", [True, False])
def test_offsets_point_at_the_characters_each_token_came_from(rules, lowercase):
    pipe = TextPipeline(VOCAB, rules=rules, lowercase=lowercase, segment=False)
    inverse = {i: t for t, i in pipe.vocab.items()}
    checked = 0
    for text, enc in zip(TEXTS, pipe.encode_many(TEXTS, word_ids=False)):
        assert len(enc.offsets) == len(enc.ids)
        for token_id, (s, e) in zip(enc.ids, enc.offsets):
            assert 0 <= s < e <= len(text), text
            token = inverse[token_id]
            if token == "[UNK]":
                continue
            if token in SPECIAL_TOKENS and rules != "ernie_ft":
                assert text[s:e] == token
                continue
            normalized, piece = normalized_by_rule(pipe, text[s:e]), token.removeprefix("##")
            # One character may become several ('…' is '...' for ernie_ft): each token of them points at it.
            assert normalized == piece or (e - s == 1 and piece in normalized), (text, token, text[s:e])
            checked += 1
    assert checked > 500


@pytest.mark.parametrize("rules", ["bert", "paddlenlp"])
def test_jieba_word_ids_change_no_ids(rules):
    pipe = TextPipeline(VOCAB, rules=rules)
    texts = ["南京市长江大桥欢迎你，iPhone15很贵。", "我在Apple Store买了iPhone15，花了６９９９元😀！", *TEXTS[:40]]
    with_words = pipe.encode_many(texts)
    assert [(e.ids, e.offsets) for e in with_words] == [
        (e.ids, e.offsets) for e in pipe.encode_many(texts, word_ids=False)
    ]
    for text, enc in zip(texts, with_words):
        words = pipe.words(text)
        assert enc.word_ids == sorted(enc.word_ids) and len(enc.word_ids) == len(enc.ids)
        for w, (s, _) in zip(enc.word_ids, enc.offsets):  # a token's word is the one its first character is in
            assert w == -1 or words[w][0] <= s < words[w][1], text


def test_rules_and_their_settings_are_checked():
    with pytest.raises(UserError, match="rules='hf': no such tokenization rules; use one of ernie_ft, bert, paddlenlp"):
        TextPipeline(VOCAB, rules="hf")
    with pytest.raises(UserError, match="for rules 'bert' only"):
        TextPipeline(VOCAB, rules="paddlenlp", strip_accents=True)


def write_json(path, value) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


def test_from_dir_reads_a_transformers_tokenizer_directory(tmp_path):
    shutil.copy(VOCAB, tmp_path / "vocab.txt")
    write_json(tmp_path / "tokenizer_config.json", {"tokenizer_class": "BertTokenizer", "do_lower_case": False})
    assert is_hf_tokenizer_dir(str(tmp_path))
    pipe = TextPipeline.from_dir(str(tmp_path))
    assert (pipe.rules, pipe.lowercase, pipe.strip_accents, pipe.tokenize_chinese_chars) == ("bert", False, None, True)
    assert ids(pipe, TEXTS) == [case["ids"]["cased"] for case in CASES]
    assert TextPipeline.from_dir(str(tmp_path), rules="paddlenlp").rules == "paddlenlp"

    (tmp_path / "tokenizer_config.json").unlink()  # a model's config.json alone decides
    write_json(tmp_path / "config.json", {"model_type": "bert"})
    assert TextPipeline.from_dir(str(tmp_path)).rules == "bert" and TextPipeline.from_dir(str(tmp_path)).lowercase
    write_json(tmp_path / "config.json", {"model_type": "ernie", "paddlenlp_version": "2.8.1"})
    # saved by PaddleNLP itself (no ernie_ft_text.json): ErnieTokenizer's ids
    assert not is_hf_tokenizer_dir(str(tmp_path)) and TextPipeline.from_dir(str(tmp_path)).rules == "paddlenlp"
    write_json(tmp_path / "tokenizer_config.json", {"tokenizer_class": "BertTokenizer", "do_basic_tokenize": False})
    (tmp_path / "config.json").unlink()
    with pytest.raises(UserError, match="tokenizer_config.json: do_basic_tokenize is false"):
        TextPipeline.from_dir(str(tmp_path))


def test_from_dir_reads_a_tokenizer_json_alone(tmp_path):
    shutil.copy(FIXTURE / "tokenizer.json", tmp_path / "tokenizer.json")  # BertTokenizerFast's, cased
    assert is_hf_tokenizer_dir(str(tmp_path))
    pipe = TextPipeline.from_dir(str(tmp_path))
    assert (pipe.rules, pipe.lowercase) == ("bert", False)
    # The repeated '$' left no token at id 5 there: a placeholder keeps every later id.
    assert pipe.vocab_size == len(open(VOCAB, encoding="utf-8").read().splitlines()) and "$" in pipe.vocab
    assert ids(pipe, TEXTS) == [case["ids"]["cased"] for case in CASES]

    other = Tokenizer(models.BPE({"a": 0, "[UNK]": 1}, [], unk_token="[UNK]"))
    other.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(UserError, match=r"tokenizer\.json: its model is BPE, not WordPiece"):
        TextPipeline.from_dir(str(tmp_path))


def test_a_repeated_vocabulary_line_warns_once_for_bert_rules(tmp_path, capsys):
    vocab = tmp_path / "vocab.txt"
    shutil.copy(VOCAB, vocab)
    TextPipeline(str(vocab))  # rules ernie_ft: no warning
    assert capsys.readouterr().err == ""
    pipe = TextPipeline(str(vocab), rules="bert")
    pipe.replace(lowercase=False)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: vocab file {vocab}: repeated tokens: '$' on lines 6, 47")
    assert "ids follow transformers (the last line)" in err[0] and "shifts every later id" in err[0]
    assert pipe.vocab["$"] == 46 and pipe.vocab_size == 305


def test_save_hf_keeps_every_id(tmp_path):
    pipe = bert("cased_strip_accents")
    (note,) = pipe.save_hf(str(tmp_path), model_max_length=128)  # BertTokenizer is exact; the fast one is not
    assert "BertTokenizerFast" in note and not (tmp_path / "tokenizer.json").exists()
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    reread = {tok: i for i, tok in enumerate(lines)}  # how transformers' load_vocab reads it
    assert len(lines) == pipe.vocab_size and lines[5] == "[unused-repeat-5]" and len(reread) == len(lines)
    assert all(reread[tok] == i for tok, i in pipe.vocab.items())
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "BertTokenizer" and config["model_max_length"] == 128
    assert (config["do_lower_case"], config["strip_accents"], config["tokenize_chinese_chars"]) == (False, True, True)
    special = json.loads((tmp_path / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert special == {"pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]",
                       "unk_token": "[UNK]"}  # fmt: skip
    restored = TextPipeline.from_dir(str(tmp_path))
    assert (restored.rules, restored.lowercase, restored.strip_accents) == ("bert", False, True)
    hand = [case for case in CASES if "cased_strip_accents" in case["ids"]]
    assert ids(restored, [case["text"] for case in hand]) == [case["ids"]["cased_strip_accents"] for case in hand]


def saved_fast_tokenizer_differences(pipe: TextPipeline, directory, texts: list[str]) -> list[str]:
    """The texts on which the tokenizer.json that save_hf wrote gives other ids than ``pipe``."""
    differences = pipe.save_hf(str(directory))
    assert differences and all(isinstance(d, str) for d in differences)
    saved = Tokenizer.from_file(str(directory / "tokenizer.json"))
    ours = ids(pipe, texts)
    theirs = [e.ids for e in saved.encode_batch(texts, add_special_tokens=False)]
    return [t for t, a, b in zip(texts, ours, theirs) if a != b]


MARKS = ("Mn", "Mc", "Me")


@pytest.mark.parametrize("rules", ["ernie_ft", "paddlenlp"])
@pytest.mark.parametrize("lowercase", [True, False])
def test_save_hf_writes_a_tokenizer_json_for_other_rules(tmp_path, rules, lowercase):
    pipe = TextPipeline(VOCAB, rules=rules, lowercase=lowercase, segment=False)
    differing = saved_fast_tokenizer_differences(pipe, tmp_path, TEXTS)
    # What remains is what save_hf lists: special tokens written in a text (ernie_ft), a changed character with
    # combining marks after it (a grapheme cluster for tokenizers' Precompiled normaliser).
    for text in differing:
        special = rules == "ernie_ft" and any(t in text for t in SPECIAL_TOKENS)
        assert special or any(unicodedata.category(c) in MARKS or c == "\uff9e" for c in text), text
    assert all(case["text"] not in differing for case in CASES[:20])
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "BertTokenizerFast" and config["ernie_ft_rules"] == rules
    restored = TextPipeline.from_dir(str(tmp_path))
    assert (restored.rules, restored.lowercase) == (rules, lowercase)
    assert ids(restored, TEXTS) == ids(pipe, TEXTS)


@needs_shared
@pytest.mark.parametrize("rules", ["ernie_ft", "paddlenlp"])
def test_save_hf_tokenizer_json_on_chnsenticorp_dev(tmp_path, rules):
    pipe = TextPipeline(str(REAL_VOCAB), rules=rules, segment=False)
    texts = shared_sets()["chnsenticorp/dev.tsv"]
    assert saved_fast_tokenizer_differences(pipe, tmp_path, texts) == []


@pytest.mark.parametrize(
    "kwargs",
    [dict(rules="bert", lowercase=False, strip_accents=True, tokenize_chinese_chars=False), dict(rules="paddlenlp")],
)
def test_save_and_from_dir_keep_the_rules(tmp_path, kwargs):
    pipe = TextPipeline(VOCAB, **kwargs)
    pipe.save(str(tmp_path))
    restored = TextPipeline.from_dir(str(tmp_path))
    assert restored.fingerprint == pipe.fingerprint and restored._kwargs | {"vocab_file": VOCAB} == pipe._kwargs
    meta = json.loads((tmp_path / "ernie_ft_text.json").read_text(encoding="utf-8"))
    for key in ("rules", "strip_accents", "tokenize_chinese_chars"):
        del meta[key]  # a checkpoint saved before rules existed
    write_json(tmp_path / "ernie_ft_text.json", meta)
    assert TextPipeline.from_dir(str(tmp_path)).rules == "ernie_ft"


def test_punctuation_and_symbols_end_where_the_scan_ends():
    assert all(unicodedata.category(chr(cp))[0] not in "PS" for cp in range(_PUNCTUATION_SCAN_END, 0x110000))


@pytest.mark.parametrize("lower,strip", [(True, True), (True, False)])
def test_rust_lower_casing_leaves_python_lower_cased_characters_alone(lower, strip):
    kept = [c for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and not _dropped(c := chr(cp))]
    mapped = "\x01".join(_basic_unit.__wrapped__(c, lower, strip, False) for c in kept)
    assert normalizers.Lowercase().normalize_str(mapped) == mapped
