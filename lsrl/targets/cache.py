"""``run_with_cache``: every sub-layer's activations of a torch model, per step (as TransformerLens's
``run_with_cache`` does for transformers), by forward hooks.

The cache maps a sub-module's name (``net.named_modules()``) to its output ``(B, T, width)``, in the
order the sub-modules finish, so the last entry of a compiled target is its output layer. A recurrent
layer that returns ``(sequence, final state)`` (``torch.nn.RNN`` / ``GRU`` / ``LSTM``) is cached by its
sequence of hidden states. Gates are recomputed from the layer's weights, its input and its hidden
states: ``NAME.r``, ``NAME.z``, ``NAME.n`` for a GRU, ``NAME.i``, ``NAME.f``, ``NAME.g``, ``NAME.o`` and
the cell states ``NAME.c`` for an LSTM. The ReLU GRU / LSTM stacks of ``lsrl.targets.gru_lstm`` run
their layers by a method, not as sub-modules: layer ``k`` of the stack ``NAME`` is ``NAME.l{k}``.

``patch={name: values}`` replaces a sub-layer's output (an interchange intervention at the level of
a layer); the cache then holds the patched values, and gates after a patched layer are recomputed
from them. A key that is a program node of ``net.patchable`` (not a sub-layer name) patches that
node as ``net(xs, patch=...)`` does (``lsrl.targets.patch``), by its labelled units.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lsrl.errors import DimensionError, LsrlError, SequenceError
from lsrl.lang.evaluate import patch_items, patch_key_name, finite_numbers

Patch = Mapping[Any, Any]  # {sub-layer name or program node (name or node): values}


class CachedRun:
    """Mixin for the target modules: ``net.run_with_cache(xs)``, and ``net(xs, patch={node: values})``."""

    def __call__(self, x: Any, *args: Any, patch: Patch | None = None, **kwargs: Any) -> Any:
        """``forward``; ``patch={node: values}`` patches program nodes by their labelled units (as
        ``model(xs, patch=...)`` does; see ``lsrl.targets.patch``)."""
        if not patch_items(patch, getattr(self, "architecture", type(self).__name__)):
            return super().__call__(x, *args, **kwargs)
        from lsrl.targets.checks import checked_input
        from lsrl.targets.patch import node_patches

        x = checked_input(self, x, check_bounds=False)  # the shape of the patch values; forward checks bounds
        with node_patches(self, patch, x.shape[0], x.shape[1]):
            return super().__call__(x, *args, **kwargs)

    def run_with_cache(self, xs: Any, patch: Patch | None = None, **forward_options: Any) -> tuple[Any, dict]:
        """``(outputs, cache)``: ``self(xs)`` and ``{sub-layer name: activations (B, T, width)}``;
        ``patch={sub-layer name: values}`` replaces those sub-layers' outputs (``run_with_cache``)."""
        return run_with_cache(self, xs, patch, **forward_options)


def run_with_cache(net: nn.Module, xs: Any, patch: Patch | None = None, **forward_options: Any) -> tuple[Any, dict]:
    """Run ``net`` on ``xs`` (``(B, T, d)`` or ``(T, d)``, array or tensor) without gradients; returns its
    outputs and the cache (module docstring), both without the batch axis when ``xs`` had none.

    ``patch={name: values}`` replaces the output of the sub-layer ``name`` (a key of the cache, not a
    recomputed gate) by ``values`` of its shape (``(B, T, width)``, or ``(T, width)`` for a ``(T, d)``
    input) at every step; the layers after it read the patched values. A recurrent layer's own
    recurrence is not changed: its whole output sequence is replaced. A ``name`` that is no sub-layer
    but a program node of ``net.patchable`` patches the node's labelled units (``lsrl.targets.patch``;
    ``values`` as for the program); the cache holds the values of the patched run.
    """
    from lsrl.targets.patch import node_patches

    x = _as_batch(net, xs)
    squeeze = x.dim() == 2
    x = x[None] if squeeze else x
    patchable = set(getattr(net, "patchable", None) or ())
    items = patch_items(patch, "run_with_cache")
    # a node's (T, dim) values apply to the one sequence of a (T, d) input as they are (patch_array)
    nodes = {key: values for key, values in items if patch_key_name(key) in patchable}
    patches = _read_patches(net, {name: values for name, values in items if name not in nodes}, squeeze)
    with node_patches(net, nodes, x.shape[0], x.shape[1]):  # its hooks run before the recorders
        return _cached_run(net, x, squeeze, patches, forward_options)


def _cached_run(net, x, squeeze, patches, forward_options):
    cache = {}
    handles = [
        module.register_forward_hook(_recorder(name, cache, x.shape[:2], patches.get(name)))
        for name, module in net.named_modules() if name
    ]
    stacks = [(name, module) for name, module in net.named_modules() if _is_cell_stack(module)]
    for name, stack in stacks:
        stack.layer = _recording_layer(name, stack, cache, patches)  # an instance attribute shadows the method
    try:
        with torch.no_grad():
            outputs = net(x, **forward_options)
    finally:
        for handle in handles:
            handle.remove()
        for _, stack in stacks:
            del stack.layer
    if squeeze:
        return outputs[0], {name: value[0] for name, value in cache.items()}
    return outputs, cache


def _as_batch(net, xs) -> torch.Tensor:
    tensors = list(net.parameters()) + list(net.buffers())
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float64)
    try:
        array = None if isinstance(xs, torch.Tensor) else np.asarray(xs)
    except (TypeError, ValueError, OverflowError):  # ragged
        array = None
    if not isinstance(xs, torch.Tensor) and (array is None or array.dtype.kind not in "biuf"):  # text, complex, ...
        raise SequenceError(f"run_with_cache: xs must be real numbers of shape (T, d) or (B, T, d), got "
                            f"{type(xs).__name__}" + ("" if array is None else f" of dtype {array.dtype}"))
    x = xs if isinstance(xs, torch.Tensor) else torch.as_tensor(array.astype(np.float64), dtype=dtype)
    if x.dim() not in (2, 3):
        raise DimensionError(
            f"run_with_cache: expected a sequence (T, d) or a batch (B, T, d), got shape {tuple(x.shape)}")
    return x


def _sub_layers(net) -> set:
    """The names ``patch`` can replace: sub-modules and GRU / LSTM stacks' layers."""
    layers = {name for name, module in net.named_modules() if name}
    for name, module in net.named_modules():
        if _is_cell_stack(module):
            layers |= {f"{name}.l{k}" for k in range(module.num_layers)}
    return layers


def _read_patches(net, patch, squeeze) -> dict:
    """``{name: tensor (B, T, width)}``; a name must be a sub-module or a GRU / LSTM stack's layer."""
    layers = _sub_layers(net)
    patches = {}
    for name, values in patch.items():
        if name not in layers:
            raise LsrlError(f"run_with_cache: cannot patch {name!r}: neither a program node of net.patchable nor "
                            f"a sub-layer of this {type(net).__name__} (sub-layers: {', '.join(sorted(layers))})")
        array = finite_numbers(values, f"run_with_cache: patch values for {name!r}")
        tensor = torch.as_tensor(np.asarray(array, dtype=np.float64))
        patches[name] = tensor[None] if squeeze else tensor
    return patches


def _patched(name, output, values):
    """``values`` in place of ``output``, checked to have its shape and cast to its dtype."""
    if tuple(values.shape) != tuple(output.shape):
        raise DimensionError(f"run_with_cache: patch for {name!r} has shape {tuple(values.shape)}, the layer's "
                             f"output has shape {tuple(output.shape)}")
    return values.to(output.dtype)


def _is_cell_stack(module) -> bool:
    from lsrl.targets.gru_lstm import _CellStack

    return isinstance(module, _CellStack)


def _recorder(name, cache, batch_steps, patch):
    def hook(module, args, output):
        sequence = output[0] if isinstance(output, tuple) else output
        per_step = isinstance(sequence, torch.Tensor) and sequence.dim() == 3
        if not per_step or tuple(sequence.shape[:2]) != tuple(batch_steps):
            if patch is not None:
                raise LsrlError(f"run_with_cache: cannot patch {name!r}: its output is not a sequence of activations")
            return None  # not a per-step activation (e.g. a final state alone)
        if patch is not None:
            sequence = _patched(name, sequence, patch)
        cache[name] = sequence.detach()
        if isinstance(module, (nn.GRU, nn.LSTM)) and module.num_layers == 1 and not module.bidirectional:
            x, initial = args[0], (args[1] if len(args) > 1 else None)
            cache.update(_stock_gates(name, module, x, sequence, initial))
        if patch is None:
            return None
        return (sequence,) + tuple(output[1:]) if isinstance(output, tuple) else sequence

    return hook


def _stock_gates(name, module, x, h, initial) -> dict:
    """Gates of a one-layer batch-first stock GRU / LSTM (sigmoid and tanh) from its input and states."""
    weights = [getattr(module, f"{w}_l0") for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    if not module.batch_first:
        return {}
    zeros = h.new_zeros(h.shape[0], h.shape[2])
    if isinstance(module, nn.LSTM):
        h0, c0 = (initial[0][0], initial[1][0]) if initial is not None else (zeros, zeros)
        return _lstm_gates(name, x, h, h0, c0, weights, torch.sigmoid, torch.tanh)
    h0 = initial[0] if initial is not None else zeros
    return _gru_gates(name, x, h, h0, weights, torch.sigmoid, torch.tanh)


def _recording_layer(name, stack, cache, patches):
    """``stack.layer`` that also caches layer k's hidden states, gates (and cells) as ``NAME.l{k}...``."""
    from lsrl.targets.gru_lstm import ACTIVATIONS

    method = type(stack).layer

    def layer(k, x):
        key = f"{name}.l{k}"
        h = method(stack, k, x)
        if key in patches:
            h = _patched(key, h, patches[key])
        tensors = stack.layer_tensors(k)
        weights = [tensors[w] for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        h0 = tensors["h0"].expand(x.shape[0], -1)
        gate, candidate = (ACTIVATIONS[activation] for activation in stack.activations)
        cache[key] = h.detach()
        if stack.kind == "lstm":
            c0 = tensors["c0"].expand(x.shape[0], -1)
            cache.update(_lstm_gates(key, x, h, h0, c0, weights, gate, candidate))
        else:
            cache.update(_gru_gates(key, x, h, h0, weights, gate, candidate))
        return h

    return layer


def _previous(h, h0):
    """``h_{t-1}`` for every step: the initial state, then the states shifted by one."""
    return torch.cat([h0[:, None], h[:, :-1]], dim=1)


def _gru_gates(key, x, h, h0, weights, gate, candidate) -> dict:
    w_ih, w_hh, b_ih, b_hh = weights
    hidden = h.shape[-1]
    i_r, i_z, i_n = F.linear(x, w_ih, b_ih).split(hidden, dim=-1)
    h_r, h_z, h_n = F.linear(_previous(h, h0), w_hh, b_hh).split(hidden, dim=-1)
    r = gate(i_r + h_r)
    return {f"{key}.r": r, f"{key}.z": gate(i_z + h_z), f"{key}.n": candidate(i_n + r * h_n)}


def _lstm_gates(key, x, h, h0, c0, weights, gate, candidate) -> dict:
    w_ih, w_hh, b_ih, b_hh = weights
    hidden = h.shape[-1]
    i, f, g, o = (F.linear(x, w_ih, b_ih) + F.linear(_previous(h, h0), w_hh, b_hh)).split(hidden, dim=-1)
    i, f, g, o = gate(i), gate(f), candidate(g), gate(o)
    cells, c = [], c0
    for t in range(h.shape[1]):  # c_t = f_t c_{t-1} + i_t g_t
        c = f[:, t] * c + i[:, t] * g[:, t]
        cells.append(c)
    c = torch.stack(cells, dim=1) if cells else h.new_zeros(h.shape)
    return {f"{key}.i": i, f"{key}.f": f, f"{key}.g": g, f"{key}.o": o, f"{key}.c": c}
