"""``CompiledProgram``: a path graph of layers, runnable exactly (``lsrl.model.exact``) and in
float64 (``lsrl.model.runner``); saved by ``lsrl.model.saving``, loaded by ``lsrl.model.fileformat``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from lsrl.errors import BackendError, InternalError, LsrlError
from lsrl.ir.labels import PATCHABLE_ROLES, Label, UnitLabel, label_violations, units_holding
from lsrl.kinds import NODE_WEIGHTS, STATE_KINDS
from lsrl.lang.evaluate import Mode, mode_for, patch_array, patch_items, patch_key_name, refuse_float_overflow
from lsrl.lang.nodes import Input, Node
from lsrl.model import exact as exact_runner
from lsrl.model import extensions, saving
from lsrl.model.layers import Eigenbases
from lsrl.model.structure import structured_blocks_note
from lsrl.numbers import FLOAT64_MAX, get_backend, mpq

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from lsrl.lang.program import ForEach
    from lsrl.model.runner import Plan
    from lsrl.numbers import Backend

_UNREPRESENTABLE = {True: "beyond float64's range (|x| <= 1.8e308)", False: "below float64's smallest normal "
                    "number (2.2e-308): it would round to 0 or lose its precision"}
_FLOAT64_TINY = mpq(float(np.finfo(np.float64).tiny))  # the smallest normal float64, exactly


def _known(label: Label, layer: int) -> UnitLabel:
    """A unit's label: the compiler labels every unit of a compiled model (``lsrl.ir.labels.path_labels``)."""
    if label is None:
        raise InternalError(f"layer {layer} of a compiled model has a unit without a label")
    return label


def _order_of(value: Any) -> str:
    """``"10^k"`` (with its sign) for an exact rational, from its digits (``float`` may overflow)."""
    digits = len(str(abs(int(value.numerator)))) - len(str(int(value.denominator)))
    return f"{'-' if value < 0 else ''}10^{digits}"


class CompiledProgram:
    """A program after debranching: ``layers`` form a path from ``input``."""

    # a model.diagonal()'s (lsrl.compiler.diagonal), for eigen_trace; absent from other models
    eigenbases: Eigenbases

    def __init__(self, input_node: Input, layers: Iterable[Node], backend: str | Backend, stats: dict | None = None,
                 name: str = "program", labels: Iterable[Iterable[Label]] | None = None) -> None:
        self.input = input_node
        self.layers = list(layers)
        # per layer, a lsrl.UnitLabel per unit: what the unit holds (see lsrl.ir.labels)
        self.labels = None if labels is None else [[_known(label, index) for label in layer]
                                                   for index, layer in enumerate(labels)]
        # program nodes that cannot be patched by label (see ``patchable``)
        self.entangled: frozenset[str] = frozenset()
        # program node name -> its width, the width a patch of it must have (set by the compiler;
        # None in a model saved before it was recorded: see ``patch_width``)
        self.node_widths: dict[str, int] | None = None
        self.backend = get_backend(backend).name
        self.stats = dict(stats or {})
        self.name = name
        self._plan: Plan | None = None  # the float runner's plan (lsrl.model.runner), built on first use
        self._float_checked = False  # require_float64_weights found every weight representable

    @property
    def output_dim(self) -> int:
        return self.layers[-1].dim if self.layers else self.input.dim

    @property
    def parameter_count(self) -> int:
        """Non-zero weights (A, B, b and initial states)."""
        return sum(getattr(layer, w).nnz for layer in self.layers for w in NODE_WEIGHTS[layer.kind])

    @property
    def state_size(self) -> int:
        return sum(layer.dim for layer in self.layers if layer.kind in STATE_KINDS)

    @property
    def widest_layer(self) -> int:
        return max([layer.dim for layer in self.layers] + [self.input.dim])

    def summary(self) -> str:
        kinds = " -> ".join(f"{layer.kind}({layer.dim})" for layer in self.layers)
        return (
            f"{self.name}: {len(self.layers)} layers, widest {self.widest_layer}, state {self.state_size}, "
            f"{self.parameter_count} non-zero weights [{self.backend}]\n  Input({self.input.dim}) -> {kinds}"
        ) + structured_blocks_note(self.layers)

    def __repr__(self) -> str:
        return f"CompiledProgram({self.name!r}, layers={len(self.layers)}, backend={self.backend!r})"

    def __call__(self, xs: Any, exact: bool = False, check_bounds: bool = True,
                 patch: Mapping[str | Node, Any] | None = None) -> np.ndarray:
        """Same contract as ``ForEach.__call__``; ``exact=True`` needs the exact backend.

        ``patch={name: values}`` patches a program node (``values`` as for ``ForEach.trace``): every
        unit labelled with that node is set to what its label says it holds, the program's
        interchange intervention carried out on the units.
        """
        mode = mode_for(exact, self.name)
        if patch_items(patch, self.name):  # an empty patch runs unpatched; a malformed one is refused here
            return self.trace(xs, exact, check_bounds, patch)[-1]
        if exact and self.backend != "exact":
            raise LsrlError(f"{self.name}: exact=True needs a program compiled with backend='exact'")
        batch, squeeze, steps = mode.read(xs, self.input, check_bounds)
        if isinstance(batch, list):  # the exact mode's lists of mpq
            for layer in self.layers:
                batch = exact_runner.run_layer(layer, batch)
            result = exact_runner.as_object_array(batch, steps, self.output_dim)
        else:
            from lsrl.model import runner  # numba is imported only to run floats

            if self._plan is None:  # built once: the layers do not change after compiling
                self.require_float64_weights("model(xs)")
                self._plan = runner.build_plan(self.input.dim, self.layers)
            result = refuse_float_overflow(runner.run_plan(self._plan, batch), f"{self.name}: the output")
        return result[0] if squeeze else result

    def trace(self, xs: Any, exact: bool = False, check_bounds: bool = True,
              patch: Mapping[str | Node, Any] | None = None) -> list[np.ndarray]:
        """Every layer's output per step: one array per layer of ``layers``, ``(T, width)`` (``(B, T,
        width)`` for a batch), exact (needs the exact backend) or float64 as ``model(xs)`` computes it.
        ``patch``: as for ``__call__``."""
        mode = mode_for(exact, self.name)
        if exact and self.backend != "exact":
            raise LsrlError(f"{self.name}: exact=True needs a program compiled with backend='exact'")
        if not exact:
            self.require_float64_weights("model.trace(xs)")
        batch, squeeze, steps = mode.read(xs, self.input, check_bounds)
        patched = self._patched_units(patch, mode, len(batch), steps)
        outputs = []
        for index, layer in enumerate(self.layers):
            units = patched.get(index, ())
            if isinstance(batch, list):  # the exact mode's lists of mpq
                batch = exact_runner.run_layer(layer, batch, units)
                outputs.append(exact_runner.as_object_array(batch, steps, layer.dim))
            else:
                from lsrl.model import runner

                batch = runner.run_layer(layer, batch, units)
                outputs.append(batch)
        return [output[0] for output in outputs] if squeeze else outputs

    @property
    def patchable(self) -> list:
        """Program nodes that ``patch=`` can intervene on: they have units, and their value reaches
        the outputs only through them (not fused into a reader, not sharing a unit with a node that
        is not computed from them, not pruned as always 0)."""
        held = {label.node for layer in self.labels or [] for label in layer if label.role in PATCHABLE_ROLES}
        return sorted(held - self.entangled)

    def label_violations(self, program: ForEach, xs: Any, exact: bool = True, tolerance: float = 0.0) -> list:
        """Units whose values on ``xs`` break their label, checked against ``program.trace``: a list
        of ``(layer, unit, label, reason)``, empty when every label holds."""
        if self.labels is None:
            raise LsrlError(f"{self.name}: this model has no unit labels (a file from before labels) to check")
        return label_violations(self.labels, self.trace(xs, exact), program.trace(xs, exact), tolerance)

    def require_float64_weights(self, where: str) -> None:
        """Refuse (``BackendError`` naming the layer and the weight) to run an exact model in float64 when a
        weight has no float64 form: beyond ``+-1.8e308`` (it would become infinite) or non-zero below
        ``2.2e-308`` (it would become 0 or lose its precision). ``where`` names the float path asked for."""
        if self.backend != "exact" or self._float_checked:
            return
        for layer in self.layers:
            for weight in NODE_WEIGHTS[layer.kind]:
                for _, _, value in getattr(layer, weight).entries():
                    if abs(value) > FLOAT64_MAX or 0 < abs(value) < _FLOAT64_TINY:
                        raise BackendError(
                            f"{where}: weight {weight} of {layer.describe()} holds a number of about "
                            f"{_order_of(value)}, {_UNREPRESENTABLE[abs(value) > 1]}; run this exact model with "
                            "exact=True (it has no float64 form)")
        self._float_checked = True

    def patch_width(self, name: str) -> int | None:
        """The width a patch of program node ``name`` must have: the node's width; None where the model
        does not know it (a file saved before widths were recorded: the patch must then cover every
        component a unit holds, see ``_patched_units``)."""
        if self.node_widths is not None:
            return self.node_widths.get(name)
        return None

    def _patched_units(self, patch: Mapping[str | Node, Any] | None, mode: Mode, count: int, steps: int) -> dict:
        """``{layer index: [(unit, values)]}`` for the units labelled with the patched nodes."""
        items = patch_items(patch, self.name)
        if not items:
            return {}
        if self.labels is None:
            raise LsrlError(f"{self.name}: this model has no unit labels (a file from before labels), so it "
                            "cannot be patched by program node")
        patched = {}  # node name -> (width, values in the mode's batch form)
        for key, values in items:
            name = patch_key_name(key)
            self.check_patchable(name)
            where = f"{self.name}: patch values for {name!r}"
            array = patch_array(values, count, steps, where, self.patch_width(name))
            holder = Input(array.shape[-1], name=f"patch of {name}")
            read = mode.read(array, holder, False)[0]
            patched[name] = (array.shape[-1], read)
        units = {}
        for index, layer_labels in enumerate(self.labels):
            found = units_holding(enumerate(layer_labels), patched, f"layer {index}")
            if found:
                units[index] = found
        return units

    def check_patchable(self, name: str) -> None:
        """Refuse (``LsrlError``) a patch of program node ``name`` that the units cannot carry out exactly."""
        if name in self.entangled:
            raise LsrlError(
                f"{self.name}: program node {name!r} cannot be patched in the compiled model: its value does "
                "not reach the outputs only through units labelled with it (it was fused into a reader, "
                "shares units with another node, or was pruned as always 0); see model.patchable"
            )
        if name not in self.patchable:
            raise LsrlError(
                f"{self.name}: program node {name!r} has no unit in the compiled model (it was fused into "
                "the layers that read it, or never existed); patch a node that model.labels names"
            )

    def diagonal(self) -> CompiledProgram:
        """The same program with every LinState's ``A`` diagonal (see ``lsrl.compiler.diagonal``).

        A front door to a compiler pass, which registers itself in ``lsrl.model.extensions``: the
        compiler builds models and so sits above this package."""
        return extensions.find_model_pass("diagonal")(self)

    def to_torch(self, arch: str, **options: Any) -> torch.nn.Module:
        """This program as a ``torch.nn.Module`` of ``arch`` (see ``lsrl.targets.ARCHITECTURES``).

        The targets register themselves in ``lsrl.model.extensions.BUILDERS`` (see ``lsrl.targets.to_torch``);
        torch is imported only when one is built."""
        return extensions.find_builder(arch, "to_torch").build(self, **options)

    def to_hf(self, arch: str, max_len: int, dtype: torch.dtype | str | None = None, generate: bool = False
              ) -> PreTrainedModel:
        """This program in a stock ``transformers`` model of ``arch`` ("hf-mamba", "hf-mamba2", "hf-hawk",
        "hf-griffin": ``lsrl.hf.ARCHITECTURES``), exact for sequences of up to ``max_len`` steps in ``dtype``
        (torch.float32 by default); see ``lsrl.hf``, which registers itself in ``lsrl.model.extensions``
        (transformers is imported only when a model is built); ``generate=True``: a next-token head (a token
        program)."""
        return extensions.find_builder(arch, "to_hf").build(self, max_len, dtype, generate)

    def save(self, path: str | Path) -> Path:
        """Write ``path/model.json``, ``path/weights.safetensors`` and ``path/manifest.json`` as a unit
        (``lsrl.model.saving``, ``lsrl.model.folders``); returns the folder."""
        return saving.save(self, path)
