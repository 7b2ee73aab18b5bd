"""Every loop of the library that is not a ``for`` over a finite collection states its bound,
and where the bound is not obvious a guard raises ``InternalError`` when it is exceeded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import lsrl
from lsrl.compiler import fusion
from lsrl.errors import InternalError

LIBRARY = Path(lsrl.__file__).parent
WHILE = re.compile(r"^\s*while\b")


def unstated_while_loops() -> list[str]:
    """``while`` loops with no comment on their line or the two lines above it (where the bound is said)."""
    unstated = []
    for path in sorted(LIBRARY.rglob("*.py")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if WHILE.match(line) and not any("#" in above for above in lines[max(number - 2, 0):number + 1]):
                unstated.append(f"{path.relative_to(LIBRARY.parent)}:{number + 1}: {line.strip()}")
    return unstated


def test_every_while_loop_states_its_bound() -> None:
    assert not unstated_while_loops(), "while loops with no stated bound (say it in a comment):\n" + \
        "\n".join(unstated_while_loops())


def test_a_fusion_rule_that_removes_nothing_is_a_bug_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """``prepare`` applies the rules at an op until none fits; a rule that fits but removes no op would
    loop forever: the bound (one op removed per rule) is checked instead."""
    x = lsrl.Input(2, name="x")
    program = lsrl.ForEach(lsrl.Linear(lsrl.Linear(x, [[1, 2], [3, 4]]), [[1, 0], [0, 2]]), name="twice")
    monkeypatch.setattr(fusion, "fuse_at", lambda graph, op: "a rule that changes nothing")
    with pytest.raises(InternalError, match="without removing it or another op"):
        lsrl.compile(program, progress=False)
