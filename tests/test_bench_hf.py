"""The trained tier in stock transformers models (lsrl.bench.training.hf): a folder builds, loads with
from_pretrained, its loader's stepwise run equals the stock full forward, patching through the loader equals
patching the stock cache by hand between steps, the harness scores it; and interchange intervention training
lowers the interchange error."""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import lsrl.bench
from lsrl.bench.training.hf import HF_ARCHS, state_hook, train_hf
from lsrl.bench.training.loop import program_targets, variable_levels
from lsrl.bench.tasks import TASKS

pytest.importorskip("transformers")
torch.set_num_threads(1)


@functools.cache
def built(arch: str):
    """A tiny trained folder of majority (two levels: two layers), 2 training steps."""
    root = tempfile.mkdtemp(prefix="lsrl-bench-hf-")
    lsrl.bench.build_suite(root, ["majority"], progress=False, tiers=["trained"], test_sequences=20,
                           train_steps=2, trained_archs=[arch])
    return root, lsrl.bench.load(f"majority/{arch}", root=root, tier="trained")


def stock_full_forward(hf, xs):
    """The stock model's own full forward on token inputs: the outputs are its first logits (Griffin's attention
    blocks with the sliding-window causal mask the stock model makes)."""
    ids = torch.as_tensor(xs[..., 0]).long()
    extra = {}
    if hf.config.model_type == "recurrent_gemma":
        extra = {"position_ids": torch.arange(ids.shape[1])[None]}
        if "attention" not in hf.config.block_types:
            extra["attention_mask"] = {"sliding_attention": None}
    with torch.no_grad():
        return hf(input_ids=ids, use_cache=False, **extra).logits[..., :1]


def rms(h, norm):
    return norm.weight * (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))


def mamba_by_hand(hf, xs, units, source_states=None):
    """Mamba's equations written out here (float64; the stock code rounds some steps to float32), the SSM state
    of layer 0 read after each step's update and, given ``source_states``, its units ``units`` set to theirs
    before the step's output reads the state."""
    ids = torch.as_tensor(xs[..., 0]).long()
    count, steps = ids.shape
    config = hf.config
    conv = [torch.zeros(count, config.intermediate_size, config.conv_kernel - 1, dtype=torch.float64)
            for _ in hf.backbone.layers]
    ssm = [torch.zeros(count, config.intermediate_size, config.state_size, dtype=torch.float64)
           for _ in hf.backbone.layers]
    outputs, states = [], []
    with torch.no_grad():
        for t in range(steps):
            h = hf.backbone.embeddings(ids[:, t])
            for i, block in enumerate(hf.backbone.layers):
                mixer = block.mixer
                x, z = mixer.in_proj(rms(h, block.norm)).chunk(2, dim=-1)
                window = torch.cat([conv[i], x[..., None]], dim=-1)
                conv[i] = window[..., 1:]
                u = torch.nn.functional.silu((window * mixer.conv1d.weight[:, 0]).sum(-1) + mixer.conv1d.bias)
                dt, B, C = torch.split(mixer.x_proj(u), [mixer.time_step_rank, config.state_size, config.state_size],
                                       dim=-1)
                dt = torch.nn.functional.softplus(mixer.dt_proj(dt))
                A = -torch.exp(mixer.A_log)
                ssm[i] = torch.exp(dt[..., None] * A) * ssm[i] + dt[..., None] * B[:, None] * u[..., None]
                if i == 0:
                    flat = ssm[0].reshape(count, -1)
                    if source_states is not None:
                        flat[:, units] = source_states[t]
                    states.append(flat[:, units].clone())
                y = (ssm[i] @ C[..., None])[..., 0] + mixer.D * u
                h = h + mixer.out_proj(y * torch.nn.functional.silu(z))
            outputs.append(hf.lm_head(rms(h, hf.backbone.norm_f))[:, :1])
    return torch.stack(outputs, dim=1), states


def mamba2_by_hand(hf, xs, units, source_states=None):
    """Mamba-2's equations written out here (float64), as ``mamba_by_hand``: x, B and C through the conv and SiLU,
    one decay and dt per head, the gated group RMSNorm; the state unit ``(h * head_dim + p) * state_size + n``."""
    silu, softplus = torch.nn.functional.silu, torch.nn.functional.softplus
    ids = torch.as_tensor(xs[..., 0]).long()
    count, steps = ids.shape
    config = hf.config
    heads, width, size = config.num_heads, config.head_dim, config.state_size
    inner = heads * width
    conv = [torch.zeros(count, inner + 2 * size, config.conv_kernel - 1, dtype=torch.float64)
            for _ in hf.backbone.layers]
    ssm = [torch.zeros(count, heads, width, size, dtype=torch.float64) for _ in hf.backbone.layers]
    outputs, states = [], []
    with torch.no_grad():
        for t in range(steps):
            h = hf.backbone.embeddings(ids[:, t])
            for i, block in enumerate(hf.backbone.layers):
                mixer = block.mixer
                gate, xbc, dt = torch.split(mixer.in_proj(rms(h, block.norm)), [inner, inner + 2 * size, heads], -1)
                window = torch.cat([conv[i], xbc[..., None]], dim=-1)
                conv[i] = window[..., 1:]
                x, B, C = torch.split(silu((window * mixer.conv1d.weight[:, 0]).sum(-1) + mixer.conv1d.bias),
                                      [inner, size, size], dim=-1)
                dt = softplus(dt + mixer.dt_bias)[:, :, None, None]
                decay = torch.exp(dt * -torch.exp(mixer.A_log)[:, None, None])
                ssm[i] = decay * ssm[i] + dt * B[:, None, None] * x.view(count, heads, width, 1)
                if i == 0:
                    flat = ssm[0].reshape(count, -1)
                    if source_states is not None:
                        flat[:, units] = source_states[t]
                        ssm[0] = flat.view_as(ssm[0])
                    states.append(flat[:, units].clone())
                y = (ssm[i] @ C[:, None, :, None])[..., 0] + mixer.D[:, None] * x.view(count, heads, width)
                h = h + mixer.out_proj(rms(y.reshape(count, inner) * silu(gate), mixer.norm))
            outputs.append(hf.lm_head(rms(h, hf.backbone.norm_f))[:, :1])
    return torch.stack(outputs, dim=1), states


def hawk_by_hand(hf, xs, units, source_states=None, attention=None):
    """The stock Hawk / Griffin decoding token by token through its cache, with a forward hook written here on layer
    0's RG-LRU (whose output is its state) that reads it and, given ``source_states``, sets its units ``units``;
    ``attention`` (Griffin): values (B, T, hidden) of layer 1's attention block output, NaN where kept."""
    from transformers import DynamicCache

    ids = torch.as_tensor(xs[..., 0]).long()
    blocks = [layer.temporal_block for layer in hf.model.layers]
    for block in blocks[::len(hf.config.block_types)]:  # the recurrent ones
        block.conv1d_state = torch.zeros(len(ids), block.hidden_size, block.conv1d_width - 1, dtype=torch.float64)
        block.rg_lru.recurrent_states = torch.zeros(len(ids), block.lru_width, dtype=torch.float32)
    outputs, states, step, cache = [], [], [0], DynamicCache(config=hf.config)

    def hook(module, args, output):
        state = module.recurrent_states.clone()
        if source_states is not None:
            state[:, units] = source_states[step[0]].to(state.dtype)
        module.recurrent_states = state
        states.append(state[:, units].clone())
        return state[:, None].to(output.dtype)

    def set_attention(module, args, output):
        setting = torch.as_tensor(attention[:, step[0]])[:, None]
        return torch.where(torch.isnan(setting), output[0], setting), output[1]

    handles = [blocks[0].rg_lru.register_forward_hook(hook)]
    if attention is not None:
        handles.append(blocks[1].register_forward_hook(set_attention))
    try:
        with torch.no_grad():
            for t in range(ids.shape[1]):
                step[0] = t
                logits = hf(input_ids=ids[:, t:t + 1], position_ids=torch.full((len(ids), 1), t), use_cache=True,
                            cache=cache, attention_mask={"sliding_attention": None}).logits
                outputs.append(logits[:, 0, :1])
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(outputs, dim=1), states


@pytest.mark.parametrize("arch", HF_ARCHS)
@pytest.mark.slow
def test_a_folder_loads_with_from_pretrained_and_its_hooks_are_its_labels(arch):
    from transformers import AutoModelForCausalLM

    root, (net, labels, data, circuit) = built(arch)
    folder = f"{root}/trained/majority/{arch}"
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64)
    assert type(hf).__name__ == {"mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM"}.get(
        arch, "RecurrentGemmaForCausalLM")
    assert hf.config.num_hidden_layers == (4 if arch == "griffin" else 2)  # two levels, Griffin's with attention
    assert sorted(labels) == sorted(net.hook_names) == sorted(hook["name"] for hook in circuit.hooks)
    assert json.loads(Path(folder, "config.json").read_text())["lsrl_bench"]["tier"] == "trained"
    xs = data["test_inputs"][:6]
    outputs, cache = net.run_with_cache(xs)
    assert torch.allclose(outputs, stock_full_forward(hf, xs), rtol=0, atol=1e-6)  # stepwise == full, to float32
    aligned = {(v["node"], u[0]) for v in circuit.variables for u in v["units"]}
    levels = {"ones_minus_zeros": 0, "more_ones": 1}  # each variable in the state of its level (Griffin: layer 2)
    assert {(node, state_hook(arch, level)) for node, level in levels.items()} <= aligned
    for hook, values in cache.items():
        assert values.shape[:2] == xs.shape[:2] and values.shape[2] == len(labels[hook])


@pytest.mark.slow
@pytest.mark.parametrize("arch", HF_ARCHS)
def test_patching_through_the_loader_equals_setting_the_state_by_hand_inside_the_step(arch):
    root, (net, labels, data, circuit) = built(arch)
    hook = "layers.0.ssm_state" if arch.startswith("mamba") else "layers.0.recurrent_state"
    units = [u for u, label in enumerate(labels[hook]) if label.node == "ones_minus_zeros"]
    assert units
    base = data["pairs_clean_inputs"][:5, :9]
    _, own = net.run_with_cache(base)
    patch = np.full(own[hook].shape, np.nan)
    patch[..., units] = np.random.default_rng(5).normal(size=(*patch.shape[:2], len(units)))  # states of size 1
    patched, cache = net.run_with_cache(base, patch={hook: patch})
    by_hand = {"mamba": mamba_by_hand, "mamba2": mamba2_by_hand}.get(arch, hawk_by_hand)
    tolerance = 1e-5 if arch.startswith("mamba") else 0  # the maths written out in float64, the stock in part float32
    expected, states = by_hand(net.hf, base, units, list(torch.as_tensor(patch[..., units]).unbind(1)))
    assert torch.allclose(patched.double(), expected.double(), rtol=0, atol=tolerance)
    assert torch.allclose(cache[hook][..., units].double(), torch.stack(states, dim=1).double(), rtol=0, atol=tolerance)
    assert (patched - net.run_with_cache(base)[0]).abs().max() > 100 * tolerance + 1e-3  # the patch mattered


@pytest.mark.parametrize("arch", ["mamba", "hawk"])
def test_a_forward_hook_on_a_loader_hook_point_sets_the_state_later_steps_read(arch):
    """The loader's hooks are ``HookPoint`` modules reached at every step of a plain ``net(xs)``: 5 added to a
    state at step 0 by a forward hook is the patch of the same values through ``run_with_cache``; nnsight reaches
    the same point."""
    import nnsight

    root, (net, labels, data, circuit) = built(arch)
    hook = "layers.0.ssm_state" if arch == "mamba" else "layers.0.recurrent_state"
    xs = torch.as_tensor(data["pairs_clean_inputs"][:3, :8])
    _, own = net.run_with_cache(xs)
    patch = np.full(own[hook].shape, np.nan)
    patch[:, 0] = own[hook][:, 0] + 5.0
    expected, _ = net.run_with_cache(xs, patch={hook: patch})
    point = net.points[hook.replace(".", "__")]
    steps = []

    def add_five_at_step_0(module, args, output):
        steps.append(args[1])
        return output + 5.0 if args[1] == 0 else None

    handle = point.register_forward_hook(add_five_at_step_0)
    try:
        with torch.no_grad():
            hooked_outputs = net(xs)
    finally:
        handle.remove()
    assert steps == list(range(8))
    assert torch.allclose(hooked_outputs, expected, rtol=0, atol=0)
    assert (expected - own["readout"]).abs().max() > 1e-3  # the state at step 0 mattered later
    traced = nnsight.NNsight(net)
    with traced.trace(xs):
        getattr(traced.points, hook.replace(".", "__")).output[:] += 5.0  # its first call: step 0
        outputs = traced.output.save()
    assert torch.allclose(outputs.detach(), expected, rtol=0, atol=0)


def test_a_hawk_folder_runs_a_plain_forward_with_its_own_config():
    """transformers 5 cannot run a RecurrentGemma model without attention layers through the default cache; the
    folder's config turns the cache off, so ``from_pretrained(folder)(ids)`` is the full forward."""
    from transformers import AutoModelForCausalLM

    root, (net, labels, data, circuit) = built("hawk")
    hf = AutoModelForCausalLM.from_pretrained(f"{root}/trained/majority/hawk", dtype=torch.float64)
    xs = data["test_inputs"][:4]
    with torch.no_grad():
        logits = hf(torch.as_tensor(xs[..., 0]).long()).logits[..., :1]
    assert torch.allclose(logits, stock_full_forward(hf, xs), rtol=0, atol=0)


def test_griffin_patches_its_attention_blocks_output_as_a_hook_written_by_hand_does():
    root, (net, labels, data, circuit) = built("griffin")
    assert [label.role for label in labels["layers.1.attention"]] == ["helper"] * 16
    assert not any(unit["in_circuit"] for unit in circuit.units if unit["hook"].endswith(".attention"))
    base = data["pairs_clean_inputs"][:5, :9]
    _, own = net.run_with_cache(base)
    patch = np.full(own["layers.1.attention"].shape, np.nan)
    patch[:, 2:6, 3:9] = np.random.default_rng(6).normal(size=(5, 4, 6))
    patched, cache = net.run_with_cache(base, patch={"layers.1.attention": patch})
    expected, _ = hawk_by_hand(net.hf, base, [], attention=patch)
    assert torch.equal(patched, expected)
    assert torch.equal(cache["layers.1.attention"][:, 2:6, 3:9], torch.as_tensor(patch[:, 2:6, 3:9]))
    assert (patched - own["readout"]).abs().max() > 1e-3  # the patch mattered


@pytest.mark.slow
def test_the_harness_scores_a_folder():
    from lsrl.cli import main

    root, _ = built("mamba")
    result = CliRunner().invoke(main, ["bench", "eval", f"{root}/trained/majority/mamba", "--method", "resample",
                                       "--pairs", "4"])
    assert result.exit_code == 0, result.output
    scores = dict(line.split(": ", 1) for line in result.output.splitlines() if ": " in line)
    assert scores["tier"] == "trained" and 0 <= float(scores["unit_auroc"]) <= 1
    assert int(scores["units"]) == 2 * 128 + 1  # the aligned and free units of both ssm states, and the readout


@pytest.mark.slow
def test_interchange_intervention_training_lowers_the_interchange_error():
    """Hawk on count_ones: the squared error of the outputs under the interchange of ``count``'s units against
    the program's, on fresh sequences, falls with training."""
    program, rng = TASKS["count_ones"].build(), np.random.default_rng(7)
    base, source = (np.stack([TASKS["count_ones"].sample(rng, 6) for _ in range(32)]).astype(float) for _ in "ab")
    expected = program_targets(program, base, source, "count")

    def interchange_error(model):
        _, states = model.run(torch.as_tensor(source))
        with torch.no_grad():
            outputs, _ = model.run(torch.as_tensor(base), model.alignment["count"], states)
        return float(((outputs - expected) ** 2).mean())

    untrained, trained = train_hf("count_ones", "hawk", steps=1), train_hf("count_ones", "hawk", steps=60, batch=32)
    assert interchange_error(trained) < 0.5 * interchange_error(untrained)


def test_levels_follow_the_chain_of_variables_within_a_step():
    for name, levels in {"majority": {"ones_minus_zeros": 0, "more_ones": 1},
                         "count_token_2": {"is_2": 0, "count": 1}, "count_ones": {"count": 0}}.items():
        task = TASKS[name]
        assert variable_levels(task.build(), task.circuit_nodes()) == levels


def test_the_command_line_names_the_trained_architectures():
    from lsrl.bench.build import TRAINED_ARCHS
    from lsrl.cli import TRAINED_ARCHS as CLI_ARCHS

    assert CLI_ARCHS == (*TRAINED_ARCHS, *HF_ARCHS)


@pytest.mark.slow
def test_the_harness_fills_the_interchange_accuracy_of_the_variables_a_unit_method_finds():
    """The column is the share of (pair, step) outputs equal, rounded, to data.npz's interchange of each found
    variable when its found units take their corrupted values: recomputed here from the folder's own arrays."""
    from lsrl.bench.eval import evaluate
    from lsrl.bench.eval.methods import METHODS
    from lsrl.bench.eval.pairs import Pairs
    from lsrl.bench.eval.hooked import HookedSubject

    root, (net, labels, data, circuit) = built("hawk")
    subject = HookedSubject.from_folder(f"{root}/trained/majority/hawk")
    row = evaluate(subject, "random", pairs=4)  # random calls about half the units: some of each variable
    assert 0.0 <= row["interchange_accuracy"] <= 1.0
    found = METHODS["random"](subject, Pairs.from_data(subject, 4))
    total = len(data["pairs_clean_lengths"])
    chosen = np.r_[0:2, total // 2:total // 2 + 2]
    lengths, source_lengths = data["pairs_clean_lengths"][chosen], data["pairs_corrupted_lengths"][chosen]
    steps = int(lengths.max())
    clean = data["pairs_clean_inputs"][chosen, :steps]
    _, source = net.run_with_cache(data["pairs_corrupted_inputs"][chosen])
    held = np.minimum(np.arange(steps)[None], source_lengths[:, None] - 1)  # a shorter source holds its last step
    real = np.arange(steps)[None] < lengths[:, None]
    accuracies = []
    for node in ("ones_minus_zeros", "more_ones"):
        patch = {}
        for (layer, unit), candidate_score in zip([(c.layer, c.unit) for c in subject.candidates], found.units):
            hook = subject.hooks[layer]
            if labels[hook][unit] is not None and labels[hook][unit].node == node and candidate_score > 0.5:
                values = patch.setdefault(hook, np.full((len(chosen), steps, len(labels[hook])), np.nan))
                values[..., unit] = source[hook].double().numpy()[np.arange(len(chosen))[:, None], held, unit]
        if patch:
            outputs, _ = net.run_with_cache(clean, patch=patch)
            expected = data[f"interchange.{node}"][chosen, :steps]
            equal = (np.round(outputs.double().numpy()) == np.round(expected)).all(axis=-1)
            accuracies.append(equal[real].mean())
    assert accuracies and row["interchange_accuracy"] == pytest.approx(np.mean(accuracies), abs=1e-12)


def _digests(root: str) -> dict[str, str]:
    """Every file under ``root``, by its path from there: its sha256."""
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(Path(root).rglob("*")) if path.is_file()}


@pytest.mark.parametrize("arch", HF_ARCHS)
@pytest.mark.slow
def test_two_builds_of_a_folder_are_byte_identical(arch, tmp_path):
    first, _ = built(arch)
    second = str(tmp_path)
    lsrl.bench.build_suite(second, ["majority"], progress=False, tiers=["trained"], test_sequences=20,
                           train_steps=2, trained_archs=[arch])
    digests = _digests(first)
    assert {name for name in digests if name.startswith(f"trained/majority/{arch}/")} >= {
        f"trained/majority/{arch}/{name}" for name in ("config.json", "model.safetensors", "labels.json",
                                                       "circuit.json", "data.npz", "manifest.json", "README.md")}
    assert digests == _digests(second)


@pytest.mark.slow
def test_mamba2_and_griffin_folders_load_with_their_own_loader_and_patch_as_lsrl_does(tmp_path):
    """Each folder's ``load_model.py``, run in a process without lsrl on its path (torch and transformers only; no
    lsrl module imported), loads the folder and patches a carried state (and Griffin's attention output) inside
    the recurrence: its outputs equal lsrl's ``bench.load`` model's under the same patch."""
    import os
    import subprocess
    import sys

    patched = {"mamba2": ["layers.0.ssm_state"], "griffin": ["layers.0.recurrent_state", "layers.1.attention"]}
    code, expected = ["import importlib.util, sys", "import numpy as np"], {}
    for arch, hooks in patched.items():
        root, (net, labels, data, circuit) = built(arch)
        base = data["pairs_clean_inputs"][:4, :10]
        own, _ = net.run_with_cache(base)
        patch = {}
        for number, hook in enumerate(hooks):
            patch[hook] = np.full((4, 10, len(labels[hook])), np.nan)
            patch[hook][:, 1::2, :3] = np.random.default_rng(number).normal(size=(4, 5, 3))
        np.savez(tmp_path / f"{arch}.npz", base=base, **patch)
        expected[arch] = net.run_with_cache(base, patch=patch)[0].double().numpy()
        assert not np.array_equal(expected[arch], own.double().numpy())  # the patch mattered
        folder = Path(root) / "trained" / "majority" / arch
        code += [f"spec = importlib.util.spec_from_file_location('loader_{arch}', {str(folder / 'load_model.py')!r})",
                 "loader = importlib.util.module_from_spec(spec); spec.loader.exec_module(loader)",
                 f"given = dict(np.load({str(tmp_path / f'{arch}.npz')!r})); base = given.pop('base')",
                 f"outputs, _ = loader.load_folder({str(folder)!r}).run_with_cache(base, patch=given)",
                 f"np.save({str(tmp_path / f'{arch}.out.npy')!r}, outputs.double().numpy())"]
    code.append("assert not any(name.startswith('lsrl') for name in sys.modules), 'lsrl imported'")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", "\n".join(code)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    for arch, outputs in expected.items():
        assert np.array_equal(np.load(tmp_path / f"{arch}.out.npy"), outputs)


def test_a_run_replaces_the_rows_of_its_tasks_and_archs_in_the_table_and_keeps_the_others(tmp_path):
    import csv

    from lsrl.bench.eval.harness import write_csv
    from lsrl.bench.trained_tier import TRAINED_COLUMNS, merged_rows

    def row(task, arch, accuracy):
        return {column: 0 for column in TRAINED_COLUMNS} | {"task": task, "arch": arch, "task_accuracy": accuracy}

    table = tmp_path / "trained_hf.csv"
    assert merged_rows([row("majority", "hawk", 0.5)], table) == [row("majority", "hawk", 0.5)]  # no table yet
    write_csv([row("majority", "mamba", 0.1), row("count_ones", "hawk", 0.2), row("majority", "hawk", 0.3)], table,
              TRAINED_COLUMNS)
    merged = merged_rows([row("majority", "griffin", 0.9), row("majority", "mamba", 0.8)], table)
    assert [(r["task"], r["arch"], float(r["task_accuracy"])) for r in merged] == [
        ("count_ones", "hawk", 0.2), ("majority", "mamba", 0.8), ("majority", "hawk", 0.3),
        ("majority", "griffin", 0.9)]  # the order of TASKS_TRAINED, then of HF_ARCHS
    write_csv(merged, table, TRAINED_COLUMNS)
    with open(table, newline="") as file:
        assert len(list(csv.DictReader(file))) == 4


@pytest.mark.slow
def test_each_interchange_step_trains_every_variable_on_the_same_pair(monkeypatch):
    """``train_hf``'s steps in turn: the task (nothing set), every circuit variable's interchange on one base / source
    pair (their losses summed), the free units."""
    from lsrl.bench.training import loop

    calls, loss = [], loop.pair_loss

    def recorded(model, program, base, source, units, variable):
        calls.append((len(calls), variable, sorted(units), base.tobytes(), source.tobytes()))
        return loss(model, program, base, source, units, variable)

    monkeypatch.setattr(loop, "pair_loss", recorded)
    model = train_hf("majority", "hawk", steps=3, batch=4)
    assert [variable for _, variable, *_ in calls] == [None, "ones_minus_zeros", "more_ones", None]
    assert [units for _, _, units, *_ in calls] == [[], [model.alignment["ones_minus_zeros"][0]],
                                                   [model.alignment["more_ones"][0]], sorted(model.free)]
    assert calls[1][3:] == calls[2][3:] and calls[0][3:] != calls[1][3:]
