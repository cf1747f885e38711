"""Tests for ernie_ft.text: normalisation, offsets, jieba words, vocab, audit, cache."""

import os
import re
import shutil
from pathlib import Path

import pytest
from tokenizers import normalizers

from ernie_ft.errors import UserError
from ernie_ft.text.audit import audit
from ernie_ft.text.pipeline import TextPipeline, normalize_text
from ernie_ft.text.scratch import build_vocab, write_vocab

SHARED = Path(os.environ.get("ERNIE_FT_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
REAL_VOCAB = SHARED / "ernie-3.0-vocab" / "vocab.txt"
needs_real_vocab = pytest.mark.skipif(not REAL_VOCAB.is_file(), reason=f"no ERNIE 3.0 vocab at {REAL_VOCAB}")

MIXED = "我在Apple Store买了iPhone15，花了６９９９元😀！"
CORPUS = [
    "我在苹果商店买了手机，花了很多钱元！",
    "Apple Store and iPhone 15 are expensive, 0123456789.",
    "今天天气很好，我们去公园散步吧。",
    "南京市长江大桥欢迎你",
]


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    write_vocab(build_vocab(CORPUS), str(path))
    return str(path)


@pytest.fixture(scope="module", params=["small", pytest.param("real", marks=needs_real_vocab)])
def pipe(request, small_vocab) -> TextPipeline:
    return TextPipeline(small_vocab if request.param == "small" else str(REAL_VOCAB))


def _tokens(pipe: TextPipeline, ids: list[int]) -> list[str]:
    inverse = {i: t for t, i in pipe._tok.get_vocab().items()}
    return [inverse[i] for i in ids]


def test_normalize_full_width_space_and_controls():
    norm, index = normalize_text("ＡＢＣ１２３\u3000x\x07y\u200bz\tw…")
    assert norm == "ABC123 xyz w..."
    # Each normalised character points back at its source: the bell (8) and the
    # zero-width space (10) are gone, the tab (12) became a space, '…' (14) gave three dots.
    assert index == [0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 12, 13, 14, 14, 14]


def test_offsets_point_at_the_token_text(pipe):
    bert = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    text = MIXED + " Tenderness Printer İsland"
    enc = pipe.encode(text)
    assert len(enc.ids) == len(enc.offsets) == len(enc.word_ids)
    for tok, tid, (s, e) in zip(_tokens(pipe, enc.ids), enc.ids, enc.offsets):
        assert 0 <= s < e <= len(text)
        if tid == pipe.unk_id:
            assert text[s:e] == "😀"
        else:
            assert bert.normalize_str(pipe.normalize(text[s:e])[0]).strip() == tok.removeprefix("##")
    assert pipe.unk_id in enc.ids
    # WordPiece pieces of one word tile it without gaps.
    for i in range(len(enc.ids) - 1):
        if enc.word_ids[i] == enc.word_ids[i + 1]:
            assert enc.offsets[i][1] == enc.offsets[i + 1][0]
    iphone = [s for s, e in pipe.words(text)].index(MIXED.index("iPhone15"))
    pieces = [t for t, w in zip(_tokens(pipe, enc.ids), enc.word_ids) if w == iphone]
    assert len(pieces) > 1 and "".join(p.removeprefix("##") for p in pieces) == "iphone15"


def test_word_ids_follow_jieba_words(pipe):
    text = "南京市长江大桥欢迎你，iPhone15很贵。"
    words = pipe.words(text)
    assert [text[s:e] for s, e in words][:4] == ["南京市", "长江大桥", "欢迎", "你"]
    enc = pipe.encode(text)
    assert enc.word_ids == sorted(enc.word_ids)
    for w, (s, e) in zip(enc.word_ids, enc.offsets):
        assert words[w][0] <= s < e <= words[w][1]
    assert enc.word_ids[:7] == [0, 0, 0, 1, 1, 1, 1]


def test_segment_false_uses_whitespace_runs(small_vocab):
    fast = TextPipeline(small_vocab, segment=False)
    assert fast.words(" 南京市长江大桥\t欢迎你 ") == [(1, 8), (9, 12)]
    assert fast.encode("南京市长江大桥").word_ids == [0] * 7
    assert fast.fingerprint != TextPipeline(small_vocab).fingerprint


def test_user_dict_changes_word_boundaries(small_vocab, tmp_path):
    text = "我坐蓝莓飞船回家"
    plain = TextPipeline(small_vocab)
    assert (2, 6) not in plain.words(text)  # stock jieba: 蓝莓 / 飞船
    user_dict = tmp_path / "dict.txt"
    user_dict.write_text("蓝莓飞船 10 n\n", encoding="utf-8")
    custom = TextPipeline(small_vocab, user_dict=str(user_dict))
    assert (2, 6) in custom.words(text)
    assert custom.encode(text).ids == plain.encode(text).ids  # only word ids move
    assert custom.fingerprint != plain.fingerprint
    with pytest.raises(UserError, match="--user-dict"):
        TextPipeline(small_vocab, user_dict=str(tmp_path / "missing.txt"))


def test_build_vocab_order_and_min_count():
    vocab = build_vocab(["aab好好好", "好b。"], min_count=1)
    assert vocab[:4] == ["[PAD]", "[CLS]", "[SEP]", "[MASK]"] and vocab[-1] == "[UNK]"
    # '好' x4, then a/b x2 ordered by codepoint, then '。' x1; CJK and punctuation get no '##' form.
    assert vocab[4:-1] == ["好", "a", "##a", "b", "##b", "。"]
    assert build_vocab(["aab好好好", "好b。"], min_count=3)[4:-1] == ["好"]
    assert "a" in build_vocab(["ABC"]) and "A" in build_vocab(["ABC"], lowercase=False)


def test_bad_vocab_and_missing_checkpoint_are_user_errors(tmp_path):
    bad = tmp_path / "vocab.txt"
    write_vocab(["[PAD]", "a"], str(bad))
    with pytest.raises(UserError, match="missing special tokens"):
        TextPipeline(str(bad))
    with pytest.raises(UserError, match="no vocab.txt"):
        TextPipeline.from_dir(str(tmp_path / "nowhere"))


def test_audit_counts_hand_made_cases(small_vocab):
    pipe = TextPipeline(small_vocab)
    texts = ["好☃了", "天…气", "天\u200b气 \n"]
    result = audit(texts, [pipe.encode(t) for t in texts], pipe.unk_id)
    assert (result.n_texts, result.n_chars) == (3, 11)
    assert result.unk_chars == {"☃": 1}
    assert result.multi_token_chars == {"…": 1}
    assert result.zero_token_chars == {"\u200b": 1}  # whitespace is not counted
    assert result.n_tokens == 3 + 5 + 2 and result.n_unk == 1
    assert "[UNK] 10.00% of 10 tokens" in result.summary() and "U+200B" in result.summary()
    assert result.as_dict()["multi_token_chars"] == {"…": 1}


def test_encode_many_matches_encode_and_caches(small_vocab, tmp_path):
    pipe = TextPipeline(small_vocab)
    texts = CORPUS * 3 + ["", "   ", MIXED]
    expected = [pipe.encode(t) for t in texts]
    assert pipe.encode("").ids == []
    assert pipe.encode_many(texts) == expected
    first = pipe.encode_many(texts, cache_dir=str(tmp_path))
    assert first == expected and not pipe.last_cache_hit
    again = TextPipeline(small_vocab).encode_many(texts, cache_dir=str(tmp_path))
    assert again == expected
    other = TextPipeline(small_vocab, segment=False)
    other.encode_many(texts, cache_dir=str(tmp_path))
    assert not other.last_cache_hit  # a different pipeline never reads this cache
    assert pipe.encode_many(texts, num_proc=2) == expected
    assert pipe.encode_many(texts[:-1], cache_dir=str(tmp_path), num_proc=2) == expected[:-1]
    assert not pipe.last_cache_hit
    pipe.encode_many(texts[:-1], cache_dir=str(tmp_path))
    assert pipe.last_cache_hit


@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "drop the digest", "swap in another cache"])
def test_a_damaged_tokenisation_cache_is_detected_and_rebuilt(small_vocab, tmp_path, capsys, damage):
    pipe = TextPipeline(small_vocab)
    texts = CORPUS * 3 + [MIXED]
    expected = pipe.encode_many(texts, cache_dir=str(tmp_path / "a"))
    pipe.encode_many(texts[:2], cache_dir=str(tmp_path / "b"))
    (cache,) = (tmp_path / "a").glob("*.arrow")
    data = cache.read_bytes()
    if damage == "truncate":
        cache.write_bytes(data[: len(data) // 2])
    elif damage == "flip a byte":  # inside the token ids: the file still parses, with wrong tokens
        cache.write_bytes(data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0x01]) + data[len(data) // 2 + 1 :])
    elif damage == "drop the digest":
        cache.with_name(cache.name + ".sha256").unlink()
    else:  # a valid cache file and its digest, but for other texts
        (other,) = (tmp_path / "b").glob("*.arrow")
        shutil.copy(other, cache)
        shutil.copy(other.with_name(other.name + ".sha256"), cache.with_name(cache.name + ".sha256"))
    capsys.readouterr()
    assert pipe.encode_many(texts, cache_dir=str(tmp_path / "a")) == expected and not pipe.last_cache_hit
    assert f"the tokenisation cache {cache} is damaged" in capsys.readouterr().err
    assert pipe.encode_many(texts, cache_dir=str(tmp_path / "a")) == expected and pipe.last_cache_hit  # rebuilt


@needs_real_vocab
def test_real_vocab_matches_paddlenlp_and_saves(tmp_path):
    from paddlenlp.transformers import ErnieTokenizer

    pipe = TextPipeline(str(REAL_VOCAB))
    reference = ErnieTokenizer(str(REAL_VOCAB))
    texts = ["南京市长江大桥欢迎你", "我们去公园散步吧今天天气很好"]
    train = SHARED / "chnsenticorp" / "train.tsv"
    if train.is_file():  # real sentences with full-width punctuation, digits and Latin words
        lines = [line.split("\t", 1)[1] for line in train.read_text(encoding="utf-8").splitlines()[1:300]]
        # full-width letters and digits are normalised to ASCII on purpose ('３０' is [UNK] for ErnieTokenizer)
        texts += [t for t in lines if not re.search("[０-９Ａ-Ｚａ-ｚ]", t)]
    for text in texts:
        assert pipe.encode(text).ids == reference.convert_tokens_to_ids(reference.tokenize(text))
    assert pipe.encode("好，很好！").ids[1] == 4  # '，' keeps ERNIE's id: normalisation spares vocabulary characters
    assert pipe.vocab_size == 39980 and (pipe.pad_id, pipe.cls_id, pipe.sep_id, pipe.unk_id) == (0, 1, 2, 39979)

    user_dict = tmp_path / "words.txt"
    user_dict.write_text("蓝莓飞船 10 n\n", encoding="utf-8")
    cased = TextPipeline(str(REAL_VOCAB), lowercase=False, user_dict=str(user_dict))
    cased.save(str(tmp_path / "ckpt"))
    loaded = ErnieTokenizer.from_pretrained(str(tmp_path / "ckpt"))
    assert loaded.convert_tokens_to_ids(loaded.tokenize("南京")) == pipe.encode("南京").ids
    assert (tmp_path / "ckpt" / "vocab.txt").read_bytes() == REAL_VOCAB.read_bytes()
    restored = TextPipeline.from_dir(str(tmp_path / "ckpt"))
    assert not restored.lowercase and (2, 6) in restored.words("我坐蓝莓飞船回家")
    assert restored.encode("Apple").ids == cased.encode("Apple").ids != pipe.encode("Apple").ids
