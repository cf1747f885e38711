"""Vocabulary extension: word pieces learned with BPE inside jieba words, appended to a base vocabulary.

ERNIE's vocabulary has one token per Chinese character. ``learn`` segments a corpus with the
text pipeline's own normalisation and jieba, trains HF ``tokenizers`` BPE on the words made of
CJK ideographs only (each word is one pre-token, so no merge can cross a word boundary) and
keeps the first N merged pieces, in merge order, that the base vocabulary lacks. Their ids
follow the base vocabulary's: piece i gets id ``base_size + i``.

Encoding (``VocabExtension.apply``): each jieba word of two or more CJK ideographs is covered
left to right by the longest learned piece starting at each position; a position that starts
no piece keeps the base token of its character. Other words (Latin, digits, symbols, mixed)
keep the base WordPiece tokens, so offsets and word ids stay exact by construction.

On disk (``--vocab-extension DIR``): ``pieces.txt`` (the new pieces, one per line, in id order),
``merges.txt`` (the BPE merges that made them, for reference) and ``extension.json`` (format,
base vocabulary sha1 and size, learned pieces the base already has, and the learning report).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

from ernie_ft.errors import UserError

FORMAT = 1
META_FILE, PIECES_FILE, MERGES_FILE = "extension.json", "pieces.txt", "merges.txt"
# BERT's _is_chinese_char ranges: the characters the base tokenizer always splits one by one.
CJK_WORD = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f]{2,}"
)


def file_sha1(path) -> str:
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


class VocabExtension:
    """Learned pieces read from an extension directory, bound to the base vocabulary they extend."""

    def __init__(self, directory: str, vocab: dict[str, int], vocab_file: str, vocab_size: int):
        d = Path(directory)
        flag = f"--vocab-extension {directory}"
        if not (d / META_FILE).is_file() or not (d / PIECES_FILE).is_file():
            raise UserError(
                f"{flag}: not a vocabulary extension (expected {META_FILE} and {PIECES_FILE}); "
                "create one with python -m ernie_ft.vocab learn"
            )
        try:  # kept in memory for save(): a checkpoint may be saved after its source directory is gone
            self.files = {
                name: (d / name).read_text(encoding="utf-8")
                for name in (META_FILE, PIECES_FILE, MERGES_FILE)
                if (d / name).is_file()
            }
            meta = json.loads(self.files[META_FILE])
            pieces = [p for p in self.files[PIECES_FILE].split("\n") if p]
        except (ValueError, UnicodeDecodeError) as e:
            raise UserError(f"{flag}: unreadable ({e}); learn it again with python -m ernie_ft.vocab learn") from None
        if meta.get("format") != FORMAT or not all(CJK_WORD.fullmatch(p) for p in pieces):
            raise UserError(
                f"{flag}: unsupported format or pieces that are not Chinese words; "
                "learn it again with python -m ernie_ft.vocab learn"
            )
        base_sha1 = file_sha1(vocab_file)
        if (meta.get("base_vocab_sha1"), meta.get("base_vocab_size")) != (base_sha1, vocab_size):
            raise UserError(
                f"{flag}: learned on a base vocabulary of {meta.get('base_vocab_size')} tokens (sha1 "
                f"{str(meta.get('base_vocab_sha1'))[:12]}), but this model's {vocab_file} has {vocab_size} (sha1 "
                f"{base_sha1[:12]}); learn it again with --base set to this model, or for a scratch model "
                "pass --vocab with the vocabulary it was learned on"
            )
        self.directory, self.pieces = str(d), pieces
        self.reused = list(meta.get("reused_base_pieces", []))
        self.base_size = vocab_size
        self.ids = {p: vocab[p] for p in self.reused if p in vocab}
        self.ids.update((p, vocab_size + i) for i, p in enumerate(pieces))
        self.longest = max(map(len, self.ids), default=0)
        self.digest = hashlib.sha1("\n".join([base_sha1, *pieces, "|", *self.reused]).encode()).hexdigest()
        self.split = lru_cache(maxsize=1 << 18)(self._split)

    def _split(self, word: str) -> tuple | None:
        """((start, end, id), ...) of the learned pieces covering ``word`` (greedy longest match),
        or None when the word is not all CJK or no piece applies. Uncovered characters are left out:
        they keep their base tokens."""
        if not CJK_WORD.fullmatch(word):
            return None
        found, i, n = [], 0, len(word)
        while i < n - 1:
            for j in range(min(n, i + self.longest), i + 1, -1):
                piece_id = self.ids.get(word[i:j])
                if piece_id is not None:
                    found.append((i, j, piece_id))
                    i = j
                    break
            else:
                i += 1
        return tuple(found) or None

    def apply(
        self, norm: str, spans: list[tuple[int, int]], ids: list[int], offsets: list[tuple[int, int]]
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """Base ids and normalised-text offsets with the character tokens under each learned piece
        replaced by the piece. ``spans`` are the jieba words of ``norm``."""
        pending = [(s + a, s + b, pid) for s, e in spans if e - s > 1 for a, b, pid in self.split(norm[s:e]) or ()]
        if not pending:
            return list(ids), list(offsets)
        out_ids, out_offsets, k, skip_to = [], [], 0, -1
        for tid, (a, b) in zip(ids, offsets):
            if a < skip_to:  # a character token inside the piece just emitted
                continue
            if k < len(pending) and a == pending[k][0]:
                start, skip_to, pid = pending[k]
                k += 1
                out_ids.append(pid)
                out_offsets.append((start, skip_to))
                continue
            out_ids.append(tid)
            out_offsets.append((a, b))
        if k != len(pending):  # every CJK character has a base token of its own; anything else is a bug
            raise RuntimeError(f"vocabulary extension: {len(pending) - k} pieces found no base tokens in {norm!r}")
        return out_ids, out_offsets

    def char_ids(self, vocab: dict[str, int], unk_id: int) -> dict[int, list[int]]:
        """New piece id -> base ids of its characters (what the base tokenizer gives each one)."""
        return {self.base_size + i: [vocab.get(c, unk_id) for c in p] for i, p in enumerate(self.pieces)}

    def save(self, directory: str) -> None:
        """Write the extension's files into ``directory`` (created)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for name, content in self.files.items():
            (out / name).write_text(content, encoding="utf-8")


def same_pieces(a: str, b: str) -> bool:
    """Whether two extension directories hold the same pieces (pieces.txt byte for byte)."""
    files = [Path(d) / PIECES_FILE for d in (a, b)]
    return all(f.is_file() for f in files) and files[0].read_bytes() == files[1].read_bytes()


def chinese_words(pipeline, texts) -> Counter:
    """Counts of the jieba words of two or more CJK ideographs in the normalised texts."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(w for w in pipeline.normalized_words(text) if CJK_WORD.fullmatch(w))
    return counts


def learn(pipeline, texts: list[str], size: int, min_frequency: int = 2) -> dict:
    """Learn up to ``size`` new pieces for ``pipeline``'s vocabulary from ``texts``.

    Returns {"pieces": new pieces in merge order, "reused": learned pieces the base already has,
    "merges": [(left, right), ...] up to the last kept piece, "words": distinct words seen}.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    counts = chinese_words(pipeline, texts)
    alphabet = {c for w in counts for c in w}
    in_base = sum(1 for t in pipeline.vocab if CJK_WORD.fullmatch(t))  # merges that may add nothing new
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # one pre-token per jieba word, no merge across
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + size + in_base, min_frequency=min_frequency, show_progress=False, special_tokens=[]
    )
    # Every occurrence of a word, ten thousand to a string: the trainer counts the words itself.
    words = [w for w, n in counts.items() for _ in range(n)]
    bpe.train_from_iterator((" ".join(words[i : i + 10000]) for i in range(0, len(words), 10000)), trainer=trainer)
    pieces, reused, merges = [], [], []
    for left, right in _merges(bpe):
        if len(pieces) == size:
            break
        merges.append((left, right))
        piece = left + right
        (reused if piece in pipeline.vocab else pieces).append(piece)
    return {"pieces": pieces, "reused": reused, "merges": merges, "words": len(counts)}


def _merges(bpe) -> list[tuple[str, str]]:
    merges = json.loads(bpe.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def write(directory: str, learned: dict, base_vocab_file: str, base_size: int, info: dict) -> None:
    """Write an extension directory from ``learn``'s result; ``info`` goes into extension.json."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / PIECES_FILE).write_text("".join(p + "\n" for p in learned["pieces"]), encoding="utf-8")
    (out / MERGES_FILE).write_text("".join(f"{a} {b}\n" for a, b in learned["merges"]), encoding="utf-8")
    meta = {
        "format": FORMAT,
        "base_vocab_sha1": file_sha1(base_vocab_file),
        "base_vocab_size": base_size,
        "size": len(learned["pieces"]),
        "reused_base_pieces": learned["reused"],
        "encoder": "greedy longest match inside jieba words of CJK ideographs; everything else base WordPiece",
        **info,
    }
    (out / META_FILE).write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
