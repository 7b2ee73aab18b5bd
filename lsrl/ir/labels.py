"""Unit labels: what each unit of a compiled layer holds, as a claim about the program's values.

A label ``UnitLabel(node, index, role)`` names a program node (its stable name, see
``ForEach.names``), one of its components, and how the unit relates to that component ``v``:

========== ============================================================================
role        the unit equals, at every step
========== ============================================================================
value       ``v``: the node's own unit (or a layer that computes the node)
copy        ``v``, carried past a layer by a bypass (a dummy LinState, a slice, ``v * 1``)
pos         ``ReLU(v)``, the positive part of Eq. (11)
neg         ``ReLU(-v)``, the negative part of Eq. (11)
negated     ``-v`` (what a negative part is made of, before its ReLU)
-pos, -neg  ``-ReLU(v)``, ``-ReLU(-v)`` (a part read with weight -1, as in a target's product terms)
constant    one number at every step, whatever the input: a helper (the ``1`` that carries a
            value through a Multi); ``node, index`` name what it helps
helper      a unit of a target that helps compute ``v`` but is no function of ``v`` alone (one
            sign term of a product ``P+ Q-``, the GRU product's running units); not checked
            against the trace: the units it feeds are
mode        after ``model.diagonal()``: coordinate ``index`` of ``z = V^-1 s``, the eigen-coordinates
            of the state ``s`` of compiled LinState layer ``node``
drive       after ``model.diagonal()``: coordinate ``index`` of ``V^-1 B x_t`` (no bias), the drive
            of LinState layer ``node`` (input ``x_t``) that a Jordan cascade carries as a copy
========== ============================================================================

Labels are born with the program (every component of every node is a ``value``) and the compiler
hands them on: a rewrite that replaces an op by an equal one passes the old op's labels to the new
one (and through a Slice, to the components it picks), and every bypass a case builds says what it
carries. ``label_violations`` (``model.label_violations``) tests the claims against ``ForEach.trace``.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import numpy as np

from lsrl.errors import DimensionError, LsrlError
from lsrl.kinds import LINEAR, RELU

if TYPE_CHECKING:
    from lsrl.ir.ops import Op

ROLES = ("value", "copy", "pos", "neg", "negated", "-pos", "-neg", "constant", "helper", "mode", "drive")


class UnitLabel(NamedTuple):
    """What one unit holds: component ``index`` of program node ``node``, as ``role`` says."""

    node: str
    index: int  # type: ignore[assignment]  # a field named as tuple's method; public since labels exist
    role: str

    def __str__(self) -> str:
        return f"{self.node}[{self.index}]" + ("" if self.role == "value" else f":{self.role}")


Label = Optional[UnitLabel]  # a component's label, None where the compiler knows nothing simple


def copy_of(label: Label) -> Label:
    """The label of a unit carrying ``label``'s unit unchanged."""
    return label if label is None or label.role != "value" else label._replace(role="copy")


_UNCHECKED = ("helper", "mode", "drive")  # no function of the node's own trace: what they feed is checked


def positive_part(label: Label) -> Label:
    """The label of ``ReLU`` of a unit labelled ``label`` (None where that is not a label's claim)."""
    if label is not None and label.role in _UNCHECKED:
        return helper_for(label)
    if label is None or label.role in ("pos", "neg", "constant"):
        return label  # ReLU of a ReLU; ReLU of a constant is a constant
    if label.role in ("-pos", "-neg"):
        return label._replace(role="constant")  # ReLU(-ReLU(.)) = 0
    return label._replace(role="neg" if label.role == "negated" else "pos")


def negation_of(label: Label) -> Label:
    """The label of ``-1`` times a unit labelled ``label``."""
    if label is not None and label.role in _UNCHECKED:
        return helper_for(label)
    if label is None or label.role == "constant":
        return label
    if label.role in ("value", "copy"):
        return label._replace(role="negated")
    if label.role == "negated":
        return label._replace(role="copy")
    return label._replace(role={"pos": "-pos", "neg": "-neg", "-pos": "pos", "-neg": "neg"}[label.role])


def negative_part(label: Label) -> Label:
    """The label of ``ReLU(-u)`` for a unit ``u`` labelled ``label`` (the ``s-`` half of Eq. (11))."""
    if label is None or label.role in ("pos", "neg", "constant"):
        return None if label is None else label._replace(role="constant")  # ReLU(-ReLU(v)) = 0
    return positive_part(negation_of(label))


def helper_for(label: Label) -> Label:
    """The label of a helper unit serving ``label``'s component (see the table above)."""
    return None if label is None else label._replace(role="helper")


def constant_for(label: Label, index: int = 0) -> UnitLabel:
    """The label of a constant helper unit serving ``label``'s node."""
    return UnitLabel(label.node if label else "", label.index if label else index, "constant")


def better(current: Label, incoming: Label) -> Label:
    """The label to keep when a unit already has ``current`` and is shown to hold ``incoming`` too:
    a node's own ``value`` is the most telling."""
    if incoming is None:
        return current
    if current is None or (incoming.role == "value" and current.role != "value"):
        return incoming
    return current


PATCHABLE_ROLES = ("value", "copy", "pos", "neg", "negated", "-pos", "-neg")  # the roles that are functions of v


def _held(role: str, v: Any) -> Any:
    """What a unit of ``role`` holds when its component's value is ``v`` (a number or an array)."""
    if role in ("value", "copy", "mode", "drive"):  # mode, drive: v is from lsrl.compiler.diagonal.eigen_trace
        return v
    if role == "negated":
        return -v
    if role.startswith("-"):
        return -_held(role[1:], v)
    if role == "pos":
        return np.where(v > 0, v, 0 * v) if isinstance(v, np.ndarray) else max(v, 0 * v)
    return np.where(v < 0, -v, 0 * v) if isinstance(v, np.ndarray) else max(-v, 0 * v)


def unit_values(label: UnitLabel, values: Any) -> Any:
    """What a unit with ``label`` holds, given its node's ``values``: a ``(B, T, dim)`` float array
    (gives ``(B, T)``) or, exactly, a list (batch) of lists (time) of lists of numbers."""
    if isinstance(values, np.ndarray):
        return _held(label.role, values[..., label.index])
    return [[_held(label.role, vector[label.index]) for vector in sequence] for sequence in values]


def units_holding(labelled_units: Iterable[tuple[int, Label]], patched: dict, where: str) -> list[tuple[int, Any]]:
    """``[(unit, what it holds)]`` for the ``(unit, label)`` pairs whose label names a node of
    ``patched`` (name -> ``(width, values)``, values as ``unit_values`` takes them) in a patchable role."""
    found = []
    for unit, label in labelled_units:
        if label is not None and label.node in patched and label.role in PATCHABLE_ROLES:
            width, values = patched[label.node]
            if label.index >= width:
                raise DimensionError(f"patch values for {label.node!r} have {width} components, but unit {unit} "
                                     f"of {where} holds component {label.index}")
            found.append((unit, unit_values(label, values)))
    return found


# ---- checking the claims ---------------------------------------------------------------------


def label_violations(labels: Sequence[Sequence[UnitLabel]], layer_values: Sequence[np.ndarray], trace: Mapping,
                     tolerance: float = 0.0) -> list[tuple[int, int, UnitLabel, str]]:
    """Units whose values (``layer_values``: per layer, ``(..., T, width)``) break their label;
    each as ``(layer, unit, label, reason)``. ``tolerance``: for float values (0 means equal), a finite
    number >= 0 (anything else is refused: a negative or NaN one would report every unit)."""
    _check_tolerance(tolerance)
    broken = []
    for layer, (layer_labels, values) in enumerate(zip(labels, layer_values)):
        for unit, label in enumerate(layer_labels):
            held = values[..., unit]
            if label.role == "constant":
                first = held.reshape(-1)[0] if held.size else 0
                if not _close(held, np.full_like(held, first), tolerance):
                    broken.append((layer, unit, label, "not constant"))
                continue
            if label.role == "helper":  # no claim about the unit's own values
                continue
            if _trace_key(label) not in trace:
                broken.append((layer, unit, label, "no such node in the program" if _trace_key(label) == label.node
                               else "no eigen-coordinates in the trace (see eigen_trace)"))
            elif not _close(held, _held(label.role, trace[_trace_key(label)][..., label.index]), tolerance):
                broken.append((layer, unit, label, "values differ"))
    return broken


def _check_tolerance(tolerance: object) -> None:
    real = isinstance(tolerance, numbers.Real) and not isinstance(tolerance, bool)
    if not real or not 0 <= tolerance < float("inf"):  # type: ignore[operator]  # NaN fails both
        raise LsrlError(f"label_violations: tolerance must be a finite number >= 0 (relative, 0: equal), got "
                        f"{type(tolerance).__name__} {tolerance!r}"[:200])


def _trace_key(label: UnitLabel) -> str | tuple[str, str]:
    return (label.node, label.role) if label.role in ("mode", "drive") else label.node


def _close(a: Any, b: Any, tolerance: float) -> bool:
    if tolerance == 0:
        return bool(np.all(a == b))
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return bool(np.all(np.abs(a - b) <= tolerance * np.maximum(1.0, np.abs(b))))


# ---- the finished path -----------------------------------------------------------------------


def _derived(layer: Op, i: int, below: Sequence[Label]) -> Label:
    """The label of unit ``i`` of a path ``layer`` read off its weights, given the labels ``below``
    of the layer it reads (None where the weights say nothing simple)."""
    if layer.kind == RELU:
        return positive_part(below[i])
    if layer.kind != LINEAR:
        return None
    row, bias = layer.A.row(i), layer.b.row(i)
    if not row:
        return UnitLabel(layer.name, i, "constant")
    if bias or len(row) != 1:
        return None
    (j, weight), = row.items()
    if weight == 1:
        return copy_of(below[j])
    if weight == -1:
        return negation_of(below[j])
    return None


def path_labels(path: Sequence[Op]) -> list[list[Label]]:
    """Per layer of a finished ``path`` (its ops after the Input), the label of every unit: the
    ones the compiler handed on, the rest read off the weights."""
    below, labels = path[0].labels, []
    for layer in path[1:]:
        layer_labels = [label or _derived(layer, i, below) for i, label in enumerate(layer.labels)]
        labels.append(layer_labels)
        below = layer_labels
    return labels


def label_table(layers: Sequence[Any], labels: Sequence[Sequence[Label]], shown: int = 12) -> str:
    """Each layer's units and their labels, ``shown`` per layer at most."""
    lines = ["units (node[index]:role):"]
    for index, (layer, layer_labels) in enumerate(zip(layers, labels)):
        names = ", ".join(str(label) for label in layer_labels[:shown])
        more = f", ... ({len(layer_labels) - shown} more)" if len(layer_labels) > shown else ""
        lines.append(f"  {index:3d} {layer.kind}({layer.dim}) {layer.name}: {names}{more}")
    return "\n".join(lines)
