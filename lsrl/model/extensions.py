"""The model's front doors to the packages built on it: targets and model-to-model passes.

``model.to_torch(arch)`` builds a target (``lsrl.targets``), ``model.to_hf(arch)`` a Hugging Face
model (``lsrl.hf``) and ``model.diagonal()`` runs a compiler pass (``lsrl.compiler.diagonal``). These
packages import the model, so the model must not import them: they register here when they are
imported (none imports torch or transformers on import), and the model looks them up by name. The first
use of any of lsrl's public names imports them all (``lsrl.api``); a lookup that finds nothing registered
does that first, so that a model reached through a submodule (``from lsrl.compiler import compile``)
finds its front doors too.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from lsrl.errors import InternalError, LsrlError, shown

# a CompiledProgram: the model imports this module, so this module names no type of the model's
Model = Any


class Target(Protocol):
    """What the model needs of a target (``lsrl.targets.registry.Target`` is the record that has it)."""

    @property
    def name(self) -> str:
        """The architecture's name, as ``model.to_torch`` takes it."""

    def to_torch(self, model: Model, **options: Any) -> Any:
        """``model`` as a ``torch.nn.Module`` of this architecture."""


ModelPass = Callable[[Model], Model]

TARGETS: dict[str, Target] = {}  # architecture name -> target, in the order registered
MODEL_PASSES: dict[str, ModelPass] = {}  # name of a CompiledProgram method -> the pass behind it
BUILDERS: dict[str, Callable[..., Any]] = {}  # name of a CompiledProgram method -> the builder behind it


def _load_public_api() -> None:
    """Import ``lsrl.api`` through the package (which loads it on first use), registering every front door."""
    import lsrl

    lsrl.compile  # noqa: B018  (the first use of a public name loads them all)


def register_target(target: Target) -> None:
    """Make ``model.to_torch(target.name)`` build ``target``."""
    if TARGETS.get(target.name, target) != target:
        raise InternalError(f"two targets are registered as {target.name!r}")
    TARGETS[target.name] = target


def find_target(name: str) -> Target:
    """The target registered as ``name``; ``LsrlError`` listing the architectures for an unknown one."""
    if not TARGETS:
        _load_public_api()
    if not TARGETS:
        raise InternalError("no target is registered: lsrl.targets was not imported")
    if not isinstance(name, str) or name not in TARGETS:
        raise LsrlError(f"unknown architecture {shown(name)}; expected one of {tuple(TARGETS)}")
    return TARGETS[name]


def register_model_pass(name: str, function: ModelPass) -> None:
    """Make the model method ``name`` run ``function`` (a pass from a model to a model)."""
    if MODEL_PASSES.get(name, function) is not function:
        raise InternalError(f"two passes are registered as model.{name}()")
    MODEL_PASSES[name] = function


def find_model_pass(name: str) -> ModelPass:
    """The pass behind the model method ``name``."""
    if name not in MODEL_PASSES:
        _load_public_api()
    if name not in MODEL_PASSES:
        raise InternalError(f"no pass is registered for model.{name}(): lsrl.compiler was not imported")
    return MODEL_PASSES[name]


def register_builder(name: str, function: Callable[..., Any]) -> None:
    """Make the model method ``name`` call ``function(model, ...)`` (a builder of something else, such
    as ``to_hf``: a Hugging Face model)."""
    if BUILDERS.get(name, function) is not function:
        raise InternalError(f"two builders are registered as model.{name}()")
    BUILDERS[name] = function


def find_builder(name: str) -> Callable[..., Any]:
    """The builder behind the model method ``name``."""
    if name not in BUILDERS:
        _load_public_api()
    if name not in BUILDERS:
        raise InternalError(f"no builder is registered for model.{name}(): its package was not imported")
    return BUILDERS[name]
