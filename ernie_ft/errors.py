"""The one exception type for mistakes in what the user gave us."""


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
