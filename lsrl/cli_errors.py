"""The command line's error handling, shared by ``lsrl`` and ``lsrl llrnn``: an error a user can
cause is printed as one line (``Error: ...``), not as a traceback."""

from __future__ import annotations

import functools

import click

from lsrl.errors import LsrlError


def one_line_errors(command):
    """Turn the errors of ``command`` that a user can cause into one-line Click errors."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (LsrlError, OSError, ValueError) as error:
            raise click.ClickException(str(error).splitlines()[0]) from None

    return wrapper
