"""The language: nodes, the ForEach program wrapper with its interpreter, and value bounds."""

from lsrl.lang.bounds import value_bounds
from lsrl.lang.nodes import Concat, Input, Linear, LinState, Multi, Node, ReLU, ReLUState
from lsrl.lang.program import ForEach

__all__ = ["Concat", "ForEach", "Input", "LinState", "Linear", "Multi", "Node", "ReLU", "ReLUState", "value_bounds"]
