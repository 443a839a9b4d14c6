"""The one exception type for mistakes a user can fix (bad input, missing file, ...).

The CLI turns it into one line on stderr and exit code 2; everything else is a bug.
"""


class UserError(Exception):
    """Bad input: printed as one line, exit code 2, never a traceback."""


EXIT_USER_ERROR = 2
