"""How well a vocabulary covers a corpus: [UNK] rate, characters with no token or several."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ernie_ft.text.encoding import Encoding


@dataclass
class Audit:
    """What tokenisation lost or changed, over a set of texts."""

    n_texts: int
    n_chars: int
    n_tokens: int
    n_unk: int
    unk_chars: Counter = field(default_factory=Counter)  # non-space characters under [UNK] tokens
    zero_token_chars: Counter = field(default_factory=Counter)  # non-space characters no token covers
    multi_token_chars: Counter = field(default_factory=Counter)  # one character -> 2+ tokens ('…')

    @property
    def unk_rate(self) -> float:
        return self.n_unk / self.n_tokens if self.n_tokens else 0.0

    def summary(self, top: int = 10) -> str:
        """A few human-readable lines; each counter shows its `top` most common characters."""
        lines = [
            f"{self.n_texts:,} texts, {self.n_chars:,} characters -> {self.n_tokens:,} tokens",
            f"[UNK] {self.unk_rate:.2%} of {self.n_tokens:,} tokens"
            + (f"; top: {_top(self.unk_chars, top)}" if self.unk_chars else ""),
        ]
        if self.zero_token_chars:
            lines.append(f"characters with no token: {_top(self.zero_token_chars, top)}")
        if self.multi_token_chars:
            lines.append(f"characters split into 2+ tokens: {_top(self.multi_token_chars, top)}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """JSON-serialisable dict; counters become {character: count}, most common first."""
        return {
            k: dict(v.most_common()) if isinstance(v, Counter) else v
            for k, v in {**self.__dict__, "unk_rate": self.unk_rate}.items()
        }


def _top(counter: Counter, top: int) -> str:
    return ", ".join(f"{c if c.isprintable() else f'U+{ord(c):04X}'} ({n:,})" for c, n in counter.most_common(top))


def audit(texts: list[str], encodings: list[Encoding], unk_id: int) -> Audit:
    """Count [UNK]s, characters that produced no token and characters split into several tokens.

    WordPiece turns a whole pre-token into [UNK] when any piece is missing, so unk_chars can
    include innocent neighbours of the culprit (jieba isolates most symbols, which limits this).
    """
    if len(texts) != len(encodings):
        raise ValueError(f"audit got {len(texts)} texts but {len(encodings)} encodings")
    result = Audit(n_texts=len(texts), n_chars=sum(map(len, texts)), n_tokens=0, n_unk=0)
    for text, enc in zip(texts, encodings):
        result.n_tokens += len(enc.ids)
        covered = bytearray(len(text))
        single: Counter = Counter()
        for tid, (s, e) in zip(enc.ids, enc.offsets):
            covered[s:e] = b"\x01" * (e - s)
            if e - s == 1:
                single[s] += 1
            if tid == unk_id:
                result.n_unk += 1
                result.unk_chars.update(c for c in text[s:e] if not c.isspace())
        if 0 in covered:
            result.zero_token_chars.update(c for c, hit in zip(text, covered) if not hit and not c.isspace())
        result.multi_token_chars.update(text[i] for i, n in single.items() if n > 1)
    return result
