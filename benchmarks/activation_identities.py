"""Where torch's activations are exactly 0, 1, the identity or ReLU, and how accurate they are elsewhere:
the facts the stock constructions rest on, checked for EVERY float32 input and sampled in float64.

    python benchmarks/activation_identities.py [--csv DIR] [--chunk 22] [--dtypes float64,float32]
    # DIR/activation_identities.csv

Each row is one fact about torch's CPU kernels (``torch.sigmoid``, ``torch.tanh``, ``F.silu``,
``F.gelu(approximate="tanh")``, the functions ``nn.LSTM`` / ``nn.GRU`` and the ``transformers`` models call):

* an **identity on a region**: ``sigmoid(x) == 1`` for ``x >= b``, ``sigmoid(x) == 0`` for ``x <= b``,
  ``silu(x) == relu(x)`` and ``gelu_tanh(x) == relu(x)`` beyond ``b`` on either side, ``tanh(y) == y`` for
  ``|y| <= b``. ``boundary`` is the exact float where the region starts: the identity holds for every
  float beyond it (on the zero side: up to it) and fails at its neighbour on the other side.
* a **bound**: the largest ``|fl(silu(x)) - relu(x)|`` and ``|fl(gelu_tanh(x)) - relu(x)|`` over all
  inputs, and the largest relative error of ``sigmoid`` / ``tanh`` in units of the unit roundoff ``u``
  plus ``finfo.tiny`` (``|error| <= psi (u |f(x)| + tiny)``: where ``f(x)`` underflows only the absolute
  part is small), against the same function in float64 for float32 inputs (its own error, about
  ``2^-52``, is ``2^-29`` of a float32 ulp) and numpy's long double for float64 ones.

``used`` names the constant an lsrl construction relies on (``lsrl.targets.stock``, ``lsrl.hf``) and
``holds`` says whether the fact covers it: the boundary lies inside the region the construction uses,
or the bound is within the constant the proof charges.

**float32: exhaustive.** Every finite float32 (all 2^32 - 2^24 bit patterns but NaN and infinity, in
chunks of ``2^chunk``) is evaluated, by the vectorised kernel and by the scalar loop torch runs on a
tensor's tail and on strided inputs (they round differently: at ``x = -5.0613809`` float32 ``gelu_tanh``
gives -0 in a vector and -1.5e-7 alone; ``nn.LSTM`` runs both, on the widths that fill vectors and the
rest); a fact must hold on both. A region's boundary is the float just beyond the farthest failure, so
the region is proved, not sampled. The kernels are the ones ``torch.backends.cpu.get_cpu_capability()``
picks (``ATEN_CPU_CAPABILITY=default`` / ``avx2`` / ``avx512`` forces one); each row names the capability it
was measured on (``capability``), and a run replaces only the rows of its own capability and dtypes
(``--dtypes``) in ``--csv DIR``'s table, so the table keeps one set of rows per capability and dtype
measured. A capability not in the table (AVX512 on the machines that made it) or a GPU is not covered by
it: lsrl checks the facts its constructions use where a model runs (``lsrl.targets.facts``). Run time: 38
minutes (2260 s) on one core of a loaded 2-core machine (``seconds``); float64 takes 12 s.
**float64: sampled**, as 2^64 inputs cannot be enumerated: the boundary is found by bisection over the
bit patterns (the identity sets are rays because the kernels are monotone, an assumption this samples:
``2^20`` log-uniform points on each region and the ``2^12`` floats on both sides of the boundary); the
set where ``tanh(x) == x`` is no interval (float64: it fails at 1.354e-8 and holds at 1.7e-8), so that
region is the largest power of two below the nearest failure that ``5 * 2^20`` samples find, sampled again.

The tests do not read this table's boundaries (they differ between capabilities: float32 ``tanh(x) == x``
ends at ``0x1.717268p-12`` on AVX2 and lower on AVX512); they check that every fact a construction uses holds
on the capability they run on (``tests/test_facts.py``), as ``lsrl.targets.facts`` does where a model runs.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch.nn import functional as F

from results import add_csv_option, write_csv

torch.set_num_threads(1)

FLOAT32_FINITE = 0x7F800000  # bit patterns 0 .. this - 1 are the finite non-negative float32 (0x7F800000 is inf)
SAMPLES = 1 << 20
CAPABILITY = torch.backends.cpu.get_cpu_capability()  # the kernels checked (ATEN_CPU_CAPABILITY forces one)
CPU = f"torch {torch.__version__.split('+')[0]}, {CAPABILITY}"
NEIGHBOURS = 1 << 12


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The ``gelu_pytorch_tanh`` of RecurrentGemma's MLP and recurrent branch."""
    return F.gelu(x, approximate="tanh")


@dataclass(frozen=True)
class Region:
    """``function(x) == target(x)`` for every ``x`` beyond ``boundary`` on ``side``: ``"+"`` (``x >= b``),
    ``"-"`` (``x <= b``), ``"0"`` (``|x| <= b``, both signs); ``uses``: ``(constant, where)`` that lsrl relies on,
    or ``(constant, where, dtype name)`` for a constant of one dtype only."""

    name: str
    function: Callable[[torch.Tensor], torch.Tensor]
    target: Callable[[torch.Tensor], torch.Tensor]
    side: str
    uses: tuple[tuple[float, str], ...]

    def holds(self, x: torch.Tensor, fx: torch.Tensor | None = None) -> torch.Tensor:
        """Where the identity holds; ``fx``: ``function(x)`` when already computed."""
        return (self.function(x) if fx is None else fx) == self.target(x)


@dataclass(frozen=True)
class Bound:
    """``measure(x, function(x))`` at most ``used`` for every input (the largest is reported)."""

    name: str
    function: Callable[[torch.Tensor], torch.Tensor]
    measure: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    used: float
    used_by: str


def _reference(function: Callable, x: torch.Tensor) -> torch.Tensor:
    """``function(x)`` more precisely: float64 for float32 inputs; numpy's long double (64-bit significand on x86)
    for float64 ones, from the function's formula."""
    if x.dtype == torch.float32:
        return function(x.double())
    wide = x.numpy().astype(np.longdouble)
    formulas = {torch.sigmoid: lambda v: 1 / (1 + np.exp(np.minimum(-v, 11000))), torch.tanh: np.tanh}
    return torch.as_tensor(formulas[function](wide).astype(np.float64))  # the bound's error is ~2^-11 ulps


def _relative_ulps(function: Callable) -> Callable:
    """``|fl(f(x)) - f(x)| / (u |f(x)| + tiny)``: at most ``psi`` means a relative error of ``psi u`` plus an
    absolute ``psi tiny`` (the proofs' form: where ``f(x)`` underflows, only the absolute part is small)."""

    def measure(x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
        finfo = torch.finfo(x.dtype)
        reference = _reference(function, x)
        error = fx.double().sub_(reference).abs_()
        return error.div_(reference.abs_().mul_(finfo.eps / 2).add_(finfo.tiny))

    return measure


def _gap(x: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    """``|fl(f(x)) - relu(x)|`` in the input's dtype (the difference of two nearby floats: exact, or off by at
    most half an ulp of a number below 1)."""
    return (fx - torch.relu(x)).abs()


_STOCK_GATES = "stock_rnn SATURATION (constant gates; their leak e^-128 is charged anyway)"
_SATURATE = "hf.recurrentgemma SATURATE"
REGIONS = [
    Region("sigmoid(x) == 1", torch.sigmoid, torch.ones_like, "+", ((128.0, _STOCK_GATES), (1024.0, _SATURATE))),
    Region("sigmoid(x) == 0", torch.sigmoid, torch.zeros_like, "-", ((-128.0, _STOCK_GATES), (-1024.0, _SATURATE))),
    Region("silu(x) == relu(x)", F.silu, torch.relu, "+", ((710.0, "hf.mamba SILU_EXACT"),)),
    Region("silu(x) == relu(x)", F.silu, torch.relu, "-", ((-710.0, "hf.mamba SILU_EXACT"),)),
    Region("gelu_tanh(x) == relu(x)", gelu_tanh, torch.relu, "+", ((8.0, "hf.recurrentgemma GELU_EXACT"),)),
    Region("gelu_tanh(x) == relu(x)", gelu_tanh, torch.relu, "-", ((-8.0, "hf.recurrentgemma GELU_EXACT"),)),
    Region("tanh(x) == x", torch.tanh, lambda x: x, "0",
           ((2.0 ** -27, "hf.recurrentgemma soft cap"), (2.0 ** -12, "stock_rnn TANH_IDENTITY", "float32"),
            (2.0 ** -27, "stock_rnn TANH_IDENTITY", "float64"))),
]
BOUNDS = [
    Bound("max |silu(x) - relu(x)|", F.silu, _gap, 0.28, "hf.mamba SILU_GAP"),
    Bound("max |gelu_tanh(x) - relu(x)|", gelu_tanh, _gap, 0.171, "hf.recurrentgemma GELU_GAP"),
    Bound("max relative error of sigmoid (units of u)", torch.sigmoid, _relative_ulps(torch.sigmoid), 4.0,
          "stock_rnn ACTIVATION_ULPS"),
    Bound("max relative error of tanh (units of u)", torch.tanh, _relative_ulps(torch.tanh), 4.0,
          "stock_rnn ACTIVATION_ULPS"),
]
FUNCTIONS = list(dict.fromkeys([region.function for region in REGIONS] + [bound.function for bound in BOUNDS]))


# ---- float32: every value -------------------------------------------------------------------------


def float32_chunks(bits: int):
    """Every finite float32, ``2^bits`` at a time, each chunk of one sign and increasing magnitude: the
    non-negative ones by bit pattern, then the negative ones."""
    step = 1 << bits
    for sign in (0, -(1 << 31)):  # the negative floats' bit patterns, as int32, start at -2^31
        for start in range(0, FLOAT32_FINITE, step):
            stop = min(start + step, FLOAT32_FINITE)
            yield torch.arange(sign + start, sign + stop, dtype=torch.int32).view(torch.float32)


class Float32Scan:
    """The state of the exhaustive scan: per region and sign the farthest failure (for the region around 0:
    the nearest), per bound the largest value."""

    def __init__(self, ordered: bool = True) -> None:
        self.ordered = ordered  # chunks come by increasing magnitude per sign (float32_chunks)
        self.failures: dict[tuple[int, bool], float] = {}
        self.largest = {i: 0.0 for i in range(len(BOUNDS))}
        self.checked = 0

    def add(self, x: torch.Tensor) -> None:
        self.checked += x.numel()
        negative = bool(torch.signbit(x[0]))
        outputs = {function: both_paths(function, x) for function in FUNCTIONS}  # each kernel once per chunk
        for i, region in enumerate(REGIONS):
            if region.side != "0" and negative != (region.side == "-"):
                continue
            if region.side == "0" and (i, negative) in self.failures and self.ordered:  # only larger ones follow
                continue
            failed = ~region.holds(x, outputs[region.function][0]) | ~region.holds(x, outputs[region.function][1])
            if bool(failed.any()):  # the chunk's magnitudes increase with the index
                far = abs(float(x[failed.nonzero()[-1 if region.side != "0" else 0]]))
                known = self.failures.get((i, negative))
                combine = min if region.side == "0" else max
                self.failures[(i, negative)] = far if known is None else combine(known, far)
        for i, bound in enumerate(BOUNDS):
            largest = max(float(bound.measure(x, fx).max()) for fx in outputs[bound.function])
            self.largest[i] = max(self.largest[i], largest)


def both_paths(function: Callable, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``function(x)`` by torch's vectorised kernel (a contiguous input) and by its scalar loop (a strided
    one, as a tensor's tail that fills no vector is): on AVX2 they differ for sigmoid, silu and gelu."""
    spread = x.new_empty(2 * x.numel())
    spread[::2] = x
    return function(x), function(spread[::2])


def _boundary(region: Region, failures: list[float], dtype: torch.dtype) -> float:
    """The float where the region starts, given its failures' magnitudes (per sign): just beyond the farthest
    on a ray, just before the nearest around 0."""
    np_type = np.float32 if dtype == torch.float32 else np.float64
    if region.side == "0":
        return float(np.nextafter(np_type(min(failures)), np_type(0))) if failures else math.inf
    edge = float(np.nextafter(np_type(max(failures)), np_type(np.inf))) if failures else 0.0
    return -edge if region.side == "-" else edge


def _covers(side: str, used: float, boundary: float) -> bool:
    if side == "+":
        return used >= boundary
    if side == "-":
        return used <= boundary
    return abs(used) <= boundary


def float32_rows(chunk: int) -> list[dict]:
    start = time.perf_counter()
    scan = Float32Scan()
    for index, x in enumerate(float32_chunks(chunk)):
        scan.add(x)
        if index % 64 == 63:
            print(f"  float32: {scan.checked:,} values, {time.perf_counter() - start:.0f} s", flush=True)
    seconds = time.perf_counter() - start
    rows = []
    for i, region in enumerate(REGIONS):
        failures = [far for (j, _), far in scan.failures.items() if j == i]
        rows += _region_rows(region, "float32", "exhaustive", _boundary(region, failures, torch.float32),
                             scan.checked, seconds)
    for i, bound in enumerate(BOUNDS):
        rows.append(_bound_row(bound, "float32", "exhaustive", scan.largest[i], scan.checked, seconds))
    return rows


def _region_rows(region, dtype, method, boundary, checked, seconds) -> list[dict]:
    where = {"+": "x >= boundary", "-": "x <= boundary", "0": "|x| <= boundary"}[region.side]
    return [dict(capability=CAPABILITY, fact=region.name, dtype=dtype, method=method, region=where,
                 boundary=f"{boundary:.9g}", boundary_hex=float(boundary).hex(), used=f"{used:g}", used_by=used_by,
                 holds=_covers(region.side, used, boundary), checked=checked, seconds=round(seconds, 1), cpu=CPU)
            for used, used_by, *only in region.uses if only in ([], [dtype])]


def _bound_row(bound, dtype, method, largest, checked, seconds) -> dict:
    return dict(capability=CAPABILITY, fact=bound.name, dtype=dtype, method=method, region="every input",
                boundary=f"{largest:.6g}", boundary_hex=float(largest).hex(), used=f"{bound.used:g}",
                used_by=bound.used_by, holds=largest <= bound.used, checked=checked, seconds=round(seconds, 1), cpu=CPU)


# ---- float64: sampled -------------------------------------------------------------------------------


def _as_float64(bits: int) -> float:
    return float(np.array([bits], dtype=np.int64).view(np.float64)[0])


def _float64_boundary(region: Region) -> float:
    """Bisection over the magnitudes' bit patterns for the edge of the region (monotone kernels assumed)."""
    sign = -1.0 if region.side == "-" else 1.0

    def holds(bits: int) -> bool:
        return bool(region.holds(torch.tensor([sign * _as_float64(bits)], dtype=torch.float64))[0])

    small, large = 1, 0x7FEFFFFFFFFFFFFF  # the smallest subnormal .. the largest finite float64
    good, bad = (small, large) if region.side == "0" else (large, small)  # the identity holds at good
    while abs(good - bad) > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if holds(middle) else (good, middle)
    return sign * _as_float64(good)


def _nearest_failure(region: Region, x: torch.Tensor) -> float | None:
    """The smallest ``|x|`` where the identity fails on either code path; None where it holds on all of ``x``."""
    failed = torch.cat([x[~region.holds(x, fx)] for fx in both_paths(region.function, x)])
    return float(failed.abs().min()) if failed.numel() else None


def _float64_samples(region: Region, boundary: float, rng: np.random.Generator) -> torch.Tensor:
    """Log-uniform points of the region, and the floats on both sides of its boundary."""
    magnitude = abs(boundary)
    if region.side == "0":  # dense near the edge, where the holes are
        points = magnitude * np.exp2(-np.concatenate([rng.uniform(0, 60, SAMPLES), rng.uniform(0, 2, 4 * SAMPLES)]))
        points *= rng.choice([-1.0, 1.0], points.size)
    else:
        points = np.copysign(magnitude * np.exp2(rng.uniform(0, math.log2(np.finfo(np.float64).max / magnitude),
                                                             SAMPLES)), boundary)
    edge = np.array([boundary]).view(np.int64)[0]
    neighbours = (edge + np.arange(-NEIGHBOURS, NEIGHBOURS + 1)).astype(np.int64).view(np.float64)
    return torch.as_tensor(np.concatenate([points, neighbours]))


def float64_rows() -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for region in REGIONS:
        start = time.perf_counter()
        boundary = _float64_boundary(region)
        method = "sampled"
        if region.side == "0":  # the set has holes (float64 tanh(x) == x fails at 1.354e-8, holds at 1.7e-8)
            nearest = _nearest_failure(region, _float64_samples(region, boundary, rng))
            if nearest is not None:  # the largest power of two below the nearest failure the samples find
                boundary, method = 2.0 ** math.floor(math.log2(nearest)), "sampled, a power of two below"
        x = _float64_samples(region, boundary, rng)
        inside = x[{"+": x >= boundary, "-": x <= boundary, "0": x.abs() <= abs(boundary)}[region.side]]
        if _nearest_failure(region, inside) is not None:
            boundary = math.nan  # no region after all: the row fails
        rows += _region_rows(region, "float64", method, boundary, 2 * x.numel(), time.perf_counter() - start)
    for bound in BOUNDS:
        start = time.perf_counter()
        uniform = rng.uniform(-40, 40, SAMPLES)
        spread = np.copysign(np.exp2(rng.uniform(-1074, 1023, SAMPLES)), rng.normal(size=SAMPLES))
        x = torch.as_tensor(np.concatenate([uniform, spread]))
        largest = max(float(bound.measure(x, fx).max()) for fx in both_paths(bound.function, x))
        rows.append(_bound_row(bound, "float64", "sampled", largest, x.numel(), time.perf_counter() - start))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunk", type=int, default=22, help="float32 values per chunk: 2^CHUNK")
    parser.add_argument("--dtypes", default="float64,float32",
                        help="the dtypes measured (float32 enumerates every value: 38 minutes on a quiet core)")
    add_csv_option(parser)
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    rows = (float64_rows() if "float64" in dtypes else []) + (float32_rows(args.chunk) if "float32" in dtypes else [])
    print(f"{'fact':42} {'dtype':8} {'method':10} {'region':15} {'boundary':>14}  {'used':>9}  holds  used by")
    for row in rows:
        print(f"{row['fact']:42} {row['dtype']:8} {row['method']:10} {row['region']:15} {row['boundary']:>14}  "
              f"{row['used']:>9}  {str(row['holds']):5}  {row['used_by']}")
    print(f"{rows[-1]['dtype']}: {rows[-1]['checked']} values in {rows[-1]['seconds']} s")
    if args.csv is not None:
        table = sorted(_kept_rows(args.csv, dtypes) + rows, key=lambda row: (row["capability"], row["dtype"]))
        write_csv(args.csv, "activation_identities", table)


def _kept_rows(folder, dtypes: list[str]) -> list[dict]:
    """The rows of ``folder``'s table this run does not measure (other CPU capabilities, or other dtypes), kept
    beside its rows; a row without a ``capability`` column takes it from its ``cpu`` column (``torch X, CAP``)."""
    path = folder / "activation_identities.csv"
    if not path.exists():
        return []
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    for row in rows:
        row.setdefault("capability", row["cpu"].rsplit(", ", 1)[-1])
    return [{"capability": row["capability"], **{k: v for k, v in row.items() if k != "capability"}}
            for row in rows if row["capability"] != CAPABILITY or row["dtype"] not in dtypes]


if __name__ == "__main__":
    main()
