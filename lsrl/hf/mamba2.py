"""Every LSRL program in a stock ``transformers`` ``Mamba2ForCausalLM``: only a config and weights.

The same slots (``lsrl.hf.lowering``) and residual stream (``lsrl.hf.stream``) as ``lsrl.hf.mamba``:
block ``L`` writes the slots of level ``L``. Mamba-2 differs in three ways, each handled here:

- ``dt``, ``A`` and ``D`` are per head: every head has ``head_dim = 1`` (``num_heads`` = the inner
  width), so each channel keeps its own; ``n_groups = 1``, ``state_size = 1``.
- ``B_t`` and ``C_t`` pass through the convolution and SiLU: their in_proj rows are 0 and their conv
  bias 64, so ``B_t = C_t = silu(64) = 64`` exactly; ``dt = softplus(32) = 32`` on a scan head.
  A scan head therefore multiplies its input by ``C_t dt B_t = 2**17``, and its SiLU input must be
  saturated (``x = k form``, ``|x| >= 710`` or 0, as in ``lsrl.hf.mamba``; a signed drive is split into
  the scans of its positive and negative parts), so ``y`` can reach ``2**17 k R M`` (``R`` the scan's
  reach, ``M`` the drive's bound, ``k`` up to ``2**30``): far more than the group norm below can hold
  beside its anchors. The **gate** brings it down: ``z = 64`` (``silu(64) = 64``) where ``64 y`` fits,
  else ``z = 2 g`` for a power of two ``g <= 2**-26`` with ``g y <= 2**44``: the gate is computed in
  float32 (also in a float64 model), where ``exp(-2 g)`` rounds to 1 (``2 g`` is below half an ulp
  under 1, ``2**-25``), so ``sigmoid(2 g) = 1/2`` and ``silu(2 g) = g`` exactly (an assumption on
  torch, tested in ``tests/test_hf_mamba.py``), and ``y g`` is an exact scaling. The scan itself is
  then Mamba's: whole numbers stay exact (sums of multiples of ``k`` below ``2**24`` units), and the
  value bounds only set the scales, so even where they are far wider than the values (the intervals of
  ``value_bounds`` bound Listing 2's output registers' drive by 7e5 at ``max_len = 18``, for tokens 0..3;
  the builders plan from the sharper ``relational_bounds``) a program on a grid runs exactly. A pulse
  (an initial state) is ``x = k c >= 64`` at the first step only (conv taps +1, -1 on a constant;
  ``silu(x) = x`` there).
- ``y * silu(z)`` passes a **gated group RMSNorm** (one group, float32) before out_proj. Anchor heads
  (``u = silu(64) = 64``, ``D = 1``, ``z = A / 64``) hold ``A`` (a power of two) in ``K`` heads with
  ``inner / K = 4**j``, so the anchors' mean square is ``(A / 2**j)**2``; every other head's output
  ``p`` is kept with ``sum p**2 <= 2**-26 A**2`` and the stream's proof (``lsrl.hf.stream``) makes
  the group norm the exact scaling by ``2**j / A``. Its squares are float32: ``A <= 2**62``, so every
  head's output is kept at most ``2**44`` (a scan's by its gate, a product's by ``D``); a block whose
  outputs' energy still needs a larger ``A``, or a product that would have to shrink by more than
  ``2**-60``, is refused, naming a node.

The rest (relu and product heads, pulses for initial states, the gains, the refusals) is as in
``lsrl.hf.mamba``.

**Tolerance.** ``lsrl.hf.mamba``'s proof, slot by slot, with three changes. (a) Every head's output
``y silu(z)`` passes the float32 gated group norm: one more rounding, ``U`` times its bound (the
norm's scaling is exact by the anchors' claim, as the stream's). (b) A scan head's drive is Mamba's
(``silu(k form) / k``, its SiLU gap where unsaturated; a pulse's ``x >= 64`` is the identity), and its
gate ``silu(z)`` an exact power of two, so ``y silu(z)`` adds no rounding of its own (below
``2**-126`` the subnormal slack ``TINY`` covers it). (c) The chunked scan (``mamba2_chunk_scan``: per
chunk, ``L = exp(segsum(dt A))``, einsum reductions, an inter-chunk recurrence):

- *decay 1, proved*: ``A = -exp(-200)`` is ``-0.0`` in float32, so every ``dt A``, every cumulative
  and segment sum of them is a signed zero and every exponential is ``exp(+-0) = 1`` or
  ``exp(-inf) = 0`` (the masked entries): each output is a sum of products of ``x dt`` with powers
  of two, 0 and 1. On a grid (exactness, ``lsrl.hf.mamba``), with the scan's bound below ``2**24``
  grid units, every product and every partial sum is representable, so the result is exact in any
  order of summation (einsum's blocking, an FMA, the stepwise path's ``S dA + dB x`` alike); off a
  grid the same sums are within ``gamma_(2T+8)`` times the sum of their terms' magnitudes, which is
  the state's own bound where the drive is non-negative (``lsrl.hf.rounding.scan_error``); where the
  drive may be non-zero at ``K`` steps only (``lsrl.hf.rounding.Activity``), the others' terms are exact
  zeros, whose additions are exact: ``gamma_(2K+8)`` and ``K e_d``;
- *decays in (0, 1), assumed*: each output is within ``gamma_(2T+8) R (D + e_d)`` of the recurrence
  on its computed drive with the computed decay ``exp(32 A)`` (at most ``2T + 8`` roundings along
  any path: ``dt A``, a cumulative sum of at most ``T`` terms, ``exp`` taken as correctly rounded to
  within one more ``U``, the einsum's products and sums of at most ``T`` terms, the inter-chunk sum).
  ``lsrl.hf.rounding.scan_error`` charges it; the tests check the stated bound against the
  interpreter on random programs at ``T = max_len``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from lsrl.errors import LsrlError
from lsrl.hf.lowering import Channel, Lowered, lower
from lsrl.hf.mamba import (
    CONSTANT, DT_OFF, DT_ON, EXACT_DECAY_LOG, GATE, SMALLEST_GAIN, channel_reach, decay_log, ends, finished,
    form_row, output_tolerance, power_of_two_gain, slot_errors, split_signs, stream_bounds, vocabulary_size,
)
from lsrl.hf.stream import MARGIN_BITS, Stream, plan_stream

if TYPE_CHECKING:
    import torch
    from transformers import Mamba2ForCausalLM

    from lsrl.model.compiled import CompiledProgram

SCAN_FACTOR = CONSTANT * DT_ON * CONSTANT  # C_t * dt * B_t: 2**17
SMALL_GATE = 2.0 ** -26  # silu(2 g) == g in float32 for powers of two g <= this (sigmoid rounds to 1/2)
LARGEST_ANCHOR = 2.0 ** 62  # its square, and the group's mean square, stay finite in float32
PAYLOAD_LIMIT = 2.0 ** 44  # a head's output at most this (a product's D, a scan's gate shrink it)
SMALLEST_SHRINK = 2.0 ** -60  # values shrunk further could leave float32's normal range


class Head:
    """One head (one channel) of a Mamba-2 block: what its rows and parameters hold."""

    def __init__(self, slot: int | None, weight: float, output: float, bound: float) -> None:
        self.slot, self.weight = slot, weight  # the stream slot it adds to, times weight / output
        self.output = output  # y * silu(z) = output * (the channel's value)
        self.bound = bound  # of |y * silu(z)|
        self.x: tuple = (None, 0.0)  # (form, scale) of the conv input, or (None, 0)
        self.taps: dict[int, float] = {}  # conv tap (lag) -> weight
        self.conv_bias = 0.0
        self.z: tuple = (None, 0.0)  # (form, scale) of the gate, or (None, constant)
        self.dt_bias, self.a_log, self.skip = DT_OFF, EXACT_DECAY_LOG, 0.0
        # for the error bound (lsrl.hf.mamba.slot_errors): the channel it computes and its SiLU gains
        self.error: tuple[Channel, float, float] | None = None


def build_mamba2(model: CompiledProgram, max_len: int, dtype: torch.dtype, beta: float | None = None
                 ) -> Mamba2ForCausalLM:
    """``model`` as a stock ``Mamba2ForCausalLM`` (module doc); ``beta`` overrides the payload scale."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    lowered = lower(model, max_len)
    blocks = [_heads(lowered, level) for level in range(1, max(lowered.depth, 1) + 1)]
    rows = [[(h.slot, *h.error) for h in heads if h.slot is not None and h.error is not None] for heads in blocks]
    errors, grids = slot_errors(lowered, rows, chunked=True)
    stream = plan_stream(stream_bounds(lowered, errors), model.name, beta)
    hidden, anchors_per_hidden = stream.hidden_size, len(stream.anchors)
    expand = max(1, math.ceil(max(len(heads) for heads in blocks) / (hidden - anchors_per_hidden)))
    inner, anchors = expand * hidden, expand * anchors_per_hidden
    kernel = max(4, lowered.longest_lag + 2)
    vocab = vocabulary_size(model, lowered)
    config = Mamba2Config(
        vocab_size=vocab, hidden_size=hidden, state_size=1, num_hidden_layers=len(blocks), layer_norm_epsilon=0.0,
        expand=expand, num_heads=inner, head_dim=1, n_groups=1, conv_kernel=kernel, use_bias=False,
        use_conv_bias=True, hidden_act="silu", residual_in_fp32=False, tie_word_embeddings=False,
        chunk_size=min(64, max_len), pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )
    weights: dict[str, np.ndarray] = {}
    for layer, heads in enumerate(blocks):
        weights.update(_block_weights(f"backbone.layers.{layer}.", heads, stream, inner, anchors, kernel,
                                      model.name))
    weights.update(ends(model, lowered, stream, vocab))
    tolerance = output_tolerance(model, lowered, errors, grids)
    record = {"arch": "mamba2", "max_len": max_len, "tolerance": tolerance, "outputs": len(lowered.outputs)}
    return finished(Mamba2ForCausalLM(config), weights, model, stream, dtype, record)


def _heads(lowered: Lowered, level: int) -> list[Head]:
    """The heads that write the slots of ``level`` (anchors are added by ``_block_weights``)."""
    heads = []
    for index, slot in enumerate(lowered.slots):
        if slot.level != level:
            continue
        for channel in slot.channels:
            for part in split_signs(channel):
                heads.append(_head(index, part, lowered.max_len, slot.name))
    return heads


def _head(slot: int, channel: Channel, max_len: int, name: str) -> Head:
    """The head computing ``channel`` (one of ``split_signs``')."""
    form = channel.form
    if channel.kind == "relu":
        head = _gated(Head(slot, channel.weight, 1.0, form.bound))
        gain = power_of_two_gain(form.bound)
        taps = {channel.lag: 1.0, channel.lag + 1: -1.0} if channel.impulse else {channel.lag: 1.0}
        head.x, head.taps, head.skip = (form, gain), taps, 1 / gain
        head.error = (channel, gain, 0.0)
        return head
    if channel.kind == "product":  # y = D u = shrink * relu(a), silu(z) = gate * relu(b)
        a, b = form.bound, channel.gate.bound  # type: ignore[union-attr]
        gain, gate = power_of_two_gain(a), power_of_two_gain(b)
        shrink = min(1.0, 2.0 ** math.floor(math.log2(PAYLOAD_LIMIT / max(gate * a * b, 2.0 ** -60))))
        if gate < SMALLEST_GAIN or shrink < SMALLEST_SHRINK:
            raise LsrlError(f"{name}: a product's factors (bounds {a:.3g}, {b:.3g}) are too large for the saturated "
                            "gate and the float32 group norm of Mamba-2; lower max_len or the Input bounds, or use "
                            "'mamba'")
        head = Head(slot, channel.weight, shrink * gate, shrink * gate * a * b)
        head.x, head.taps, head.skip, head.z = (form, gain), {0: 1.0}, shrink / gain, (channel.gate, gate)
        head.error = (channel, gain, gate)
        return head
    return _scan_head(slot, channel, max_len, name)


def _scan_head(slot: int, channel: Channel, max_len: int, name: str) -> Head:
    """A scan of ``relu(form)`` (``x = k form``, ``silu(x) = k relu(form)`` as in ``lsrl.hf.mamba``) or a
    pulse (``x = k c >= 64`` at the first step only: conv taps +1, -1 on a constant): ``y = 2**17 k S``,
    gated down by ``_gated``."""
    form, reach = channel.form, channel_reach(channel, max_len)
    if channel.kind == "pulse":  # silu(x) = x for x >= 64 (the identity: no gain floor); the state is at most c
        gain, taps, largest = 2.0 ** math.ceil(math.log2(CONSTANT / form.const)), {0: 1.0, 1: -1.0}, form.const
    else:
        gain, taps = power_of_two_gain(form.bound, SCAN_FACTOR * reach * form.bound), {0: 1.0}
        largest = reach * form.high
        if gain < SMALLEST_GAIN:
            raise LsrlError(f"{name}: its values (bound {form.bound:.3g}) are too large for the saturated gates of a "
                            "Mamba-2 scan; lower max_len or the Input bounds")
    head = _gated(Head(slot, channel.weight, SCAN_FACTOR * gain, SCAN_FACTOR * gain * largest))
    head.x, head.taps, head.dt_bias, head.a_log = (form, gain), taps, DT_ON, decay_log(channel.decay)
    head.error = (channel, math.inf if channel.kind == "pulse" else gain, 0.0)
    return head


def _gated(head: Head) -> Head:
    """``head`` (its ``y`` at most ``head.bound``) with the gate ``z`` whose ``silu(z)`` brings ``y silu(z)``
    to at most ``PAYLOAD_LIMIT``: ``silu(64) = 64`` where that fits, else ``silu(2 g) = g`` for a power of two
    ``g <= 2**-26`` (float32: ``sigmoid(2 g)`` rounds to 1/2; module doc)."""
    if GATE * head.bound <= PAYLOAD_LIMIT:
        z, factor = GATE, GATE
    else:
        factor = min(SMALL_GATE, 2.0 ** math.floor(math.log2(PAYLOAD_LIMIT / head.bound)))
        z = 2 * factor
    head.z, head.output, head.bound = (None, z), head.output * factor, head.bound * factor
    return head


def _anchor_value(heads: list[Head], where: str) -> float:
    """The anchors' ``A``: a power of two with ``sum p**2 <= 2**-MARGIN_BITS A**2``."""
    energy = math.fsum(h.bound ** 2 for h in heads)
    value = 2.0 ** max(12, math.ceil((math.log2(energy) + MARGIN_BITS) / 2) if energy else 12)
    if value > LARGEST_ANCHOR:
        raise LsrlError(f"{where}: the values of a Mamba-2 block are too large for its float32 group norm (outputs up "
                        f"to {max(h.bound for h in heads):.3g}); lower max_len or the Input bounds, or use 'mamba'")
    return value


def _block_weights(prefix: str, heads: list[Head], stream: Stream, inner: int, anchors: int, kernel: int,
                   where: str) -> dict[str, np.ndarray]:
    hidden = stream.hidden_size
    anchor = _anchor_value(heads, where)
    rms = anchor / math.sqrt(inner // anchors)  # anchors' mean square; inner / anchors is a power of 4
    in_proj = np.zeros((2 * inner + 2 + inner, hidden))  # [z | x | B | C | dt]
    conv = np.zeros((inner + 2, 1, kernel))
    conv_bias = np.zeros(inner + 2)
    conv_bias[inner:] = CONSTANT  # B_t = C_t = silu(64) = 64
    dt_bias, a_log, skip = np.full(inner, DT_OFF), np.full(inner, EXACT_DECAY_LOG), np.zeros(inner)
    out_proj = np.zeros((hidden, inner))
    for d in range(anchors):  # y = D u = 64, z = anchor / 64
        conv_bias[d], skip[d] = CONSTANT, 1.0
        in_proj[d, stream.anchor] = anchor / CONSTANT / stream.alpha
    for d, head in enumerate(heads, start=anchors):
        form, scale = head.x
        if form is not None:
            for column, value in form_row(form, stream, scale).items():
                in_proj[inner + d, column] = value
        for lag, tap in head.taps.items():
            conv[d, 0, kernel - 1 - lag] = tap
        conv_bias[d] = head.conv_bias
        gate_form, gate_scale = head.z
        if gate_form is None:
            in_proj[d, stream.anchor] = gate_scale / stream.alpha
        else:
            for column, value in form_row(gate_form, stream, gate_scale).items():
                in_proj[d, column] = value
        dt_bias[d], a_log[d], skip[d] = head.dt_bias, head.a_log, head.skip
        if head.slot is not None:
            out_proj[stream.payload[head.slot], d] = stream.beta * head.weight * rms / head.output
    return {
        prefix + "norm.weight": np.ones(hidden), prefix + "mixer.in_proj.weight": in_proj,
        prefix + "mixer.conv1d.weight": conv, prefix + "mixer.conv1d.bias": conv_bias,
        prefix + "mixer.dt_bias": dt_bias, prefix + "mixer.A_log": a_log, prefix + "mixer.D": skip,
        prefix + "mixer.norm.weight": np.ones(inner), prefix + "mixer.out_proj.weight": out_proj,
    }

