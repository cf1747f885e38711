"""Extractive question answering (SQuAD-style JSON or JSONL): ``python -m ernie_ft.qa``."""

from ernie_ft.qa.answers import best_answers
from ernie_ft.qa.task import NO_ANSWER, QA

__all__ = ["NO_ANSWER", "QA", "best_answers"]
