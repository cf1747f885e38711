"""Vocabulary files: a vocab.txt, or the WordPiece vocabulary of a tokenizers ``tokenizer.json``, as token ids
and lines; repeated lines and their warning; the lines written for transformers (``hf_vocab_lines``)."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

from ernie_ft.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")


def read_vocab(vocab_file: str) -> tuple[dict, list[str], bytes]:
    """(token -> id, the file's lines, its bytes) of a vocab.txt, or of a tokenizers ``tokenizer.json``
    (``*.json``) with a WordPiece model; a UserError when it cannot be read or lacks a special token."""
    try:
        data = Path(vocab_file).read_bytes()
        if vocab_file.endswith(".json"):
            lines = _tokenizer_json_vocab(Path(vocab_file))
        else:  # line splitting as PaddleNLP's load_vocabulary (a text file's universal newlines); str.splitlines
            # would also split on \u2028
            lines = [line.rstrip("\n") for line in io.StringIO(data.decode("utf-8"), newline=None)]
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(
            f"vocab file {vocab_file}: cannot read it as UTF-8 text ({e}); give a vocab.txt with one token per line"
        ) from None
    # A repeated token keeps its last id, as PaddleNLP and transformers do ('$' is on two lines of ERNIE 3.0).
    vocab = {tok: i for i, tok in enumerate(lines)}
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise UserError(
            f"vocab file {vocab_file}: missing special tokens {', '.join(missing)}; "
            "use the checkpoint's vocab.txt or one written by build_vocab"
        )
    return vocab, lines, data


def read_json(path: Path) -> dict:
    """The JSON object in ``path``; {} when there is no such file, a UserError when it is not JSON."""
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e}); fix or delete the file") from None


def tokenizer_json(path: Path) -> dict:
    """A tokenizers ``tokenizer.json`` whose model is WordPiece with BERT's settings; a UserError otherwise."""
    data = read_json(path)
    model = data.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise UserError(
            f"{path}: its model is {model.get('type') or 'missing'}, not WordPiece; ernie_ft reads BERT-style "
            "tokenizers only (a WordPiece vocabulary, as bert-base-chinese or ERNIE)"
        )
    if model.get("continuing_subword_prefix", "##") != "##" or model.get("max_input_chars_per_word", 100) != 100:
        raise UserError(
            f"{path}: its WordPiece model has continuing_subword_prefix "
            f"{model.get('continuing_subword_prefix')!r} and max_input_chars_per_word "
            f"{model.get('max_input_chars_per_word')}; ernie_ft reads BERT's '##' and 100 only"
        )
    return data


def _tokenizer_json_vocab(path: Path) -> list[str]:
    """The vocabulary of a WordPiece ``tokenizer.json`` as the lines of a vocab.txt (token of id i on line i).

    An id no token has (transformers converts a vocab.txt with a repeated line so: the earlier line's id is
    gone) gets the placeholder ``[unused-repeat-N]``, so every later id stays."""
    vocab = tokenizer_json(path)["model"]["vocab"]
    lines = {i: tok for tok, i in vocab.items() if isinstance(i, int) and i >= 0}
    if len(lines) != len(vocab):
        raise UserError(
            f"{path}: its WordPiece vocabulary gives two tokens one id, or an id that is not a whole number; "
            "save the tokenizer again with transformers, or give its vocab.txt"
        )
    return [lines.get(i, f"[unused-repeat-{i}]") for i in range(max(lines, default=-1) + 1)]


def _repeated_lines(lines: list[str]) -> dict[str, list[int]]:
    """Tokens on more than one line, with their 0-based line numbers."""
    seen: dict[str, list[int]] = {}
    for i, tok in enumerate(lines):
        seen.setdefault(tok, []).append(i)
    return {tok: where for tok, where in seen.items() if len(where) > 1}


_WARNED_REPEATS: set[str] = set()


def warn_repeated_lines(vocab_file: str, lines: list[str]) -> None:
    """One stderr line (once per file and process) when a vocabulary repeats a token, for rules "bert"."""
    repeated = _repeated_lines(lines)
    key = os.path.abspath(vocab_file)
    if not repeated or key in _WARNED_REPEATS:
        return
    _WARNED_REPEATS.add(key)
    where = "; ".join(
        f"{tok!r} on lines {', '.join(str(i + 1) for i in lines_of)} (id {lines_of[-1]})"
        for tok, lines_of in repeated.items()
    )
    print(
        f"warning: vocab file {vocab_file}: repeated tokens: {where}; ids follow transformers (the last line), "
        "but re-saving this tokenizer with transformers' save_pretrained drops the earlier line and shifts every "
        "later id; write it with TextPipeline.save_hf, which keeps every id",
        file=sys.stderr,
    )


def hf_vocab_lines(lines: list[str]) -> list[str]:
    """The vocabulary's lines for transformers: every line of a repeated token but its last (the one whose id
    both transformers and ernie_ft use) becomes ``[unused-repeat-N]`` (N: its id), so that transformers'
    load and save_pretrained round trip keeps every id."""
    last = {tok: i for i, tok in enumerate(lines)}
    return [tok if last[tok] == i else f"[unused-repeat-{i}]" for i, tok in enumerate(lines)]
