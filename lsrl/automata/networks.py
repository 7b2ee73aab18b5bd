"""The module every automaton compiles to: a recurrent core (``.core``) and a thresholded linear readout.

One-hot symbols ``(B, T, |alphabet|)`` in, ``(B, T, C)`` out, 1.0 / 0.0 — C = 1 (acceptance of the
prefix) for a DFA, C = |outputs| (the one-hot output symbol) for a Mealy machine. The input is a tensor or
anything numpy reads as an array (a numpy array, nested lists), of any real or bool dtype, holding 0/1
one-hot rows; anything else is a ``DimensionError`` or ``SequenceError``. No steps (T = 0) is the empty
word: the outputs are ``(B, 0, C)`` and the state after it is the state before it. The builders are in
``lsrl.automata.exact`` (ReLU RNN, second-order RNN) and ``lsrl.automata.gated`` (LSTM, GRU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard, TypeVar

import numpy as np
import torch
from torch import nn

from numpy.typing import ArrayLike

from lsrl.automata.units import TransitionUnits
from lsrl.errors import DimensionError, InternalError, SequenceError, whole_number
from lsrl.targets.cache import CachedRun

if TYPE_CHECKING:
    from lsrl.llrnn.cell import LLRNN

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # h (B, H), or the stock layers' (h, c) of (1, B, H)
Core = TypeVar("Core", bound=nn.RNNBase)


class AutomatonNetwork(CachedRun, nn.Module):
    """``core`` (a stock recurrent layer, or the LLRNN cell) from the initial state ``h0`` (and ``c0``), then
    ``readout``: a channel is 1.0 where its linear score is positive."""

    h0: torch.Tensor
    c0: torch.Tensor | None  # the LSTM's initial cell state

    def __init__(self, architecture: str, core: nn.RNNBase | LLRNN, readout: nn.Linear, h0: torch.Tensor,
                 c0: torch.Tensor | None = None, gain: float | None = None) -> None:
        super().__init__()
        self.architecture, self.readout, self.gain = architecture, readout, gain
        self.core: nn.RNNBase | LLRNN = core
        self.register_buffer("h0", h0)
        self.register_buffer("c0", c0)

    def _input_size(self) -> int:
        return self.core.input_size if isinstance(self.core, nn.RNNBase) else self.core.input_dim

    def initial_state(self, batch: int) -> State:
        """The core's state before any symbol, for a batch: what ``hidden`` starts from."""
        if whole_number(batch) is None or batch < 0:
            raise DimensionError(f"{self.architecture} automaton network: the batch size must be an integer >= 0, "
                                 f"got {batch!r}")
        h0 = self.h0.expand(batch, -1)
        if not isinstance(self.core, nn.RNNBase):
            return h0.clone()  # the LLRNN cell's state is (B, H)
        if isinstance(self.core, nn.LSTM):
            if self.c0 is None:
                raise InternalError(f"{self.architecture} automaton network: an LSTM core was built without c0")
            return h0[None].contiguous(), self.c0.expand(1, batch, -1).contiguous()
        return h0[None].contiguous()

    def hidden(self, x: torch.Tensor | ArrayLike, state: State | None = None) -> tuple[torch.Tensor, State]:
        """The hidden states ``(B, T, H)`` of the core on ``x`` from ``state`` (default: the initial state),
        and the state after the last step (to continue from); for T = 0, no hidden states and ``state``."""
        x = _as_tensor(x, self.architecture)
        if x.dim() != 3 or x.shape[-1] != self._input_size():
            raise DimensionError(f"{self.architecture} automaton network: input must be one-hot symbols of shape "
                                 f"(B, T, {self._input_size()}), got {tuple(x.shape)}")
        _check_one_hot(x, self.architecture)
        x = x.to(self.h0.dtype)
        state = self.initial_state(x.shape[0]) if state is None else self._checked_state(state, x.shape[0])
        if x.shape[1] == 0:  # the empty word (torch's recurrent layers refuse zero steps)
            return x.new_zeros((x.shape[0], 0, self.h0.shape[0])), state
        if isinstance(self.core, nn.RNNBase):
            return self.core(x, state)
        states = self.core(x, state)
        return states, states[:, -1]

    def _checked_state(self, state: object, batch: int) -> State:
        """``state`` if it has the layout of ``initial_state(batch)`` (a state ``hidden`` returned), else an error."""
        expected = self.initial_state(batch)
        wanted = expected if isinstance(expected, tuple) else (expected,)
        given = state if isinstance(expected, tuple) else (state,)
        if not _same_layout(state, given, wanted):
            layout = ", ".join(str(tuple(w.shape)) for w in wanted)
            got = ", ".join(str(tuple(g.shape)) if isinstance(g, torch.Tensor) else type(g).__name__
                            for g in (given if isinstance(given, tuple) else (given,)))
            raise DimensionError(f"{self.architecture} automaton network: state must be what hidden() returned for "
                                 f"this batch ({layout} of {self.h0.dtype}), got {got}")
        return state

    def read(self, hidden: torch.Tensor) -> torch.Tensor:
        """The readout of hidden states: 1.0 where a channel's linear score is positive."""
        return (self.readout(hidden) > 0).to(self.h0.dtype)

    def forward(self, x: torch.Tensor | ArrayLike) -> torch.Tensor:
        return self.read(self.hidden(x)[0])

    def initial_output(self) -> torch.Tensor:
        """The readout before any symbol, ``(C,)``: for a DFA, whether the empty word is accepted."""
        return self.read(self.h0)


def _same_layout(state: object, given: object, wanted: tuple[torch.Tensor, ...]) -> TypeGuard[State]:
    """Whether ``given`` (``state``, as a tuple) holds tensors of the shapes and dtypes of ``wanted``."""
    return isinstance(given, tuple) and len(given) == len(wanted) and all(
        isinstance(g, torch.Tensor) and g.shape == w.shape and g.dtype == w.dtype for g, w in zip(given, wanted))


def _as_tensor(x: torch.Tensor | ArrayLike, architecture: str) -> torch.Tensor:
    """``x`` as a real tensor (arrays and nested lists converted), or a ``SequenceError``."""
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError, RuntimeError):
            raise SequenceError(f"{architecture} automaton network: input must be one-hot symbols (a tensor or a "
                                f"numeric array), got {type(x).__name__}") from None
    if x.is_complex():
        raise SequenceError(f"{architecture} automaton network: input holds complex numbers, not one-hot symbols")
    return x


def _check_one_hot(x: torch.Tensor, architecture: str) -> None:
    """Each (string, step) must be one symbol: a row of zeros with a single 1."""
    is_symbol = ((x == 0) | (x == 1)).all(dim=-1) & (x.sum(dim=-1) == 1)
    if not bool(is_symbol.all()):
        b, t = (int(i) for i in torch.nonzero(~is_symbol)[0])
        raise SequenceError(f"{architecture} automaton network: input [{b}, {t}] is {x[b, t].tolist()}, not a "
                            f"one-hot symbol (a single 1 among zeros)")


def linear_layer(weight: np.ndarray, bias: np.ndarray, dtype: torch.dtype) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(np.asarray(weight, dtype=np.float64)))
        layer.bias.copy_(torch.as_tensor(np.asarray(bias, dtype=np.float64)))
    return layer.requires_grad_(False)


def set_weights(core: Core, **weights: np.ndarray) -> Core:
    """Copy numpy arrays into ``core``'s layer-0 parameters (``weight_ih=..`` sets ``weight_ih_l0``)."""
    with torch.no_grad():
        for name, value in weights.items():
            getattr(core, f"{name}_l0").copy_(torch.as_tensor(np.asarray(value, dtype=np.float64)))
    return core.requires_grad_(False)


def half_threshold_readout(units: TransitionUnits, scale: float, offset: float | np.ndarray,
                           dtype: torch.dtype) -> nn.Linear:
    """Channel c is on when ``Σ_{readout[c]} on(u) > 1/2``, with ``on = scale * h + offset`` read off the units."""
    readout = units.readout.astype(np.float64)
    return linear_layer(readout * scale, readout @ np.broadcast_to(offset, units.size) - 0.5, dtype)
