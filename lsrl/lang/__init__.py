"""The language: nodes, the ForEach program wrapper with its interpreter, and value bounds."""

from lsrl.lang.bounds import value_bounds
from lsrl.lang.nodes import Concat, Input, Linear, LinState, Multi, Node, ReLU
from lsrl.lang.program import ForEach

__all__ = ["Concat", "ForEach", "Input", "LinState", "Linear", "Multi", "Node", "ReLU", "value_bounds"]
