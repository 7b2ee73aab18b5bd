"""Interventions on a torch target by program node: ``net(xs, patch={node: values})`` (a key that names a hook
patches the hook instead: ``lsrl.targets.cache.patched_run``, the one code path of both).

The program's interchange intervention (``prog(xs, patch=...)``, ``model(xs, patch=...)``) carried
out on the target's units: every unit that ``net.labels`` says holds a function of the patched
node (a role in ``PATCHABLE_ROLES``: the value, a copy, its sign parts, ...) is set to what its
label says it holds, given the node's ``values`` (``lsrl.ir.labels.unit_values``).

* A sub-module's output is overwritten by a forward hook; the layers after it read the patched
  units (keys of ``net.labels`` that name a sub-module).
* A recurrence's state is overwritten at every step *before it is carried*, so that the next step
  reads the patched state, as the program's LinState / ReLUState does: the keys ``blocks.{i}.state``
  (Linear RNN), ``blocks.{i}.rnn`` (classic RNN: ``[s+; s-]``), the diagonal recurrences
  (``blocks.{i}.recurrence``, Hawk's ``blocks.{i}.temporal.rg_lru``) and the GRU / LSTM layers
  ``rnn.l{k}``: every state a recurrence carries (``lsrl.targets.hook_points.Recurrence``). Those modules
  hold ``state_patches`` (per layer, a ``StatePatch``) while a patched call runs, and then run step by step.
* Keys that are recomputed from the units above (GRU / LSTM gates and cells, a classic RNN's
  ``blocks.{i}.state = s+ - s-``) follow from them and are not set.

Units labelled ``helper``, ``mode``, ``drive`` or ``constant`` are never set. Only the nodes of
``net.patchable`` can be patched: the compiled model's ``patchable`` (of ``model.diagonal()`` for
the targets built from it), less the nodes a target computes without units of their own
(``net.unpatchable`` says why for each).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import torch

from lsrl.ir.labels import PATCHABLE_ROLES, units_holding
from lsrl.lang.evaluate import patch_array, patch_items, patch_key_name
from lsrl.errors import LsrlError
from lsrl.targets.checks import module_placement
from lsrl.targets.hook_points import recurrences


class StatePatch:
    """``units`` of a recurrence's state set to ``values[:, t]`` at step ``t`` (``values``: ``(B, T, k)``)."""

    def __init__(self, units: torch.Tensor, values: torch.Tensor) -> None:
        self.units, self.values = units, values

    def __call__(self, state: torch.Tensor, t: int) -> torch.Tensor:
        state = state.clone()
        state[:, self.units] = self.values[:, t].to(state.dtype)
        return state


def held_nodes(net: torch.nn.Module) -> set[str]:
    """The program nodes that have a unit a patch can set (a patchable role, in a sub-module's output,
    a carried state, or as a second label)."""
    keys = set(recurrences(net)) | {name for name, _ in net.named_modules()}
    labelled = [label for key, labels in _unit_labels(net).items() if key in keys for label in labels]
    labelled += [label for aliases in getattr(net, "patch_aliases", {}).values() for label in aliases.values()]
    return {label.node for label in labelled if label is not None and label.role in PATCHABLE_ROLES}


def _unit_labels(net: torch.nn.Module) -> dict[str, list]:
    """``net.labels``: per sub-module or carried state, one ``UnitLabel`` (or None) per unit."""
    return getattr(net, "labels", None) or {}


def values_array(net: torch.nn.Module, name: str, values: Any, count: int, steps: int) -> np.ndarray:
    """The patch ``values`` for node ``name`` as a float64 ``(count, steps, width)`` array, checked as the
    interpreter checks them (``lsrl.lang.evaluate.patch_array``) against the node's width."""
    arch = getattr(net, "architecture", type(net).__name__)
    width = (getattr(net, "node_widths", None) or {}).get(name)
    return patch_array(values, count, steps, f"{arch}: patch values for {name!r}", width, dtype=np.float64)


def check_patchable(net: torch.nn.Module, name: str) -> None:
    arch = getattr(net, "architecture", type(net).__name__)
    widths = getattr(net, "node_widths", None)
    if widths is not None and name not in widths:  # no node of the program (and no hook: lsrl.targets.cache)
        raise LsrlError(f"{arch}: cannot patch {name!r}: neither a program node of net.patchable nor a sub-layer "
                        f"(hook) of this {type(net).__name__}; the hooks are the keys of net.run_with_cache(xs)[1]")
    patchable = getattr(net, "patchable", None)
    if patchable is None:
        raise LsrlError(f"{arch}: cannot patch {name!r}: no sub-layer (hook) of this {type(net).__name__}, and it "
                        "has no net.patchable (it was not built by lsrl.targets.to_torch from a compiled model with "
                        "unit labels), so it cannot be patched by program node")
    if name not in patchable:
        reason = getattr(net, "unpatchable", {}).get(name) or (
            "the compiled model cannot patch it exactly either (see model.patchable): it has no units of its own, "
            "was fused into a reader, shares units with another node, or was pruned as always 0")
        raise LsrlError(f"{arch}: program node {name!r} cannot be patched in this target: {reason}; "
                        f"see net.patchable")


def patched_units(net: torch.nn.Module, patch: Mapping[Any, Any], count: int, steps: int) -> dict:
    """``{labels key: [(unit, values (count, steps))]}``: every unit of a sub-module output or of a
    carried state that is labelled with a patched node, and what it is set to."""
    modules = dict(net.named_modules())
    carriers = recurrences(net)
    arrays = {}
    for key, values in patch_items(patch, getattr(net, "architecture", type(net).__name__)):
        name = patch_key_name(key)
        check_patchable(net, name)
        array = values_array(net, name, values, count, steps)
        arrays[name] = (array.shape[-1], array)
    units = {}
    for labels_key, labels in _unit_labels(net).items():
        if labels_key not in carriers and labels_key not in modules:
            continue  # recomputed from the units it follows (gates, cells, s+ - s-)
        own = units_holding(enumerate(labels), arrays, labels_key)
        # a second label of a unit (a GRU / LSTM unit labelled ReLU(v) also holds v's positive part),
        # used where its own label is not patched
        aliases = getattr(net, "patch_aliases", {}).get(labels_key, {})
        taken = {unit for unit, _ in own}
        own += units_holding(((u, label) for u, label in aliases.items() if u not in taken), arrays, labels_key)
        if own:
            units[labels_key] = own
    return units


def _as_patch(pairs: list[tuple[int, np.ndarray]], dtype: torch.dtype, device: torch.device) -> StatePatch:
    units = torch.tensor([unit for unit, _ in pairs], dtype=torch.long, device=device)
    values = torch.as_tensor(np.stack([values for _, values in pairs], axis=-1), dtype=dtype, device=device)
    return StatePatch(units, values)


def overwriting(patch: StatePatch) -> Callable[[torch.nn.Module, Any, Any], Any]:
    """A forward hook that sets the patched units of a ``(B, T, width)`` output at every step."""
    def hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
        sequence = output[0] if isinstance(output, tuple) else output
        sequence = sequence.clone()
        sequence[..., patch.units] = patch.values.to(sequence.dtype)
        return (sequence,) + tuple(output[1:]) if isinstance(output, tuple) else sequence

    return hook


@contextmanager
def node_patches(net: torch.nn.Module, patch: Mapping[Any, Any], count: int, steps: int) -> Iterator[None]:
    """While the block runs, a call of ``net`` on ``count`` sequences of ``steps`` steps has the
    program nodes of ``patch`` patched (module docstring)."""
    if not patch:
        yield
        return
    units = patched_units(net, patch, count, steps)
    dtype, device = module_placement(net)
    modules, carriers = dict(net.named_modules()), recurrences(net)
    handles, patched_carriers = [], []
    try:
        for key, pairs in units.items():
            state_patch = _as_patch(pairs, dtype, device)
            if key in carriers:
                module, layer = carriers[key]
                module.state_patches = {**(module.state_patches or {}), layer: state_patch}
                patched_carriers.append(module)
            else:
                handles.append(modules[key].register_forward_hook(overwriting(state_patch)))
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module in patched_carriers:
            module.state_patches = None
