"""The registry record of the stock LSTM / GRU targets: their builder reads the compiled program itself.

The other targets are built from a ``BlockStack`` (``lsrl.targets.blocks``); the stock ones need the
program's nodes, because their scales come from ``lsrl.lang.value_bounds`` of every layer at
``max_len`` (``lsrl.targets.stock``). Torch-free: the builder is resolved when first used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lsrl.targets.registry import Target, resolve_reference, check_options

if TYPE_CHECKING:
    from torch import nn

    from lsrl.model.compiled import CompiledProgram


@dataclass(frozen=True)
class ProgramTarget(Target):
    """A ``Target`` whose ``builder(model: CompiledProgram, **options)`` takes the compiled program.

    The module states its own accuracy (``net.tolerance``), so no precision warning is attached; its
    unit labels and the nodes it can patch come from the builder (``module.unit_plan``: None for a model
    without labels, and then ``net.patchable`` is None and ``patch=`` raises).
    """

    def to_torch(self, model: CompiledProgram, **options: Any) -> nn.Module:
        """``model`` as a module of this architecture (see ``lsrl.targets.to_torch``)."""
        check_options(self.name, options, self.options)
        module = resolve_reference(self.builder)(model, **options)
        module.declared_input = model.input
        module.precision = None
        module.node_widths = model.node_widths  # the widths patches must have (lsrl.targets.patch)
        plan = module.unit_plan
        module.unpatchable = {} if plan is None else plan.unpatchable
        module.patchable = None if plan is None else plan.patchable
        return module
