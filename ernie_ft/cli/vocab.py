"""``python -m ernie_ft vocab learn``: learn a vocabulary extension (``ernie_ft.extension``) from a
corpus, write it, and report what it does to the corpus's length in tokens."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from ernie_ft.errors import UserError


def read_corpus(paths: list[str], text_column: str | None = None) -> list[str]:
    """Every text of the corpus files: .txt lines, or the text (and text-pair) columns of TSV/CSV/JSONL."""
    from ernie_ft.data.readers import PAIR_COLUMNS, TEXT_COLUMNS, read_records

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


def learn_command(args) -> dict:
    """``learn``: learn pieces, write the extension directory and report tokens per character."""
    from ernie_ft.text import extension

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
        raise UserError(
            f"--corpus: no pair of characters inside a jieba word occurs --min-frequency "
            f"{args.min_frequency} times; give a larger corpus or a lower --min-frequency"
        )
    info = {
        "min_frequency": args.min_frequency,
        "corpus": [os.path.abspath(p) for p in args.corpus],
        "user_dict": args.user_dict and os.path.abspath(args.user_dict),
    }
    extension.write(str(out), learned, base.vocab_file, base.vocab_size, info)
    extended = base.replace(vocab_extension=str(out))
    before = sum(len(e.ids) for e in base.encode_many(texts, num_proc=args.num_proc))
    after_encodings = extended.encode_many(texts, num_proc=args.num_proc)
    after = sum(len(e.ids) for e in after_encodings)
    chars = sum(map(len, texts))
    uses = Counter(i for e in after_encodings for i in e.ids if i >= base.vocab_size)
    top = [(learned["pieces"][i - base.vocab_size], n) for i, n in uses.most_common(args.top)]
    report = {
        "texts": len(texts),
        "characters": chars,
        "chinese_words": learned["words"],
        "new_pieces": len(learned["pieces"]),
        "reused_base_pieces": len(learned["reused"]),
        "tokens_per_char_before": before / chars,
        "tokens_per_char_after": after / chars,
        "pieces_used": len(uses),
        "top_pieces": top,
        "learn_seconds": round(took, 2),
    }
    meta_path = out / extension.META_FILE
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta_path.write_text(json.dumps({**meta, "report": report}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"corpus: {len(texts):,} texts, {chars:,} characters, {learned['words']:,} distinct Chinese words (jieba)")
    print(
        f"learned {len(learned['pieces']):,} new pieces (min frequency {args.min_frequency}) in {took:.1f}s; "
        f"{len(learned['reused'])} learned pieces were already in the base vocabulary; {len(uses):,} pieces "
        "occur in the corpus"
    )
    print(f"tokens per character: {before / chars:.3f} -> {after / chars:.3f} ({after / before - 1:+.1%})")
    print("most frequent new pieces: " + ", ".join(f"{p} ({n:,})" for p, n in top))
    print(
        f"wrote {out}; train with --vocab-extension {out}"
        + (f" --user-dict {args.user_dict}" if args.user_dict else "")
    )
    return report
