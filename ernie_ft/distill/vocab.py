"""The student's vocabulary (``--student-vocab``): the teacher's whole vocabulary, or only the part of it that the
training texts use.

A scratch student's word embedding has one row per vocabulary token; with the teacher's ERNIE 3.0 vocabulary that is
40,000 rows, most of a small student's weights, though a training set uses a few thousand of them. ``used`` keeps
the special tokens and every token the teacher's pipeline gives the training texts (the unlabelled ones included),
in the teacher's order, and the teacher's tokenization settings, written as a tokenizer directory the student loads
like a ``--vocab`` (``modeling.load_pipeline``). Every training text gets the same tokens as from the teacher's
pipeline: WordPiece picks the longest piece of the vocabulary at each place, and each piece it picked from the full
vocabulary is in the cut one, which has no longer piece. A text outside the training set may meet a character the
cut vocabulary lacks: [UNK] (or shorter pieces where a word has them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys

import numpy as np

from ernie_ft.config import RunConfig
from ernie_ft.errors import UserError
from ernie_ft.text.vocab_files import SPECIAL_TOKENS

CHOICES = ("full", "used")
"""--student-vocab: the teacher's whole vocabulary, or the tokens the training texts use."""


def check(config: RunConfig, choice: str | None) -> None:
    """``--student-vocab`` is for a scratch student without ``--vocab``."""
    if choice is None:
        return
    if choice not in CHOICES:
        raise UserError(f"--student-vocab must be one of {', '.join(CHOICES)}, not {choice!r}")
    if not config.model.model.startswith("scratch:"):
        raise UserError(
            f"--student-vocab {choice}: for a scratch student (scratch:tiny, scratch:LxH, ...); --student "
            f"{config.model.model} brings its own vocabulary and embedding"
        )
    if config.model.vocab is not None:
        raise UserError(f"--student-vocab {choice} gives the student its vocabulary; drop --vocab {config.model.vocab}")


def used_tokens(pipeline, texts: list[str]) -> list[str]:
    """The tokens of ``pipeline``'s vocabulary that it gives ``texts``, and the special tokens, in its id order."""
    used = {pipeline.vocab[t] for t in SPECIAL_TOKENS}
    for encoding in pipeline.encode_many(texts, word_ids=False):
        used.update(encoding.ids)
    by_id = {i: t for t, i in pipeline.vocab.items()}
    return [by_id[i] for i in sorted(used)]


def cut_pipeline(teacher_dir: str, texts: list[str], cache_dir: str) -> str:
    """A tokenizer directory (under ``cache_dir``, named by its content) with the teacher's settings and its
    vocabulary cut to the tokens of ``texts``; returns its path."""
    from ernie_ft.distill.teacher import teacher_model
    from ernie_ft.text.scratch import write_vocab

    teacher = teacher_model(teacher_dir).pipeline()
    if teacher.extension is not None:
        raise UserError(
            f"--student-vocab used: the teacher {teacher_dir} has a vocabulary extension, whose pieces are not cut; "
            "use --student-vocab full"
        )
    tokens = used_tokens(teacher, texts)
    digest = hashlib.sha1("\n".join([teacher.fingerprint, *tokens]).encode("utf-8")).hexdigest()[:16]
    directory = os.path.join(cache_dir, f"student-vocab-{digest}")
    if not os.path.isfile(os.path.join(directory, "ernie_ft_text.json")):
        os.makedirs(directory, exist_ok=True)
        vocab = os.path.join(directory, "vocab.txt")
        write_vocab(tokens, vocab)
        teacher.replace(vocab_file=vocab).save(directory)
    print(
        f"--student-vocab used: {len(tokens)} of the teacher's {teacher.vocab_size} tokens (the training texts' and "
        f"{len(SPECIAL_TOKENS)} special ones) in {directory}",
        file=sys.stderr,
    )
    return directory


def student_config(config: RunConfig, task, inputs: tuple[dict, list] | None) -> RunConfig:
    """``config`` with the student's vocabulary that ``task.student_vocab`` asks for (``inputs``: the checked
    splits, whose training texts a cut vocabulary keeps)."""
    from ernie_ft.data.dataset import default_cache_dir

    choice = task.student_vocab
    if choice is None:
        return config
    vocab = task.teacher_dir
    if choice == "used":
        texts = task.texts(inputs[0]["train"])
        vocab = cut_pipeline(task.teacher_dir, texts, config.data.cache_dir or default_cache_dir())
    return dataclasses.replace(config, model=dataclasses.replace(config.model, vocab=vocab))


def teacher_ids(student, teacher) -> np.ndarray:
    """The teacher's token id of each of the ``student`` pipeline's ids (a cut of the teacher's vocabulary)."""
    ids = np.zeros(student.vocab_size, dtype=np.int64)
    for token, i in student.vocab.items():
        ids[i] = teacher.vocab[token]
    return ids
