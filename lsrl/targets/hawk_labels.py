"""The unit labels of the Hawk / Griffin construction (``lsrl.targets.hawk``): what each unit of a residual block's
temporal block and gated MLP holds (``lsrl.ir.labels``), given the labels of its input stream."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from lsrl.ir.labels import Label, constant_for, copy_of, helper_for, negation_of
from lsrl.targets.blocks import Block, Dense

Stream = tuple[int, int, Dense | None]  # (offset, size, its next Dense layer or None: copied) in a residual stream


def held(labels: list[Label] | None) -> list[Label]:
    """The labels of a layer of a labelled stack (which labels every layer)."""
    assert labels is not None  # a labelled stack labels every layer
    return labels


def copies(labels: Sequence[Label]) -> list[Label]:
    return [copy_of(label) for label in labels]


def constants(labels: Sequence[Label]) -> list[Label]:
    return [constant_for(label) for label in labels]


def mlp_labels(e: list[Label], f: list[Label], out: list[Label], one: Label) -> dict:
    return {"W_e": e, "W_f": f, "W_m": out + [one]}


def identity_mlp_labels(stream: list[Label], one: Label) -> dict:
    """``_identity_mlp`` on a stream labelled ``stream`` (without its constant)."""
    return mlp_labels(copies(stream), constants(stream), copies(stream), one)


def layer_mlp_labels(streams: list[Stream], stream_labels: list[list[Label]], one: Label
                      ) -> tuple[dict, list[list[Label]]]:
    """``_layer_mlp``'s labels, and its output streams' labels."""
    e: list[Label] = []
    f: list[Label] = []
    outs: list[list[Label]] = []
    for (_, _, dense), labels in zip(streams, stream_labels):
        if dense is None:
            e, f, out = e + copies(labels), f + constants(labels), copies(labels)
        elif dense.relu:  # f = W v + c, then its ReLU; e = 1
            e, f, out = e + constants(held(dense.labels)), f + held(dense.labels), held(dense.relu_labels)
        else:
            e, f, out = e + held(dense.labels), f + constants(held(dense.labels)), held(dense.labels)
        outs.append(out)
    return mlp_labels(e, f, [label for out in outs for label in out], one), outs


def product_mlp_labels(P: list[Label], Q: list[Label], q_nonnegative: bool, product: list[Label], one: Label
                        ) -> dict:
    """``_product_mlp``'s labels for factors labelled ``P``, ``Q`` and the product ``product``."""
    if q_nonnegative:
        return mlp_labels(copies(P), copies(Q), product, one)
    return mlp_labels(copies(P) * 2, copies(Q) + [negation_of(label) for label in Q], product, one)


def state_labels(block: Block, x_labels: list[Label], carried: bool, one: Label) -> list[Label]:
    """``[s; x; 1]`` (``x`` only when ``carried``): the state block's output."""
    return held(block.state_labels) + (copies(x_labels) if carried else []) + [one]


def diagonal_temporal_labels(block: Block, x_labels: list[Label], one: Label) -> dict:
    """A ``DiagonalRecurrentBlock``'s labels: ``W_a`` gives ``[B x + b; x; 1]`` (a unit of
    ``B x + b`` is the state itself where the state is a copy, ``A``'s row zero, else a helper)."""
    out = state_labels(block, x_labels, block.gamma is not None, one)
    drive = [label if not np.any(row) else helper_for(label) for label, row in zip(held(block.state_labels), block.A)]
    return {"W_a": drive + out[block.d_state:], "rg_lru": out, "": out}


def recurrent_labels(a_prime: list[Label], z: list[Label], g: list[Label], out: list[Label]) -> dict:
    """A ``RecurrentBlock`` (App. E) whose ``a' = W_a a``, conv output ``z`` (= the RG-LRU's, which
    passes it), gate ``g`` and output ``out`` are labelled as given."""
    gates = constants(z)
    return {"W_a": a_prime, "conv": z, "rg_lru.recurrence_gate": gates, "rg_lru.input_gate": gates, "rg_lru": z,
            "W_g": g, "W_o": out, "": out}


def app_e_state_labels(block: Block, x_labels: list[Label], one: Label) -> dict:
    """``_state_residual``'s temporal labels: ``a' = [0; x; 1]``, ``z = [s; x; 1]``, ``g = 1``."""
    z = state_labels(block, x_labels, True, one)
    a_prime = constants(held(block.state_labels)) + z[block.d_state:]
    return recurrent_labels(a_prime, z, constants(z), state_labels(block, x_labels, block.gamma is not None, one))


def identity_recurrent_labels(stream: list[Label]) -> dict:
    return recurrent_labels(copies(stream), copies(stream), constants(stream), copies(stream))
