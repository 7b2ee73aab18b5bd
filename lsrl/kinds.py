"""``Kind``: what a node computes, one enum for the program's nodes, the compiler's ops and the compiled layers.

A ``str`` enum whose values are the node class names (``"Linear"``, ``"LinState"`` ...): the names
``model.json`` and every other file stores, so a kind serialises as the same bytes it always did and a
kind read back from a file is ``Kind(text)``. The compiler's printed graphs and automatic names use the
lower-case form (``kind.lower()``: ``linear``, ``linstate``).
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """What a node, op or compiled layer computes."""

    INPUT = "Input"
    LINEAR = "Linear"  # A x + b
    RELU = "ReLU"
    LINSTATE = "LinState"  # s_t = A s_{t-1} + B x_t + b, s_0 = init
    RELUSTATE = "ReLUState"  # h_t = ReLU(A h_{t-1} + B x_t + b): weights as a linstate's, a kind of its own
    CONCAT = "Concat"  # the inputs one after the other (in the compiler: a gather of slots (op, picks))
    MULTI = "Multi"  # x[:d] * x[d:]


# The members by name, for inner loops (the interpreter's step, the compiler's passes): on Python 3.11 every
# ``Kind.X`` lookup goes through the hook of EnumType.__getattr__, three times a plain global lookup.
INPUT, LINEAR, RELU, CONCAT, MULTI = Kind.INPUT, Kind.LINEAR, Kind.RELU, Kind.CONCAT, Kind.MULTI
LINSTATE, RELUSTATE = Kind.LINSTATE, Kind.RELUSTATE
STATE_KINDS = (LINSTATE, RELUSTATE)  # a state carried from step to step: weights A, B, b and an init
# the weights a node of each kind holds, by attribute name (a compiled layer's, and model.json's)
NODE_WEIGHTS: dict[Kind, tuple[str, ...]] = {
    LINEAR: ("A", "b"), LINSTATE: ("A", "B", "b", "init_state"), RELUSTATE: ("A", "B", "b", "init_state"),
    RELU: (), MULTI: (),
}
