"""Folders written as a unit and bound by a manifest: ``model.save``, ``lsrl.hf.save`` and ``lsrl compile -o``.

Writing (``replaced_folder``). Every file goes into a fresh staging folder beside the target
(``.lsrl-<key>.<pid>.<random>.partial``); ``manifest.json``, written last, holds the sha256 of every
other file in it (subfolders included). Then the staging folder takes the target's place by renames:

1. rename the staging folder to the target (this succeeds where the target is missing or empty);
2. where the target holds an earlier folder, rename that aside (``.lsrl-<key>.<pid>.<random>.old``)
   and go back to 1 (a concurrent save may have put its folder in meanwhile: the last rename wins);
3. remove the folders set aside.

So the target is, at every moment, either an earlier complete folder, a complete new one, or (between
2 and 1) missing while the earlier one is aside. Only a folder lsrl wrote (one with a manifest, or
the ``model.json`` / ``config.json`` of an lsrl from before manifests) or an empty one is replaced;
any other folder is refused, so ``-o`` into a folder of the user's own files deletes nothing.

Crashes. A writer killed at any point leaves its staging or aside folder behind, named with its pid.
The next write to that target removes those whose process is gone (no litter survives a later save);
where the target is missing and a dead writer's aside folder exists (killed between 2 and 1), the
next write or read renames it back first, so a reader sees the old model, never none. A reader that
finds the target missing while a live writer holds it aside waits for the rename. The pid tells a
dead writer from a live one, so the writers must share one machine (not one network folder from
several). Nothing is fsynced: the guarantee is against killed and concurrent processes, not against
a power cut.

Reading (``read_bound``). ``manifest.json`` must exist and list the files the reader needs; every
file it lists must have its sha256 (one-line ``ModelFileError`` naming the file otherwise). Files not
listed are ignored. A folder replaced while it was read (its identity changed) is read again, so a
reader never combines files of two saves.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from lsrl.errors import ModelFileError
from lsrl.model.writing import as_path, cannot_write

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "lsrl.manifest"
LEGACY_MARKERS = {"model.json": '"format": "lsrl.compiled"', "config.json": '"lsrl_io"'}  # before manifests
_SWAP_TRIES = 1000  # renames lost to concurrent writers before giving up
_READ_TRIES = 50  # reads spoiled by a concurrent replacement before giving up (each retry waits 5-20 ms)
_WAIT_S, _POLL_S = 10.0, 0.005  # how long a reader waits for a live writer's rename, and how often it looks
T = TypeVar("T")


def sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """``folder/manifest.json``: the sha256 of every other file in ``folder``, its subfolders' too.

    The writers call it last; a person who edits a saved folder on purpose calls it to bind the edit."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p != folder / MANIFEST)
    digests = {file.relative_to(folder).as_posix(): sha256(file) for file in files}
    manifest = {"format": MANIFEST_FORMAT, "sha256": digests,
                "note": "written by lsrl; lsrl refuses a file whose sha256 differs"}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))


@contextmanager
def replaced_folder(path: object, what: str) -> Iterator[Path]:
    """A fresh staging folder to write ``path``'s files into; when the block ends, the manifest is
    written and the staging folder replaces ``path`` as a unit (module doc). If the block fails,
    nothing at ``path`` changes and the staging folder (and any parent folder made for it) is removed.
    An ``OSError`` becomes a ``ModelFileError`` naming the path."""
    target = _target(path, what)
    made = _make_parents(target, what)
    staging = _temporary(target, "partial")
    try:
        _tidy(target)
        _check_replaceable(target, what)
        staging.mkdir()
        yield staging
        write_manifest(staging)
        _swap_in(staging, target, what)
    except OSError as error:
        _remove_made(made)
        raise cannot_write(what, Path(str(path)), error) from None
    except ModelFileError as error:  # a writer's own error names the file in the staging folder: name the target's
        _remove_made(made)
        raise ModelFileError(str(error).replace(str(staging), str(path))) from None
    except BaseException:
        _remove_made(made)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def read_bound(path: object, what: str, needed: tuple[str, ...], read: Callable[[Path], T]) -> T:
    """``read(folder)`` of the folder at ``path``, after checking its manifest lists ``needed`` and every
    file it lists has its sha256; read again where the folder was replaced meanwhile (module doc)."""
    folder = as_path(path, what)
    target = _target(folder, what)
    for _ in range(_READ_TRIES):
        _restore_or_wait(target)
        identity = _identity(target)
        try:
            _check_manifest(folder, needed)
            result = read(folder)
        except Exception as error:
            if identity is not None and _identity(target) != identity:
                time.sleep(_POLL_S * (1 + secrets.randbelow(4)))  # jittered: busy writers do not starve a reader
                continue  # replaced while it was read: the files may be of two saves
            if isinstance(error, OSError):
                raise ModelFileError(f"{what}: cannot read {str(folder)!r}: {error.strerror or error}") from None
            raise
        if _identity(target) == identity:
            return result
        time.sleep(_POLL_S * (1 + secrets.randbelow(4)))
    raise ModelFileError(f"{what}: {str(folder)!r} was replaced {_READ_TRIES} times while it was read; try again")


def _check_manifest(folder: Path, needed: tuple[str, ...]) -> None:
    """ModelFileError naming the file unless ``folder``'s manifest lists ``needed`` and matches every file."""
    if not folder.is_dir():
        raise ModelFileError(f"no folder at the path {str(folder)!r}")
    digests = _manifest(folder)
    for name in needed:
        if name not in digests:
            raise ModelFileError(f"{folder}/{MANIFEST} does not list {name}; the folder was not written whole by "
                                 "lsrl")
    for name, digest in digests.items():
        file = folder / name
        if not file.is_file():
            raise ModelFileError(f"{file}: missing, though {MANIFEST} lists it")
        if sha256(file) != digest:
            raise ModelFileError(f"{file}: its sha256 differs from the one in {MANIFEST} (edited or mixed with "
                                 "another save); save the model again")


def _manifest(folder: Path) -> dict[str, str]:
    """``{relative file name: sha256}`` of ``folder``'s manifest, every field checked."""
    file = folder / MANIFEST
    if not file.is_file():
        raise ModelFileError(f"{file}: missing; lsrl binds a saved folder's files by it (a folder written by an "
                             "lsrl before manifests, or not whole: save the model again)")
    try:
        manifest = json.loads(file.read_text())
    except (ValueError, RecursionError) as error:
        raise ModelFileError(f"{file}: not readable JSON ({type(error).__name__})") from None
    digests = manifest.get("sha256") if isinstance(manifest, dict) else None
    if (not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT or not isinstance(digests, dict)
            or not all(isinstance(k, str) and isinstance(v, str) and _inside(k) for k, v in digests.items())):
        raise ModelFileError(f"{file}: not an lsrl manifest (format {MANIFEST_FORMAT!r} with a 'sha256' object "
                             "of relative file names)")
    return digests


def _inside(name: str) -> bool:
    """Whether a manifest's file name stays inside its folder (no absolute path, no '..')."""
    parts = Path(name).parts
    return bool(parts) and not Path(name).is_absolute() and ".." not in parts


def _target(path: object, what: str) -> Path:
    """``path`` made absolute (its parent is where the temporaries go); a file there is refused."""
    target = Path(os.path.abspath(as_path(path, what)))
    try:  # one stat: a folder another writer is renaming away between two calls is no file
        is_file = not stat.S_ISDIR(os.stat(target).st_mode)
    except FileNotFoundError:
        is_file = False
    except OSError as error:  # a parent folder that cannot be searched
        raise ModelFileError(f"{what}: cannot reach {str(path)!r}: {error.strerror or error}") from None
    if is_file:
        raise ModelFileError(f"{what}: {str(path)!r} is a file, not a folder")
    return target


def _make_parents(target: Path, what: str) -> Path | None:
    """Create ``target``'s missing parents; returns the outermost one made (None if none was)."""
    missing = next((p for p in reversed(target.parents) if not p.exists()), None)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise cannot_write(what, target, error) from None
    return missing


def _remove_made(made: Path | None) -> None:
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)


def _check_replaceable(target: Path, what: str) -> None:
    """Refuse to replace a folder holding files lsrl did not write."""
    try:
        if not target.is_dir() or not any(target.iterdir()) or (target / MANIFEST).is_file():
            return
        for name, marker in LEGACY_MARKERS.items():
            file = target / name
            if file.is_file():
                with open(file, errors="replace") as text:
                    if marker in text.read(1 << 20):  # near the top of the file in both
                        return
    except FileNotFoundError:  # another writer renamed the folder away meanwhile: nothing of the user's to keep
        return
    raise ModelFileError(f"{what}: the folder {str(target)!r} holds files lsrl did not write (no {MANIFEST}); "
                         "give a new or empty folder")


def _key(target: Path) -> str:
    """A short name for ``target`` that its temporaries carry (a long name would exceed 255 characters)."""
    return hashlib.sha256(os.fsencode(target.name)).hexdigest()[:16]


def _temporary(target: Path, kind: str) -> Path:
    """A fresh name beside ``target`` for a staging (``partial``) or set-aside (``old``) folder."""
    return target.with_name(f".lsrl-{_key(target)}.{os.getpid()}.{secrets.token_hex(4)}.{kind}")


def _temporaries(target: Path, kind: str) -> list[tuple[Path, bool]]:
    """``(folder, its writer is alive)`` for ``target``'s temporaries of ``kind``, newest first."""
    found = []
    for folder in target.parent.glob(f".lsrl-{_key(target)}.*.{kind}"):
        pid = folder.name.split(".")[2]
        if pid.isdigit():
            try:
                found.append((folder.stat().st_ctime, folder, _alive(int(pid))))
            except FileNotFoundError:  # removed meanwhile by another writer
                pass
    return [(folder, alive) for _, folder, alive in sorted(found, reverse=True)]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _restore_or_wait(target: Path) -> None:
    """Where ``target`` is missing: put back a dead writer's set-aside folder, or wait while a live writer
    holds one aside (it is between its two renames)."""
    deadline = time.monotonic() + _WAIT_S
    while not target.exists() and time.monotonic() < deadline:  # bounded by the deadline, _WAIT_S from now
        asides = _temporaries(target, "old")
        dead = [folder for folder, alive in asides if not alive]
        if dead:
            try:
                os.rename(dead[0], target)
            except FileNotFoundError:  # another reader or writer was first
                pass
            except OSError:  # a folder this process cannot write: nothing to put back from here
                return
        elif not asides:
            return
        else:
            time.sleep(_POLL_S)


def _tidy(target: Path) -> None:
    """Restore a dead writer's set-aside folder where the target is missing, then remove dead writers'
    temporaries of ``target``."""
    _restore_or_wait(target)
    for kind in ("partial", "old"):
        for folder, alive in _temporaries(target, kind):
            if not alive:
                shutil.rmtree(folder, ignore_errors=True)


def _swap_in(staging: Path, target: Path, what: str) -> None:
    """Rename ``staging`` to ``target``, setting aside whatever folder is there first (module doc); the
    folders set aside are removed once it is in, or the last one put back if it cannot be."""
    asides = []
    try:
        for _ in range(_SWAP_TRIES):
            try:
                os.rename(staging, target)
                break
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            aside = _temporary(target, "old")
            try:
                os.rename(target, aside)
                asides.append(aside)
            except FileNotFoundError:  # a concurrent writer set it aside first
                pass
        else:
            raise ModelFileError(f"{what}: {str(target)!r} was replaced by other writers {_SWAP_TRIES} times; "
                                 "try again")
    except BaseException:
        if asides and not target.exists():
            try:
                os.rename(asides.pop(), target)
            except OSError:  # left aside: the next read or write puts it back
                pass
        raise
    finally:
        for aside in asides:
            shutil.rmtree(aside, ignore_errors=True)


def _identity(folder: Path) -> tuple[int, int, int] | None:
    """The folder's (device, inode, ctime): it changes when the folder is replaced (a rename sets the ctime,
    so a new folder that reuses a removed one's inode differs too); None where it is missing."""
    try:
        status = os.stat(folder)
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_ctime_ns


__all__ = ["MANIFEST", "read_bound", "replaced_folder", "sha256", "write_manifest"]
