"""Numbers in motion: reading input sequences and applying node operations in float64 or exactly.

A batch of vectors is a ``(N, d)`` float64 array in float mode and a list of ``N`` lists of
``gmpy2.mpq`` in exact mode. The DAG interpreter and the compiled-program runner share these.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np

from lsrl.errors import BackendError, DimensionError, LsrlError, SequenceError
from lsrl.kinds import CONCAT, MULTI, RELU, RELUSTATE
from lsrl.lang.nodes import Input, Linear, Node, StateNode
from lsrl.numbers import ZERO, Matrix, is_number, to_rational

if TYPE_CHECKING:
    import gmpy2
    from numpy.typing import ArrayLike, DTypeLike


Vectors: TypeAlias = "list[list[gmpy2.mpq]]"  # exact mode's batch of N vectors
Sequences: TypeAlias = "list[list[list[gmpy2.mpq]]]"  # exact mode's batch of N sequences of vectors


def _shape_error(input_node: Input, shape: object, reason: str) -> SequenceError:
    return SequenceError(
        f"{input_node.describe()}: expected a sequence of shape (T, {input_node.dim}) or "
        f"(B, T, {input_node.dim}), got shape {shape}{reason}"
    )


def _checked_shape(array: np.ndarray, input_node: Input) -> bool:
    if array.ndim not in (2, 3) or array.shape[-1] != input_node.dim:
        raise _shape_error(input_node, array.shape, "")
    return array.ndim == 2


def _outside_bounds(input_node: Input, where: tuple[int, int], value: object, component: int) -> SequenceError:
    low, high = input_node.bounds[0][component], input_node.bounds[1][component]
    sequence, step = where
    return SequenceError(
        f"{input_node.describe()}: component {component} is {value} at step {step} of sequence {sequence}, "
        f"outside the declared bounds [{low}, {high}]; the program may rely on them (optimised "
        "f_ifelse variants); pass check_bounds=False to run anyway"
    )


def not_integer(input_node: Input, where: tuple[int, int], value: object, component: int) -> SequenceError:
    """The error for a ``value`` that is not an integer although ``input_node`` declares integer tokens."""
    sequence, step = where
    return SequenceError(
        f"{input_node.describe()}: component {component} is {value} at step {step} of sequence {sequence}, "
        "but the Input declares integer tokens; pass check_bounds=False to run anyway"
    )


def float_bounds(bounds: Sequence[gmpy2.mpq | float], below: bool) -> tuple[list[float], list[bool]]:
    """Rational ``bounds`` (lower ones if ``below``) as floats, and per bound whether its float lies
    outside it; no other float lies between a bound and its rounding, so comparing with the float and
    excluding it where it is outside is an exact test."""
    rounded = [float(v) for v in bounds]
    return rounded, [f < v if below else f > v for f, v in zip(rounded, bounds)]


def _float_bound_violation(values: np.ndarray, bounds: Sequence[gmpy2.mpq | float], below: bool) -> np.ndarray:
    """Where float ``values`` lie beyond the rational ``bounds`` (``below``: under the lower ones), exactly."""
    rounded, rounded_outside = (np.array(v) for v in float_bounds(bounds, below))
    beyond = values < rounded if below else values > rounded
    return beyond | ((values == rounded) & rounded_outside)


_FLOAT64_MAX = np.finfo(np.float64).max


def _not_numbers(input_node: Input, what: str) -> SequenceError:
    return SequenceError(f"{input_node.describe()}: the input sequence holds {what}; expected real numbers "
                         "(a list or an array of ints or floats)")


_NUMPY_FLOATS = ("torch.float16", "torch.float32", "torch.float64")  # torch float dtypes numpy holds


def tensor_values(values: Any, where: str) -> Any:
    """A torch tensor's values as a numpy array, anything else unchanged: read without its autograd graph
    (the interpreter's outputs are numpy arrays, which carry no gradients), a float dtype numpy lacks
    (bfloat16, float8) widened to float32, exactly; ``SequenceError`` (starting with ``where``) for a tensor
    on the meta device, which holds no values."""
    if not (hasattr(values, "detach") and hasattr(values, "numpy")):  # no torch tensor (this package imports no torch)
        return values
    if values.is_meta:
        raise SequenceError(f"{where}: the tensor is on the meta device, which holds no values")
    values = values.detach().cpu()
    if values.is_floating_point() and str(values.dtype) not in _NUMPY_FLOATS:
        values = values.float()
    return values.numpy()


def refuse_non_numbers(xs: ArrayLike, input_node: Input) -> ArrayLike:
    """Refuse, with one ``SequenceError``, what numpy would read as numbers but is not: masked arrays
    (the mask would be lost), dates and durations, text and bytes (``"1.5"`` would be parsed),
    ``None`` and other objects. Lists are checked through the array numpy makes of them, which is
    returned (``xs`` itself where numpy cannot make one: a ragged list, left to the shape check). A torch
    tensor is read by ``tensor_values``."""
    xs = tensor_values(xs, input_node.describe())
    if isinstance(xs, np.ma.MaskedArray):
        raise _not_numbers(input_node, "a masked array (its mask would be lost: pass xs.filled(value))")
    if isinstance(xs, np.ndarray):
        array = xs
    else:
        try:
            array = np.asarray(xs)
        except (TypeError, ValueError):  # ragged: the caller's own reading names the shape
            return xs
    kind = array.dtype.kind
    if kind in "biufc":
        return array
    if kind != "O":
        names = {"M": "dates", "m": "durations", "U": "text", "S": "bytes", "V": "records"}
        raise _not_numbers(input_node, f"{names.get(kind, 'non-numbers')} (dtype {array.dtype})")
    for value in array.reshape(-1).tolist():
        if not is_number(value):
            raise _not_numbers(input_node, f"{type(value).__name__} {value!r}"[:120])
    return array


def _float64_or_refuse(xs: ArrayLike, input_node: Input) -> np.ndarray:
    """``xs`` as float64; a Python int beyond float64's range is refused (numpy raises ``OverflowError``)."""
    try:
        return np.asarray(xs, dtype=np.float64)
    except OverflowError:
        raise SequenceError(f"{input_node.describe()}: the input sequence holds an integer beyond float64's range "
                            f"(|x| <= {_FLOAT64_MAX:.3g}); run it exactly with exact=True") from None


class FloatMode:
    name = "float"

    def read(self, xs: ArrayLike, input_node: Input, check_bounds: bool = True) -> tuple[np.ndarray, bool, int]:
        """``(B, T, d)`` float64 array, whether the batch axis was added, and the number of steps."""
        xs = refuse_non_numbers(xs, input_node)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", np.exceptions.ComplexWarning)
                array = _float64_or_refuse(xs, input_node)
        except np.exceptions.ComplexWarning:
            raise SequenceError(f"{input_node.describe()}: the input sequence holds complex numbers") from None
        except (TypeError, ValueError) as error:
            raise _shape_error(input_node, np.shape(xs) if not isinstance(xs, list) else "ragged",
                               f" ({error})") from error
        squeeze = _checked_shape(array, input_node)
        if not np.all(np.isfinite(array)):
            raise SequenceError(f"{input_node.describe()}: the input sequence holds NaN or infinite values")
        batch = array[None] if squeeze else array
        if check_bounds:
            for side, bounds in enumerate(input_node.bounds):
                outside = _float_bound_violation(batch, bounds, below=side == 0)
                if np.any(outside):
                    sequence, step, component = (int(i) for i in np.argwhere(outside)[0])
                    raise _outside_bounds(input_node, (sequence, step), batch[sequence, step, component], component)
            fractional = batch != np.round(batch)
            if input_node.integer and np.any(fractional):
                sequence, step, component = (int(i) for i in np.argwhere(fractional)[0])
                raise not_integer(input_node, (sequence, step), batch[sequence, step, component], component)
        return batch, squeeze, batch.shape[1]

    def at(self, batch: np.ndarray, t: int) -> np.ndarray:
        return batch[:, t, :]

    def linear(self, A: Matrix, b: Matrix, x: np.ndarray) -> np.ndarray:
        return A.apply_float(x) + b.float_values()

    def relu(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0.0)

    def multi(self, x: np.ndarray) -> np.ndarray:
        half = x.shape[1] // 2
        return x[:, :half] * x[:, half:]

    def concat(self, xs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(xs, axis=1)

    def initial_state(self, node: StateNode, count: int) -> np.ndarray:
        return np.tile(node.init_state.float_values(), (count, 1))

    def linstate(self, node: StateNode, state: np.ndarray, x: np.ndarray) -> np.ndarray:
        return node.A.apply_float(state) + node.B.apply_float(x) + node.b.float_values()

    def stack(self, outputs: list[np.ndarray]) -> np.ndarray:
        """Per-step ``(B, d)`` outputs as a ``(B, T, d)`` array."""
        return np.stack(outputs, axis=1)

    def empty(self, count: int, steps: int, dim: int) -> np.ndarray:
        return np.zeros((count, steps, dim))


class ExactMode:
    name = "exact"

    def read(self, xs: ArrayLike, input_node: Input, check_bounds: bool = True) -> tuple[Sequences, bool, int]:
        """Lists (batch) of lists (time) of lists of mpq, whether the batch axis was added, the steps."""
        xs = refuse_non_numbers(xs, input_node)
        try:
            array = np.array(xs, dtype=object)
        except ValueError as error:
            raise _shape_error(input_node, "ragged", f" ({error})") from None
        squeeze = _checked_shape(array, input_node)
        flat = array.reshape(-1)
        try:
            converted = [to_rational(v, input_node.describe()) for v in flat.tolist()]
        except DimensionError as error:
            raise SequenceError(f"{error} (in the input sequence)") from None
        batch: np.ndarray = np.empty(len(converted), dtype=object)
        batch[:] = converted
        batch = batch.reshape((1,) + array.shape if squeeze else array.shape)
        if check_bounds:
            low, high = input_node.bounds
            for (sequence, step, component), value in np.ndenumerate(batch):
                if not low[component] <= value <= high[component]:
                    raise _outside_bounds(input_node, (sequence, step), value, component)
                if input_node.integer and value.denominator != 1:
                    raise not_integer(input_node, (sequence, step), value, component)
        return [[list(step) for step in sequence] for sequence in batch.tolist()], squeeze, batch.shape[1]

    def at(self, batch: Sequences, t: int) -> Vectors:
        return [sequence[t] for sequence in batch]

    def linear(self, A: Matrix, b: Matrix, x: Vectors) -> Vectors:
        bias = b.values()
        return [[y + c for y, c in zip(row, bias)] for row in A.apply_exact(x)]

    def relu(self, x: Vectors) -> Vectors:
        return [[v if v > 0 else ZERO for v in row] for row in x]

    def multi(self, x: Vectors) -> Vectors:
        half = len(x[0]) // 2 if x else 0
        return [[row[i] * row[half + i] for i in range(half)] for row in x]

    def concat(self, xs: list[Vectors]) -> Vectors:
        return [[v for part in parts for v in part] for parts in zip(*xs)]

    def initial_state(self, node: StateNode, count: int) -> Vectors:
        return [node.init_state.values() for _ in range(count)]

    def linstate(self, node: StateNode, state: Vectors, x: Vectors) -> Vectors:
        from_state = node.A.apply_exact(state)
        from_input = node.B.apply_exact(x)
        bias = node.b.values()
        return [[p + q + c for p, q, c in zip(a, b, bias)] for a, b in zip(from_state, from_input)]

    def stack(self, outputs: list[Vectors]) -> np.ndarray:
        count = len(outputs[0])
        dim = len(outputs[0][0]) if count else 0
        result = np.empty((count, len(outputs), dim), dtype=object)
        for t, step in enumerate(outputs):
            for i, row in enumerate(step):
                result[i, t, :] = row
        return result

    def empty(self, count: int, steps: int, dim: int) -> np.ndarray:
        return np.empty((count, steps, dim), dtype=object)


class Mode(Protocol):
    """What the interpreter's loop asks of a number mode (``FloatMode``, ``ExactMode``); a batch is in the
    mode's own form: ``(B, d)`` float64 arrays, or lists of lists of mpq."""

    name: str

    def read(self, xs: ArrayLike, input_node: Input, check_bounds: bool = True) -> tuple[Any, bool, int]: ...
    def at(self, batch: Any, t: int) -> Any: ...
    def linear(self, A: Matrix, b: Matrix, x: Any) -> Any: ...
    def relu(self, x: Any) -> Any: ...
    def multi(self, x: Any) -> Any: ...
    def concat(self, xs: list[Any]) -> Any: ...
    def initial_state(self, node: StateNode, count: int) -> Any: ...
    def linstate(self, node: StateNode, state: Any, x: Any) -> Any: ...
    def stack(self, outputs: list[Any]) -> np.ndarray: ...
    def empty(self, count: int, steps: int, dim: int) -> np.ndarray: ...


FLOAT_MODE = FloatMode()
EXACT_MODE = ExactMode()


def patch_items(patch: object, where: str) -> list[tuple[Any, Any]]:
    """The ``(key, values)`` pairs of a ``patch=`` argument, each key a program node or a node's name.

    The one check of a patch's form that the interpreter, the compiled model and the torch targets
    share: anything but a mapping, or a key of another type, raises ``LsrlError`` starting with ``where``.
    """
    from lsrl.lang.nodes import Node

    if patch is None:
        return []
    if not isinstance(patch, Mapping):
        raise LsrlError(f"{where}: patch must be a dict {{node or node name: values}}, got {type(patch).__name__}")
    for key in patch:
        if not isinstance(key, (str, Node)):
            raise LsrlError(f"{where}: a patch key must be a program node or a node's name, got "
                            f"{type(key).__name__} {key!r}")
    return list(patch.items())


def patch_key_name(key: Any) -> str:
    """A patch key's node name (``patch_items`` checked it is a name or a node)."""
    return key if isinstance(key, str) else key.name


def finite_numbers(values: Any, where: str) -> np.ndarray:
    """``values`` as an array, refused (``SequenceError`` starting with ``where``) unless every entry is a
    finite real number: no text, ``None``, objects, masked entries, complex numbers, NaN or infinity."""
    if isinstance(values, np.ma.MaskedArray):
        raise SequenceError(f"{where}: a masked array is not numbers (its mask would be lost); pass values.filled(v)")
    values = tensor_values(values, where)
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as error:  # ragged
        raise DimensionError(f"{where} must be an array of shape (steps, dim) or (batch, steps, dim), got a "
                             f"ragged {type(values).__name__} ({error})") from None
    kind = array.dtype.kind
    if kind in "biu":
        return array
    if kind == "f":
        if not np.all(np.isfinite(array)):
            raise SequenceError(f"{where}: the values hold NaN or infinity; expected finite numbers")
        return array
    if kind != "O":
        raise SequenceError(f"{where} must be real numbers, got an array of dtype {array.dtype}")
    for value in array.reshape(-1).tolist():
        if not is_number(value) or isinstance(value, (complex, np.complexfloating)):
            raise SequenceError(f"{where} must be real numbers, got {type(value).__name__} {value!r}"[:200])
        try:
            to_rational(value, where)
        except DimensionError:
            raise SequenceError(f"{where}: the values hold {value!r}; expected finite numbers") from None
    return array


def patch_array(values: ArrayLike, count: int, steps: int, where: str, dim: int | None,
                dtype: DTypeLike = object) -> np.ndarray:
    """One node's patch ``values`` as a ``(count, steps, dim)`` array: ``(steps, dim)`` values apply to
    every sequence of the batch; ``dim=None`` (the node's width unknown) takes the values' own width.

    The one check of patch values that the interpreter, the compiled model and the torch targets
    share: another shape (a width other than the node's ``dim``, another length) raises
    ``DimensionError``, values that are not finite real numbers (text, ``None``, NaN, infinity,
    complex, masked) ``SequenceError``; both start with ``where``, which names the node.
    """
    array = finite_numbers(values, where)
    shape = array.shape
    width = shape[-1] if dim is None and len(shape) in (2, 3) else dim
    if width is None or shape not in ((steps, width), (count, steps, width)):
        shown = "dim" if width is None else width
        raise DimensionError(f"{where} must have shape ({steps}, {shown}) or ({count}, {steps}, {shown}) "
                             f"(steps, the node's width) for this run, got {shape}")
    try:
        array = np.asarray(array, dtype=dtype)
    except OverflowError:
        raise SequenceError(f"{where}: the values hold an integer beyond float64's range") from None
    return np.broadcast_to(array, (count, steps, width))


def refuse_float_overflow(values: np.ndarray, what: str) -> np.ndarray:
    """``values`` (a float run's ``(..., T, d)`` outputs) unless one is infinite or NaN: the inputs were finite,
    so float64 overflowed where the exact value is finite. ``BackendError`` naming ``what`` and the step."""
    finite = np.isfinite(values)
    if not finite.all():
        step = int(np.argwhere(~finite)[0][-2]) if values.ndim >= 2 else 0
        raise BackendError(f"{what} leaves float64's range (about 1.8e308) at step {step} of a float run; "
                           "run it exactly with exact=True")
    return values


def mode_for(exact: bool, where: str) -> Mode:
    """The exact or the float mode; ``exact`` anything but a bool raises ``LsrlError`` starting with ``where``."""
    if not isinstance(exact, (bool, np.bool_)):
        raise LsrlError(f"{where}: exact must be True or False, got {type(exact).__name__} {exact!r:.40}")
    return EXACT_MODE if exact else FLOAT_MODE


def step_node(mode: Mode, node: Node, inputs: list[Any], states: dict[StateNode, Any]) -> Any:
    """Value of ``node`` at one time step given its inputs' values (updates ``states``)."""
    kind = node.kind
    if kind is RELU:
        return mode.relu(inputs[0])
    if kind is MULTI:
        return mode.multi(inputs[0])
    if kind is CONCAT:
        return mode.concat(inputs)
    if isinstance(node, Linear):
        return mode.linear(node.A, node.b, inputs[0])
    if isinstance(node, StateNode):
        updated = mode.linstate(node, states[node], inputs[0])
        states[node] = mode.relu(updated) if kind is RELUSTATE else updated  # a ReLUState: the affine step, then ReLU
        return states[node]
    raise TypeError(f"cannot evaluate {node!r}")
