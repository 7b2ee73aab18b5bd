"""How many worker processes a study may start (``lsrl experiment noise``, ``lsrl llrnn experiment`` and
``reproduce``), and the check of a requested number.

Each worker is a process that runs one CPU thread and holds its own Python, numpy and (for LLRNN)
torch, a few hundred MB. Workers beyond the CPUs this process may use only share them and add that
memory, so the limit is four per usable CPU (room to overlap start-up and writing), and at most 64 on
any machine (64 processes of torch are already ~20 GB).
"""

from __future__ import annotations

import os
from typing import Any

from lsrl.errors import LsrlError, whole_number


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the platform says, else ``os.cpu_count()``)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


MAX_WORKERS = min(64, 4 * usable_cpus())


class StudyError(LsrlError):
    """A setting of a study outside its allowed values: workers outside 1 .. ``MAX_WORKERS``, noise levels,
    names, the size of a grid."""


def check_workers(owner: str, workers: Any) -> int:
    """``workers`` as an int in 1 .. ``MAX_WORKERS``, else a ``StudyError`` naming ``owner``."""
    number = whole_number(workers)
    if number is None or not 1 <= number <= MAX_WORKERS:
        raise StudyError(f"{owner}: workers must be an integer in 1 .. {MAX_WORKERS} (4 per usable CPU, "
                           f"at most 64), got {workers!r}")
    return number
