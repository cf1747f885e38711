"""``Encoding``: the tokens of one text, what the pipeline returns and the tokenisation cache stores."""

from __future__ import annotations

from array import array


class Encoding:
    """Tokens of one text, without [CLS]/[SEP]: ``ids``, ``offsets`` ([start, end) into the original text, one
    per token) and ``word_ids`` (index into ``TextPipeline.words(text)`` of each token's word; None: not asked
    for).

    A training file's encodings are all held until its last text is featurized, so they are stored as machine
    integers (one ``array('i')``: 4 bytes a number), not as Python lists of ints and of (start, end) tuples (about 100
    bytes a token: 13 KB for a review of 108 characters, 30 GB for a file of 10^6 of them). The attributes give
    fresh Python lists, built on each read: change them by building a new ``Encoding``.
    """

    __slots__ = ("_numbers", "_words")

    def __init__(self, ids, offsets, word_ids=None):
        # One buffer, sized once: ids, then starts, then ends, then word ids when asked for.
        numbers = [*ids, *(start for start, _ in offsets), *(end for _, end in offsets), *(word_ids or ())]
        self._numbers, self._words = array("i", numbers), word_ids is not None
        if len(numbers) != len(ids) * (4 if self._words else 3) or len(offsets) != len(ids):
            raise ValueError(f"{len(ids)} ids, {len(offsets)} offsets and word ids of another length")

    @classmethod
    def from_columns(cls, ids, starts, ends, word_ids=None) -> Encoding:
        """An encoding from its columns: sequences of ints or their int32 bytes."""
        encoding = cls.__new__(cls)
        encoding._numbers, encoding._words = array("i", ids), word_ids is not None
        for column in (starts, ends) + ((word_ids,) if word_ids is not None else ()):
            encoding._numbers += array("i", column)
        return encoding

    def _column(self, k: int) -> array:
        n = len(self)
        return self._numbers[k * n : (k + 1) * n]

    def columns(self) -> tuple[memoryview, memoryview, memoryview, memoryview | None]:
        """The columns (ids, starts, ends, word ids) as views of the int32 buffer, not copies: what the
        tokenisation cache writes."""
        n, view = len(self), memoryview(self._numbers)
        return view[:n], view[n : 2 * n], view[2 * n : 3 * n], view[3 * n :] if self._words else None

    @property
    def ids(self) -> list[int]:
        return self._column(0).tolist()

    @property
    def offsets(self) -> list[tuple[int, int]]:
        return list(zip(self._column(1), self._column(2)))

    @property
    def word_ids(self) -> list[int] | None:
        return self._column(3).tolist() if self._words else None

    def __len__(self) -> int:
        return len(self._numbers) // (4 if self._words else 3)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Encoding):
            return NotImplemented
        return (self._numbers, self._words) == (other._numbers, other._words)

    __hash__ = None

    def __repr__(self) -> str:
        return f"Encoding(ids={self.ids}, offsets={self.offsets}, word_ids={self.word_ids})"

    def __getstate__(self):
        return self._numbers, self._words

    def __setstate__(self, state) -> None:
        self._numbers, self._words = state
