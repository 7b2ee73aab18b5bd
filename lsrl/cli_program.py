"""The program file of ``lsrl compile SOURCE``: a Python file (``FILE.py`` or ``FILE.py:name``) whose
module-level ``ForEach`` is the program.

The file is the user's code, and what goes wrong while it runs is blamed on the party that caused it:

- a syntax error, an exception raised by the program's own code (or by a library it calls directly), an
  ``LsrlError`` with which lsrl refused what the program gave it, and ``sys.exit`` are the program's: a
  ``ProgramError`` whose one-line message says so, with the traceback of the program's frames (lsrl's and
  the import machinery's left out), which the command line prints above it (for ``sys.exit``, none: the
  message names the line that called it);
- any other exception raised inside lsrl (an ``InternalError``, a ``KeyError``...) is a bug in lsrl: it
  goes on unchanged, and the command line prints it with its whole traceback and a request to report it.
"""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, TracebackType

import lsrl
from lsrl.cli_errors import USER_ERRORS, first_line
from lsrl.errors import InternalError, LsrlError, ProgramError

LSRL_FOLDER = Path(lsrl.__file__).resolve().parent
IMPORT_MACHINERY = Path(importlib.util.__file__).resolve().parent  # and its frozen copies, "<frozen importlib...>"
# where the standard library and the installed packages live: frames there are neither lsrl's nor the program's
LIBRARY_FOLDERS = tuple({Path(sysconfig.get_path(kind)).resolve() for kind in ("stdlib", "platstdlib", "purelib",
                                                                                   "platlib")})


def load_program(spec: str) -> lsrl.ForEach:
    """``FILE.py`` or ``FILE.py:name``: a module-level ForEach (the only one, or the named one)."""
    path, _, name = spec.partition(":")
    module = run_program_file(path)
    programs = {key: value for key, value in vars(module).items() if isinstance(value, lsrl.ForEach)}
    if name:
        if name not in programs:
            raise LsrlError(f"{path}: no module-level ForEach named {name!r} (found: {sorted(programs) or 'none'})")
        return programs[name]
    if len(programs) != 1:
        raise LsrlError(f"{path}: expected one module-level ForEach, found {sorted(programs) or 'none'}; "
                        "use FILE.py:name")
    return next(iter(programs.values()))


def run_program_file(path: str) -> ModuleType:
    """The module of the Python file at ``path``, run; what it raises, blamed as the module doc says."""
    if not Path(path).exists():
        raise LsrlError(f"SOURCE {path!r}: no such file")
    if not Path(path).is_file():
        raise LsrlError(f"SOURCE {path!r}: not a file (a program file is a Python file, FILE.py)")
    if Path(path).suffix != ".py":
        raise LsrlError(f"SOURCE {path!r}: a program file is a Python file whose name ends in .py")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if module_spec is None or module_spec.loader is None:
        raise InternalError(f"importlib found no loader for the Python file {path!r}")
    module = importlib.util.module_from_spec(module_spec)
    try:
        with _importable(Path(path).resolve().parent):  # the program may import modules beside it
            module_spec.loader.exec_module(module)
    except SystemExit as stop:  # one line, as Python reports none: where the program called it
        raise ProgramError(f"{path}: the program ended the command with sys.exit({stop.code!r}) at "
                           f"{_program_line(stop)} while it was loaded; a program file only defines its ForEach",
                           user_traceback="") from stop
    except Exception as error:
        if not _is_the_programs(error):
            raise
        raise ProgramError(f"{path}: the program raised {type(error).__name__}: {first_line(error)} (an error in "
                           "the program, not in lsrl; the program's traceback is above)",
                           user_traceback=_program_traceback(error)) from error
    return module


@contextmanager
def _importable(folder: Path) -> Iterator[None]:
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))


def _is_the_programs(error: Exception) -> bool:
    """Whether ``error``, raised while the program file ran, is the program's (see the module doc)."""
    if isinstance(error, InternalError):
        return False
    if isinstance(error, USER_ERRORS):  # lsrl refused what the program gave it, or the program's own mistake
        return True
    return _raised_by(error.__traceback__) != "lsrl"


def _raised_by(trace: TracebackType | None) -> str:
    """``"lsrl"`` or ``"program"``: whose code the innermost frame of ``trace`` is, past library frames
    (a numpy function the program called is the program's doing; one lsrl called is lsrl's)."""
    owner = "program"
    for frame in traceback.extract_tb(trace)[1:]:  # the first frame is run_program_file's own
        kind = _kind(frame.filename)
        if kind in ("lsrl", "program"):
            owner = kind
    return owner


def _program_line(error: BaseException) -> str:
    """``FILE, line N`` of the innermost frame of the program's code in ``error``'s traceback."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if _kind(frame.filename) == "program"]
    return f"{frames[-1].filename}, line {frames[-1].lineno}" if frames else "an unknown line"


def _kind(filename: str) -> str:
    """``"lsrl"``, ``"import"`` (the import machinery), ``"library"`` (the standard library, installed packages)
    or ``"program"`` (anything else: the program file and the modules it imports from beside it)."""
    if filename.startswith("<frozen importlib"):
        return "import"
    if filename.startswith("<"):
        return "library"
    path = Path(filename).resolve()
    if path.is_relative_to(LSRL_FOLDER):
        return "lsrl"
    if path.is_relative_to(IMPORT_MACHINERY):
        return "import"
    return "library" if any(path.is_relative_to(folder) for folder in LIBRARY_FOLDERS) else "program"


def _program_traceback(error: BaseException) -> str:
    """``error``'s traceback as Python prints it, less lsrl's and the import machinery's frames (of every
    exception in its chain too)."""
    shown = traceback.TracebackException.from_exception(error)
    for exception in _chain(shown):
        exception.stack = traceback.StackSummary.from_list(
            [frame for frame in exception.stack if _kind(frame.filename) not in ("lsrl", "import")])
    return "".join(shown.format())


def _chain(exception: traceback.TracebackException) -> Iterator[traceback.TracebackException]:
    """``exception`` and the exceptions it was raised from or during (its cause and context), each once."""
    seen: set[int] = set()
    waiting = [exception]
    while waiting:  # each exception is yielded once (seen): at most the chain's length rounds
        current = waiting.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        waiting += [linked for linked in (current.__cause__, current.__context__) if linked is not None]
