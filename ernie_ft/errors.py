"""The one exception type for mistakes in what the user gave us, and the one for a module this install lacks."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's files, flags or environment.

    The command-line entry points print its message as one line (no traceback) and
    exit with status 2. The message names the file, line or flag and says what to do.
    """


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal: Ctrl-C (SIGINT) or a SIGTERM (a scheduler's preemption, a
    container stop). The command exits with 128 + ``signum``, as a shell reports a signalled process."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


TRAIN_INSTALL = "pip install 'ernie_ft[train,cpu]'"
"""The install that trains and exports (Paddle's CPU build; on a GPU, paddlepaddle-gpu as Paddle's docs say, then
``ernie_ft[train]``)."""

TRAINING_STACK = ("paddle", "paddlenlp", "paddle2onnx", "datasets", "sklearn", "visualdl", "onnx")
"""What the ``train`` extra installs and the runtime install (``pip install ernie_ft``, which runs exports) lacks."""


def missing_install(error: ModuleNotFoundError) -> UserError | None:
    """The user error for a module of the training stack that this install (the runtime's) lacks, naming the install
    that has it; None for any other missing module (a bug or a broken environment: its traceback)."""
    module = (error.name or "").split(".")[0]
    if module not in TRAINING_STACK:
        return None
    return UserError(
        f"{module} is not installed: this install of ernie_ft runs exports (a model made by export --format onnx); "
        f"training, export and Paddle's engines need {TRAIN_INSTALL}"
    )
