"""Vocabularies: every character of the training texts for scratch models (vocab.txt format), and
``python -m ernie_ft.vocab learn``, which learns a vocabulary extension (see ``ernie_ft.extension``)."""
from __future__ import annotations

import json
import os
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Iterable

from tokenizers import normalizers

from .errors import UserError
from .text import SPECIAL_TOKENS, normalize_text


def _stands_alone(c: str) -> bool:
    """True when BertPreTokenizer always splits c into its own piece (CJK ideograph or punctuation),
    so it never needs a '##' continuation form."""
    o = ord(c)  # the ranges are BERT's _is_chinese_char and _is_punctuation (ASCII part)
    return (any(lo <= o <= hi for lo, hi in _ALONE_RANGES) or unicodedata.category(c).startswith("P"))


_ALONE_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B81F), (0x2B820, 0x2CEAF),
                 (0xF900, 0xFAFF), (0x2F800, 0x2FA1F), (33, 47), (58, 64), (91, 96), (123, 126))


def build_vocab(texts: Iterable[str], *, min_count: int = 1, lowercase: bool = True) -> list[str]:
    """Vocabulary for a scratch model: [PAD] [CLS] [SEP] [MASK], then each character of the
    normalised texts seen >= min_count times, by frequency then codepoint, and [UNK] last.
    Characters that can sit inside a word (letters, digits, symbols) also get a '##' form."""
    bert = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                      lowercase=lowercase)
    counts: Counter = Counter()
    for text in texts:
        counts.update(bert.normalize_str(normalize_text(text)[0]))
    chars = sorted((c for c, n in counts.items() if n >= min_count and not c.isspace()),
                   key=lambda c: (-counts[c], ord(c)))
    tokens = list(SPECIAL_TOKENS[:4])
    for c in chars:
        tokens.append(c)
        if not _stands_alone(c):
            tokens.append("##" + c)
    tokens.append("[UNK]")
    return tokens


def write_vocab(tokens: list[str], path: str) -> None:
    """Write tokens one per line (UTF-8), the vocab.txt format TextPipeline and PaddleNLP read."""
    bad = [t for t in tokens if not t or "\n" in t or "\r" in t]
    if bad:
        raise ValueError(f"vocabulary tokens must be non-empty single lines, got {bad[:3]!r}")
    tmp = Path(f"{path}.{os.getpid()}.tmp")  # renamed into place: data-parallel ranks write the same file at once
    tmp.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    os.replace(tmp, path)


def read_corpus(paths: list[str], text_column: str | None = None) -> list[str]:
    """Every text of the corpus files: .txt lines, or the text (and text-pair) columns of TSV/CSV/JSONL."""
    from .readers import PAIR_COLUMNS, TEXT_COLUMNS, read_records

    texts = []
    for path in paths:
        columns, rows = read_records(path, "--corpus", header_names=[text_column] if text_column else ())
        wanted = [text_column] if text_column else [c for c in columns if c.lower() in TEXT_COLUMNS + PAIR_COLUMNS]
        if not set(wanted) <= set(columns) or not wanted:
            raise UserError(f"--corpus {path}: no text column{f' {text_column!r}' if text_column else ''}; columns "
                            f"found: {', '.join(columns)}. Name the column with --text-column")
        texts += [r[c] for _, r in rows for c in wanted if isinstance(r.get(c), str) and r[c].strip()]
    return texts


def _base_pipeline(base: str, user_dict: str | None):
    from .config import DataConfig, ModelConfig
    from .modeling import load_pipeline
    from .text import TextPipeline

    if os.path.isfile(base):
        return TextPipeline(base, user_dict=user_dict)
    if base.startswith("scratch:"):
        raise UserError(f"--base {base}: give the vocab.txt the scratch model will use (its --vocab file)")
    pipeline = load_pipeline(ModelConfig(model=base), DataConfig(user_dict=user_dict), None)
    if pipeline.extension is not None:
        raise UserError(f"--base {base}: this checkpoint already has a vocabulary extension; fine-tune it with "
                        "the one it has, or learn a new one against the model it started from")
    return pipeline


def learn_command(args) -> dict:
    """``learn``: learn pieces, write the extension directory and report tokens per character."""
    from . import extension

    if args.size < 1 or args.min_frequency < 1 or args.num_proc < 1:
        raise UserError("--size, --min-frequency and --num-proc must be at least 1")
    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--output {out} already exists and is not an empty directory; choose another one")
    texts = read_corpus(args.corpus, args.text_column)
    if not texts:
        raise UserError(f"--corpus {' '.join(args.corpus)}: no text found")
    base = _base_pipeline(args.base, args.user_dict)
    start = time.perf_counter()
    learned = extension.learn(base, texts, args.size, args.min_frequency)
    took = time.perf_counter() - start
    if not learned["pieces"]:
        raise UserError(f"--corpus: no pair of characters inside a jieba word occurs --min-frequency "
                        f"{args.min_frequency} times; give a larger corpus or a lower --min-frequency")
    info = {"min_frequency": args.min_frequency, "corpus": [os.path.abspath(p) for p in args.corpus],
            "user_dict": args.user_dict and os.path.abspath(args.user_dict)}
    extension.write(str(out), learned, base.vocab_file, base.vocab_size, info)
    extended = base.replace(vocab_extension=str(out))
    before = sum(len(e.ids) for e in base.encode_many(texts, num_proc=args.num_proc))
    after_encodings = extended.encode_many(texts, num_proc=args.num_proc)
    after = sum(len(e.ids) for e in after_encodings)
    chars = sum(map(len, texts))
    uses = Counter(i for e in after_encodings for i in e.ids if i >= base.vocab_size)
    top = [(learned["pieces"][i - base.vocab_size], n) for i, n in uses.most_common(args.top)]
    report = {"texts": len(texts), "characters": chars, "chinese_words": learned["words"],
              "new_pieces": len(learned["pieces"]), "reused_base_pieces": len(learned["reused"]),
              "tokens_per_char_before": before / chars, "tokens_per_char_after": after / chars,
              "pieces_used": len(uses), "top_pieces": top, "learn_seconds": round(took, 2)}
    meta_path = out / extension.META_FILE
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta_path.write_text(json.dumps({**meta, "report": report}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"corpus: {len(texts):,} texts, {chars:,} characters, {learned['words']:,} distinct Chinese words (jieba)")
    print(f"learned {len(learned['pieces']):,} new pieces (min frequency {args.min_frequency}) in {took:.1f}s; "
          f"{len(learned['reused'])} learned pieces were already in the base vocabulary; {len(uses):,} pieces "
          "occur in the corpus")
    print(f"tokens per character: {before / chars:.3f} -> {after / chars:.3f} ({after / before - 1:+.1%})")
    print("most frequent new pieces: " + ", ".join(f"{p} ({n:,})" for p, n in top))
    print(f"wrote {out}; train with --vocab-extension {out}" + (f" --user-dict {args.user_dict}" if args.user_dict else ""))
    return report


def parser():
    from .cli import Parser

    p = Parser(prog="python -m ernie_ft.vocab", allow_abbrev=False,
               description="Vocabulary tools. learn: word pieces from a corpus (jieba words, BPE inside them) "
                           "appended to a model's vocabulary, for --vocab-extension.")
    commands = p.add_subparsers(dest="command", required=True, metavar="learn")
    learn = commands.add_parser("learn", allow_abbrev=False, help="learn a vocabulary extension from a corpus",
                                description="Learn up to --size new word pieces from a corpus.")
    learn.add_argument("--corpus", nargs="+", required=True, metavar="FILE",
                       help=".txt (one text per line), TSV, CSV or JSONL files")
    learn.add_argument("--base", required=True, metavar="MODEL_OR_VOCAB",
                       help="a vocab.txt, a checkpoint directory or a PaddleNLP model name")
    learn.add_argument("--size", type=int, required=True, metavar="N", help="new pieces to learn")
    learn.add_argument("--output", required=True, metavar="DIR", help="new directory for the extension")
    learn.add_argument("--min-frequency", type=int, default=2,
                       help="merge a pair only when it occurs this often (default: 2)")
    learn.add_argument("--user-dict", help="jieba user dictionary (use the same one when training)")
    learn.add_argument("--text-column", help="column or JSON key with the text (default: text_a, text, text_b...)")
    learn.add_argument("--num-proc", type=int, default=1, help="processes for the before/after tokenisation")
    learn.add_argument("--top", type=int, default=20, help="how many frequent pieces to show (default: 20)")
    return p


def main(argv=None) -> int:
    from .cli import run_guarded

    args = parser().parse_args(argv)
    return run_guarded(lambda: learn_command(args))


if __name__ == "__main__":
    sys.exit(main())
