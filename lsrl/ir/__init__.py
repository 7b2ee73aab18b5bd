"""The compiler's intermediate representation: the working graph of ops, and what each unit holds.

``lsrl.ir.ops`` holds ``Op`` (its ``kind`` is an ``lsrl.kinds.Kind``); ``lsrl.ir.graph`` the ``Graph``
(a private, rewritable copy of a program's DAG); ``lsrl.ir.verify`` the invariants ``Graph.verify()`` checks;
``lsrl.ir.labels`` the ``UnitLabel`` of every component (node, index, role).
"""

from lsrl.ir.graph import Graph, from_program
from lsrl.ir.labels import UnitLabel
from lsrl.ir.ops import Op

__all__ = ["Graph", "Op", "UnitLabel", "from_program"]
