"""jieba, the pipeline's word segmenter: its default dictionary loaded once per process, and user dictionaries."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import jieba

from ernie_ft.errors import UserError

jieba.setLogLevel(logging.WARNING)


class Segmenter(jieba.Tokenizer):
    """jieba's Tokenizer, with its default dictionary read from disk (about 1 s) once per process rather than once
    per pipeline: later instances start from a copy of it (a user dictionary adds words to its own copy only)."""

    _default_dictionary: tuple[dict, int] | None = None  # (word frequencies, their total), as jieba loaded them

    def initialize(self, dictionary=None):
        if self.initialized or dictionary is not None or self.dictionary != jieba.DEFAULT_DICT:
            return super().initialize(dictionary)
        with self.lock:
            if Segmenter._default_dictionary is None:
                super().initialize()
                Segmenter._default_dictionary = (dict(self.FREQ), self.total)
            elif not self.initialized:
                frequencies, total = Segmenter._default_dictionary
                self.FREQ, self.total, self.initialized = dict(frequencies), total, True


def load_user_dict(segmenter: Segmenter, user_dict: str) -> bytes:
    """Load a jieba user dictionary into ``segmenter``; returns the file's bytes (for the fingerprint)."""
    if not os.path.isfile(user_dict):
        raise UserError(
            f"--user-dict {user_dict}: file not found; give a jieba user dictionary "
            "(one 'word [frequency] [tag]' per line) or drop the flag"
        )
    try:
        segmenter.load_userdict(user_dict)
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"--user-dict {user_dict}: {e}; each line must be 'word [frequency] [tag]' in UTF-8") from None
    return Path(user_dict).read_bytes()
