"""A next-token head for token programs: the argmax of the logits is the program's output token.

A model ``lsrl.hf.to_hf`` builds reads output j as the value of one logit (``output_logits``); the
other logits are 0, so ``generate``'s argmax is no token of the program. ``generation_head`` rewrites
``lm_head`` of a token program (its ``Input`` one integer with finite bounds, one output) so that the
logit of token ``u`` (``input_ids = u - token_low``) is

    ``logit_u = u y - u**2 / 2``

with ``y`` the output as the model computes it: ``logit_u = (y**2 - (u - y)**2) / 2``, so the largest
logit is that of the token nearest to ``y``. The output row ``r`` (``y = r . h`` on the final hidden
state ``h``) and the constant channel (``h_c = value`` at every step, the stream's anchor) give
``logit_u = u r . h - u**2 / 2 / value * h_c``: one row per token, nothing else changes.

**Margin.** Where the program's output is a token ``m`` of the vocabulary and the computed ``y`` is
within ``tolerance`` of it, in real arithmetic ``logit_m - logit_(m+d) = d (d/2 - (y - m) sign d) >=
1/2 - tolerance`` for every other token. The head's float rounding (its weights ``u r_c`` and the
dot product of ``k`` terms, ``gamma_(k+1) + 2U`` relative with ``U = 2**-24``, the float64 model's
float32 logits included) is at most ``rounding = (gamma_(k+1) + 2U) (u_max A + u_max**2 / 2)`` per
logit, where ``A = sum_c |r_c| |h_c|`` is bounded by the stream (every payload channel is below
``2**-13`` times the anchor value, ``lsrl.hf.stream``). So the argmax is the program's token with
``margin = 1/2 - tolerance - 2 rounding`` (recorded as ``generation["margin"]``); a head whose margin
is not positive is refused. RecurrentGemma's soft-cap ``tanh(l / cap) * cap`` stays the identity:
``cap`` is set to a power of two at least ``2**27`` times the largest logit.

Outputs that are not tokens of the vocabulary (beyond ``token_low .. token_high``) read as the
nearest end of it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from lsrl.errors import LsrlError
from lsrl.hf.io import io_record
from lsrl.hf.lowering import declared
from lsrl.hf.record import sealed

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from lsrl.model.compiled import CompiledProgram

UNIT_ROUNDOFF = 2.0 ** -24  # the logits are float32 in every model (float64 Mamba casts them)
PAYLOAD_SHARE = 2.0 ** -13  # a payload channel's magnitude at most this times the anchor value (lsrl.hf.stream)
TANH_IDENTITY = 2.0 ** -27  # tanh(x) == x for |x| <= this (assumed of torch, tested with the soft-cap)


def require_token_program(model: CompiledProgram, what: str) -> None:
    """``LsrlError`` naming the ``Input`` unless ``model`` reads tokens and writes one output."""
    spec = declared(model)
    if not spec.token:
        raise LsrlError(f"{what}: Input {spec.name!r} is not a token input (one integer component with finite bounds; "
                        f"it has dim {spec.dim}, integer={spec.integer}, bounds {spec.low} .. {spec.high}), so "
                        "there are no tokens to generate")
    if model.output_dim != 1:
        raise LsrlError(f"{what}: a generation head picks one token per step, but {model.name!r} has "
                        f"{model.output_dim} outputs")


def generation_head(hf_model: PreTrainedModel) -> PreTrainedModel:
    """``hf_model`` (a token program's model from ``lsrl.hf.to_hf``) with ``lm_head`` rewritten in place
    (module doc) and ``config.lsrl_io["generation"]`` recorded; returns it."""
    import torch

    record = io_record(hf_model)
    head = hf_model.lm_head.weight
    row = head.detach()[record["output_logits"][0]].double().numpy().copy()
    constant = record["hidden_constant"]
    channel, value = int(constant["channel"]), float(constant["value"])
    tokens = record["token_low"] + np.arange(hf_model.config.vocab_size, dtype=np.float64)
    largest_token = float(np.max(np.abs(tokens)))
    # A: |r_c| times each channel's bound (the anchor's is value)
    reach = abs(row[channel]) * value + float(np.sum(np.abs(np.delete(row, channel)))) * PAYLOAD_SHARE * value
    largest_logit = largest_token * reach + largest_token ** 2 / 2
    terms = int(np.count_nonzero(row)) + 1
    gamma = terms * UNIT_ROUNDOFF / (1 - terms * UNIT_ROUNDOFF)
    rounding = (gamma + 2 * UNIT_ROUNDOFF) * largest_logit
    margin = 0.5 - record["tolerance"] - 2 * rounding
    if margin <= 0:
        raise LsrlError(f"{record['program']}: the outputs' tolerance {record['tolerance']:.3g} leaves the generation "
                        f"head no margin (1/2 - tolerance - rounding {2 * rounding:.3g} <= 0); its argmax would not "
                        "be the program's token")
    weights = tokens[:, None] * row[None, :]
    weights[:, channel] -= tokens ** 2 / 2 / value
    with torch.no_grad():
        head.copy_(torch.from_numpy(weights).to(head.dtype))
    if hasattr(hf_model.config, "logits_soft_cap"):  # RecurrentGemma: keep tanh(l / cap) * cap the identity
        capped = math.log2(largest_logit + rounding) - math.log2(TANH_IDENTITY)
        hf_model.config.logits_soft_cap = 2.0 ** math.ceil(capped)
    hf_model.config.lsrl_io = sealed({**record, "output_logits": None,
                                      "generation": {"logit": "u * y - u**2 / 2", "margin": float(margin)}})
    return hf_model
