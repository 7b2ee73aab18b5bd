"""The hook-point interface (``lsrl.targets.hook_points``): the shared cache and patch code run any recurrence that
implements ``Recurrence``, one lsrl does not build included, and import no concrete recurrence."""

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from lsrl.targets.cache import CachedRun, run_with_cache
from lsrl.targets.hook_points import Layer, Recurrence

TARGETS = Path(__file__).resolve().parents[1] / "lsrl" / "targets"


class RunningSum(Recurrence, nn.Module):
    """``s_t = s_{t-1} + x_t``, each new state through the hook points of its steps."""

    records_steps = True

    def carried_states(self, name: str) -> dict[str, Layer]:
        return {f"{name}.s": None}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hook = self.state_hook()
        state, states = x.new_zeros(x.shape[0], x.shape[2]), []
        for t in range(x.shape[1]):
            state = state + x[:, t]
            state = state if hook is None else hook(state, t)
            states.append(state)
        return torch.stack(states, dim=1)


class Summing(CachedRun, nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sum = RunningSum()
        self.out = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.sum(x))


XS = np.random.default_rng(0).integers(-3, 4, size=(2, 5, 3)).astype(np.float64)


def test_a_recurrence_of_its_own_is_recorded_at_its_steps():
    outputs, cache = run_with_cache(Summing(), XS)
    assert list(cache) == ["sum.s", "sum", "out"]  # the steps' hook first, then the sub-modules' outputs
    assert np.array_equal(cache["sum.s"].numpy(), np.cumsum(XS, axis=1))
    assert np.array_equal(outputs.numpy(), np.cumsum(XS, axis=1))


def test_a_patched_state_is_set_before_it_is_carried():
    """Setting the state at step 2 (NaN elsewhere keeps the model's value) changes every later step, as the running
    sum restarted from the patched value."""
    values = np.full(XS.shape, np.nan)
    values[:, 2] = 10.0
    outputs, cache = run_with_cache(Summing(), XS, patch={"sum.s": values})
    expected = np.cumsum(XS, axis=1)
    expected[:, 2] = 10.0
    expected[:, 3:] = 10.0 + np.cumsum(XS[:, 3:], axis=1)
    assert np.array_equal(outputs.numpy(), expected)
    assert np.array_equal(cache["sum.s"].numpy(), expected)


@pytest.mark.parametrize("module", ["cache.py", "patch.py"])
def test_the_shared_code_imports_no_concrete_recurrence(module):
    concrete = {"lsrl.targets.recurrent", "lsrl.targets.diagonal", "lsrl.targets.gru_lstm", "lsrl.targets.hawk",
                "lsrl.targets.stock"}
    imported = {node.module for node in ast.walk(ast.parse((TARGETS / module).read_text()))
                if isinstance(node, ast.ImportFrom) and node.module}
    assert "lsrl.targets.hook_points" in imported
    assert not {name for name in imported if any(name.startswith(prefix) for prefix in concrete)}
