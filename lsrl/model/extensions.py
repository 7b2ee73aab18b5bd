"""The model's front doors to the packages built on it: builders of models and model-to-model passes.

``model.to_torch(arch)`` builds a target (``lsrl.targets``), ``model.to_hf(arch)`` a Hugging Face
model (``lsrl.hf``) and ``model.diagonal()`` runs a compiler pass (``lsrl.compiler.diagonal``). These
packages import the model, so the model must not import them: they register here when they are
imported (none imports torch or transformers on import), and the model looks them up by name. The first
use of any of lsrl's public names imports them all (``lsrl.api``); a lookup that finds nothing registered
does that first, so that a model reached through a submodule (``from lsrl.compiler import compile``)
finds its front doors too.

``BUILDERS`` is the one registry of everything that builds a model from a compiled program: one record
per architecture name (unique across doors), each saying which model method (its ``door``) builds it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Protocol

from lsrl.errors import InternalError, LsrlError, shown

# a CompiledProgram: the model imports this module, so this module names no type of the model's
Model = Any


class Builder(Protocol):
    """What the model needs of a builder (``lsrl.targets.registry.Target`` and ``lsrl.hf.HfArchitecture``
    are the records that have it)."""

    @property
    def name(self) -> str:
        """The architecture's name, as its door takes it."""

    @property
    def door(self) -> str:
        """The model method that builds it: ``"to_torch"`` or ``"to_hf"``."""

    @property
    def aliases(self) -> tuple[str, ...]:
        """Older names its door still takes for it."""

    def build(self, model: Model, *args: Any, **options: Any) -> Any:
        """``model`` as a model of this architecture (the door's arguments after ``arch``)."""


ModelPass = Callable[[Model], Model]

BUILDERS: dict[str, Builder] = {}  # architecture name -> its builder, in the order registered
MODEL_PASSES: dict[str, ModelPass] = {}  # name of a CompiledProgram method -> the pass behind it


class DoorView(Mapping[str, Builder]):
    """The builders of one door, read live from ``BUILDERS`` (what registers later shows up)."""

    def __init__(self, door: str) -> None:
        self.door = door

    def __getitem__(self, name: str) -> Builder:
        builder = BUILDERS[name]
        if builder.door != self.door:
            raise KeyError(name)
        return builder

    def __iter__(self) -> Iterator[str]:
        return (name for name, builder in BUILDERS.items() if builder.door == self.door)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _load_public_api() -> None:
    """Import ``lsrl.api`` through the package (which loads it on first use), registering every front door."""
    import lsrl

    lsrl.compile  # noqa: B018  (the first use of a public name loads them all)


def register_builder(builder: Builder) -> None:
    """Make ``model.<builder.door>(builder.name)`` build ``builder``."""
    if BUILDERS.get(builder.name, builder) != builder:
        raise InternalError(f"two builders are registered as {builder.name!r}")
    BUILDERS[builder.name] = builder


def find_builder(name: str, door: str) -> Builder:
    """The builder that ``model.<door>(name)`` uses (``name`` or one of its aliases); ``LsrlError``
    listing the door's architectures for a name it does not build."""
    names = DoorView(door)
    if not names:
        _load_public_api()
    if not names:
        raise InternalError(f"no builder is registered for model.{door}(): its package was not imported")
    if isinstance(name, str):
        for builder in BUILDERS.values():
            if builder.door == door and (builder.name == name or name in builder.aliases):
                return builder
    other = BUILDERS.get(name) if isinstance(name, str) else None
    if other is not None:
        raise LsrlError(f"{door}: {name!r} is built by model.{other.door}(), not model.{door}(); "
                        f"expected one of {tuple(names)}")
    raise LsrlError(f"{door}: unknown architecture {shown(name)}; expected one of {tuple(names)}")


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
