"""Writing files where a person asks: every path checked first, every file written whole or not at all.

``model.save``, ``export_onnx`` and the exports built on them write through these: a path that is
no path, an existing folder where a file is asked for, a file where a folder is asked for, a folder
that does not exist, or one that cannot be written (read-only, no permission, disk full) raises one
``ModelFileError`` naming the path, never a raw ``OSError``. A file is written to a temporary name
beside it and renamed into place when complete, so a failed write leaves no partial file behind
(and an earlier file of that name untouched). Folders (``save``, ``lsrl.hf.save``, ``lsrl compile -o``)
are written as a unit by ``lsrl.model.folders``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lsrl.errors import ModelFileError, shown

NAME_MAX = 255  # bytes in one path component: ext4, APFS, NTFS (in UTF-16 units) and most others


def as_path(path: object, what: str) -> Path:
    """``path`` as a ``Path``; anything but a non-empty str or ``os.PathLike``, or a path with a component
    longer than ``NAME_MAX`` bytes, raises ``ModelFileError``."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or not str(path) or "\x00" in str(path):
        raise ModelFileError(f"{what}: expected a path (str or pathlib.Path), got {type(path).__name__} {shown(path)}")
    longest = max(Path(path).parts, key=lambda part: len(os.fsencode(part)))
    if len(os.fsencode(longest)) > NAME_MAX:
        raise ModelFileError(f"{what}: the path component {shown(longest)} is {len(os.fsencode(longest))} bytes "
                             f"long; file systems allow at most {NAME_MAX}")
    return Path(path)


def cannot_write(what: str, path: Path, error: OSError) -> ModelFileError:
    """The ``ModelFileError`` for an ``OSError`` met writing ``path``."""
    return ModelFileError(f"{what}: cannot write {str(path)!r}: {error.strerror or error}")


def output_file(path: object, what: str) -> Path:
    """``path`` as a file to write: not an existing folder, in a folder that exists; else ``ModelFileError``."""
    file = as_path(path, what)
    if file.is_dir():
        raise ModelFileError(f"{what}: {str(file)!r} is a folder; give a file name inside it")
    parent = file.parent
    if not parent.is_dir():
        reason = "is a file, not a folder" if parent.exists() else "does not exist"
        raise ModelFileError(f"{what}: cannot write {str(file)!r}: the folder {str(parent)!r} {reason}")
    return file


@contextmanager
def written(path: Path, what: str) -> Iterator[Path]:
    """A temporary name beside ``path`` to write to; renamed to ``path`` when the block ends, removed if
    it fails. An ``OSError`` inside the block becomes a ``ModelFileError`` naming ``path``."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        temporary.touch()  # fails here, as an OSError, where the folder cannot be written
        yield temporary
        os.replace(temporary, path)
    except OSError as error:
        raise cannot_write(what, path, error) from None
    finally:
        temporary.unlink(missing_ok=True)


__all__ = ["as_path", "cannot_write", "output_file", "written"]
