"""Relation extraction (DuIE / CMeIE JSON Lines, doccano and Label Studio exports): ``python -m ernie_ft.relation``."""

from ernie_ft.relation.task import Relation

__all__ = ["Relation"]
