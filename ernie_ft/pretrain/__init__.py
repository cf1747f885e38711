"""Pretraining on unlabelled text (whole-word MLM, ELECTRA): ``python -m ernie_ft.pretrain``."""

from ernie_ft.pretrain.task import MASK_TEXT, Pretraining, id_to_token, random_ids, replaced_ranking

__all__ = ["MASK_TEXT", "Pretraining", "id_to_token", "random_ids", "replaced_ranking"]
