"""What the libraries under ``export`` print and install: their messages go to a file, and nothing installs.

An export runs Paddle's C++ core (glog lines on file descriptor 2), paddle2onnx (C++ lines on descriptor 1,
Python logging), Polygraphy (its own logger, on standard output) and ONNX Runtime's optimizer and quantizer
(Python logging): about 30 lines for a two-layer model. ``to_file`` sends all of them, whoever writes them and
however, to ``export.log`` in the export, so the terminal gets ernie_ft's own lines.

paddle2onnx's ``export`` sets ``POLYGRAPHY_AUTOINSTALL_DEPS=1`` right before it first imports Polygraphy, and
``polygraphy.config`` reads that variable once, when it is imported, into ``config.AUTOINSTALL_DEPS``, which
Polygraphy's importer (``polygraphy.mod.importer``) reads whenever a module it lazily imports is missing or too old:
set, it runs ``pip install onnx_graphsurgeon --extra-index-url=...`` into the user's environment during the export.
``no_installs`` imports ``polygraphy.config`` with the variable at 0 before paddle2onnx can set it, holds
``AUTOINSTALL_DEPS`` False whatever the variable says, and puts both back afterwards. The modules Polygraphy would
install are declared dependencies instead (``REQUIRED``).
"""

from __future__ import annotations

import contextlib
import os
import sys

from ernie_ft.errors import UserError

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


@contextlib.contextmanager
def to_file(path: str | None):
    """Standard output and error, as file descriptors 1 and 2 (C++ and Python alike), appended to ``path`` for the
    ``with`` body; None: left as they are (``export --verbose``)."""
    if path is None:
        yield
        return
    _flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(path, "a", encoding="utf-8") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                _flush()
    finally:
        for descriptor, copy in zip((1, 2), saved):
            os.dup2(copy, descriptor)
            os.close(copy)


def _flush() -> None:
    """Python's and C's buffered output written out (C++ streams write through C's ``stdout``)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


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
    """UserError naming the first of ``REQUIRED`` that cannot be imported, and how to install it."""
    for module, package, why, quantizing in REQUIRED:
        if quantizing and not quantize:
            continue
        try:
            __import__(module)
        except ImportError:
            flag = "--quantize" if quantizing else "--format onnx"
            raise UserError(f"{flag} needs {package} {why}: pip install {package} (or 'ernie_ft[onnx]')") from None
