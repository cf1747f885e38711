"""What ``import ernie_ft`` puts on ``sys.meta_path``: the module paths of ernie_ft 0.1 kept importable, and Paddle's
import warnings kept from a Python caller's terminal.

``import ernie_ft.trainer`` gives the module ``ernie_ft.training.trainer`` itself (the same object, so
patching either name patches both) with a ``DeprecationWarning`` naming the new path. The old command
modules still run: ``python -m ernie_ft.evaluate ...`` is ``python -m ernie_ft evaluate ...``.

Paddle and PaddleNLP warn as they are imported, about the machine that built them ("No ccache found") and
setuptools' import hook ("Setuptools is replacing distutils"): nothing a user can act on. ernie_ft imports them
where it first needs them (in ``load_model``, ``Predictor``, ``setup``...), so a Python caller saw those lines, and
``training.quiet.quiet_process`` is for the owner of a process only. ``_QuietImport`` executes the ``paddle`` and
``paddlenlp`` packages, whoever imports them first, with an ``ignore`` filter for each of those two warnings that
is taken out again when the import ends: every other warning of the import still shows, and the filters are the
caller's plus what the packages' own imports add, as without ernie_ft. (An ``ignore`` filter leaves nothing in the
warning registries: a warning it hid is decided again the next time.)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
import warnings

from ernie_ft import _paddlenlp

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


PADDLE_IMPORT_WARNINGS = ("No ccache found", "Setuptools is replacing distutils")
"""The starts of the Python warnings Paddle and PaddleNLP print as they are imported."""
NOISY_PACKAGES = ("paddle", "paddlenlp")


class _QuietLoader(importlib.abc.Loader):
    """Runs a package's own loader with ``PADDLE_IMPORT_WARNINGS`` ignored for the time of its execution; the module
    keeps its own loader."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        added = []
        for message in PADDLE_IMPORT_WARNINGS:
            if ("ignore", re.compile(message, re.I), Warning, None, 0) not in warnings.filters:  # a caller's own
                warnings.filterwarnings("ignore", message=message)
                added.append(warnings.filters[0])
        try:
            if module.__name__ == "paddlenlp" and _paddlenlp.deferred():
                _paddlenlp.exec_deferred(module, lambda: self.loader.exec_module(module))
            else:
                self.loader.exec_module(module)
        finally:  # the filters the package's own import added stay, as without ernie_ft
            for entry in added:
                if entry in warnings.filters:
                    warnings.filters.remove(entry)


class _QuietImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in NOISY_PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def install() -> None:
    """Put the finder of old names last on ``sys.meta_path`` (a module that exists is always found first), and
    ``_QuietImport`` first (before Python's own finder of installed packages). Once each."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
    if not any(isinstance(finder, _QuietImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietImport())
