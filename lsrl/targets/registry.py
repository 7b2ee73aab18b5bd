"""The target registry: one ``Target`` record per architecture that ``model.to_torch`` builds.

A record names its builder and its layer report (``"module:function"``, imported when first used,
so that neither ``import lsrl.targets`` nor this registry imports torch), says which sub-modules its
unit labels name, the options it accepts and what it needs of a program (a gate for a ``Multi``, a
non-linear state update for a ``ReLUState``, the diagonal form ``model.diagonal()``).

``register`` adds a record to the one registry of builders that ``lsrl.model.extensions`` keeps for
the model (``BUILDERS``, shared with ``lsrl.hf``'s architectures): ``model.to_torch(name)`` looks it up
there, and ``TARGETS`` reads the records of ``to_torch`` from it. The targets lsrl makes are registered by
``lsrl.targets.catalog``; a new target is a builder in its own module plus one ``Target`` there.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, cast

from lsrl.compiler.diagonal import float_diagonal
from lsrl.errors import LsrlError, whole_number
from lsrl.kinds import Kind
from lsrl.model import extensions
from lsrl.targets.blocks import BlockStack, to_blocks
from lsrl.targets.precision import precision_of, tolerance_of

if TYPE_CHECKING:
    from torch import nn

    from lsrl.model.compiled import CompiledProgram

# architecture name -> Target, in the order registered: the to_torch records of the model's registry
TARGETS = cast("Mapping[str, Target]", extensions.DoorView("to_torch"))


@dataclass(frozen=True)
class Target:
    """One architecture: how to build it, report on it and read its labels, and what it accepts.

    ``builder(stack: BlockStack, **options) -> nn.Module`` gets the program as blocks
    (``lsrl.targets.blocks``), of ``model.diagonal()`` when the target is built on it; the module it
    returns has ``architecture`` (this name) and ``labels`` (``{sub-module name: [UnitLabel]}`` or
    None). ``report(module) -> list[dict]`` gives ``layer_report``'s rows.
    """

    name: str
    builder: str  # "module:function" building the module from a BlockStack
    report: str  # "module:function" giving layer_report's rows
    labels: str  # the sub-modules that module.labels names (a forward hook on one sees those units)
    options: tuple[str, ...] = ()  # keyword options passed on to the builder
    gated: bool = True  # has a multiplicative gate, so it can compute a Multi
    relu_state: bool = False  # updates its state through a ReLU, so it can run a ReLUState
    diagonal: bool = False  # built on model.diagonal() (with a ``construction`` option: unless it is not "diagonal")
    door: ClassVar[str] = "to_torch"  # the model method that builds it (lsrl.model.extensions.Builder)
    aliases: ClassVar[tuple[str, ...]] = ()  # no older names

    def built_on_diagonal(self, options: Mapping[str, Any]) -> bool:
        """Whether the module computes ``model.diagonal()`` (rather than ``model``) given ``options``."""
        construction = options.get("construction", "diagonal")  # the builder refuses what is no name
        return self.diagonal and isinstance(construction, str) and construction == "diagonal"

    def build(self, model: CompiledProgram, **options: Any) -> nn.Module:
        """What ``model.to_torch(self.name, **options)`` returns: ``self.to_torch(model, **options)``."""
        return self.to_torch(model, **options)

    def to_torch(self, model: CompiledProgram, **options: Any) -> nn.Module:
        """``model`` as a module of this architecture (see ``lsrl.targets.to_torch``)."""
        from lsrl.targets.patch import held_nodes  # imports torch

        check_options(self.name, options, self.options)
        model.require_float64_weights(f"to_torch({self.name!r})")
        self._require_linear_states(model)
        source = float_diagonal(model) if self.built_on_diagonal(options) else model
        stack = to_blocks(source)
        self._require_no_gate(stack)
        module = resolve_reference(self.builder)(stack, **options)
        module.declared_input = model.input
        module.node_widths = source.node_widths  # the widths patches must have (lsrl.targets.patch)
        module.precision = precision_of(model)
        module.tolerance = tolerance_of(source, "float64", getattr(module, "gate_bound", None))
        module.unpatchable = getattr(module, "unpatchable", {})
        module.patchable = None if module.labels is None else sorted(
            (set(source.patchable) & held_nodes(module)) - set(module.unpatchable))
        return module

    def layer_report(self, module: nn.Module) -> list[dict]:
        """Per layer (block) of ``module``: kind, hidden size, non-zero parameters."""
        return resolve_reference(self.report)(module)

    def _require_no_gate(self, stack: BlockStack) -> None:
        gates = [block.gate_name for block in stack.blocks if block.gamma is not None]
        if gates and not self.gated:
            raise LsrlError(
                f"{self.name!r} has no multiplicative gate, but Multi '{gates[0]}' needs one; "
                f"compile to 'gated_{self.name}' (or another gated architecture) instead"
            )

    def _require_linear_states(self, model: CompiledProgram) -> None:
        """Refuse a ReLUState for an architecture whose state update is linear (it cannot express one)."""
        states = [layer for layer in model.layers if layer.kind is Kind.RELUSTATE]
        if states and not self.relu_state:
            raise LsrlError(
                f"{self.name!r} updates its state linearly, but {states[0].describe()} updates its state through "
                f"a ReLU (h_t = ReLU(A h_(t-1) + B x_t + b)), which no linear recurrence can express; compile to "
                f"one of {tuple(name for name, target in TARGETS.items() if target.relu_state)} instead"
            )


def register(target: Target) -> Target:
    """Add ``target`` to the registry: ``model.to_torch(target.name)`` builds it from now on."""
    extensions.register_builder(target)
    return target


def find(name: str) -> Target:
    """The target registered as ``name``; ``LsrlError`` listing the architectures for an unknown one."""
    return cast(Target, extensions.find_builder(name, "to_torch"))


def check_options(arch: str, options: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    """Refuse keyword options that ``arch`` does not take (instead of ignoring them)."""
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise LsrlError(
            f"{arch!r} takes no option {', '.join(map(repr, unknown))}; its options: {', '.join(accepted) or 'none'}"
        )


def whole_number_option(arch: str, option: str, value: Any, at_most: int, why: str = "") -> int:
    """A builder's integer option (``max_len``, ``window``, ``heads``) as an ``int`` in ``1..at_most``, or
    one ``LsrlError`` naming ``arch``, ``option`` and the range: no bool, text, NaN, infinity or fraction
    (an integral float such as ``8.0`` is read as 8). ``why`` says where the upper limit comes from."""
    integral = whole_number(value) is not None  # however large (math.isfinite would overflow)
    # a real that is no whole number, and not Integral either (a timedelta64 is, and is a duration)
    real = integral or isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral))
    if not real or not integral and (not math.isfinite(value) or value != int(value)):
        raise LsrlError(f"{arch}: {option} must be a positive integer, got {type(value).__name__} {value!r}")
    if not 1 <= value <= at_most:
        raise LsrlError(f"{arch}: {option} must be an integer in 1..{at_most}{why}, got {value!r}")
    return int(value)


def resolve_reference(reference: str) -> Callable[..., Any]:
    """The function a ``"module:function"`` reference names (its module imported now)."""
    module, function = reference.split(":")
    return getattr(import_module(module), function)
