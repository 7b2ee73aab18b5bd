"""Compile targets: a CompiledProgram as a PyTorch module of a chosen recurrent architecture.

``TARGETS`` is the registry (``lsrl.targets.registry``): per architecture, its builder, layer report,
labels, options and requirements; ``lsrl.targets.catalog`` registers lsrl's. Importing this package
does not import torch: a target's modules are imported when it is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsrl.errors import LsrlError, listed
from lsrl.ir.labels import label_table
from lsrl.targets import catalog  # noqa: F401  (registers lsrl's targets)
from lsrl.targets.blocks import BlockStack, to_blocks
from lsrl.targets.registry import TARGETS, Target, find, register
from lsrl.targets.stock_target import ProgramTarget

if TYPE_CHECKING:
    from torch import nn

    from lsrl.model.compiled import CompiledProgram

ARCHITECTURES = tuple(TARGETS)
UNGATED = tuple(name for name, target in TARGETS.items() if not target.gated)
NONLINEAR_STATE = tuple(name for name, target in TARGETS.items() if target.relu_state)  # can run a ReLUState
OPTIONS = {name: target.options for name, target in TARGETS.items() if target.options}
# built from the compiled program at a max_len, without unit labels (lsrl.targets.stock)
STOCK = tuple(name for name, target in TARGETS.items() if isinstance(target, ProgramTarget))


def to_torch(model: CompiledProgram, arch: str, **options: Any) -> nn.Module:
    """``model`` (a CompiledProgram) as a ``torch.nn.Module`` of architecture ``arch``.

    The module checks its input (``lsrl.targets.checks``): shape, dtype, finiteness and the
    program's ``Input`` bounds (``module(x, check_bounds=False)`` skips the last) and, where the module
    has a ``max_len``, the length; it warns once when run in a precision its weights are too large for
    (``lsrl.targets.precision``). ``module.tolerance`` states its accuracy; ``module.to(dtype)`` restates
    it or is refused (half precision, the meta device; ``lsrl.targets.promises``).

    ``module.labels`` (None when ``model.labels`` is None) maps a sub-module's name, as in
    ``module.named_modules()``, to one ``lsrl.ir.labels.UnitLabel`` per unit of its output's
    last dimension (what a forward hook on it sees; the first element of a tuple output); which
    sub-modules, per architecture: ``TARGETS[arch].labels`` (``lsrl.targets.catalog``).

    ``module(x, patch={node: values})`` patches program nodes as ``model(xs, patch=...)`` does
    (``lsrl.targets.patch``): every unit labelled with the node in a role of ``PATCHABLE_ROLES`` is
    set to what its label says it holds (``values``: ``(T, dim)`` or ``(B, T, dim)``), a patched
    state before the recurrence carries it. ``module.patchable`` lists the nodes it accepts (the
    compiled model's ``patchable``, of ``model.diagonal()`` for the targets built from it, less
    ``module.unpatchable``: node -> why this target has no unit for it); any other raises
    ``LsrlError``. ``module.run_with_cache(x, patch=...)`` takes those nodes as well as sub-layers.
    """
    return find(arch).to_torch(model, **options)


def layer_report(module: nn.Module) -> list[dict]:
    """Per layer (block) of a target module: kind, hidden size, non-zero parameters (the report its
    architecture's ``Target`` names)."""
    architecture = getattr(module, "architecture", None)
    if not isinstance(architecture, str) or architecture not in TARGETS:
        raise LsrlError(f"layer_report needs a module built by to_torch, got a {type(module).__name__}")
    return TARGETS[architecture].layer_report(module)


def inspect(model: CompiledProgram, archs: tuple[str, ...] = ARCHITECTURES, max_len: int | None = None) -> str:
    """A table per architecture: layer count, each layer's hidden size and non-zero parameters.

    Hawk and Griffin rows use the diagonal construction; given ``max_len``, the literal App. E one
    (whose temporal convolution spans ``max_len`` steps). The stock LSTM / GRU rows need ``max_len``.
    """
    from lsrl.model.compiled import CompiledProgram

    if not isinstance(model, CompiledProgram):
        raise LsrlError(f"inspect: model must be a CompiledProgram, got {type(model).__name__}")
    names = listed(archs)
    chosen: tuple[Any, ...] = (archs,) if names is None else tuple(names)  # a lone name too, checked next
    if not all(isinstance(arch, str) and arch in TARGETS for arch in chosen):
        raise LsrlError(f"inspect: archs must be architecture names among {ARCHITECTURES}, got {chosen!r}"[:300])
    lines = [model.summary()]
    if model.labels is not None:
        lines.append(label_table(model.layers, model.labels))
    for arch in chosen:
        literal = max_len is not None and "construction" in TARGETS[arch].options
        options = {"max_len": max_len, "construction": "app_e"} if literal else {}
        if arch in STOCK and max_len is not None:  # their scales come from the bounds at max_len
            options = {"max_len": max_len}
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


__all__ = [
    "ARCHITECTURES", "BlockStack", "NONLINEAR_STATE", "OPTIONS", "STOCK", "TARGETS", "Target", "UNGATED", "inspect",
    "layer_report", "register", "to_blocks", "to_torch",
]
