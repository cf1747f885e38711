"""The module paths of ernie_ft 0.1, before the package had subpackages, kept importable for one release.

``import ernie_ft.trainer`` gives the module ``ernie_ft.training.trainer`` itself (the same object, so
patching either name patches both) with a ``DeprecationWarning`` naming the new path. The old command
modules still run: ``python -m ernie_ft.evaluate ...`` is ``python -m ernie_ft evaluate ...``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

# Old module (under ernie_ft) -> its new path. One table; nothing else knows the old names.
MOVED = {
    "args": "cli.train",
    "audit": "text.audit",
    "batching": "data.batching",
    "dataset": "data.dataset",
    "readers": "data.readers",
    "windows": "data.windows",
    "vocab": "text.scratch",
    "learn_vocab": "cli.vocab",
    "extension": "text.extension",
    "modeling": "models.modeling",
    "crf": "models.crf",
    "electra": "models.electra",
    "weights": "models.weights",
    "kernels": "models.kernels",
    "trainer": "training.trainer",
    "runtime": "training.runtime",
    "parallel": "training.parallel",
    "launch": "training.launch",
    "worker": "training.worker",
    "checkpoint": "training.checkpoint",
    "lock": "training.lock",
    "runlog": "training.runlog",
    "metrics": "evaluation.classification",
    "qa_metrics": "evaluation.squad",
    "plots": "evaluation.plots",
    "predict": "inference.predict",
    "evaluate": "inference.evaluate",
    "export": "inference.export",
    "serve": "serving.legacy",
    "ner_formats": "ner.formats",
    "qa_formats": "data.squad",
    "corpus": "pretrain.corpus",
    "blocks": "pretrain.blocks",
    "masking": "pretrain.masking",
}
# Old modules that were commands under python -m: the command they run.
COMMANDS = {"evaluate": "evaluate", "export": "export", "vocab": "vocab"}


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def create_module(self, spec):
        warnings.warn(
            f"ernie_ft.{self.old} is now {self.new}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module):
        pass  # the new module is already executed; it is only given a second name

    def get_code(self, fullname):  # python -m ernie_ft.OLD (runpy asks for the code to run as __main__)
        command = COMMANDS.get(self.old)
        if command is None:
            return importlib.util.find_spec(self.new).loader.get_code(self.new)
        source = (
            f"import sys\nfrom ernie_ft.cli import main\n"
            f"sys.exit(main([{command!r}, *sys.argv[1:]], prog='python -m ernie_ft.{self.old}'))\n"
        )
        return compile(source, f"<python -m ernie_ft.{self.old}>", "exec")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != "ernie_ft" or name not in MOVED:
            return None
        new = f"ernie_ft.{MOVED[name]}"
        # the new file as origin: python -m gives the code run as __main__ a __file__ (setuptools' hooks read it)
        return importlib.machinery.ModuleSpec(fullname, _Alias(name, new), origin=importlib.util.find_spec(new).origin)


def install() -> None:
    """Put the finder last on ``sys.meta_path``: a module that exists is always found first."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
