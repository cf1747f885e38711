"""The old home of the functions tasks share, now in the modules of their ideas: ``label_set`` (``label_order``,
``warn_rare_labels``, ``FEW_EXAMPLES``, ``check_known_labels``) and ``dev_split`` (``split_dev``). These names stay
importable from here for the code that still does (the example task ``tasks/multilabel_intent.py``, custom tasks
written against it); import them from their modules."""

from ernie_ft.dev_split import DEV_SPLIT_SEED, split_dev
from ernie_ft.label_set import FEW_EXAMPLES, check_known_labels, label_order, warn_rare_labels

__all__ = ["DEV_SPLIT_SEED", "FEW_EXAMPLES", "check_known_labels", "label_order", "split_dev", "warn_rare_labels"]
