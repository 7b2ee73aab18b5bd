"""The compiler's intermediate representation: the working graph of ops, and what each unit holds.

``lsrl.ir.graph`` holds ``Graph`` and ``Op`` (a private, rewritable copy of a program's DAG);
``lsrl.ir.labels`` the ``UnitLabel`` of every component (node, index, role).
"""

from lsrl.ir.graph import Graph, Op, from_program
from lsrl.ir.labels import UnitLabel

__all__ = ["Graph", "Op", "UnitLabel", "from_program"]
