"""Matrices with one interface and two backends.

Both backends store a matrix as a dict of sparse rows (cheap to build, slice and stack while
compiling); ``exact`` holds ``gmpy2.mpq`` rationals, ``float`` holds Python floats (float64) and
runs batches through a cached ``scipy.sparse`` CSR copy. gmpy2 was chosen by measurement
(``benchmarks/rationals.py``): its arithmetic is about 19x faster than ``fractions.Fraction`` and 2x
faster than python-flint's ``fmpq`` on the small rationals programs are made of.

A float given by the user is read as the shortest decimal it prints as (``0.1`` is ``1/10``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from numbers import Rational as _AbstractRational
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, TypeAlias, TypeVar, cast

import gmpy2
import numpy as np
import scipy.sparse as sp

from lsrl.errors import BackendError, DimensionError, shown

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

mpq = gmpy2.mpq
MPQ_TYPE = type(mpq(0))
ZERO = mpq(0)
ONE = mpq(1)
Entry: TypeAlias = "gmpy2.mpq | float"  # a stored number: mpq in the exact backend, float in the float one
Bound: TypeAlias = "gmpy2.mpq | float"  # a bound on a value: a rational, or plus / minus infinity
# what users may give as weights: a Matrix, nested lists, a numpy array, a scipy.sparse matrix or a number
MatrixLike: TypeAlias = object
_NO_ENTRIES: dict = {}  # what a row without entries holds (shared, never written)
_T = TypeVar("_T")


def _pair(shape2d: Sequence[int]) -> tuple[int, int]:
    rows, cols = shape2d
    return rows, cols


def to_rational(value: object, where: str = "value") -> gmpy2.mpq:
    """One number as an exact rational; floats are read as the shortest decimal they print as."""
    if isinstance(value, MPQ_TYPE):
        return value
    if isinstance(value, np.timedelta64):  # a numpy integer type, but a duration, not a number
        raise DimensionError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
    if isinstance(value, (bool, int, np.integer)):
        return mpq(int(value))
    if isinstance(value, Fraction):
        return mpq(value.numerator, value.denominator)
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if not math.isfinite(number):
            raise DimensionError(f"{where}: {number} is not a finite number")
        return mpq(repr(number))
    if isinstance(value, _AbstractRational) or type(value).__name__ in ("mpz", "fmpq", "fmpz"):
        return mpq(str(value))
    raise DimensionError(f"{where}: expected a number, got {type(value).__name__} {value!r}")


def to_rational_exactly(value: Entry) -> gmpy2.mpq:
    """A stored number as the rational it is: a float is its exact binary value (``to_rational``
    reads it as the shortest decimal it prints as)."""
    return value if isinstance(value, MPQ_TYPE) else mpq(value)


def to_fraction(value: gmpy2.mpq | Fraction) -> Fraction:
    return Fraction(int(value.numerator), int(value.denominator))


_NUMERIC_KINDS = "biufc"  # numpy dtype kinds that hold numbers (complex ones are refused per entry)
FLOAT64_MAX = mpq(int(np.finfo(np.float64).max))  # the largest finite float64, exactly


def is_number(value: object) -> bool:
    """Whether ``value`` is a number ``to_rational`` may read (None, strings, dates are not)."""
    if isinstance(value, np.timedelta64):
        return False
    if isinstance(value, (_AbstractRational, MPQ_TYPE, float, int, complex, np.number, np.bool_)):
        return True
    return type(value).__name__ in ("mpz", "mpfr", "fmpq", "fmpz")


def _numeric_array(array: np.ndarray, where: str) -> np.ndarray:
    """``array`` itself, after checking that every entry is a number: ``None``, ``""``, dates, text
    and masked entries are refused, not read as 0 (``np.nonzero`` takes every falsy entry for 0)."""
    if isinstance(array, np.ma.MaskedArray):
        raise DimensionError(f"{where}: a masked array is not a matrix of numbers (its mask would be lost); "
                             "pass array.filled(value) or a plain array")
    kind = array.dtype.kind
    if kind in _NUMERIC_KINDS:
        return array
    if kind != "O":
        raise DimensionError(f"{where}: expected numbers, got an array of dtype {array.dtype}")
    for index, value in np.ndenumerate(array):
        if not is_number(value):
            position = index[-1] if len(index) == 1 else index
            raise DimensionError(f"{where}: expected a number at {position}, got {type(value).__name__} {value!r}")
    return array


def as_float(value: Entry) -> float:
    """A stored number as a float64; an exact one beyond float64's range raises ``BackendError``
    (``float`` would raise a bare ``OverflowError``)."""
    try:
        return float(value)
    except OverflowError:
        sign = "-" if value < 0 else ""
        raise BackendError(
            f"an exact weight of about {sign}10^{len(str(abs(int(value)))) - 1} is beyond float64's range "
            f"(|x| <= 1.8e308), so the weights have no float64 form; run with exact=True"
        ) from None


def _dense_entries(array: np.ndarray) -> Iterator[tuple[int, int, object]]:
    rows, cols = np.nonzero(array)
    return zip(rows.tolist(), cols.tolist(), array[rows, cols].tolist())


def _as_2d_array(value: MatrixLike, where: str) -> np.ndarray:
    """Nested lists / numpy arrays / scalars as a 2-D numpy array (object dtype keeps exact numbers)."""
    if isinstance(value, np.ndarray):
        array = value
    else:
        try:
            array = np.array(value, dtype=object)
        except ValueError as error:  # ragged nested lists
            raise DimensionError(f"{where}: not a rectangular matrix ({error})") from None
    if array.ndim == 0:
        array = array.reshape(1, 1)
    elif array.ndim == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2:
        raise DimensionError(f"{where}: expected a 2-D matrix, got {array.ndim} dimensions")
    return array


def _as_1d_array(value: MatrixLike, where: str) -> np.ndarray:
    if sp.issparse(value):
        value = cast(sp.sparray, value).toarray()
    array = value if isinstance(value, np.ndarray) else np.array(value, dtype=object)
    if array.ndim == 0:
        array = array.reshape(1)
    if array.ndim == 2 and 1 in array.shape:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise DimensionError(f"{where}: expected a vector, got shape {array.shape}")
    return array


class Matrix:
    """Immutable sparse matrix: ``rows[i][j]`` holds the non-zero entries, numbers of ``backend``.

    Vectors (biases, initial states) are one-column matrices whose ``shape`` reads ``(n,)``.
    """

    def __init__(self, rows: dict[int, dict[int, Entry]], shape2d: tuple[int, int], backend: Backend,
                 is_vector: bool = False) -> None:
        self.rows = rows
        self.shape2d = shape2d
        self.backend = backend
        self.is_vector = is_vector
        self._cache: dict[str, Any] = {}  # properties computed once (the matrix never changes)

    @property
    def shape(self) -> tuple:
        rows, cols = self.shape2d
        return (rows,) if self.is_vector else (rows, cols)

    def __repr__(self) -> str:
        return f"Matrix({self.backend.name}, shape={self.shape}, nnz={self.nnz})"

    def _like(self, rows: dict[int, dict[int, Entry]], shape2d: tuple[int, int] | None = None,
              is_vector: bool | None = None) -> Matrix:
        return Matrix(rows, shape2d or self.shape2d, self.backend, self.is_vector if is_vector is None else is_vector)

    def _cached(self, key: str, compute: Callable[[], _T]) -> _T:
        """A property of this (immutable) matrix, computed once."""
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = compute()
            return value

    @property
    def nnz(self) -> int:
        return self._cached("nnz", lambda: sum(len(row) for row in self.rows.values()))

    def entries(self) -> Iterator[tuple[int, int, Entry]]:
        for i, row in self.rows.items():
            for j, value in row.items():
                yield i, j, value

    def row(self, i: int) -> Mapping[int, Entry]:
        """The non-zero entries of row ``i`` as a read-only ``{column: value}`` (empty: a zero row)."""
        return MappingProxyType(self.rows.get(i, _NO_ENTRIES))

    def entry(self, i: int, j: int) -> Entry:
        """The entry at row ``i``, column ``j`` (the backend's zero where none is stored)."""
        return self.rows.get(i, _NO_ENTRIES).get(j, self.backend.zero)

    def magnitudes(self) -> tuple[gmpy2.mpq, gmpy2.mpq] | None:
        """``(largest, smallest)`` absolute value of the non-zero entries, exactly (None: no entries)."""

        def compute() -> tuple[gmpy2.mpq, gmpy2.mpq] | None:
            sizes = [abs(to_rational_exactly(v)) for _, _, v in self.entries()]
            return (max(sizes), min(sizes)) if sizes else None

        return self._cached("magnitudes", compute)

    def nonzero_rows(self) -> frozenset[int]:
        """The rows that hold a non-zero entry."""
        return self._cached("nonzero_rows", lambda: frozenset(i for i, row in self.rows.items() if row))

    def to_numpy(self) -> np.ndarray:
        dense = np.zeros(self.shape2d)
        for i, j, value in self.entries():
            dense[i, j] = as_float(value)
        return dense.reshape(-1) if self.is_vector else dense

    def to_fractions(self) -> list:
        if self.backend is not EXACT:
            raise BackendError("to_fractions() needs the exact backend; this matrix holds float64 weights")
        dense = [[Fraction(0)] * self.shape2d[1] for _ in range(self.shape2d[0])]
        for i, j, value in self.entries():
            dense[i][j] = to_fraction(value)
        return [row[0] for row in dense] if self.is_vector else dense

    def values(self) -> list:
        """A vector's entries as a dense list."""
        zero = self.backend.zero
        return [self.rows.get(i, {}).get(0, zero) for i in range(self.shape2d[0])]

    def __matmul__(self, other: "Matrix") -> "Matrix":
        other = self.backend.convert(other)
        zero, result = self.backend.zero, {}
        for i, row in self.rows.items():
            accumulated: dict[int, Entry] = {}
            for k, a in row.items():
                for j, b in other.rows.get(k, {}).items():
                    accumulated[j] = accumulated.get(j, zero) + a * b
            accumulated = {j: v for j, v in accumulated.items() if v}
            if accumulated:
                result[i] = accumulated
        return self._like(result, (self.shape2d[0], other.shape2d[1]), other.is_vector)

    def __add__(self, other: "Matrix") -> "Matrix":
        other = self.backend.convert(other)
        result = {i: dict(row) for i, row in self.rows.items()}
        for i, j, value in other.entries():
            row = result.setdefault(i, {})
            total = row.get(j, self.backend.zero) + value
            if total:
                row[j] = total
            else:
                row.pop(j, None)
        return self._like({i: r for i, r in result.items() if r})

    def __sub__(self, other: "Matrix") -> "Matrix":
        return self + (-other)

    def __neg__(self) -> "Matrix":
        return self.scale(-1)

    def scale(self, factor: object) -> Matrix:
        factor = self.backend.scalar(factor)
        if not factor:
            return self._like({})
        return self._like({i: {j: v * factor for j, v in row.items()} for i, row in self.rows.items()})

    def transpose(self) -> "Matrix":
        return self.backend._assemble(((j, i, v) for i, j, v in self.entries()), self.shape2d[::-1])

    def take_rows(self, indices: Iterable[int]) -> Matrix:
        indices = list(indices)
        rows = {new: self.rows[old] for new, old in enumerate(indices) if old in self.rows}
        return self._like(rows, (len(indices), self.shape2d[1]))

    def times_selection(self, columns: Sequence[int], width: int) -> Matrix:
        """``self @ S`` for the selection ``S`` whose row r picks column ``columns[r]`` of ``width``."""
        zero, rows = self.backend.zero, {}
        for i, row in self.rows.items():
            combined: dict[int, Entry] = {}
            for r, value in row.items():
                c = columns[r]
                combined[c] = combined.get(c, zero) + value
            combined = {c: v for c, v in combined.items() if v}
            if combined:
                rows[i] = combined
        return self._like(rows, (self.shape2d[0], width))

    def take_columns(self, columns: Iterable[int]) -> Matrix:
        """The given columns, in order (entries in other columns are dropped)."""
        position = {c: k for k, c in enumerate(columns)}
        rows = {}
        for i, row in self.rows.items():
            kept = {position[j]: v for j, v in row.items() if j in position}
            if kept:
                rows[i] = kept
        return self._like(rows, (self.shape2d[0], len(position)))

    def is_zero(self) -> bool:
        return not self.rows

    def is_selection(self) -> bool:
        """Every row picks exactly one input with coefficient 1 (a Slice, possibly with repeats)."""
        return self._cached("is_selection", lambda: len(self.rows) == self.shape2d[0] and all(
            len(row) == 1 and next(iter(row.values())) == 1 for row in self.rows.values()
        ))

    def selected_columns(self) -> list:
        """For a selection matrix: the column each row picks."""
        return self._cached("selected_columns", lambda: [next(iter(self.rows[i])) for i in range(self.shape2d[0])])

    def nonzero_columns(self) -> frozenset:
        """The columns that hold a non-zero entry."""
        return self._cached("nonzero_columns", lambda: frozenset(j for row in self.rows.values() for j in row))

    def row_keys(self) -> list:
        """A hashable key per row; equal keys mean equal rows."""
        return self._cached(
            "row_keys", lambda: [tuple(sorted(self.rows.get(i, {}).items())) for i in range(self.shape2d[0])]
        )

    def equals(self, other: "Matrix") -> bool:
        return (
            isinstance(other, Matrix)
            and other.backend is self.backend
            and self.shape2d == other.shape2d
            and self.rows == other.rows
        )

    def csr(self) -> sp.csr_array:
        """float64 CSR copy (cached) for fast application to batches."""

        def build() -> sp.csr_array:
            entries = list(self.entries())
            data = [as_float(e[2]) for e in entries]
            return sp.coo_array((data, ([e[0] for e in entries], [e[1] for e in entries])), shape=self.shape2d).tocsr()

        return self._cached("csr", build)

    def float_values(self) -> np.ndarray:
        """A vector's entries as a float64 array (cached)."""
        return self._cached("float_values", lambda: self.to_numpy().reshape(-1))

    def apply_float(self, batch: np.ndarray) -> np.ndarray:
        """``batch @ self.T`` for a ``(N, cols)`` float64 batch."""
        return np.asarray((self.csr() @ batch.T).T)

    def apply_exact(self, batch: list) -> list:
        """``self @ x`` for every vector ``x`` (a list of mpq) in ``batch``."""
        rows = [(i, list(row.items())) for i, row in self.rows.items()]
        height = self.shape2d[0]
        out = []
        for x in batch:
            y = [ZERO] * height
            for i, row in rows:
                total = ZERO
                for j, a in row:
                    xj = x[j]
                    if xj:
                        total += a * xj
                y[i] = total
            out.append(y)
        return out


class Backend(ABC):
    """Constructors for matrices of one number type. A backend gives its ``name``, its ``zero`` and
    ``scalar`` (one number in its type); every constructor below builds on those."""

    name: str
    zero: Entry

    @abstractmethod
    def scalar(self, value: object) -> Entry:
        """``value`` as this backend's number; ``DimensionError`` where it cannot be one."""

    def from_entries(self, entries: Iterable[tuple[int, int, object]], shape2d: Sequence[int], is_vector: bool = False,
                     where: str = "matrix") -> Matrix:
        rows: dict = {}
        for i, j, value in entries:
            try:
                value = self.scalar(value)
            except DimensionError as error:
                raise DimensionError(f"{where}: {error}") from None
            if value:
                rows.setdefault(i, {})[j] = value
        return Matrix(rows, _pair(shape2d), self, is_vector)

    def convert(self, matrix: Matrix) -> Matrix:
        if matrix.backend is self:
            return matrix
        return self.from_entries(matrix.entries(), matrix.shape2d, matrix.is_vector)

    def _assemble(self, entries: Iterable[tuple[int, int, Entry]], shape2d: Sequence[int],
                  is_vector: bool = False) -> Matrix:
        """Like ``from_entries`` for non-zero entries already of this backend's number type."""
        rows: dict = {}
        for i, j, value in entries:
            rows.setdefault(i, {})[j] = value
        return Matrix(rows, _pair(shape2d), self, is_vector)

    def matrix(self, value: MatrixLike, where: str = "matrix", shape: Sequence[int] | None = None) -> Matrix:
        """A user-given matrix (nested lists, numpy, scipy.sparse, scalar) in this backend."""
        if isinstance(value, Matrix):
            matrix = self.convert(value)
            if matrix.is_vector:
                matrix = self.from_entries(matrix.entries(), matrix.shape2d)
        elif sp.issparse(value):
            coo = sp.coo_array(value)
            matrix = self.from_entries(
                zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist()), tuple(coo.shape), where=where
            )
        else:
            array = _numeric_array(_as_2d_array(value, where), where)
            matrix = self.from_entries(_dense_entries(array), array.shape, where=where)
        if shape is not None and matrix.shape2d != tuple(shape):
            raise DimensionError(f"{where}: expected shape {tuple(shape)}, got {matrix.shape2d}")
        return matrix

    def vector(self, value: MatrixLike | None, dim: int, where: str = "vector") -> Matrix:
        """A user-given vector; ``None`` is zeros and a scalar is broadcast."""
        if value is None:
            return self.zeros_vector(dim)
        if isinstance(value, Matrix):
            matrix = self.convert(value)
            entries = matrix.entries()
            length = matrix.shape2d[0] * matrix.shape2d[1]
            if matrix.shape2d[1] != 1:
                entries = ((i * matrix.shape2d[1] + j, 0, v) for i, j, v in entries)
        else:
            array = _numeric_array(_as_1d_array(value, where), where)
            if np.ndim(cast("ArrayLike", value)) == 0 and dim != 1:  # a number is broadcast; a short list is an error
                array = np.repeat(array, dim)
            length = array.shape[0]
            entries = ((i, 0, v) for i, v in enumerate(array.tolist()) if v != 0)
        if length != dim:
            raise DimensionError(f"{where}: expected a vector of length {dim}, got length {length}")
        return self.from_entries(entries, (dim, 1), is_vector=True, where=where)

    def zeros(self, rows: int, cols: int) -> Matrix:
        return self.from_entries((), (rows, cols))

    def zeros_vector(self, dim: int) -> Matrix:
        return self.from_entries((), (dim, 1), is_vector=True)

    def constant_vector(self, dim: int, value: object) -> Matrix:
        return self.from_entries(((i, 0, value) for i in range(dim)), (dim, 1), is_vector=True)

    def eye(self, dim: int, value: object = 1) -> Matrix:
        return self.from_entries(((i, i, value) for i in range(dim)), (dim, dim))

    def selection(self, columns: Sequence[int], width: int) -> Matrix:
        """Rows ``e_{columns[0]}, e_{columns[1]}, ...`` of the identity of size ``width``."""
        one = self.scalar(1)
        return self._assemble(((i, c, one) for i, c in enumerate(columns)), (len(columns), width))

    def vstack(self, matrices: Iterable[Matrix]) -> Matrix:
        matrices = [self.convert(m) for m in matrices]
        offset, entries = 0, list[tuple[int, int, Entry]]()
        for m in matrices:
            entries.extend((i + offset, j, v) for i, j, v in m.entries())
            offset += m.shape2d[0]
        width = matrices[0].shape2d[1] if matrices else 0
        return self._assemble(entries, (offset, width), is_vector=bool(matrices) and matrices[0].is_vector)

    def hstack(self, matrices: Iterable[Matrix]) -> Matrix:
        matrices = [self.convert(m) for m in matrices]
        offset, entries = 0, list[tuple[int, int, Entry]]()
        for m in matrices:
            entries.extend((i, j + offset, v) for i, j, v in m.entries())
            offset += m.shape2d[1]
        return self._assemble(entries, (matrices[0].shape2d[0], offset))

    def block_diag(self, matrices: Iterable[Matrix]) -> Matrix:
        matrices = [self.convert(m) for m in matrices]
        row_offset = col_offset = 0
        entries: list[tuple[int, int, Entry]] = []
        for m in matrices:
            entries.extend((i + row_offset, j + col_offset, v) for i, j, v in m.entries())
            row_offset += m.shape2d[0]
            col_offset += m.shape2d[1]
        return self._assemble(entries, (row_offset, col_offset))


class ExactBackend(Backend):
    name = "exact"
    zero = ZERO

    def scalar(self, value: object) -> gmpy2.mpq:
        return to_rational(value)


class FloatBackend(Backend):
    name = "float"
    zero = 0.0

    def scalar(self, value: object) -> float:
        try:
            number = float(value) if isinstance(value, (float, int, np.number, MPQ_TYPE)) else float(to_rational(value))
        except OverflowError:
            raise DimensionError(f"{value} is beyond float64's range (|x| <= 1.8e308); use the exact backend") from None
        if not math.isfinite(number):
            raise DimensionError(f"{number} is not a finite number")
        return number


EXACT = ExactBackend()
FLOAT = FloatBackend()
BACKENDS = {"exact": EXACT, "float": FLOAT}


def get_backend(name: str | Backend) -> Backend:
    if isinstance(name, Backend):
        return name
    if not isinstance(name, str) or name not in BACKENDS:
        raise BackendError(f"unknown backend {shown(name)}; expected one of {sorted(BACKENDS)}")
    return BACKENDS[name]
