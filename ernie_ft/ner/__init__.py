"""Named-entity recognition (CoNLL, CLUENER or span JSONL): ``python -m ernie_ft.ner``."""

from ernie_ft.evaluation.entities import entity_errors, entity_metrics, format_entity_table
from ernie_ft.ner.task import NER, entity_types, stitch

__all__ = ["NER", "entity_errors", "entity_metrics", "entity_types", "format_entity_table", "stitch"]
