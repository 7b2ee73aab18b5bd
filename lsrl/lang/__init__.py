"""The language: nodes, the ForEach program wrapper with its interpreter, and value bounds (the interval
analysis ``value_bounds`` and its unrolled relational sharpening ``relational_bounds``)."""

from lsrl.lang.bounds import value_bounds
from lsrl.lang.nodes import Concat, Input, Linear, LinState, Multi, Node, ReLU, ReLUState
from lsrl.lang.program import ForEach
from lsrl.lang.relational_bounds import relational_bounds

__all__ = ["Concat", "ForEach", "Input", "LinState", "Linear", "Multi", "Node", "ReLU", "ReLUState",
           "relational_bounds", "value_bounds"]
