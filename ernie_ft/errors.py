"""The one exception type for mistakes in what the user gave us."""


class UserError(Exception):
    """A problem with the user's files, flags or environment.

    The command-line entry points print its message as one line (no traceback) and
    exit with status 2. The message names the file, line or flag and says what to do.
    """
