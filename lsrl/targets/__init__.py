"""Compile targets: a CompiledProgram as a PyTorch module of a chosen recurrent architecture."""

from __future__ import annotations

from lsrl.ir.labels import label_table
from lsrl.errors import LsrlError
from lsrl.targets.blocks import BlockStack, to_blocks
from lsrl.targets.checks import check_hawk_size, check_options
from lsrl.targets.patch import held_nodes
from lsrl.targets.precision import precision_of
from lsrl.targets.recurrent import BlockModel, ClassicRNNBlock, LinearRNNBlock, block_report

ARCHITECTURES = (
    "linear_rnn", "gated_linear_rnn", "diagonal_linear_rnn", "rnn", "gated_rnn", "gru", "lstm", "hawk", "griffin"
)
UNGATED = ("linear_rnn", "rnn")
NONLINEAR_STATE = ("rnn", "gated_rnn", "gru", "lstm")  # the architectures that can run a ReLUState
OPTIONS = {
    "gru": ("gate_bound",), "hawk": ("max_len", "construction"), "griffin": ("max_len", "window", "heads", "construction"),
}


def _require_no_gate(stack: BlockStack, arch: str) -> None:
    gates = [block.gate_name for block in stack.blocks if block.gamma is not None]
    if gates:
        raise LsrlError(
            f"{arch!r} has no multiplicative gate, but Multi '{gates[0]}' needs one; "
            f"compile to 'gated_{arch}' (or another gated architecture) instead"
        )


def _require_linear_states(model, arch: str) -> None:
    """Refuse a ReLUState for an architecture whose state update is linear (it cannot express one)."""
    states = [layer for layer in model.layers if layer.kind == "ReLUState"]
    if states and arch not in NONLINEAR_STATE:
        raise LsrlError(
            f"{arch!r} updates its state linearly, but {states[0].describe()} updates its state through a ReLU "
            f"(h_t = ReLU(A h_(t-1) + B x_t + b)), which no linear recurrence can express; compile to one of "
            f"{NONLINEAR_STATE} instead"
        )


def to_torch(model, arch: str, **options):
    """``model`` (a CompiledProgram) as a ``torch.nn.Module`` of architecture ``arch``.

    The module checks its input (``lsrl.targets.checks``): shape, dtype, finiteness and the
    program's ``Input`` bounds (``module(x, check_bounds=False)`` skips the last); it warns once
    when run in a precision its weights are too large for (``lsrl.targets.precision``).

    ``module.labels`` (None when ``model.labels`` is None) maps a sub-module's name, as in
    ``module.named_modules()``, to one ``lsrl.ir.labels.UnitLabel`` per unit of its output's
    last dimension (what a forward hook on it sees; the first element of a tuple output):

    * linear_rnn, gated_linear_rnn, rnn, gated_rnn, diagonal_linear_rnn: ``blocks.{i}`` (the
      block's output), ``blocks.{i}.phi`` / ``.gamma`` (the MLPs) and ``.phi.layers.{j}`` /
      ``.gamma.layers.{j}`` (each ``nn.Linear``, before its ReLU); the state ``s_t`` is
      ``blocks.{i}.state`` (no module outputs it: ``block.states(x)`` computes it), in the classic
      RNNs also ``blocks.{i}.rnn`` (``[s+; s-]``, Eq. (11)), in diagonal_linear_rnn
      ``blocks.{i}.recurrence``.
    * gru, lstm: ``rnn.l{k}`` (layer k's ``h``; ``module.rnn.layer(k, x)`` computes it), its gates
      after their activation, named by PyTorch's letters: ``rnn.l{k}.r``, ``.z``, ``.n`` (GRU),
      ``rnn.l{k}.i``, ``.f``, ``.g``, ``.o`` and the cell ``rnn.l{k}.c`` (LSTM), and ``readout``.
    * hawk, griffin: ``embedding``, ``blocks.{i}`` (the residual stream after block i),
      ``blocks.{i}.temporal`` and its sub-modules (``W_a``, ``rg_lru``; App. E adds ``conv``,
      ``rg_lru.recurrence_gate``, ``rg_lru.input_gate``, ``W_g``, ``W_o``), ``blocks.{i}.mlp`` and
      ``.mlp.W_e``, ``.mlp.W_f`` (before its ReLU), ``.mlp.W_m``; ``readout``. Griffin's
      attention blocks pass their input: ``blocks.{i}.temporal`` is labelled, its projections
      (never run) are not; neither is App. E's ``conv.conv`` (channels first).

    ``module(x, patch={node: values})`` patches program nodes as ``model(xs, patch=...)`` does
    (``lsrl.targets.patch``): every unit labelled with the node in a role of ``PATCHABLE_ROLES`` is
    set to what its label says it holds (``values``: ``(T, dim)`` or ``(B, T, dim)``), a patched
    state before the recurrence carries it. ``module.patchable`` lists the nodes it accepts (the
    compiled model's ``patchable``, of ``model.diagonal()`` for the targets built from it, less
    ``module.unpatchable``: node -> why this target has no unit for it); any other raises
    ``LsrlError``. ``module.run_with_cache(x, patch=...)`` takes those nodes as well as sub-layers.
    """
    if arch not in ARCHITECTURES:
        raise LsrlError(f"unknown architecture {arch!r}; expected one of {ARCHITECTURES}")
    check_options(arch, options, OPTIONS.get(arch, ()))
    _require_linear_states(model, arch)
    source = _source(model, arch, options)
    module = _build(model, source, arch, options)
    module.declared_input = model.input
    module.precision = precision_of(model)
    module.unpatchable = getattr(module, "unpatchable", {})
    module.patchable = None if module.labels is None else sorted(
        (set(source.patchable) & held_nodes(module)) - set(module.unpatchable))
    return module


def _source(model, arch: str, options: dict):
    """The compiled model the target computes: ``model``, or its diagonal form for the targets built
    on ``model.diagonal()`` (diagonal_linear_rnn; Hawk and Griffin's default construction)."""
    diagonal = arch == "diagonal_linear_rnn" or (
        arch in ("hawk", "griffin") and options.get("construction", "diagonal") == "diagonal")
    if not diagonal:
        return model
    from lsrl.compiler.diagonal import float_diagonal

    return float_diagonal(model)


def _build(model, source, arch: str, options: dict):
    if arch == "diagonal_linear_rnn":
        from lsrl.targets.diagonal import build_diagonal_linear_rnn

        return build_diagonal_linear_rnn(to_blocks(source))
    stack = to_blocks(model)
    if arch in UNGATED:
        _require_no_gate(stack, arch)
    if arch in ("linear_rnn", "gated_linear_rnn"):
        return BlockModel(stack, LinearRNNBlock, arch)
    if arch in ("rnn", "gated_rnn"):
        return BlockModel(stack, ClassicRNNBlock, arch)
    if arch in ("gru", "lstm"):
        from lsrl.targets import gru_lstm

        return (gru_lstm.build_gru if arch == "gru" else gru_lstm.build_lstm)(stack, **options)
    from lsrl.targets import hawk

    if options.get("construction") == "app_e":
        check_hawk_size(stack, arch, options.get("max_len"))
    return (hawk.build_hawk if arch == "hawk" else hawk.build_griffin)(
        model if source is model else to_blocks(source), **options)


def layer_report(module) -> list:
    """Per layer (block) of a target module: kind, hidden size, non-zero parameters."""
    if isinstance(module, BlockModel):
        return block_report(module)
    if module.architecture == "diagonal_linear_rnn":
        from lsrl.targets.diagonal import layer_report as report
    elif module.architecture in ("gru", "lstm"):
        from lsrl.targets.gru_lstm import layer_report as report
    else:
        from lsrl.targets.hawk import layer_report as report
    return report(module)


def inspect(model, archs=ARCHITECTURES, max_len=None) -> str:
    """A table per architecture: layer count, each layer's hidden size and non-zero parameters.

    Hawk and Griffin rows use the diagonal construction; given ``max_len``, the literal App. E one
    (whose temporal convolution spans ``max_len`` steps).
    """
    lines = [model.summary()]
    if model.labels is not None:
        lines.append(label_table(model.layers, model.labels))
    for arch in archs:
        literal = max_len is not None and arch in ("hawk", "griffin")
        options = {"max_len": max_len, "construction": "app_e"} if literal else {}
        try:
            rows = layer_report(to_torch(model, arch, **options))
        except LsrlError as error:
            lines.append(f"\n{arch}: not available ({error})")
            continue
        total = sum(row["nonzeros"] for row in rows)
        widest = max((row["hidden"] for row in rows), default=0)
        layers = len({row["layer"] for row in rows})
        lines.append(f"\n{arch}: {layers} layers, widest hidden {widest}, {total} non-zero parameters")
        lines.extend(
            f"  {row['layer']:3d} {row['kind']:24} hidden {row['hidden']:5d}  non-zeros {row['nonzeros']}"
            for row in rows
        )
    return "\n".join(lines)


__all__ = ["ARCHITECTURES", "BlockStack", "inspect", "layer_report", "to_blocks", "to_torch"]
