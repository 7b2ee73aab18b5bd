"""Operators on a memory ring of ``N`` positions: rotations, the reflection, binary words.

A memory ring has address space ``W = R^N`` with basis ``e_0 .. e_{N-1}`` (the vertices of the
regular N-gon, Sec. 2.3.1). The dihedral group acts on it by

- the rotation ``R e_a = e_{a+1 mod N}`` (Sec. 2.3), so a read address focused at ``a`` moves to ``a+1``;
- the reflection ``R' e_a = e_{-a mod N}`` (Sec. 3.2, Example: dihedral NTM); ``R'`` and ``R`` do not commute.

A binary word ``S`` denotes the operator ``[[S]](alpha, beta)`` that reads ``alpha`` for 0 and
``beta`` for 1 in reverse order (Sec. 2.4.3, the example on ``bint_A``):
``[[001]](alpha, beta) = beta alpha alpha``, so the first letter acts first.

Write addresses live in the dual space ``W*``. The paper moves them by ``R*``; the dual map in the
literal sense is the transpose ``R^T = R^{-1}``, which would move a write head backwards. We use the
contragredient action ``g -> (g^{-1})^T`` instead, which for a permutation matrix is the matrix itself:
in coordinates a write address is moved by the same matrix as a read address, so command ``k`` moves
the write head ``k`` steps forward as in the NTM paper's Eq. (8) (quoted in Sec. 2.3: ``w'_i = sum_j s_{i-j} w_j``).

Every group element is a permutation of positions, so models never multiply by ``N x N`` matrices:
a group element is stored as a gather index ``idx`` with ``(g v)[i] = v[idx[i]]``, and a weighted sum
of group elements is one gather and one contraction (``mix``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from lsrl.llrnn.checks import LlrnnArgumentError

WORD_TRANSFORMS = {
    "id": lambda word: word,
    "repeat": lambda word: word + word,  # Sec. 4.3.1: [[repeat]][[001]] = [[001001]], i.e. g -> g^2
}


def rotation(N: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None) -> torch.Tensor:
    """``R`` with ``R e_a = e_{a+1 mod N}``: ``R[i, j] = 1`` iff ``i = j + 1 mod N``."""
    return torch.eye(N, dtype=dtype, device=device).roll(1, dims=0)


def reflection(N: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None) -> torch.Tensor:
    """``R'`` with ``R' e_a = e_{-a mod N}``."""
    matrix = torch.zeros(N, N, dtype=dtype, device=device)
    positions = torch.arange(N, device=device)
    matrix[(-positions) % N, positions] = 1
    return matrix


def check_word(word: str) -> str:
    if set(word) - {"0", "1"}:
        raise LlrnnArgumentError(f"binary word {word!r} may only hold the letters 0 and 1")
    return word


def word_operator(word: str, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``[[word]](alpha, beta)``: ``alpha`` for 0, ``beta`` for 1, the first letter applied first."""
    operator = torch.eye(alpha.shape[0], dtype=alpha.dtype, device=alpha.device)
    for letter in check_word(word):
        operator = (alpha if letter == "0" else beta) @ operator
    return operator


def word_counts(word: str) -> tuple[int, int]:
    """``(a, b)``: the numbers of 0s and of 1s in ``word`` (Sec. 4.2)."""
    return check_word(word).count("0"), word.count("1")


def word_transform(name: str, word: str) -> str:
    """The word ``f(word)`` for a transform ``f`` in ``WORD_TRANSFORMS`` (Sec. 4.3.1)."""
    if name not in WORD_TRANSFORMS:
        raise LlrnnArgumentError(f"unknown word transform {name!r}; known: {sorted(WORD_TRANSFORMS)}")
    return WORD_TRANSFORMS[name](check_word(word))


def ring_powers(N: int, powers: Iterable[int] | None = None) -> tuple[int, ...]:
    """The rotations ``R^n`` a head of an N-position ring may choose: ``powers`` modulo N (so -1 is
    a step back), without repeats; all N when ``powers`` is None."""
    return tuple(range(N)) if powers is None else tuple(dict.fromkeys(p % N for p in powers))


def power_index(N: int, power: int) -> torch.Tensor:
    """Gather index of ``R^power``: ``(R^n v)[i] = v[i - n mod N]``."""
    return (torch.arange(N) - power) % N


def word_index(N: int, word: str) -> torch.Tensor:
    """Gather index of ``[[word]](R, R')``."""
    return permutation_index(word_operator(word, rotation(N), reflection(N)))


def permutation_index(matrix: torch.Tensor) -> torch.Tensor:
    """The gather index ``idx`` of a permutation matrix ``P``: ``(P v)[i] = v[idx[i]]``."""
    index = matrix.argmax(dim=1)
    if not torch.equal(matrix, torch.eye(matrix.shape[0], dtype=matrix.dtype)[index]):
        raise ValueError("matrix is not a permutation matrix")
    return index.cpu()


def mix(coefficients: torch.Tensor, v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``sum_k c_k g_k v`` for a batch: ``coefficients`` (..., K), ``v`` (..., N), ``index`` (K, N)."""
    return torch.einsum("...k,...kn->...n", coefficients, v[..., index])


def apply_powers(p: torch.Tensor, v: torch.Tensor, powers: Iterable[int]) -> torch.Tensor:
    """``sum_k p_k R^{powers[k]} v`` for a batch: ``p`` (..., K), ``v`` (..., N)."""
    N = v.shape[-1]
    index = torch.stack([power_index(N, n) for n in powers]).to(v.device)
    return mix(p, v, index)


# ---- the TF code's stabilisers: steps outside linear logic, shared by the explicit models and the LLRNN forms ----

SHARPEN_FLOOR = 1e-6  # added before raising to gamma, as in the TF code: keeps 0^gamma differentiable


def sharpen(address: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """``(a + 1e-6)^gamma / sum`` over the positions (..., N), ``gamma`` (..., 1): a power and a
    normalisation, neither of them linear. The entries are divided by the largest magnitude first
    (which cancels in the ratio): unscaled, every power underflows to 0 once ``gamma`` is large
    (float32: ``0.5^150`` is 0) and the ratio is 0 / 0; scaled, the largest stays 1. A negative entry
    (the paper's linear pattern contents can move ring 1's address to one) is powered by its magnitude
    and keeps its sign, where a real power of it would be NaN."""
    floored = address + SHARPEN_FLOOR
    scaled = floored / floored.abs().amax(-1, keepdim=True)
    powered = scaled.sign() * scaled.abs() ** gamma
    return powered / powered.sum(-1, keepdim=True)


def content_weighting(key: torch.Tensor, strength: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    """Graves et al.'s content weighting ``softmax_i(softplus(strength) cos(key, M_{.,i}))`` (..., N) of a
    key (..., d) against a memory (..., d, N): a softmax of cosines, not linear in the memory."""
    similarity = torch.cosine_similarity(key[..., :, None], memory, dim=-2, eps=1e-8)
    return torch.softmax(torch.nn.functional.softplus(strength) * similarity, dim=-1)
