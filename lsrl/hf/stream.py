"""The residual stream the constructions share: anchor channels that make every RMSNorm an exact
constant scaling, and the payload scale ``beta`` that keeps the program's values small beside them.

Layout: ``hidden_size = K * alpha**2`` channels; ``K`` anchor channels hold ``alpha`` (a power of two)
at every step, so the anchors' squares sum to exactly ``hidden_size``; every other channel is either
unused (0) or a *payload* channel holding ``beta * v`` for one value ``v`` of the program, where
``beta`` is a power of two.

**Claim.** If ``sum_i (beta * bound_i)**2 <= 2**-MARGIN_BITS * alpha**2`` (``bound_i`` bounds the
value of payload channel i at every step, ``MARGIN_BITS = 26``), then in float32 (and in float64)
``mean(h**2)`` rounds to exactly 1, so an RMSNorm with ``eps = 0`` computes ``h * rsqrt(1) * w =
h * w``: the norm is the identity up to the weight (and, where the stock code computes it in float32,
the rounding of each payload value to float32, a relative ``2**-24`` of that value).

**Proof.** Write ``P`` for the payload's sum of squares, ``P <= 2**-26 alpha**2``. Whatever order the
sum is taken in, a partial sum that contains ``m >= 1`` anchors is, before rounding, ``m alpha**2 +
p`` with ``0 <= p <= P (1 + 2**-20)`` (payload partial sums are non-negative and their own rounding is
relative). ``m alpha**2`` is a float (``m <= K`` small, ``alpha**2`` a power of two) at least
``alpha**2``, so half its unit in the last place is at least ``2**-24 alpha**2 > p`` (float32; float64
has more room): the sum rounds back to ``m alpha**2``. Sums of such partial sums are exact (small
multiples of a power of two). Hence the total is ``K alpha**2 = hidden_size`` and the mean is exactly
1 (an accumulator wider than float32 rounds ``hidden_size + P`` to ``hidden_size`` by the same half-ulp
argument). ``1 + 0 = 1`` and ``rsqrt(1) = 1`` exactly. The bound is tested at its boundary in
``tests/test_hf_mamba.py``: the largest ``beta`` allowed works, a 2**12 times larger one does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lsrl.errors import LsrlError

MARGIN_BITS = 26  # payload energy at most 2**-26 of one anchor's square
MAX_ANCHORS = 4
SMALLEST_SCALE = 2.0 ** -100  # below this the payload of a float32 stream would lose its precision


@dataclass(frozen=True)
class Stream:
    """A residual stream: ``hidden_size`` channels, the anchors ``anchors`` holding ``alpha``, payload
    channels ``payload`` (in order) holding ``beta`` times a value."""

    hidden_size: int
    anchors: tuple[int, ...]
    alpha: float
    beta: float
    payload: tuple[int, ...]

    @property
    def anchor(self) -> int:
        """The first anchor channel (the one the constructions read their constants from)."""
        return self.anchors[0]


def hidden_size_for(width: int) -> tuple[int, int]:
    """``(hidden_size, anchors)``: the smallest ``K * 4**j`` with room for ``width`` payload channels
    beside ``K <= MAX_ANCHORS`` anchors (``alpha = 2**j``)."""
    best = None
    for anchors in range(1, MAX_ANCHORS + 1):
        power = 0
        while anchors * 4 ** power < width + anchors:  # at most log4(width) + 1 rounds
            power += 1
        size = anchors * 4 ** power
        if best is None or size < best[0]:
            best = (size, anchors)
    assert best is not None
    return best


def payload_scale(bounds: Sequence[float], alpha: float, margin_bits: int = MARGIN_BITS) -> float:
    """The largest power of two ``beta`` with ``sum (beta * bound)**2 <= 2**-margin_bits * alpha**2``
    (the module's claim); ``bounds``: finite magnitudes."""
    energy = math.fsum(float(b) ** 2 for b in bounds)
    if energy == 0:
        return 1.0
    # beta**2 * energy <= 2**-margin * alpha**2  <=>  beta <= alpha * 2**(-margin/2) / sqrt(energy)
    exponent = math.floor(math.log2(alpha) - margin_bits / 2 - math.log2(energy) / 2)
    # the exact solution's floor already: the loop corrects log2's rounding, a round or two
    while (2.0 ** exponent) ** 2 * energy > 2.0 ** -margin_bits * alpha ** 2:
        exponent -= 1
    return 2.0 ** exponent


def plan_stream(bounds: Sequence[float], where: str, beta: float | None = None, extra_width: int = 0) -> Stream:
    """The stream for payload channels bounded by ``bounds`` (max |value| per channel, in order) plus
    ``extra_width`` unused channels; ``beta`` overrides the scale (tests of the boundary). Anchors
    come first. ``LsrlError`` (naming ``where``) when the scale would fall below ``SMALLEST_SCALE``."""
    size, count = hidden_size_for(len(bounds) + extra_width)
    alpha = math.sqrt(size // count)
    scale = payload_scale(bounds, alpha) if beta is None else float(beta)
    if scale < SMALLEST_SCALE:
        raise LsrlError(f"{where}: the program's values are too large for the residual stream (payload scale "
                        f"{scale:.3g} < {SMALLEST_SCALE:.3g}); lower max_len or the Input bounds")
    return Stream(size, tuple(range(count)), alpha, scale, tuple(range(count, count + len(bounds))))
