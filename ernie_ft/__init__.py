"""ernie_ft: fine-tune ERNIE on Chinese NLP tasks with PaddlePaddle and PaddleNLP.

The public Python API is what ``__all__`` names; everything else may move between releases.
Names are imported on first use, so ``import ernie_ft`` does not import Paddle.
"""

import importlib

from ernie_ft import _compat

__version__ = "0.2.0"

_compat.install()

# Public name -> the module that defines it.
_API = {
    "Task": "ernie_ft.task",
    "TaskHooks": "ernie_ft.task",
    "load_task": "ernie_ft.task",
    "check_known_labels": "ernie_ft.label_set",
    "label_order": "ernie_ft.label_set",
    "RunConfig": "ernie_ft.config",
    "DataConfig": "ernie_ft.config",
    "ModelConfig": "ernie_ft.config",
    "TrainConfig": "ernie_ft.config",
    "ParallelConfig": "ernie_ft.config",
    "build_config": "ernie_ft.recipes",
    "load_recipe": "ernie_ft.recipes",
    "UserError": "ernie_ft.errors",
    "setup": "ernie_ft.training.run",
    "fit": "ernie_ft.training.trainer",
    "train": "ernie_ft.training.trainer",
    "load_model": "ernie_ft.training.checkpoint",
    "Predictor": "ernie_ft.inference.predictor",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'ernie_ft' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
