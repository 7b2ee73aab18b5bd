"""``to_torch``: a DFA or Mealy machine as the network of a chosen architecture; ``network_size``: how large that
network is, known from the machine's size before anything is built."""

from __future__ import annotations

from typing import NamedTuple

import torch

from lsrl.automata import exact, gated
from lsrl.automata.arguments import positive_real, whole_number
from lsrl.automata.machines import DFA, Mealy
from lsrl.automata.networks import AutomatonNetwork
from lsrl.automata.units import transition_units
from lsrl.errors import LsrlError, checked_call

ARCHITECTURES = ("rnn", "second_order", "lstm", "gru")
DEFAULT_MAX_PARAMETERS = 5 * 10 ** 7  # to_torch refuses larger networks unless max_parameters says otherwise
_EXACT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # 0/1 values, sums of at most 2 of them
_GATED_DTYPES = (torch.float32, torch.float64)  # the gain bound's rounding terms are float32's (finer for float64)


class NetworkSize(NamedTuple):
    """The size of an automaton network: ``units`` (hidden units), ``parameters`` (numbers in its parameters and
    buffers) and ``bytes`` (those numbers in the network's dtype)."""

    units: int
    parameters: int
    bytes: int


@checked_call
def network_size(machine: DFA | Mealy, architecture: str, dtype: torch.dtype = torch.float32) -> NetworkSize:
    """The size of ``to_torch(machine, architecture, dtype=dtype)``, from the machine's size alone (nothing built).

    With n states, k symbols and C output channels (1 for a DFA, |outputs| for a Mealy machine), the first-order
    networks have one unit per transition, m = n k (+ 1 start unit when no transition enters the start state),
    and a stock layer of ``g`` gate blocks (rnn 1, gru 3, lstm 4): ``g m (k + m + 2)`` weights, then the readout
    ``C (m + 1)`` and the initial state (m, and m more for the LSTM's cell). The second-order network has one unit
    per state of the Moore form (n' = n for a DFA): ``W_c`` (n'² k), ``H``, ``U``, ``B`` (n'² + n' k + n'), the
    readout and two initial states.
    """
    _check_machine(machine, "network_size")
    _check_architecture(architecture, "network_size")
    itemsize = torch.empty(0, dtype=_check_dtype(dtype, architecture, "network_size")).element_size()
    k = len(machine.alphabet)
    channels = 1 if isinstance(machine, DFA) else len(machine.outputs)
    if architecture == "second_order":
        n = machine.moore()[0].shape[0]
        count = n * n * k + n * n + n * k + n + channels * (n + 1) + 2 * n
        return NetworkSize(n, count, count * itemsize)
    m = machine.table.size + (0 if bool((machine.table == machine.start).any()) else 1)
    gates = {"rnn": 1, "gru": 3, "lstm": 4}[architecture]
    count = gates * m * (k + m + 2) + channels * (m + 1) + (2 * m if architecture == "lstm" else m)
    return NetworkSize(m, count, count * itemsize)


@checked_call
def to_torch(machine: DFA | Mealy, architecture: str, *, gain: float | None = None,
             dtype: torch.dtype = torch.float32,
             max_parameters: int | None = DEFAULT_MAX_PARAMETERS) -> AutomatonNetwork:
    """The network of ``architecture`` that runs ``machine`` (a ``DFA`` or ``Mealy``) exactly for every length.

    ``gain`` (LSTM and GRU only) defaults to the smallest gain the stability bound certifies
    (``lsrl.automata.gated.gain_bound``); a gain below it is allowed with a warning (the network may err on
    long strings). The networks run in ``dtype``: float32 (default) or float64, and float16 / bfloat16 for the
    exact 'rnn' and 'second_order'. The size (``network_size``) is checked before anything is built: above
    ``max_parameters`` (default ``DEFAULT_MAX_PARAMETERS`` = 5·10^7 numbers, 200 MB in float32) the network is
    refused; ``max_parameters=None`` lifts the limit.
    """
    _check_machine(machine, "to_torch")
    _check_architecture(architecture, "to_torch")
    dtype = _check_dtype(dtype, architecture, "to_torch")
    if gain is not None and architecture not in ("lstm", "gru"):
        raise LsrlError(f"to_torch: a gain applies to the saturated 'lstm' and 'gru' only, not {architecture!r}")
    if gain is not None:
        gain = positive_real(gain, "gain", "to_torch")
    size = network_size(machine, architecture, dtype)
    if max_parameters is not None:
        max_parameters = whole_number(max_parameters, "max_parameters", "to_torch", minimum=1, error=LsrlError)
        if size.parameters > max_parameters:
            raise LsrlError(
                f"to_torch: the {architecture} network of this automaton ({len(machine.states)} states x "
                f"{len(machine.alphabet)} symbols: {size.units:,} units) has {size.parameters:,} parameters "
                f"({size.bytes / 1e9:.2g} GB in {str(dtype).removeprefix('torch.')}), above "
                f"max_parameters={max_parameters:,}; pass a larger max_parameters (or None) to build it anyway"
                + ("" if architecture == "second_order" else ", or use 'second_order' (one unit per state)"))
    if architecture == "second_order":
        return exact.second_order(machine, dtype)
    units = transition_units(machine)
    if architecture == "rnn":
        return exact.relu_rnn(units, dtype)
    return gated.build(architecture, units, gain, dtype)


def _check_machine(machine: object, where: str) -> None:
    if not isinstance(machine, (DFA, Mealy)):
        raise LsrlError(f"{where}: machine must be a lsrl.automata.DFA or Mealy, got {type(machine).__name__}")


def _check_architecture(architecture: object, where: str) -> None:
    if not isinstance(architecture, str) or architecture not in ARCHITECTURES:
        raise LsrlError(f"{where}: architecture must be one of {ARCHITECTURES}, got {architecture!r}")


def _check_dtype(dtype: object, architecture: str, where: str) -> torch.dtype:
    allowed = _GATED_DTYPES if architecture in ("lstm", "gru") else _EXACT_DTYPES
    if not isinstance(dtype, torch.dtype) or dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        why = " (the gain bound is derived for float32 rounding)" if architecture in ("lstm", "gru") else ""
        raise LsrlError(f"{where}: dtype of the {architecture} network must be one of {names}{why}, got {dtype!r}")
    return dtype
