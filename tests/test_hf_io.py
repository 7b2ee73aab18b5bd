"""``lsrl.hf``'s interface: the dispatch, the ``config.lsrl_io`` record, ``inputs`` / ``outputs``, the model
card, and ``save_pretrained`` -> ``AutoModelForCausalLM.from_pretrained`` with no lsrl in the loop."""

import json

import numpy as np
import pytest
import torch
import transformers

import lsrl
from lsrl.hf.stream import MARGIN_BITS, hidden_size_for, payload_scale, plan_stream


def real_program():
    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    return lsrl.ForEach(lsrl.Linear(lsrl.ReLU(lsrl.Linear(x, [[1, -2], [1, 1]], [0.5, 0])), [[1, 1]], [0.25]))


def token_program():
    token = lsrl.Input(1, name="token", bounds=(2, 6), integer=True)
    total = lsrl.LinState(token, A=[[1]], B=[[1]], name="total")
    return lsrl.ForEach(lsrl.Concat([total, lsrl.ReLU(token - 4)]))


def test_import_lsrl_loads_neither_torch_nor_transformers():
    import subprocess
    import sys

    code = "import lsrl, sys; assert not {'torch', 'transformers'} & set(sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_unknown_architecture_lists_the_four():
    model = lsrl.compile(real_program())
    with pytest.raises(lsrl.LsrlError, match="'hf-mamba', 'hf-mamba2', 'hf-hawk', 'hf-griffin'"):
        model.to_hf("lstm", max_len=4)
    with pytest.raises(lsrl.LsrlError, match="max_len"):
        model.to_hf("mamba", max_len=0)
    with pytest.raises(lsrl.LsrlError, match="dtype"):
        model.to_hf("mamba", max_len=4, dtype=torch.float16)


def test_the_stock_models_have_names_of_their_own_and_to_hf_takes_the_older_ones():
    import lsrl.targets

    assert not set(lsrl.hf.ARCHITECTURES) & set(lsrl.targets.ARCHITECTURES)
    model = lsrl.compile(token_program())
    for older, name in lsrl.hf.ALIASES.items():
        built, by_alias = model.to_hf(name, max_len=4), model.to_hf(older, max_len=4)
        assert type(built) is type(by_alias) and built.config.lsrl_io == by_alias.config.lsrl_io
        assert all(torch.equal(tensor, by_alias.state_dict()[key]) for key, tensor in built.state_dict().items())


def test_stream_sizes_and_scale():
    assert hidden_size_for(10) == (16, 1) and hidden_size_for(100) == (128, 2)
    beta = payload_scale([3.0, 4.0], alpha=4.0)  # energy 25
    assert beta ** 2 * 25 <= 2.0 ** -MARGIN_BITS * 16 < (2 * beta) ** 2 * 25
    with pytest.raises(lsrl.LsrlError, match="too large"):
        plan_stream([1e40], "big")


def test_real_program_reads_inputs_embeds_and_the_card_says_how(tmp_path):
    model = lsrl.compile(real_program())
    hf = model.to_hf("mamba", max_len=6)
    record = hf.config.lsrl_io
    assert record["input"] == "inputs_embeds" and record["input_dim"] == 2
    xs = np.random.default_rng(0).uniform(-1, 1, (3, 6, 2))
    kwargs = lsrl.hf.inputs(hf, xs)
    assert set(kwargs) == {"inputs_embeds"} and kwargs["inputs_embeds"].shape == (3, 6, hf.config.hidden_size)
    with torch.no_grad():
        ys = lsrl.hf.outputs(hf, hf(**kwargs))
    assert ys.shape == (3, 6, 1)
    assert np.abs(ys.double().numpy() - model(xs)).max() <= record["tolerance"]
    lsrl.hf.save(hf, tmp_path)
    card = (tmp_path / "README.md").read_text()
    assert "inputs_embeds" in card and str(record["embed_channels"]) in card
    saved = json.loads((tmp_path / "config.json").read_text())["lsrl_io"]
    assert saved == json.loads(json.dumps(record))
    with pytest.raises(lsrl.LsrlError, match="bounds"):
        lsrl.hf.inputs(hf, xs * 2)
    with pytest.raises(lsrl.LsrlError, match="max_len"):
        lsrl.hf.inputs(hf, np.zeros((7, 2)))


def test_a_user_without_lsrl_reads_the_saved_folder(tmp_path):
    """The folder loads with AutoModelForCausalLM; the record alone (as the card says) feeds and reads it."""
    model = lsrl.compile(token_program())
    hf = model.to_hf("mamba", max_len=5)
    lsrl.hf.save(hf, tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    record = loaded.config.lsrl_io
    tokens = np.array([[2, 6, 3, 4, 5]])
    with torch.no_grad():
        logits = loaded(input_ids=torch.as_tensor(tokens) - record["token_low"]).logits
        same = hf(**lsrl.hf.inputs(hf, tokens[..., None])).logits
    assert torch.equal(logits, same)
    ys = logits[..., record["output_logits"]] * record["output_scale"]
    expected = model(tokens[..., None])
    assert np.array_equal(np.rint(ys.double().numpy()), expected)
    assert record["input"] == "input_ids" and loaded.config.vocab_size == 5
    with pytest.raises(lsrl.LsrlError, match="integers"):
        lsrl.hf.inputs(hf, np.array([[[2.5]]]))


def test_outputs_refuses_a_model_lsrl_did_not_build():
    config = transformers.MambaConfig(vocab_size=4, hidden_size=8, num_hidden_layers=1)
    with pytest.raises(lsrl.LsrlError, match="lsrl_io"):
        lsrl.hf.outputs(transformers.MambaForCausalLM(config), torch.zeros(1, 1, 4))


def test_outputs_refuses_integer_logits_and_a_model_moved_to_another_dtype():
    """Integer logits (rounded: a token's output off by up to 1/2 times the output scale) and a model whose
    weights were moved from the dtype it was built and checked in are refused; its own logits are read."""
    model = lsrl.compile(real_program())
    hf = model.to_hf("mamba", max_len=6)
    xs = np.random.default_rng(1).uniform(-1, 1, (2, 6, 2))
    with torch.no_grad():
        logits = hf(**lsrl.hf.inputs(hf, xs)).logits
    expected = np.array(model(xs), dtype=float)
    assert np.max(np.abs(lsrl.hf.outputs(hf, logits).double().numpy() - expected)) <= hf.config.lsrl_io["tolerance"]
    for integers in (logits.round().long(), logits.round().int(), logits > 0):
        with pytest.raises(lsrl.LsrlError, match=rf"^lsrl.hf.outputs: the logits must be floats, got {integers.dtype}"):
            lsrl.hf.outputs(hf, integers)
    for dtype in (torch.float16, torch.float64):
        moved = model.to_hf("mamba", max_len=6).to(dtype)
        with torch.no_grad():
            moved_logits = moved(**{key: value.to(dtype) if value.is_floating_point() else value
                                    for key, value in lsrl.hf.inputs(moved, xs).items()}).logits
        with pytest.raises(lsrl.LsrlError, match=rf"^lsrl.hf.outputs: the model's weights are {str(dtype)[6:]}, but it "
                                                 "was built and checked in float32"):
            lsrl.hf.outputs(moved, moved_logits)


def test_inputs_refuse_sequences_past_max_len():
    hf = lsrl.compile(real_program()).to_hf("mamba", max_len=6)
    with pytest.raises(lsrl.LsrlError, match=r"7 steps, but the model is built for at most max_len=6"):
        lsrl.hf.inputs(hf, np.zeros((1, 7, 2)))
