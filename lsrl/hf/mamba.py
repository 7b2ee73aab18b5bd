"""Every LSRL program in a stock ``transformers`` ``MambaForCausalLM``: only a config and weights.

The program is lowered to slots of a residual stream (``lsrl.hf.lowering``), whose signed channels
``split_signs`` turns into channels of non-negative SiLU inputs; block ``L`` of the stack writes every
slot of level ``L``, one intermediate channel per slot channel, plus channel 0,
a constant ``u = silu(64) = 64`` (conv bias 64, no input) from which ``x_proj`` makes the constant
``B_t`` and ``C_t`` (it has no bias). ``state_size = 1``, ``time_step_rank = 1``, ``D``, ``dt_bias``
and ``A_log`` per channel. The stream (``lsrl.hf.stream``) makes every RMSNorm the identity
(``layer_norm_epsilon = 0``, weights 1), so block inputs read ``n = h`` (rounded to float32: the
stock norm computes in float32, also in a float64 model).

**Exact primitives** (G = 64 and every gain ``k`` a power of two; ``silu(x) = relu(x)`` bit for bit
for ``x`` outside (-88.8, 16.7) in float32 and (-709.8, 36.8) in float64; ``softplus(x) = x`` for
``x > 20``, ``softplus(-1000) = 0``; ``A_log = -200`` gives ``A = -exp(-200) = -0.0`` in float32):

- memoryless channel: ``dt = softplus(-1000) = 0`` so ``exp(dt A) = 1`` and ``dt B u = 0``: the state
  stays 0 and ``y = D u``;
- ``relu`` channel: ``x = k * form`` at conv tap ``lag``, ``u = silu(x) = k relu(form)`` (exact once
  ``|k form| >= 710``; otherwise off by at most ``0.2785 / k`` after the ``1/k``), ``D = 1/k``,
  ``z = G`` (``silu(64) = 64``), ``out_proj = beta w / G``;
- ``product`` channel: ``u = silu(k_a a)``, ``D = 1/k_a``, ``z = k_b b`` so
  ``y silu(z) = relu(a) k_b relu(b)``; ``out_proj = beta w / k_b``;
- ``scan`` channel: ``dt = softplus(32) = 32``, ``B_t = 64 * 2**-11 / k_s`` so ``dt B_t = 1/k_s`` (a
  power of two), ``C_t = 64 * 2**-6 = 1``, ``D = 0``: ``S_t = exp(32 A) S_(t-1) + relu(form_t)``;
  decay 1 is ``A_log = -200``, exact; a decay in (0, 1) is ``A = ln(decay) / 32`` rounded, its error
  enters the tolerance; ``pulse``: ``x = k_s c`` with conv taps ``(-1, 1)``: ``k_s c`` at the first
  step (the conv's zero padding) and ``k_s c - k_s c = 0`` after.

**Scales.** Every gain is the largest power of two that keeps each intermediate (``x``, ``u``,
``y * silu(z)``, the state) at most ``2**100`` given the bounds, capped at ``2**30``; a gain below
``2**16`` is refused before anything is written (the values are too large for float32), naming the
node. The largest weight is recorded as ``config.lsrl_io["largest_weight"]``.

**Tolerance (the proof).** Write ``U = 2**-24``, ``gamma_n = n U / (1 - n U)``. ``U`` bounds the
relative error of every rounding in either dtype (the stock RMSNorm and the float64 model's cast of the
scan input and of the logits are float32). Underflow: every quantity is a value of the program times a
scale of at least ``beta >= 2**-100`` (the stream), 1 (the scan) or a gain, so a rounding in the
subnormal range adds at most ``2**-150 / 2**-100 = TINY`` in value units; ``TINY`` is added per
rounding below. Each slot ``s`` has its bound ``M_s`` (``lsrl.hf.lowering``, from ``relational_bounds`` at
``max_len``) and an error bound ``E_s`` on its stored value ``v^_s = h_s / beta``, built block by
block (every block reads only slots of lower levels):

1. *Reading a form* ``f = sum c_i v_i + c_0`` with gain ``k``: the norm gives ``fl32(beta v^_i)`` (the
   stream's claim, ``lsrl.hf.stream``, holds for the computed values since the stream is planned for
   the bounds ``M_s + E_s``); in_proj holds ``fl(k c_i / beta)`` (``k``, ``beta`` powers of two) and
   sums ``m`` non-zero terms, so ``|x^ / k - f| <= e_f = sum |c_i| (E_i + U M'_i) + gamma_(m+2) (sum
   |c_i| M'_i + |c_0|) + (m + 2) TINY`` with ``M'_i = (1 + U)(M_i + E_i)`` (the spare rounding in
   ``m + 2`` covers the lowering's rounding of each exact rational ``c_i`` to the nearest float64,
   ``2**-53`` relative: ``lsrl.hf.lowering``, exact coefficients). The conv copies with
   tap 1 (an impulse: ``x - x = 0`` on identical values), exactly.
2. *SiLU* (an assumption on torch, tested in ``tests/test_hf_mamba.py``: ``silu(x) == relu(x)`` for
   ``|x| >= 710`` and ``|fl(silu(x)) - relu(x)| <= SILU_GAP = 0.28`` elsewhere, which holds in real
   arithmetic by 0.2785 plus 4 ulps of ``|x| < 710``): a relu channel's ``y = silu(x^) / k`` (``D = 1/k``,
   exact) is within ``e = e_f + SILU_GAP / k`` of ``relu(f)`` (relu is 1-Lipschitz); ``silu(z) = 64``
   exactly.
3. *Product*: with ``e_a``, ``e_b`` as in 2 for both factors (bounds ``A``, ``B``), ``y silu(z)`` is
   within ``A e_b + B e_a + e_a e_b + U (A + e_a)(B + e_b)`` of ``relu(a) relu(b)``.
4. *Scan* of decay ``a`` (``S_t = a S_(t-1) + d_t``, ``d = relu(f)``, ``|S| <= S_max = R D`` with
   ``R = sum_(j < T) a^j``): ``dt B_t = 1/k`` exactly, the drive is ``d^ = fl32(silu(x^)) / k`` with
   ``e_d = e + U (D + e)``; the computed decay ``a^ = exp(32 fl32(A))`` (1 exactly for decay 1) lies
   within ``delta = |a^(float64) - a| + 2U + 2**-53`` of ``a`` (``a`` as written is the program's decay
   rounded to float64, within ``DECAY_ROUNDING = 2**-53``: ``lsrl.hf.lowering``); each step rounds
   ``a^ S`` and the sum. So
   ``eps_t <= a^ eps_(t-1) + delta S_max + e_d + 2U (S_max + eps) + 2 TINY`` and, summed,
   ``eps <= R' (e_d + delta S_max + 2U S_max + 2 TINY) / (1 - 2U R')`` with ``R' = sum_(j<T) a^^j``
   (refused unless ``2U R' < 1/2``); where the slot is this one scan of a non-negative drive (no split),
   ``|S| <= M_s / |w|`` too and the smaller bound is ``S_max``. ``C_t = 1``, ``D = 0`` and ``silu(z) =
   64``: exact. A *pulse* (an initial state) drives the scan at the first step only (the conv gives ``k c
   - k c = 0`` after, and ``silu(0) = 0``, ``dt B 0 = 0`` exactly), so ``|S| <= D`` and ``eps_t <= a^
   eps_(t-1) + (delta + U) D + U eps + TINY`` from ``eps_1 = e_d``: ``lsrl.hf.rounding.pulse_error``; with
   the exact unit decay no later step rounds at all and ``eps = e_d``. *Live steps*
   (``lsrl.hf.rounding.Activity``): at a step where the drive is dead (both its value and the computed one
   an exact 0: ``silu(0) = 0``, ``dt B 0 = 0``) a unit-decay scan computes ``1 * S + 0 = S`` exactly and its
   error does not grow, so only the ``K`` steps where the drive may live count: ``T`` becomes ``K`` above
   (and in Mamba-2's chunked bound, ``gamma_(2K+8)``: the other terms are exact zeros). A value written once,
   ``(1 - started) x`` with ``started`` exact, has ``K = 1``; a pulse's drive lives at step 1 only.
5. *Writing a slot*: out_proj holds ``fl(beta w / 64)`` and sums the slot's ``c`` channels (``0 + x``
   into an unused stream channel is exact), so ``E_s = sum |w| e_ch + gamma_(c+2) sum |w| (B_ch + e_ch)
   + (c + 2) TINY``, ``B_ch`` the channel's bound; the lowering's weights are ``+-1``, so ``beta w / 64``
   (and ``beta w / k_b``) are powers of two, the products exact, and ``gamma_(c-1)`` replaces ``gamma_(c+2)``
   (``lsrl.hf.rounding.written``).
6. *Output*: ``lm_head`` reads the output form after ``norm_f`` (1.), and the float64 model's logits
   are cast to float32: ``tolerance = max_j e_(out_j) + U (M_out_j + e_(out_j))``; 0 where every
   output form is on a grid (below): every output, and so every token decision, is then exact.

7. *Sign splits* (``split_signs``): the pieces of one channel are charged together, not each in full. The
   SiLU outputs ``r_+ = relu~(f^)``, ``r_- = relu~(-f^)`` of a form and its negation satisfy
   ``|r_+ - r_- - f| <= e_f + 2 SILU_GAP / k`` (``relu(y) - relu(-y) = y``), so a delay's two pieces, or
   the per-step drives of a scan's two scans, carry ``e_f + n SILU_GAP / k`` together (``n`` pieces), each
   piece keeping its own roundings (``U`` times its own bound); and the pieces ``sa sb relu~(sa a^)
   relu~(sb b^)`` of a product sum to ``a~ b~`` with ``a~`` within ``e_a + n_a SILU_GAP / k`` of ``a``, their
   roundings to at most ``U (sum_sa relu~(sa a^)) (sum_sb relu~(sb b^)) <= U (A + e_a)(B + e_b)``: one
   ``product_error`` for the whole (``_split_parts``). Mamba-2's group-norm rounding is ``U`` times the
   pieces' bounds and errors together.

*Exactness* (error 0, which keeps step counters and phase indicators exact): a slot is on the grid
``q`` when its value is always a multiple of ``2**-q``: an integer Input (``q = 0``, read exactly from
the embeddings), or a slot every channel of which is exact on a grid, written with weights ``w`` of
at most 24 significant bits. A form ``sum c_i v_i + c_0`` of such slots with dyadic ``c_i = n_i
2**-p_i`` (``|n_i| < 2**24``) is a multiple of ``2**-q`` (``q = max(p_i + q_i)``), and when ``(sum |c_i| M_i +
|c_0|) 2**q < 2**24`` every partial sum of its dot product is exactly representable in float32, in any
order: it is computed exactly (``dyadic_exponent``, ``form_grid``). Its SiLU is exact where ``k 2**-q
>= 710`` (a non-zero value is then beyond the window; ``silu(0) = 0``); a product of exact factors,
a decay-1 scan of an exact drive and the out_proj sum are exact under the same ``2**24`` condition
(a scan's bound is ``T`` times its drive's, or ``M_s / |w|`` where that is smaller, 4.).

Every value stays within ``M_s + E_s``: the stream is planned for these bounds, and the gains keep
intermediates below ``2**100`` for ``M_s``, so ``E_s <= 2**20 (M_s + 1)`` (checked) keeps them below
``2**121``, finite in float32. A stated tolerance as large as the outputs' bound proves
nothing: the builder warns (``ToleranceWarning``, naming the program) and still writes the model. An output
that is a whole number is read exactly by rounding where ``tolerance < 1/2``. The bound is in
``config.lsrl_io["tolerance"]`` (absolute); the pieces are in ``lsrl.hf.rounding``. The bounds ``M_s``
are ``lsrl.lang.relational_bounds`` (an unrolled run over value sets, sound, never looser than the
intervals): the robust Listing 2 (n = 2, 3; its permutation counters read from the phase by the
lowering) is then on the grid throughout and stated exact (tolerance 0; from the interval bounds,
4.6e11 on its outputs at ``max_len = 66`` for n = 2, it was 1.5e5). What stays loose: the errors
``E_s`` are bounded per slot, uniformly over the steps, so a ramp of slope ``mu`` multiplies its input's
error by ``mu`` at every step, as it does when every prompt token puts the query on a cell's ramp
(Listing 1, slope 1000: stated 0.25 at 65 steps and 1.0 at 256, measured 1.2e-3 and 4.2e-3 on such
prompts, 2e-5 on a regular grid of cells, where the query meets one ramp at most).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from lsrl.errors import InternalError, LsrlError
from lsrl.hf.io import make_record
from lsrl.hf.lowering import DECAY_ROUNDING, Channel, Form, Lowered, declared, lower
from lsrl.hf.record import sealed
from lsrl.hf.rounding import (
    U, Activity, computed_bounds, factor, form_error, form_grid, informative, on_grid, product_error, pulse_error,
    reach, scan_error, written,
)
from lsrl.hf.stream import Stream, plan_stream

if TYPE_CHECKING:
    import torch
    from transformers import MambaForCausalLM, PreTrainedModel

    from lsrl.model.compiled import CompiledProgram

ModelT = TypeVar("ModelT", bound="PreTrainedModel")

GATE = 64.0  # silu(64) == 64 in float32 and float64
CONSTANT = 64.0  # the conv bias of channel 0
DT_ON, DT_OFF = 32.0, -1000.0  # softplus: exactly 32, exactly 0
EXACT_DECAY_LOG = -200.0  # A = -exp(-200) == -0.0 in float32
LARGEST = 2.0 ** 100  # the largest intermediate allowed
GAIN_CAP = 2.0 ** 30
SMALLEST_GAIN = 2.0 ** 16
SILU_GAP = 0.28  # |fl(silu(x)) - relu(x)|: 0.2785 plus the rounding of silu on |x| < 710
SILU_EXACT = 710.0  # silu(x) == relu(x) for |x| >= this, in float32 and float64


def build_mamba(model: CompiledProgram, max_len: int, dtype: torch.dtype, beta: float | None = None
                ) -> MambaForCausalLM:
    """``model`` as a stock ``MambaForCausalLM`` (module doc); ``beta`` overrides the payload scale."""
    lowered = lower(model, max_len)
    plan = _plan_blocks(lowered)
    errors, grids = slot_errors(lowered, plan)
    stream = plan_stream(stream_bounds(lowered, errors), model.name, beta)
    return _write(model, lowered, stream, plan, dtype, output_tolerance(model, lowered, errors, grids))


def _pow2_at_most(value: float) -> float:
    return 2.0 ** math.floor(math.log2(value)) if value > 0 else GAIN_CAP


def power_of_two_gain(*magnitudes: float) -> float:
    """The largest power of two ``k <= GAIN_CAP`` with ``k * m <= LARGEST`` for every magnitude."""
    largest = max([m for m in magnitudes if m > 0], default=0.0)
    return min(GAIN_CAP, _pow2_at_most(LARGEST / largest)) if largest else GAIN_CAP


def channel_reach(channel: Channel, max_len: int) -> float:
    """The scan's ``reach`` (``lsrl.hf.rounding``) of ``channel``'s decay over ``max_len`` steps."""
    return reach(channel.decay, max_len)


def _plan_blocks(lowered: Lowered) -> list[list[tuple[int, Channel, float, float]]]:
    """Per block: ``(slot, channel, gain, gate gain)``; scan and pulse channels share one gain."""
    blocks: list[list[tuple[int, Channel, float, float]]] = [[] for _ in range(max(lowered.depth, 1))]
    for index, slot in enumerate(lowered.slots):
        for channel in slot.channels:
            for part in split_signs(channel):
                blocks[slot.level - 1].append((index, part, 0.0, 0.0))
    planned = []
    for block in blocks:
        scans = [c for _, c, _, _ in block if c.kind in ("scan", "pulse")]
        scan_gain = min([power_of_two_gain(c.form.bound, c.form.bound * channel_reach(c, lowered.max_len) * GATE)
                         for c in scans], default=GAIN_CAP)
        rows = []
        for index, channel, _, _ in block:
            if channel.kind == "relu":
                gain, gate = power_of_two_gain(channel.form.bound), 0.0
            elif channel.kind == "product":
                a, b = channel.form.bound, channel.gate.bound  # type: ignore[union-attr]
                gain, gate = power_of_two_gain(a), power_of_two_gain(b, a * b)
            else:
                gain, gate = scan_gain, 0.0
            if min(gain, gate or gain) < SMALLEST_GAIN:
                raise LsrlError(f"{lowered.slots[index].name}: its values (bound {channel.form.bound:.3g}) are too "
                                "large for the saturated gates of a Mamba block; lower max_len or the Input bounds")
            rows.append((index, channel, gain, gate))
        planned.append(rows)
    return planned


def split_signs(channel: Channel) -> list[Channel]:
    """``channel`` as channels of non-negative SiLU inputs (the SiLU must saturate): a delay or a scan
    as those of its positive and negative parts, a product as its four sign cases ``relu(+-a) relu(+-b)``;
    a relu or a pulse as it is."""
    form, weight = channel.form, channel.weight
    signs = [sign for sign in (1.0, -1.0) if form.scaled(sign).high > 0]
    if channel.kind == "product":
        gate: Form = channel.gate  # type: ignore[assignment]
        return [Channel("product", form.scaled(sa), sa * sb * weight, gate=gate.scaled(sb), whole=channel)
                for sa in signs for sb in (1.0, -1.0) if gate.scaled(sb).high > 0]
    if channel.kind == "delay" and channel.impulse:
        return [Channel("relu", form, weight, lag=channel.lag, impulse=True)]
    if channel.kind == "delay":
        return [Channel("relu", form.scaled(sign), sign * weight, lag=channel.lag, whole=channel) for sign in signs]
    if channel.kind == "scan":
        return [Channel("scan", form.scaled(sign), sign * weight, decay=channel.decay, whole=channel)
                for sign in signs]
    return [channel]


def form_row(form: Form, stream: Stream, scale: float) -> dict[int, float]:
    """in_proj / lm_head row reading ``scale * form`` from the (identity-normed) stream."""
    row = {stream.payload[slot]: scale * c / stream.beta for slot, c in form.coef}
    if form.const:
        row[stream.anchor] = row.get(stream.anchor, 0.0) + scale * form.const / stream.alpha
    return row


def decay_log(decay: float) -> float:
    """The stock ``A_log`` that makes a step of ``dt = DT_ON`` decay by ``decay`` (``EXACT_DECAY_LOG`` for 1)."""
    return EXACT_DECAY_LOG if decay == 1 else math.log(-math.log(decay) / DT_ON)


def _realised_decay(decay: float) -> float:
    """``exp(dt A)`` as the stock scan computes it (A rounded to float32)."""
    a = -float(np.exp(np.float32(decay_log(decay))))
    return 1.0 if decay == 1 else math.exp(DT_ON * float(np.float32(a)))


def _write(model: CompiledProgram, lowered: Lowered, stream: Stream,
           plan: list[list[tuple[int, Channel, float, float]]], dtype: torch.dtype, tolerance: float
           ) -> MambaForCausalLM:
    from transformers import MambaConfig, MambaForCausalLM

    hidden = stream.hidden_size
    width = 1 + max(len(rows) for rows in plan)
    expand = math.ceil(width / hidden)
    inner = expand * hidden
    kernel = max(4, lowered.longest_lag + 2)
    vocab = vocabulary_size(model, lowered)
    config = MambaConfig(
        vocab_size=vocab, hidden_size=hidden, state_size=1, num_hidden_layers=len(plan), layer_norm_epsilon=0.0,
        expand=expand, conv_kernel=kernel, use_bias=False, use_conv_bias=True, hidden_act="silu",
        residual_in_fp32=False, time_step_rank=1, tie_word_embeddings=False, use_mambapy=False,
        pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )
    weights: dict[str, np.ndarray] = {}
    for layer, rows in enumerate(plan):
        weights.update(_block_weights(f"backbone.layers.{layer}.", rows, stream, inner, kernel, hidden))
    weights.update(ends(model, lowered, stream, vocab))
    record = {"arch": "mamba", "max_len": lowered.max_len, "tolerance": tolerance, "outputs": len(lowered.outputs)}
    return finished(MambaForCausalLM(config), weights, model, stream, dtype, record)


def vocabulary_size(model: CompiledProgram, lowered: Lowered) -> int:
    """Tokens ``low .. high`` for a token program, and at least one logit per output."""
    return declared(model).vocabulary(len(lowered.outputs))


def ends(model: CompiledProgram, lowered: Lowered, stream: Stream, vocab: int) -> dict[str, np.ndarray]:
    """``backbone.embeddings``, ``backbone.norm_f`` and ``lm_head`` (logits = the outputs)."""
    head = np.zeros((vocab, stream.hidden_size))
    for j, form in enumerate(lowered.outputs):
        for column, value in form_row(form, stream, 1.0).items():
            head[j, column] = value
    embeddings = np.zeros((vocab, stream.hidden_size))
    spec = declared(model)
    if spec.token:
        embeddings[:, list(stream.anchors)] = stream.alpha
        embeddings[:, stream.payload[0]] = stream.beta * (spec.token_low + np.arange(vocab))
    return {"backbone.embeddings.weight": embeddings, "backbone.norm_f.weight": np.ones(stream.hidden_size),
            "lm_head.weight": head}


def finished(hf: ModelT, weights: dict[str, np.ndarray], model: CompiledProgram, stream: Stream, dtype: torch.dtype,
             record: dict[str, Any]) -> ModelT:
    """``hf`` (a fresh stock model) in ``dtype`` with ``weights`` loaded after the overflow check, and its
    ``config.lsrl_io`` record: ``record`` holds ``arch``, ``max_len``, ``tolerance``, ``outputs`` (their
    number) and optionally ``embed_factor`` (what the stock model multiplies its embeddings by)."""
    import torch

    from lsrl.targets.facts import watch

    largest = max(float(np.max(np.abs(w), initial=0.0)) for w in weights.values())
    limit = float(torch.finfo(dtype).max) / 2.0 ** 8  # a weight times what it reads is at most LARGEST
    if largest > limit:
        raise LsrlError(f"{model.name}: a weight of {largest:.3g} would overflow {dtype}")
    stock: Any = hf  # transformers wraps ``to`` in a decorator mypy cannot read; it converts in place
    stock.to(dtype)  # before loading: float32 parameters would round the weights
    state = hf.state_dict()
    if set(weights) != set(state):
        raise InternalError(f"weight names differ from the stock model's: {sorted(set(state) ^ set(weights))}")
    hf.load_state_dict({name: torch.from_numpy(np.asarray(value, dtype=np.float64)).reshape(state[name].shape)
                        for name, value in weights.items()})
    hf.eval()
    watch(hf, record["arch"])  # its floating-point facts, here and on every new device or dtype it runs on
    spec, factor = declared(model), record.get("embed_factor", 1.0)
    feeding = {"token_low": spec.token_low} if spec.token else {
        "embed_channels": [stream.payload[i] for i in range(spec.dim)], "embed_scale": stream.beta / factor,
        "embed_constants": {str(a): stream.alpha / factor for a in stream.anchors}}
    io = make_record(model, record["arch"], record["max_len"], str(dtype).removeprefix("torch."),
                     record["tolerance"], list(range(record["outputs"])), 1.0, largest, **feeding)
    hf.config.lsrl_io = sealed({**io, "hidden_constant": {"channel": stream.anchor, "value": stream.alpha}})
    return hf


def _block_weights(prefix: str, rows: list[tuple[int, Channel, float, float]], stream: Stream, inner: int,
                   kernel: int, hidden: int) -> dict[str, np.ndarray]:
    in_proj = np.zeros((2 * inner, hidden))
    conv = np.zeros((inner, 1, kernel))
    conv_bias = np.zeros(inner)
    x_proj = np.zeros((3, inner))
    dt_bias = np.full(inner, DT_OFF)
    a_log = np.full((inner, 1), EXACT_DECAY_LOG)
    skip = np.zeros(inner)
    out_proj = np.zeros((hidden, inner))
    conv_bias[0] = CONSTANT  # channel 0: u = silu(64) = 64, the source of B_t and C_t
    x_proj[2, 0] = 1.0 / CONSTANT  # C_t = 1
    for d, (slot, channel, gain, gate) in enumerate(rows, start=1):
        for column, value in form_row(channel.form, stream, gain).items():
            in_proj[d, column] = value
        conv[d, 0, kernel - 1 - channel.lag] = 1.0
        if channel.impulse:  # the constant minus itself one step later: only at step lag + 1
            conv[d, 0, kernel - 2 - channel.lag] = -1.0
        target = stream.payload[slot]
        if channel.kind == "product":
            for column, value in form_row(channel.gate, stream, gate).items():  # type: ignore[arg-type]
                in_proj[inner + d, column] = value
            skip[d] = 1.0 / gain
            out_proj[target, d] = stream.beta * channel.weight / gate
            continue
        in_proj[inner + d, stream.anchor] = GATE / stream.alpha
        out_proj[target, d] = stream.beta * channel.weight / GATE
        if channel.kind == "relu":
            skip[d] = 1.0 / gain
        else:  # scan or pulse
            dt_bias[d] = DT_ON
            a_log[d, 0] = decay_log(channel.decay)
            x_proj[1, 0] = 1.0 / (CONSTANT * DT_ON * gain)  # dt B_t = 1 / gain
            if channel.kind == "pulse":
                conv[d, 0, kernel - 2] = -1.0
    return {
        prefix + "norm.weight": np.ones(hidden), prefix + "mixer.in_proj.weight": in_proj,
        prefix + "mixer.conv1d.weight": conv, prefix + "mixer.conv1d.bias": conv_bias,
        prefix + "mixer.x_proj.weight": x_proj, prefix + "mixer.dt_proj.weight": np.zeros((inner, 1)),
        prefix + "mixer.dt_proj.bias": dt_bias, prefix + "mixer.A_log": a_log, prefix + "mixer.D": skip,
        prefix + "mixer.out_proj.weight": out_proj,
    }


# ---- the tolerance (module doc) ---------------------------------------------------------------------

def scan_decay(decay: float) -> tuple[float, float]:
    """``(computed, delta)``: an upper bound on the decay the stock scan computes, and its distance
    from ``decay`` (module doc, 4.)."""
    if decay == 1:
        return 1.0, 0.0
    computed = _realised_decay(decay)  # plus the lowering's rounding of the program's decay (DECAY_ROUNDING)
    return min(1.0, computed + 2 * U), abs(computed - decay) + 2 * U + DECAY_ROUNDING


def _channel(channel: Channel, gain: float, gate: float, bounds: list[float], errors: list[float],
             grids: list[int | None], max_len: int, chunked: bool, state: float | None = None, live: int | None = None,
             carried: float | None = None) -> tuple[float, float, float, int | None]:
    """``(weight, error, bound, grid)`` of one channel's output (module doc, 2. to 4., and exactness); ``live``:
    the steps a scan's drive may be non-zero (``lsrl.hf.rounding.Activity``); ``carried``, where given, the
    error of its SiLU's output in place of its own (a share of a sign split's, ``_split_parts``)."""
    e, grid = factor(channel.form, gain, SILU_EXACT, SILU_GAP, bounds, errors, grids)
    e = e if carried is None or grid is not None else carried
    if channel.kind == "product":
        a, b = channel.form.bound, channel.gate.bound  # type: ignore[union-attr]
        e_b, other = factor(channel.gate, gate, SILU_EXACT, SILU_GAP, bounds, errors, grids)  # type: ignore[arg-type]
        grid = on_grid([(1.0, grid + other, a * b)]) if grid is not None and other is not None else None
        error, bound = product_error(a, e, b, e_b), a * b
    elif channel.kind == "pulse" and not chunked:  # the drive is 0 after the first step (module doc, 4.)
        bound = max(channel.form.high, 0.0)
        grid = on_grid([(1.0, grid, bound)]) if channel.decay == 1 and grid is not None else None
        error = pulse_error(bound, e + U * (bound + e), channel.decay, *scan_decay(channel.decay), max_len)
    elif channel.kind in ("scan", "pulse"):
        drive = max(channel.form.high, 0.0)
        bound = drive * reach(channel.decay, max_len) if state is None else min(drive * reach(channel.decay, max_len),
                                                                                state)
        grid = on_grid([(1.0, grid, bound)]) if channel.decay == 1 and grid is not None else None
        error = scan_error(drive, e + U * (drive + e), channel.decay, *scan_decay(channel.decay), max_len, chunked,
                           state, live)
    else:
        error, bound = e, max(channel.form.high, 0.0)
    return channel.weight, (0.0 if grid is not None else error), bound, grid


def _split_parts(rows: list[tuple[Channel, float, float]], bounds: list[float], errors: list[float],
                 grids: list[int | None], max_len: int, chunked: bool, state: float | None, live: int
                 ) -> list[tuple[float, float, float, int | None]]:
    """The parts of the channels ``split_signs`` made of one (``rows``: channel, gain, gate gain), whose
    errors are charged once for the whole (module doc, 7.)."""
    pieces = [_channel(c, gain, gate, bounds, errors, grids, max_len, chunked, state, live) for c, gain, gate in rows]
    whole = rows[0][0].whole
    if len(rows) > 1 and whole is not None and any(part[1] for part in pieces):
        gain, gate = rows[0][1], rows[0][2]
        if whole.kind == "product":
            shared = _split_product(whole, gain, gate, bounds, errors, grids)
            pieces = [pieces[0][:1] + (shared,) + pieces[0][2:]] + [(w, 0.0, b, g) for w, _, b, g in pieces[1:]]
        else:
            own, _ = factor(rows[0][0].form, gain, SILU_EXACT, SILU_GAP, bounds, errors, grids)
            shared = own + (len(rows) - 1) * SILU_GAP / gain
            pieces = [_channel(c, g, gg, bounds, errors, grids, max_len, chunked, state, live,
                               shared if i == 0 else 0.0) for i, (c, g, gg) in enumerate(rows)]
    if chunked and any(part[1] for part in pieces):  # Mamba-2's gated group norm rounds every head's output
        extra = U * sum(b + e for _, e, b, _ in pieces)
        pieces = [pieces[0][:1] + (pieces[0][1] + extra,) + pieces[0][2:]] + pieces[1:]
    return pieces


def _split_product(whole: Channel, gain: float, gate: float, bounds: list[float], errors: list[float],
                   grids: list[int | None]) -> float:
    """The error of ``sum sa sb relu(sa a) relu(sb b)`` (a product's sign split) as one product: the pieces'
    SiLU outputs of each factor sum to it within its error and one SiLU gap per piece (module doc, 7.)."""
    gate_form: Form = whole.gate  # type: ignore[assignment]
    errors_ab = []
    for form, k in ((whole.form, gain), (gate_form, gate)):
        e, grid = factor(form, k, SILU_EXACT, SILU_GAP, bounds, errors, grids)
        signs = sum(1 for sign in (1.0, -1.0) if form.scaled(sign).high > 0)
        errors_ab.append(0.0 if grid is not None else e + (signs - 1) * SILU_GAP / k)
    return product_error(whole.form.bound, errors_ab[0], gate_form.bound, errors_ab[1])


def slot_errors(lowered: Lowered, plan: list[list[tuple[int, Channel, float, float]]], chunked: bool = False
                ) -> tuple[list[float], list[int | None]]:
    """``E_s`` and the grid per slot (module doc, 1. to 5., and exactness); ``chunked``: Mamba-2 (its
    scans, and one more float32 rounding of every head's output in its gated group norm)."""
    bounds = [slot.bound for slot in lowered.slots]
    errors = [0.0] * len(bounds)
    # integer inputs, and slots no channel writes (the stream holds an exact 0 there), are on grid 0
    grids: list[int | None] = [0 if (lowered.integer_input or i >= lowered.input_dim) and not slot.channels else None
                               for i, slot in enumerate(lowered.slots)]
    activity = Activity(lowered.slots, lowered.max_len, grids)
    for rows in plan:
        splits: dict[int, tuple[int, list[tuple[Channel, float, float]]]] = {}  # the pieces of one channel
        for slot, channel, gain, gate in rows:
            splits.setdefault(id(channel.whole or channel), (slot, []))[1].append((channel, gain, gate))
        parts: dict[int, list[tuple[float, float, float, int | None]]] = {}
        for slot, pieces in splits.values():
            first = pieces[0][0]
            live = 1 if first.kind == "pulse" else activity.count(first.form)  # a pulse's drive: step 1 only
            parts.setdefault(slot, []).extend(_split_parts(pieces, bounds, errors, grids, lowered.max_len, chunked,
                                                           lowered.slots[slot].scan_state, live))
        for slot, channel_parts in parts.items():
            errors[slot], grids[slot] = written(channel_parts)
            activity.record(slot)
    return errors, grids


def stream_bounds(lowered: Lowered, errors: list[float]) -> list[float]:
    """``M_s + E_s`` per slot, what the stream holds (``lsrl.hf.rounding.computed_bounds``)."""
    return computed_bounds([slot.name for slot in lowered.slots], [slot.bound for slot in lowered.slots], errors,
                           lowered.max_len)


def output_tolerance(model: CompiledProgram, lowered: Lowered, errors: list[float], grids: list[int | None]
                     ) -> float:
    """The stated tolerance (module doc, 6.: 0 for outputs on a grid); a ``ToleranceWarning`` where it
    is as large as the outputs' bound."""
    bounds = [slot.bound for slot in lowered.slots]
    tolerance = 0.0
    for form in lowered.outputs:
        if form_grid(form, bounds, grids) is None:
            error = form_error(form, bounds, errors)
            tolerance = max(tolerance, error + U * (form.bound + error))
    return informative(model.name, tolerance, max((form.bound for form in lowered.outputs), default=0.0),
                       lowered.max_len)
