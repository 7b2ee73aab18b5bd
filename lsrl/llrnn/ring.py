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

from lsrl.errors import shown
from lsrl.llrnn.checks import LlrnnArgumentError, count, integers

WORD_TRANSFORMS = {
    "id": lambda word: word,
    "repeat": lambda word: word + word,  # Sec. 4.3.1: [[repeat]][[001]] = [[001001]], i.e. g -> g^2
}


MAX_DENSE_RING = 4_096  # rotation / reflection build dense N x N matrices (4096^2 float64 entries: 128 MiB)


def rotation(N: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None) -> torch.Tensor:
    """``R`` with ``R e_a = e_{a+1 mod N}``: ``R[i, j] = 1`` iff ``i = j + 1 mod N``."""
    N, factory = _dense_ring("rotation", N, dtype, device)
    return torch.eye(N, **factory).roll(1, dims=0)


def reflection(N: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None) -> torch.Tensor:
    """``R'`` with ``R' e_a = e_{-a mod N}``."""
    N, factory = _dense_ring("reflection", N, dtype, device)
    device = factory["device"]
    matrix = torch.zeros(N, N, **factory)
    positions = torch.arange(N, device=device)
    matrix[(-positions) % N, positions] = 1
    return matrix


def _dense_ring(owner: str, N: int, dtype: torch.dtype, device: torch.device | str | None) -> tuple[int, dict]:
    """The checked size ``N`` (1..MAX_DENSE_RING) and the dtype and device of a dense ring operator."""
    N = count(owner, "N", N, high=MAX_DENSE_RING)
    if not isinstance(dtype, torch.dtype):
        raise LlrnnArgumentError(f"{owner}: dtype must be a torch.dtype, got {type(dtype).__name__}")
    try:
        device = torch.device(device) if device is not None else None
    except (RuntimeError, TypeError, ValueError):  # ValueError: an index beyond a C long
        raise LlrnnArgumentError(f"{owner}: device must be a torch device or its name, got {device!r}"[:200]) from None
    return N, {"dtype": dtype, "device": device}


def check_word(word: str) -> str:
    """``word`` if it is a string of the letters 0 and 1."""
    if not isinstance(word, str):
        raise LlrnnArgumentError(f"binary word must be a string of 0s and 1s, got {type(word).__name__}")
    if set(word) - {"0", "1"}:
        raise LlrnnArgumentError(f"binary word {word!r} may only hold the letters 0 and 1")
    return word


def word_operator(word: str, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``[[word]](alpha, beta)``: ``alpha`` for 0, ``beta`` for 1, the first letter applied first."""
    for name, matrix in (("alpha", alpha), ("beta", beta)):
        if not isinstance(matrix, torch.Tensor) or matrix.dim() != 2 or matrix.shape[0] != matrix.shape[1]:
            raise LlrnnArgumentError(f"word_operator: {name} must be a square matrix (torch.Tensor), got "
                                     f"{getattr(matrix, 'shape', type(matrix).__name__)}")
    if alpha.shape != beta.shape or alpha.dtype != beta.dtype:
        raise LlrnnArgumentError(f"word_operator: alpha and beta must have one shape and dtype, got "
                                 f"{tuple(alpha.shape)} {alpha.dtype} and {tuple(beta.shape)} {beta.dtype}")
    operator = torch.eye(alpha.shape[0], dtype=alpha.dtype, device=alpha.device)
    for letter in check_word(word):
        operator = (alpha if letter == "0" else beta) @ operator
    return operator


def word_counts(word: str) -> tuple[int, int]:
    """``(a, b)``: the numbers of 0s and of 1s in ``word`` (Sec. 4.2)."""
    return check_word(word).count("0"), word.count("1")


def word_transform(name: str, word: str) -> str:
    """The word ``f(word)`` for a transform ``f`` in ``WORD_TRANSFORMS`` (Sec. 4.3.1)."""
    if not isinstance(name, str) or name not in WORD_TRANSFORMS:
        raise LlrnnArgumentError(f"unknown word transform {shown(name)}; known: {sorted(WORD_TRANSFORMS)}")
    return WORD_TRANSFORMS[name](check_word(word))


def ring_powers(N: int, powers: Iterable[int] | None = None) -> tuple[int, ...]:
    """The rotations ``R^n`` a head of an N-position ring may choose: ``powers`` modulo N (so -1 is
    a step back), without repeats; all N when ``powers`` is None."""
    return tuple(range(N)) if powers is None else tuple(dict.fromkeys(p % N for p in powers))


def power_index(N: int, power: int) -> torch.Tensor:
    """Gather index of ``R^power``: ``(R^n v)[i] = v[i - n mod N]``."""
    return (torch.arange(N) - power) % N


def word_index(N: int, word: str) -> torch.Tensor:
    """Gather index of ``[[word]](R, R')``, composed letter by letter as gather indices (no N x N matrix):
    ``(L O v)[i] = (O v)[idx_L[i]]``, so applying L after O maps ``idx_O`` to ``idx_O[idx_L]``."""
    positions = torch.arange(N)
    letters = {"0": power_index(N, 1), "1": (-positions) % N}  # R: v[i - 1]; R': v[-i]
    index = positions
    for letter in check_word(word):
        index = index[letters[letter]]
    return index


def mix(coefficients: torch.Tensor, v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``sum_k c_k g_k v`` for a batch: ``coefficients`` (..., K), ``v`` (..., N), ``index`` (K, N)."""
    return torch.einsum("...k,...kn->...n", coefficients, v[..., index])


def apply_powers(p: torch.Tensor, v: torch.Tensor, powers: Iterable[int]) -> torch.Tensor:
    """``sum_k p_k R^{powers[k]} v`` for a batch: ``p`` (..., K), ``v`` (..., N)."""
    for name, tensor in (("p", p), ("v", v)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() < 1:
            raise LlrnnArgumentError(f"apply_powers: {name} must be a torch.Tensor (..., K) / (..., N), got "
                                     f"{type(tensor).__name__}")
    powers = integers("apply_powers", "powers", powers)
    if p.shape[-1] != len(powers) or p.dtype != v.dtype:
        raise LlrnnArgumentError(f"apply_powers: p must be (..., {len(powers)}) (one coefficient per power) of v's "
                                 f"dtype {v.dtype}, got {tuple(p.shape)} {p.dtype}")
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
