"""``lsrl.hooks.hooked``: stock recurrent models run step by step with hook points on every state, gate and input.

Each check has an oracle outside the stepped run: the model's own forward (unpatched runs, inputs patched at
layer 0), the stock module started from the patched state (torch RNNs), or the stock forward of a second
sequence whose states were interchanged in (transformers models).
"""

from __future__ import annotations

import nnsight
import pytest
import torch
import transformers

from lsrl.hooks import HookError, HookPoint, hooked

RNNS = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}
STATES = {"lstm": ("hidden_state", "cell_state"), "gru": ("hidden_state",), "rnn": ("hidden_state",)}


def _rnn(kind: str, batch_first: bool = True, **options) -> torch.nn.RNNBase:
    torch.manual_seed(len(kind))
    return RNNS[kind](3, 5, num_layers=2, batch_first=batch_first, **options).double().eval()


def _hf(kind: str):
    torch.manual_seed(1)
    t = transformers
    if kind == "mamba":
        config = t.MambaConfig(vocab_size=11, hidden_size=8, state_size=4, num_hidden_layers=2, intermediate_size=16,
                               conv_kernel=3, time_step_rank=2)
        model = t.MambaForCausalLM(config)
    elif kind == "mamba2":
        config = t.Mamba2Config(vocab_size=11, hidden_size=8, state_size=4, num_hidden_layers=2, expand=2,
                                head_dim=4, num_heads=4, n_groups=1, conv_kernel=3, chunk_size=4)
        model = t.Mamba2ForCausalLM(config)
    else:
        blocks = ("recurrent",) if kind == "hawk" else ("recurrent", "recurrent", "attention")
        config = t.RecurrentGemmaConfig(vocab_size=11, hidden_size=8, lru_width=8, num_hidden_layers=len(blocks) + 1,
                                        num_attention_heads=2, num_key_value_heads=1, intermediate_size=12,
                                        block_types=blocks, attention_window_size=4, logits_soft_cap=1000.0,
                                        head_dim=4)
        model = t.RecurrentGemmaForCausalLM(config)
    return model.double().eval()


def _stock_logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


# Mamba-2 computes its gated group norm and its scan in float32 even in a float64 model
HF_TOLERANCE = {"mamba": 1e-12, "mamba2": 1e-6, "hawk": 1e-12, "griffin": 1e-12}


# ---- torch RNN / LSTM / GRU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", RNNS)
@pytest.mark.parametrize("batch_first", [True, False])
def test_an_unpatched_run_is_the_modules_forward(kind, batch_first):
    module = _rnn(kind, batch_first)
    xs = torch.randn(4, 7, 3, dtype=torch.float64)
    (output, final), cache = hooked(module).run_with_cache(xs)
    expected, expected_final = module(xs)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)
    for got, want in zip(torch.utils._pytree.tree_leaves(final), torch.utils._pytree.tree_leaves(expected_final)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    count, steps = (4, 7) if batch_first else (7, 4)
    assert cache["layers.1.hidden_state"].shape == (count, steps, 5)
    last = output if batch_first else output.transpose(0, 1)
    torch.testing.assert_close(cache["layers.1.hidden_state"], last, rtol=0, atol=0)
    torch.testing.assert_close(cache["layers.1.input"], cache["layers.0.hidden_state"], rtol=0, atol=0)


@pytest.mark.parametrize("kind", RNNS)
def test_a_patched_state_is_what_later_steps_read(kind):
    """Every layer's state set at step 2: the rest of the run is the stock module started from that state."""
    module, step = _rnn(kind), 2
    xs = torch.randn(3, 7, 3, dtype=torch.float64)
    settings = {name: torch.randn(2, 3, 5, dtype=torch.float64) for name in STATES[kind]}
    patch = {}
    for layer in range(2):
        for name, values in settings.items():
            patch[f"layers.{layer}.{name}"] = torch.full((3, 7, 5), float("nan"), dtype=torch.float64)
            patch[f"layers.{layer}.{name}"][:, step] = values[layer]
    (output, _), cache = hooked(module).run_with_cache(xs, patch=patch)
    state = (settings["hidden_state"], settings["cell_state"]) if kind == "lstm" else settings["hidden_state"]
    expected, _ = module(xs[:, step + 1:], state)
    torch.testing.assert_close(output[:, step + 1:], expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(cache["layers.0.hidden_state"][:, step], settings["hidden_state"][0], rtol=0, atol=0)
    unpatched, _ = module(xs)
    torch.testing.assert_close(output[:, :step], unpatched[:, :step], rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", RNNS)
def test_a_patched_input_is_the_forward_of_the_other_sequence(kind):
    module = _rnn(kind)
    xs, other = torch.randn(2, 6, 3, dtype=torch.float64), torch.randn(2, 6, 3, dtype=torch.float64)
    (output, _), _ = hooked(module).run_with_cache(xs, patch={"layers.0.input": lambda values, t: other[:, t]})
    torch.testing.assert_close(output, module(other)[0], rtol=0, atol=1e-12)


def test_a_patched_gate_changes_the_update_it_feeds():
    """An LSTM's forget gate held at 0 and input gate at 1: the cell is the cell input of the step alone."""
    module = _rnn("lstm")
    xs = torch.randn(2, 5, 3, dtype=torch.float64)
    patch = {"layers.0.forget_gate": lambda values, t: torch.zeros_like(values),
             "layers.0.input_gate": lambda values, t: torch.ones_like(values)}
    _, cache = hooked(module).run_with_cache(xs, patch=patch)
    torch.testing.assert_close(cache["layers.0.cell_state"], cache["layers.0.cell_input"], rtol=0, atol=0)


def test_gradients_flow_through_the_stepped_run_only_when_asked():
    module = _rnn("gru")
    xs = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    (output, _), cache = hooked(module).run_with_cache(xs, grad=True)
    (got,) = torch.autograd.grad(output.sum(), xs)
    (want,) = torch.autograd.grad(module(xs)[0].sum(), xs)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert cache["layers.0.update_gate"].requires_grad
    (output, _), cache = hooked(module).run_with_cache(xs)
    assert not output.requires_grad and not cache["layers.0.update_gate"].requires_grad


def test_a_plain_forward_hook_on_a_point_fires_every_step_and_can_replace_the_value():
    module, step = _rnn("rnn"), 3
    net = hooked(module)
    point = net.hook_point("layers.1.hidden_state")
    assert isinstance(point, HookPoint) and point in list(net.modules())
    steps: list[int] = []

    def zero_at_step(mod, args, values):
        steps.append(mod.step)
        return torch.zeros_like(values) if mod.step == step else None

    handle = point.register_forward_hook(zero_at_step)
    xs = torch.randn(2, 6, 3, dtype=torch.float64)
    try:
        output, _ = net(xs)
    finally:
        handle.remove()
    assert steps == list(range(6))
    assert torch.equal(output[:, step], torch.zeros(2, 5, dtype=torch.float64))
    first = module(xs[:, :step + 1])[1]  # layer 0 as the stock module had it; layer 1 zeroed
    expected, _ = module(xs[:, step + 1:], torch.stack([first[0], torch.zeros_like(first[1])]))
    torch.testing.assert_close(output[:, step + 1:], expected, rtol=0, atol=1e-12)


def test_an_lstm_with_a_projection_and_unbatched_input():
    module = torch.nn.LSTM(3, 5, proj_size=2).double()
    xs = torch.randn(6, 3, dtype=torch.float64)
    (output, (h_n, c_n)), cache = hooked(module).run_with_cache(xs)
    expected, (expected_h, expected_c) = module(xs)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(c_n, expected_c, rtol=0, atol=1e-12)
    assert cache["layers.0.hidden_state"].shape == (1, 6, 2) and cache["layers.0.cell_state"].shape == (1, 6, 5)


# ---- stock transformers models ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", HF_TOLERANCE)
def test_an_unpatched_run_is_the_stock_forward(kind):
    model = _hf(kind)
    ids = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(3))
    net = hooked(model)
    outputs, cache = net.run_with_cache(ids)
    expected = _stock_logits(model, ids)
    torch.testing.assert_close(outputs.logits, expected, rtol=0, atol=HF_TOLERANCE[kind])
    embedded, _ = net.run_with_cache(inputs_embeds=model.get_input_embeddings()(ids).detach())
    torch.testing.assert_close(embedded.logits, expected, rtol=0, atol=HF_TOLERANCE[kind])
    assert set(cache) == set(net.hook_names)
    assert all(values.shape[:2] == (2, 6) for values in cache.values())
    # the model is left as it was: no hook, its own RG-LRU forward
    assert not any(module._forward_hooks or module._forward_pre_hooks for module in model.modules())
    assert all("forward" not in vars(module) for module in model.modules())
    torch.testing.assert_close(_stock_logits(model, ids), expected, rtol=0, atol=0)


@pytest.mark.parametrize("kind", HF_TOLERANCE)
def test_a_patched_layer_input_is_the_stock_forward_of_the_other_tokens(kind):
    model, step = _hf(kind), 2
    ids = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(4))
    other = ids.clone()
    other[:, step] = (ids[:, step] + 1) % 11
    embedded = model.get_input_embeddings()(other).detach()
    if kind in ("hawk", "griffin"):  # RecurrentGemma scales its embeddings by its normalizer, sqrt(hidden) in bf16
        embedded = embedded * model.model.normalizer.type(embedded.dtype)
    patch = {"layers.0.input": lambda values, t: embedded[:, t].to(values.dtype) if t == step else values}
    outputs, _ = hooked(model).run_with_cache(ids, patch=patch)
    torch.testing.assert_close(outputs.logits, _stock_logits(model, other), rtol=0, atol=HF_TOLERANCE[kind])


CARRIED = {"mamba": ("ssm_state", "conv_state"), "mamba2": ("ssm_state", "conv_state"),
           "hawk": ("rg_lru.state", "conv_state")}


@pytest.mark.parametrize("kind", CARRIED)
def test_interchanged_states_carry_the_other_sequence_on(kind):
    """Every carried state of run B at step 2 set into run A, whose later tokens are B's: A's later logits are B's
    (the stock forward of B)."""
    model, step = _hf(kind), 2
    generator = torch.Generator().manual_seed(5)
    a, b = torch.randint(0, 11, (2, 7), generator=generator), torch.randint(0, 11, (2, 7), generator=generator)
    a[:, step + 1:] = b[:, step + 1:]
    net = hooked(model)
    _, cache_b = net.run_with_cache(b)
    patch = {}
    for name in net.hook_names:
        if name.split(".", 2)[2] in CARRIED[kind]:
            patch[name] = torch.full_like(cache_b[name], float("nan"))
            patch[name][:, step] = cache_b[name][:, step]
    outputs, _ = net.run_with_cache(a, patch=patch)
    expected = _stock_logits(model, b)
    torch.testing.assert_close(outputs.logits[:, step + 1:], expected[:, step + 1:], rtol=0, atol=HF_TOLERANCE[kind])
    assert not torch.allclose(outputs.logits[:, :step + 1], expected[:, :step + 1])


def test_a_patched_ssm_state_moves_the_same_steps_output():
    """The step's output is read from the state as set: Mamba's last SSM state set to ones at the last step moves
    that step's logits, and no earlier one."""
    model = _hf("mamba")
    ids = torch.randint(0, 11, (1, 5), generator=torch.Generator().manual_seed(6))
    net = hooked(model)
    plain, _ = net.run_with_cache(ids)
    zeroed, _ = net.run_with_cache(ids, patch={"layers.1.ssm_state": lambda v, t: torch.ones_like(v) if t == 4 else v})
    torch.testing.assert_close(zeroed.logits[:, :4], plain.logits[:, :4], rtol=0, atol=0)
    assert not torch.allclose(zeroed.logits[:, 4], plain.logits[:, 4])


def test_gradients_reach_a_state_of_a_transformers_model():
    model = _hf("hawk")
    ids = torch.randint(0, 11, (1, 4), generator=torch.Generator().manual_seed(7))
    net = hooked(model)
    held: dict[str, torch.Tensor] = {}

    def keep(values, t):
        if t == 1:
            values = values.detach().requires_grad_(True)
            held["state"] = values
        return values

    outputs, _ = net.run_with_cache(ids, patch={"layers.0.rg_lru.state": keep}, grad=True)
    outputs.logits[:, 3].sum().backward()
    assert held["state"].grad is not None and held["state"].grad.abs().sum() > 0


# ---- what a hooked model refuses -------------------------------------------------------------------------------

def test_refusals_name_the_problem():
    module = _rnn("lstm")
    net = hooked(module)
    xs = torch.randn(2, 4, 3, dtype=torch.float64)
    with pytest.raises(HookError, match="no hook point named 'layers.9.cell_state'"):
        net.run_with_cache(xs, patch={"layers.9.cell_state": torch.zeros(2, 4, 5)})
    with pytest.raises(HookError, match=r"shape \(batch=2, steps=4, width\)"):
        net.run_with_cache(xs, patch={"layers.0.cell_state": torch.zeros(2, 3, 5)})
    with pytest.raises(HookError, match="width 4 given"):
        net.run_with_cache(xs, patch={"layers.0.cell_state": torch.zeros(2, 4, 4)})
    with pytest.raises(HookError, match="returned"):
        net.run_with_cache(xs, patch={"layers.0.cell_state": lambda values, t: values[:, :1]})
    with pytest.raises(HookError, match="input of shape"):
        net.run_with_cache(torch.zeros(2, 4, 2, dtype=torch.float64))
    with pytest.raises(HookError, match="bidirectional"):
        hooked(torch.nn.GRU(3, 4, bidirectional=True))
    with pytest.raises(HookError, match="dropout"):
        hooked(torch.nn.GRU(3, 4, num_layers=2, dropout=0.5).train())(torch.zeros(1, 2, 3))
    with pytest.raises(HookError, match="expected, got Linear"):
        hooked(torch.nn.Linear(2, 2))
    model = _hf("mamba")
    with pytest.raises(HookError, match="attention_mask with zeros"):
        hooked(model).run_with_cache(torch.ones(1, 3, dtype=torch.long), attention_mask=torch.tensor([[1, 1, 0]]))
    with pytest.raises(HookError, match="exactly one of input_ids"):
        hooked(model).run_with_cache()
    with pytest.raises(HookError, match="not 'labels'"):
        hooked(model).run_with_cache(torch.ones(1, 3, dtype=torch.long), labels=torch.ones(1, 3, dtype=torch.long))


def test_an_nnsight_intervention_on_a_hook_point_carries_to_later_steps():
    """nnsight wraps the hooked model like any module: 5 added to the cell state at its first call (step 0) is
    the cell every later step reads (the oracle: the stock LSTM restarted from that cell)."""
    lstm = _rnn("lstm")
    xs = torch.randn(1, 5, 3, dtype=torch.float64)
    net = hooked(lstm)
    _, cache = net.run_with_cache(xs)
    model = nnsight.NNsight(net)
    with model.trace(xs):
        model.points.points.layers__0__cell_state.output[:] += 5.0
        outputs = model.output.save()
    cell = cache["layers.0.cell_state"][:, 0] + 5.0
    hidden = cache["layers.0.output_gate"][:, 0] * torch.tanh(cell)
    upper = torch.nn.LSTM(5, 5, batch_first=True).double()  # layer 1 of the stock module, alone, at step 0
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(upper, f"{name}_l0").copy_(getattr(lstm, f"{name}_l1"))
    top, (h1, c1) = upper(hidden[:, None])
    expected, _ = lstm(xs[:, 1:], (torch.stack([hidden, h1[0]]), torch.stack([cell, c1[0]])))
    torch.testing.assert_close(outputs[0][:, 0], top[:, 0], rtol=0, atol=1e-12)
    torch.testing.assert_close(outputs[0][:, 1:], expected, rtol=0, atol=1e-12)
