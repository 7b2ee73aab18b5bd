"""The command line's error handling, shared by ``lsrl`` and ``lsrl llrnn``.

An error a user can cause (an ``LsrlError``, a file that cannot be read, a bad value) is printed as one
line, ``Error: ...``; an error of the user's own code (a ``ProgramError``) has its user's traceback above
it. Anything else is a bug in lsrl: it is printed with its traceback and a request to report it.
``lsrl --debug`` prints the traceback of every error.
"""

from __future__ import annotations

import traceback
from typing import Any

import click

from lsrl.errors import REPORT_REQUEST, InternalError, LsrlError, ProgramError

USER_ERRORS = (LsrlError, OSError, ValueError)
# click's own ways out (usage errors, --help's exit, Ctrl-C's abort) are not errors of the command
_CLICK_EXITS = (click.ClickException, click.exceptions.Exit, click.Abort)


class ReportingGroup(click.Group):
    """A click group whose commands' errors are reported as described above; its subgroups are too."""

    group_class = type  # ``@group.group()`` makes another ReportingGroup

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _CLICK_EXITS:
            raise
        except USER_ERRORS as error:
            if debugging(ctx):
                click.echo(traceback.format_exc(), err=True, nl=False)
            elif isinstance(error, ProgramError):
                click.echo(error.user_traceback, err=True, nl=False)
            raise click.ClickException(first_line(error)) from None
        except Exception as error:
            click.echo(traceback.format_exc(), err=True, nl=False)
            if not isinstance(error, InternalError):  # an InternalError's message asks for the report itself
                click.echo(REPORT_REQUEST, err=True)
            raise click.exceptions.Exit(1) from None


def debugging(ctx: click.Context) -> bool:
    """Whether the command line asked for every traceback (``lsrl --debug ...``)."""
    return bool(ctx.find_root().params.get("debug", False))


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (its type's name where it has none)."""
    lines = str(error).splitlines()
    return lines[0] if lines else type(error).__name__
