"""Knowledge distillation: a student classifier trained on a trained classifier's soft labels
(``python -m ernie_ft distill``)."""

from ernie_ft.distill.task import Distillation, distill

__all__ = ["Distillation", "distill"]
