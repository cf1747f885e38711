"""What the libraries under ``export`` print and install: their messages go to a file, and nothing installs.

An export runs Paddle's C++ core (glog lines on file descriptor 2), paddle2onnx (C++ lines on descriptor 1,
Python logging), Polygraphy (its own logger, on standard output) and ONNX Runtime's optimizer and quantizer
(Python logging): about 30 lines for a two-layer model. They go to ``export.log`` in the export, so the terminal gets
ernie_ft's own lines, without touching what the caller's process holds (its file descriptors, environment, logging
levels and other threads' records): paddle2onnx and Polygraphy run in a process of their own whose output is the file
(``paddle_to_onnx``), ONNX Runtime's Python logging goes there through its own loggers (``logs_to_file``). Paddle's
own C++ warnings while the graph is traced print where Paddle prints them (the command line's
``GLOG_minloglevel=2`` keeps its terminal free of them).

paddle2onnx's ``export`` sets ``POLYGRAPHY_AUTOINSTALL_DEPS=1`` right before it first imports Polygraphy, and
``polygraphy.config`` reads that variable once, when it is imported, into ``config.AUTOINSTALL_DEPS``, which
Polygraphy's importer (``polygraphy.mod.importer``) reads whenever a module it lazily imports is missing or too old:
set, it runs ``pip install onnx_graphsurgeon --extra-index-url=...`` into the user's environment during the export.
``no_installs``, in paddle2onnx's own process, imports ``polygraphy.config`` with the variable at 0 before paddle2onnx
can set it, holds ``AUTOINSTALL_DEPS`` False whatever the variable says, and puts both back afterwards. The modules
Polygraphy would install are declared dependencies instead (``REQUIRED``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

from ernie_ft.errors import UserError, missing_install

LOG = "export.log"
"""The file in an export that holds what the libraries printed while it was written."""
AUTOINSTALL = "POLYGRAPHY_AUTOINSTALL_DEPS"


@contextlib.contextmanager
def no_installs():
    """Polygraphy's automatic ``pip install`` off for the ``with`` body, whatever paddle2onnx or the environment
    sets; the variable and Polygraphy's setting are as they were afterwards."""
    previous = os.environ.get(AUTOINSTALL)
    os.environ[AUTOINSTALL] = "0"
    try:
        from polygraphy import config
    except ImportError:  # paddle2onnx without Polygraphy: nothing to switch off
        config = None
    setting = getattr(config, "AUTOINSTALL_DEPS", False)
    if config is not None:
        config.AUTOINSTALL_DEPS = False
    try:
        yield
    finally:
        if config is not None:
            config.AUTOINSTALL_DEPS = setting
        if previous is None:
            os.environ.pop(AUTOINSTALL, None)
        else:
            os.environ[AUTOINSTALL] = previous


def paddle_to_onnx(graph: str, params: str, target: str, opset: int, log: str | None) -> None:
    """paddle2onnx's conversion of the Paddle graph ``graph`` with ``params`` into ``target``, run in a process of its
    own (``no_installs`` there) with its standard output and error, C++ and Python alike, appended to ``log`` (None:
    this process's, ``export --verbose``): this process's descriptors, environment and loggers stay as they are."""
    command = [sys.executable, "-m", __name__, graph, params, target, str(opset)]
    with open(log, "a", encoding="utf-8") if log else contextlib.nullcontext() as out:
        done = subprocess.run(command, stdout=out, stderr=out, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        where = f"; its messages: {log}" if log else ""
        raise RuntimeError(f"paddle2onnx could not convert {graph} (exit status {done.returncode}){where}")


LIBRARY_LOGGERS = ("onnxruntime",)
"""The packages whose Python logging ``logs_to_file`` takes: ONNX Runtime's optimizer and quantizer."""


@contextlib.contextmanager
def logs_to_file(path: str | None, packages: tuple[str, ...] = LIBRARY_LOGGERS):
    """What the code of ``packages`` logs while the ``with`` body runs, appended to ``path`` (None: left as it is)
    instead of reaching the caller's handlers, whatever the level the caller's configuration lets through.

    Their own loggers (those named for one of their modules: ONNX Runtime's optimizer imports its modules under
    their own names, ``fusion_base``, ``onnx_model``...) get a handler to the file and stop propagating; what their
    code logs through the root logger (``logging.warning(...)``, as ONNX Runtime's quantizer does) is taken by a
    filter on the root logger that knows their files. Afterwards each logger's handlers and propagation and the root
    logger's filters are as they were; no level, no other logger and nothing process-wide is touched, so another
    thread's records reach its handlers all the while."""
    if path is None:
        yield
        return
    import importlib
    import logging

    directories = []
    for package in packages:
        module = importlib.import_module(package)
        directories.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
        for name in ("transformers.optimizer", "quantization") if package == "onnxruntime" else ():
            with contextlib.suppress(ImportError):  # their modules' loggers exist before the body logs
                importlib.import_module(f"{package}.{name}")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def theirs(record: logging.LogRecord) -> bool:
        return os.path.abspath(record.pathname).startswith(tuple(directories))

    class ToFile(logging.Filter):
        def filter(self, record):  # a record their code logged on the root logger: to the file, not further
            if theirs(record):
                handler.handle(record)
                return False
            return True

    loggers = [logger for logger in _loggers() if _module_file(logger.name).startswith(tuple(directories))]
    saved = [(logger, logger.propagate) for logger in loggers]
    root_filter = ToFile()
    try:
        for logger in loggers:
            logger.addHandler(handler)
            logger.propagate = False
        logging.root.addFilter(root_filter)
        yield
    finally:
        logging.root.removeFilter(root_filter)
        for logger, propagate in saved:
            logger.removeHandler(handler)
            logger.propagate = propagate
        handler.close()


def _loggers() -> list:
    import logging

    return [logger for logger in list(logging.root.manager.loggerDict.values()) if isinstance(logger, logging.Logger)]


def _module_file(name: str) -> str:
    """The file of the module a logger is named for, '' for none."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    return os.path.abspath(path) if path else ""


REQUIRED = (
    ("paddle2onnx", "paddle2onnx", "to convert the graph", False),
    ("onnxruntime", "onnxruntime", "to optimize the graph", False),
    ("sympy", "sympy", "for ONNX Runtime's optimizer", False),
    ("ml_dtypes", "ml_dtypes", "for ONNX Runtime's quantizer", True),
    ("onnx_graphsurgeon", "onnx-graphsurgeon", "for paddle2onnx's constant folding (else no LayerNorm fuses)", False),
)
"""(module, package, why, only with --quantize): what ``--format onnx`` imports, each in the ``onnx`` extra and pinned
in constraints.txt. One missing stops the export with a line naming it: nothing is installed at run time."""


def check_dependencies(quantize: str | None = None) -> None:
    """UserError naming the first of ``REQUIRED`` that cannot be imported, and how to install it (the install that
    exports, where Paddle too is missing: the runtime's)."""
    import importlib.util

    if importlib.util.find_spec("paddle") is None:
        raise missing_install(ModuleNotFoundError(name="paddle"))
    for module, package, why, quantizing in REQUIRED:
        if quantizing and not quantize:
            continue
        try:
            __import__(module)
        except ImportError:
            flag = "--quantize" if quantizing else "--format onnx"
            raise UserError(f"{flag} needs {package} {why}: pip install {package} (or 'ernie_ft[onnx]')") from None


def _convert(graph: str, params: str, target: str, opset: str) -> None:
    """``paddle_to_onnx``'s process: paddle2onnx with Polygraphy's installs off."""
    with no_installs():  # paddle2onnx switches Polygraphy's pip install on while it runs
        import paddle2onnx

        paddle2onnx.export(graph, params, save_file=target, opset_version=int(opset), enable_onnx_checker=True)


if __name__ == "__main__":
    _convert(*sys.argv[1:])
