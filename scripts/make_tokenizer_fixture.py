"""The ids transformers' BertTokenizer gives on hard texts: the reference that tests/test_tokenizer_origin.py
checks ``TextPipeline(rules="bert")`` against (CI has no transformers).

Remake the fixture (needs transformers, never the project's own venv):

    /work/venv-torch/bin/python scripts/make_tokenizer_fixture.py

Writes into tests/fixtures/tokenizer_origin/:

- ``vocab.txt``: a small vocabulary made here: the special tokens, the characters and pieces the texts need, a
  repeated line (``$``, as in ERNIE 3.0), ``##`` pieces, full-width and circled forms, and the words of the
  characters where BertTokenizer and BertTokenizerFast disagree (so that their ids tell the two apart).
- ``tokenizer.json``: what BertTokenizerFast(vocab.txt, do_lower_case=False).save_pretrained writes.
- ``expected.json``: per text, the ids of BertTokenizer (slow, the reference) for do_lower_case true and false
  (and three more settings on the hand-made texts), the ids of BertTokenizerFast wherever they differ from the
  slow ones; the texts are hand-made cases, seeded random strings of tricky characters and samples of the code
  points where the two tokenizers disagree (``scan``: every code point in 'A{c}B', counted by category).
  With ../shared/data: per text of ChnSentiCorp dev and test and CLUENER dev, a digest of BertTokenizer's ids
  with the ERNIE 3.0 vocabulary (lower-cased): the first 12 hex digits of the SHA-1 of the ids joined by ','.
"""

from __future__ import annotations

import collections
import hashlib
import json
import random
import shutil
import sys
import tempfile
import unicodedata
from pathlib import Path

import tokenizers
import transformers
from transformers import BertTokenizer, BertTokenizerFast

COMMAND = "/work/venv-torch/bin/python scripts/make_tokenizer_fixture.py"
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "tokenizer_origin"
SHARED = ROOT.parent / "shared" / "data"
SPECIAL = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
CONFIGS = {
    "lower": dict(do_lower_case=True),
    "cased": dict(do_lower_case=False),
    "lower_keep_accents": dict(do_lower_case=True, strip_accents=False),
    "cased_strip_accents": dict(do_lower_case=False, strip_accents=True),
    "lower_no_chinese_split": dict(do_lower_case=True, tokenize_chinese_chars=False),
}
MAIN = ("lower", "cased")  # every text; the other settings on the hand-made texts

HARD_TEXTS = [
    "",
    "   ",
    "\t\n \u3000 \r\n",
    "Hello World HELLO hello hellO",
    "café Ñ naïve CAFÉ Café ñ",
    "e\u0301 Cafe\u0301 n\u0303 A\u030a \u212b \u00c5",  # decomposed accents, angstrom sign: NFC in slow only
    "İstanbul ΟΔΟΣ οδος Σ ς",
    "Straße STRASSE ẞ",
    "ǅ ǈ ῼ ᾈ dž \u0345x",  # titlecase letters, ypogegrammeni
    "你好，世界。好！？～",
    "～～～～",
    "～10",
    "4～6",
    "4~6 ~~ 7〜8",
    "好～～ 天气好～",
    "１２３ ＡＢＣ ａｂｃ ｘ１",
    "①② ⑩ ①②③ 第⑤条",
    "Ⅻ ⅻ Ⓐ ⓐ ™ ℃ ㎏ ½ m² …",
    "😀👍🏻 👨\u200d👩\u200d👧 🥰 🫠 1\ufe0f\u20e3 ❤\ufe0f",
    "a\x00b\x1fc\x7fd\x85e",
    "控\x00制\x1f字\u200b符\u200e\ufeff结束",
    "a\u200bb c\u200dd e\u2060f",
    "tab\tnew\nline\r\ncr\x0bvt\x0cff \u2028 \u2029 end",
    "全角\u3000空格 no\u00a0break\u2003em",
    "한국어 한국 가\u11a8",
    "カタカナ ひらがな ｶﾀｶﾅ ｶﾞ ガ",
    "αβγ Ἀθῆναι Привет ʃʒ",
    "a" * 100,
    "a" * 101,
    "好" * 120,
    "x" + "1" * 150,
    "[CLS] [SEP] [UNK] [MASK] [PAD] a[CLS]b [cls] [ CLS ] [UNK",
    "$100 $ 1,234.56 3.14% e-mail: a_b@c.com http://x.cn/?q=1&r=2",
    "豈更車 豈",
    "ﬁne ﬀ",
    "\ufffd\ufffd replacement",
    "\ue000 private \U000f0000 plane15",
    "𠀀𪚥 𫠠 𫡀",  # the last two in U+2B820-U+2B91F (BertTokenizerFast does not split them)
    "e\u0301\u0301 \u0301start",
    "؝ ⹕ ⹝ ᙭",  # newer punctuation, a symbol
    "\u0378 unassigned \U000e0001 tag",
    "我在Apple Store买了iPhone15，花了６９９９元😀！",
]
POOL = (
    list("aAbBzZ09 ,.!?~$[]")
    + list("\u0300\u0301\u0303\u0308\u0327\u0345\u20e3\u3099\u309a\uff9e")  # combining and voiced marks
    + list("\u200b\u200d\u200e\ufeff\u2060\x00\x1f\x7f\x85\t\n\r\u3000\u00a0\u2028")
    + list("\u1100\u1161\u11a8가각İΣσςẞßǅÅ\u212bÉé")
    + list("ＡａＺ１～，。！？①⑩豈\uf900\uf901更好中文天カｶ한αΩЖ😀👍🏻\ufe0f\ufffd\ue000\u0378𫠠")
    + ["[CLS]", "[UNK]", "[SEP"]
)
TOKEN_TEXT = (  # the vocabulary, separated by spaces
    "hello ##llo he world Hello HELLO ##lo cafe café Café CAFÉ caf ##e ##é n ñ Ñ N naive naïve the a A b B ab "
    "##a ##b ##s i İ ##i istanbul Istanbul straße strasse e é x X z 1 2 3 4 5 6 10 ##10 123 ##1 ##2 ##3 ##23 99 "
    ", . ! ? - _ @ / : ( ) [ ] ' \" ~ % & = + 100 ##00 cls ##s unk sep "
    "， 。 ！ ？ ～ 、 ： （ ） 「 」 … — · ～6 "
    "Ａ ａ ##ｂ ##ｃ ##Ｂ ##Ｃ １ ##２ ##３ ｘ ##１ ① ② ##② ⑩ "
    "好 的 中 文 我 你 是 天 气 世 界 全 角 空 格 控 制 字 符 结 束 更 車 \u8c48 \uf900 "
    "カ ##タ ##カ ##ナ タ ナ ひ ##ら ##が ##な ら ｶ ##ﾀ ##ｶ ##ﾅ 한 ##국 ##어 국 α ##β ##γ β σ ς Σ ##ς ##σ οδος "
    "😀 👍 🥰 ™ ℃ ² m ##² ½ fine ﬁ ##ne"
)
TOKENS = TOKEN_TEXT.split()


def write_vocab() -> list[str]:
    """The small vocabulary: special tokens, TOKENS with '$' on two lines, then words of scan samples (later)."""
    tokens = SPECIAL + ["$"] + TOKENS[:40] + ["$"] + TOKENS[40:]
    seen, out = set(), []
    for t in tokens:  # only '$' repeats
        if t not in seen or t == "$":
            out.append(t)
            seen.add(t)
    return out


def random_texts(n: int = 200, seed: int = 13) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def scan(slow: BertTokenizer, fast: BertTokenizerFast, lower: bool) -> dict[int, tuple[list, list]]:
    """Every code point c where the slow and the fast tokenizer split 'A{c}B' into different words."""
    normalizer, pre = fast.backend_tokenizer.normalizer, fast.backend_tokenizer.pre_tokenizer
    differing = {}
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        text = f"A{chr(cp)}B"
        step0 = "".join(c.lower() for c in text) if lower else text  # as PreTrainedTokenizer.tokenize
        words = slow.basic_tokenizer.tokenize(step0, never_split=slow.all_special_tokens)
        fast_words = [w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text))]
        if words != fast_words:
            differing[cp] = (words, fast_words)
    return differing


def scan_samples(differing: dict[int, tuple[list, list]], per_category: int = 12) -> list[int]:
    """A few code points of each Unicode category among the differing ones, spread over their range."""
    by_category = collections.defaultdict(list)
    for cp in sorted(differing):
        by_category[unicodedata.category(chr(cp))].append(cp)
    picked = []
    for cps in by_category.values():
        step = max(1, len(cps) // per_category)
        picked += cps[::step][:per_category]
    return sorted(picked)


def ids_of(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def digest(ids: list[int]) -> str:
    return hashlib.sha1(",".join(map(str, ids)).encode()).hexdigest()[:12]


def shared_sets() -> dict[str, list[str]]:
    def reviews(name):
        lines = (SHARED / "chnsenticorp" / name).read_text(encoding="utf-8").splitlines()[1:]
        return [line.split("\t", 1)[1] for line in lines]

    cluener = (SHARED / "cluener2020" / "dev.json").read_text(encoding="utf-8").splitlines()
    return {
        "chnsenticorp/dev.tsv": reviews("dev.tsv"),
        "chnsenticorp/test.tsv": reviews("test.tsv"),
        "cluener2020/dev.json": [json.loads(line)["text"] for line in cluener],
    }


def shared_digests() -> dict | None:
    vocab = SHARED / "ernie-3.0-vocab" / "vocab.txt"
    if not vocab.is_file():
        return None
    slow, fast = BertTokenizer(str(vocab), do_lower_case=True), BertTokenizerFast(str(vocab), do_lower_case=True)
    out = {"vocab_sha1": hashlib.sha1(vocab.read_bytes()).hexdigest(), "do_lower_case": True, "sets": {}}
    for name, texts in shared_sets().items():
        slow_ids = [ids_of(slow, t) for t in texts]
        fast_ids = [ids_of(fast, t) for t in texts]
        out["sets"][name] = {
            "digests": [digest(ids) for ids in slow_ids],
            "fast_differs": {i: digest(f) for i, (s, f) in enumerate(zip(slow_ids, fast_ids)) if s != f},
        }
        print(f"{name}: {len(texts)} texts, fast differs on {len(out['sets'][name]['fast_differs'])}", flush=True)
    return out


def dump(expected: dict) -> str:
    """JSON with one case (and one shared-data set) per line: small, and diffs stay readable."""

    def compact(value) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    lines = [f"{compact(k)}:{compact(v)}" for k, v in expected.items() if k not in ("cases", "shared")]
    lines.append('"cases":[\n' + ",\n".join(compact(c) for c in expected["cases"]) + "\n]")
    shared = expected["shared"]
    if shared is None:
        lines.append('"shared":null')
    else:
        sets = ",\n".join(f"{compact(k)}:{compact(v)}" for k, v in shared["sets"].items())
        head = ",".join(f"{compact(k)}:{compact(v)}" for k, v in shared.items() if k != "sets")
        lines.append(f'"shared":{{{head},"sets":{{\n{sets}\n}}}}')
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    vocab_file = OUT / "vocab.txt"
    base = write_vocab()
    vocab_file.write_text("".join(t + "\n" for t in base), encoding="utf-8")
    scans, samples = {}, set()
    for name in MAIN:
        slow, fast = (cls(str(vocab_file), **CONFIGS[name]) for cls in (BertTokenizer, BertTokenizerFast))
        differing = scan(slow, fast, name == "lower")
        scans[name] = {
            "count": len(differing),
            "by_category": dict(collections.Counter(unicodedata.category(chr(cp)) for cp in differing).most_common()),
        }
        samples.update(scan_samples(differing))
        print(f"scan {name}: slow and fast differ on {len(differing)} code points", flush=True)
    samples = sorted(samples)
    sample_texts = [" ".join(f"A{chr(cp)}B" for cp in samples[i : i + 8]) for i in range(0, len(samples), 8)]
    # The slow words of the samples join the vocabulary, so that ids show what each tokenizer made of them.
    extra = []
    for name in MAIN:
        slow = BertTokenizer(str(vocab_file), **CONFIGS[name])
        for text in sample_texts:
            for word in slow.basic_tokenizer.tokenize("".join(c.lower() for c in text) if name == "lower" else text):
                if word not in base and word not in extra and len(word) <= 3:
                    extra.append(word)
    vocab_file.write_text("".join(t + "\n" for t in base + extra), encoding="utf-8")

    with tempfile.TemporaryDirectory() as tmp:  # the tokenizer.json transformers writes (cased), nothing else
        BertTokenizerFast(str(vocab_file), do_lower_case=False).save_pretrained(tmp)
        shutil.copyfile(Path(tmp) / "tokenizer.json", OUT / "tokenizer.json")

    groups = {"hand": HARD_TEXTS, "random": random_texts(), "scan": sample_texts}
    cases, disagreements = [], collections.Counter()
    tokenizers_of = {
        name: (BertTokenizer(str(vocab_file), **kw), BertTokenizerFast(str(vocab_file), **kw))
        for name, kw in CONFIGS.items()
    }
    for group, texts in groups.items():
        for text in texts:
            case = {"group": group, "text": text, "ids": {}, "fast": {}}
            for name, (slow, fast) in tokenizers_of.items():
                if group != "hand" and name not in MAIN:
                    continue
                case["ids"][name] = ids_of(slow, text)
                fast_ids = ids_of(fast, text)
                if fast_ids != case["ids"][name]:
                    case["fast"][name] = fast_ids
                    disagreements[f"{group} {name}"] += 1
            cases.append(case)
    expected = {
        "command": COMMAND,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "python": sys.version.split()[0],
        "unicode": unicodedata.unidata_version,
        "vocab": "vocab.txt",
        "reference": "BertTokenizer (slow); 'fast' holds BertTokenizerFast's ids where they differ",
        "configs": CONFIGS,
        "slow_fast_disagreements": dict(disagreements),
        "scan": scans,
        "cases": cases,
        "shared": shared_digests(),
    }
    (OUT / "expected.json").write_text(dump(expected), encoding="utf-8")
    print(f"{len(cases)} texts; slow and fast disagree on: {dict(disagreements)}")


if __name__ == "__main__":
    main()
