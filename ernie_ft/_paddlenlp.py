"""PaddleNLP's package ``__init__`` deferred to the first name of its own that is asked for, in the processes ernie_ft
owns (``training.quiet.quiet_process``: the command line, its workers and trials).

``import paddlenlp.transformers`` first executes ``paddlenlp/__init__.py``, which imports every subpackage, Taskflow
and its server: 2.4 s of the 3.6 s a process spends importing Paddle and PaddleNLP on a 2-core Xeon, where ernie_ft
needs ``transformers``, ``data`` and ``utils`` (0.6 s). ``defer()`` makes ``_compat``'s import hook build the
``paddlenlp`` module from the statements of its ``__init__`` before ``import paddle`` (``__version__``), then import
``paddlenlp.data`` (the order the ``__init__`` imports in: ``transformers`` imported first would meet a circular
import) and call ``paddle.disable_signal_handler()`` as its last line does. A subpackage is imported when it is first
named (``paddlenlp.taskflow``); any other missing name (``paddlenlp.Taskflow``) runs the whole ``__init__`` in the
module once, so a user's task file sees every name it had. A Python caller's process never gets this.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util

_state = {"deferred": False}


def defer() -> None:
    """From now on, a first ``import paddlenlp`` in this process runs only the part of its ``__init__`` above."""
    _state["deferred"] = True


def deferred() -> bool:
    return _state["deferred"]


def exec_deferred(module, run_init) -> None:
    """Execute the ``paddlenlp`` package ``module`` deferred; ``run_init()`` executes its whole ``__init__`` in it.
    An ``__init__`` without a top-level ``import paddle`` (another PaddleNLP) runs whole at once."""
    with open(module.__spec__.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), module.__spec__.origin)
    first = next((i for i, node in enumerate(tree.body) if _imports_paddle(node)), None)
    if first is None:
        return run_init()
    head = ast.Module(body=tree.body[:first], type_ignores=[])
    exec(compile(head, module.__spec__.origin, "exec"), module.__dict__)
    running = []

    def __getattr__(name: str):
        if not name.startswith("__") and importlib.util.find_spec(f"paddlenlp.{name}") is not None:
            return importlib.import_module(f"paddlenlp.{name}")
        if name.startswith("__") or running:
            raise AttributeError(f"module 'paddlenlp' has no attribute {name!r}")
        running.append(name)
        run_init()  # the whole __init__, once: every name it defines is then in the module
        try:
            return module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'paddlenlp' has no attribute {name!r}") from None

    module.__getattr__ = __getattr__
    import paddle

    importlib.import_module("paddlenlp.data")
    paddle.disable_signal_handler()


def _imports_paddle(node: ast.stmt) -> bool:
    return isinstance(node, ast.Import) and any(alias.name == "paddle" for alias in node.names)
