"""``python -m ernie_ft vocab learn``: learn a vocabulary extension (``ernie_ft.text.extension``) from a
corpus, write it, and report what it does to the corpus's length in tokens."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Optional

from ernie_ft.cli.parsers import Parser
from ernie_ft.errors import UserError


def build_parser(prog: str) -> Parser:
    parser = Parser(
        prog=prog,
        allow_abbrev=False,
        description="Vocabulary tools. learn: word pieces from a corpus (jieba words, BPE inside them) "
        "appended to a model's vocabulary, for --vocab-extension.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="learn")
    learn_parser = commands.add_parser(
        "learn",
        allow_abbrev=False,
        help="learn a vocabulary extension from a corpus",
        description="Learn up to --size new word pieces from a corpus.",
    )
    learn_parser.add_argument(
        "--corpus", nargs="+", required=True, metavar="FILE", help=".txt (one text per line), TSV, CSV or JSONL files"
    )
    learn_parser.add_argument(
        "--base",
        required=True,
        metavar="MODEL_OR_VOCAB",
        help="a vocab.txt, a checkpoint directory or a PaddleNLP model name",
    )
    learn_parser.add_argument("--size", type=int, required=True, metavar="N", help="new pieces to learn")
    learn_parser.add_argument("--output", required=True, metavar="DIR", help="new directory for the extension")
    learn_parser.add_argument(
        "--min-frequency", type=int, default=2, help="merge a pair only when it occurs this often (default: 2)"
    )
    learn_parser.add_argument("--user-dict", help="jieba user dictionary (use the same one when training)")
    learn_parser.add_argument(
        "--text-column", help="column or JSON key with the text (default: text_a, text, text_b...)"
    )
    learn_parser.add_argument("--num-proc", type=int, default=1, help="processes for the before/after tokenisation")
    learn_parser.add_argument("--top", type=int, default=20, help="how many frequent pieces to show (default: 20)")
    return parser


def run(args: argparse.Namespace) -> None:
    learn(
        args.corpus,
        args.base,
        args.size,
        args.output,
        min_frequency=args.min_frequency,
        user_dict=args.user_dict,
        text_column=args.text_column,
        num_proc=args.num_proc,
        top=args.top,
    )


def read_corpus(paths: list[str], text_column: str | None = None) -> list[str]:
    """Every text of the corpus files: .txt lines, or the text (and text-pair) columns of TSV/CSV/JSONL."""
    from ernie_ft.data.readers import PAIR_COLUMNS, TEXT_COLUMNS
    from ernie_ft.data.sources import read_records

    texts = []
    for path in paths:
        columns, rows = read_records(path, "--corpus", header_names=[text_column] if text_column else ())
        wanted = [text_column] if text_column else [c for c in columns if c.lower() in TEXT_COLUMNS + PAIR_COLUMNS]
        if not set(wanted) <= set(columns) or not wanted:
            raise UserError(
                f"--corpus {path}: no text column{f' {text_column!r}' if text_column else ''}; columns "
                f"found: {', '.join(columns)}. Name the column with --text-column"
            )
        texts += [r[c] for _, r in rows for c in wanted if isinstance(r.get(c), str) and r[c].strip()]
    return texts


def _base_pipeline(base: str, user_dict: str | None):
    from ernie_ft.config import DataConfig, ModelConfig
    from ernie_ft.models.modeling import load_pipeline
    from ernie_ft.text.pipeline import TextPipeline

    if os.path.isfile(base):
        return TextPipeline(base, user_dict=user_dict)
    if base.startswith("scratch:"):
        raise UserError(f"--base {base}: give the vocab.txt the scratch model will use (its --vocab file)")
    pipeline = load_pipeline(ModelConfig(model=base), DataConfig(user_dict=user_dict), None)
    if pipeline.extension is not None:
        raise UserError(
            f"--base {base}: this checkpoint already has a vocabulary extension; fine-tune it with "
            "the one it has, or learn a new one against the model it started from"
        )
    return pipeline


def learn(
    corpus: list[str],
    base: str,
    size: int,
    output: str,
    min_frequency: int = 2,
    user_dict: Optional[str] = None,
    text_column: Optional[str] = None,
    num_proc: int = 1,
    top: int = 20,
) -> dict:
    """Learn up to ``size`` pieces from the ``corpus`` files for the model or vocabulary ``base``, write the
    extension directory ``output`` and print what it does to the corpus's tokens per character; returns that
    report. The arguments are ``vocab learn``'s flags."""
    from ernie_ft.text import extension

    if size < 1 or min_frequency < 1 or num_proc < 1:
        raise UserError("--size, --min-frequency and --num-proc must be at least 1")
    out = Path(output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--output {out} already exists and is not an empty directory; choose another one")
    texts = read_corpus(corpus, text_column)
    if not texts:
        raise UserError(f"--corpus {' '.join(corpus)}: no text found")
    pipeline = _base_pipeline(base, user_dict)
    start = time.perf_counter()
    learned = extension.learn(pipeline, texts, size, min_frequency)
    took = time.perf_counter() - start
    if not learned["pieces"]:
        raise UserError(
            f"--corpus: no pair of characters inside a jieba word occurs --min-frequency "
            f"{min_frequency} times; give a larger corpus or a lower --min-frequency"
        )
    info = {
        "min_frequency": min_frequency,
        "corpus": [os.path.abspath(p) for p in corpus],
        "user_dict": user_dict and os.path.abspath(user_dict),
    }
    extension.write(str(out), learned, pipeline.vocab_file, pipeline.vocab_size, info)
    extended = pipeline.replace(vocab_extension=str(out))
    before = sum(len(e.ids) for e in pipeline.encode_many(texts, num_proc=num_proc))
    after_encodings = extended.encode_many(texts, num_proc=num_proc)
    after = sum(len(e.ids) for e in after_encodings)
    chars = sum(map(len, texts))
    uses = Counter(i for e in after_encodings for i in e.ids if i >= pipeline.vocab_size)
    top_pieces = [(learned["pieces"][i - pipeline.vocab_size], n) for i, n in uses.most_common(top)]
    report = {
        "texts": len(texts),
        "characters": chars,
        "chinese_words": learned["words"],
        "new_pieces": len(learned["pieces"]),
        "reused_base_pieces": len(learned["reused"]),
        "tokens_per_char_before": before / chars,
        "tokens_per_char_after": after / chars,
        "pieces_used": len(uses),
        "top_pieces": top_pieces,
        "learn_seconds": round(took, 2),
    }
    meta_path = out / extension.META_FILE
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta_path.write_text(json.dumps({**meta, "report": report}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"corpus: {len(texts):,} texts, {chars:,} characters, {learned['words']:,} distinct Chinese words (jieba)")
    print(
        f"learned {len(learned['pieces']):,} new pieces (min frequency {min_frequency}) in {took:.1f}s; "
        f"{len(learned['reused'])} learned pieces were already in the base vocabulary; {len(uses):,} pieces "
        "occur in the corpus"
    )
    print(f"tokens per character: {before / chars:.3f} -> {after / chars:.3f} ({after / before - 1:+.1%})")
    print("most frequent new pieces: " + ", ".join(f"{p} ({n:,})" for p, n in top_pieces))
    print(f"wrote {out}; train with --vocab-extension {out}" + (f" --user-dict {user_dict}" if user_dict else ""))
    return report
