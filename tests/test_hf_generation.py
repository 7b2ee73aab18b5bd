"""Token programs that answer through ``generate``: the generation form of Listing 2, the next-token
head of the stock ``transformers`` models, their word-level tokenizer, and the stock LSTM / GRU loop."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from functools import cache

import numpy as np
import pytest

import lsrl
from lsrl.programs import discrete_approximator, discrete_prompt

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

N, VOCABULARY = 2, 2  # keys and values of 2 tokens in 0 .. 2: a table of 9 keys
ARCHS = ("mamba", "mamba2", "hawk", "griffin")
CAPITALS = {"AUT": "VIE", "BGR": "SOF", "CAN": "OTT", "DEU": "BER", "FRA": "PAR", "JPN": "TOK", "PER": "LIM"}


def random_map(n: int, vocabulary: int, size: int, seed: int) -> dict[tuple[int, ...], tuple[int, ...]]:
    rng = np.random.default_rng(seed)
    keys = list(itertools.product(range(vocabulary + 1), repeat=n))
    chosen = rng.choice(len(keys), size=size, replace=False)
    return {keys[i]: tuple(int(t) for t in rng.integers(0, vocabulary + 1, n)) for i in chosen}


def greedy(step, prompt: list[int], n: int) -> list[int]:
    """``n`` tokens continuing ``prompt``: each the output ``step(sequence)`` gives for the sequence so far,
    rounded, then appended (what greedy decoding does, independent of any model's cache)."""
    sequence = list(prompt)
    for _ in range(n):
        sequence.append(int(round(float(step(sequence)))))
    return sequence[len(prompt):]


@cache
def generating(n: int = N, vocabulary: int = VOCABULARY) -> lsrl.CompiledProgram:
    return lsrl.compile(discrete_approximator(n, robust=True, vocabulary=vocabulary, generate=True))


@pytest.mark.parametrize("n, vocabulary", [(1, 6), (2, 2), (3, 1)])
def test_the_generation_form_answers_every_query_when_its_outputs_are_fed_back(n, vocabulary):
    model = generating(n, vocabulary)
    mapping = random_map(n, vocabulary, min(5, (vocabulary + 1) ** n), seed=n)
    for query, value in mapping.items():
        prompt = discrete_prompt(mapping, query, generate=True)[:, 0].tolist()
        assert prompt[-n:] == list(query)  # the prompt ends with the query
        answer = greedy(lambda sequence: model(np.array(sequence).reshape(-1, 1), exact=True)[-1, 0], prompt, n)
        assert tuple(answer) == value


def test_the_listing_2_signature_and_prompt_are_unchanged_without_generate():
    mapping = {(1, 2): (3, 4), (0, 4): (2, 2)}
    assert discrete_prompt(mapping, (0, 4))[:2, 0].tolist() == [0, 4]  # the query first
    program = discrete_approximator(2, robust=True, vocabulary=4)
    assert "generate" not in program.name and program.input.dim == 1


def test_the_generation_form_needs_the_robust_construction_and_a_vocabulary():
    with pytest.raises(lsrl.LsrlError, match="generate=True.*robust=True and vocabulary"):
        discrete_approximator(2, generate=True)
    with pytest.raises(lsrl.LsrlError, match="table of"):
        discrete_approximator(4, robust=True, vocabulary=9, generate=True)


@cache
def hf_generator(arch: str, dtype: str):
    mapping = random_map(N, VOCABULARY, 4, seed=7)
    max_len = len(discrete_prompt(mapping, next(iter(mapping)), generate=True)) + N
    return mapping, generating().to_hf(arch, max_len=max_len, dtype=getattr(torch, dtype), generate=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_generate_answers_every_query_of_a_random_map(arch, dtype):
    mapping, hf = hf_generator(arch, dtype)
    prompts = np.stack([discrete_prompt(mapping, query, generate=True) for query in mapping])
    ids = torch.as_tensor(prompts[..., 0])
    with torch.no_grad():
        forward = lsrl.hf.outputs(hf, hf(input_ids=ids))
        generated = hf.generate(ids, max_new_tokens=N, do_sample=False)[:, ids.shape[1]:]
        cached = None if arch == "hawk" else hf.generate(ids, max_new_tokens=N, do_sample=False, use_cache=True)
    # every step's argmax is the program's output, and the first generated token is the last step's
    assert np.array_equal(forward.double().numpy(), generating()(prompts))
    assert torch.equal(generated[:, 0], forward[:, -1, 0].long())
    assert [tuple(row) for row in generated.tolist()] == list(mapping.values())
    assert cached is None or torch.equal(cached[:, ids.shape[1]:], generated)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_logits_keep_the_stated_margin(arch):
    mapping, hf = hf_generator(arch, "float32")
    prompts = np.stack([discrete_prompt(mapping, query, generate=True) for query in mapping])
    with torch.no_grad():
        logits = hf(input_ids=torch.as_tensor(prompts[..., 0])).logits.double()
    top = logits.topk(2, dim=-1).values
    margin = hf.config.lsrl_io["generation"]["margin"]
    assert 0.4 < margin < 0.5 and (top[..., 0] - top[..., 1]).min() >= margin


def test_hawk_generates_without_the_cache_it_cannot_count():
    """The stock Hawk cannot count a cache without attention layers; its config turns the cache off, so a
    plain ``generate`` works, and asking for the cache is the stock model's own ``ValueError``."""
    mapping, hf = hf_generator("hawk", "float32")
    ids = torch.as_tensor(discrete_prompt(mapping, next(iter(mapping)), generate=True)[None, :, 0])
    assert hf.config.use_cache is False
    with pytest.raises(ValueError, match="get_seq_length"):
        hf.generate(ids, max_new_tokens=N, do_sample=False, use_cache=True)


@pytest.mark.slow
def test_hawk_answers_greedily_step_by_step_through_its_cache_as_its_card_says():
    from transformers import DynamicCache

    mapping, hf = hf_generator("hawk", "float32")
    assert "prefill of 2 or more tokens" in lsrl.hf.model_card(hf)
    for query, value in mapping.items():
        sequence = discrete_prompt(mapping, query, generate=True)[:, 0].tolist()
        prompt_length, cache = len(sequence), DynamicCache(config=hf.config)
        start = 0
        with torch.no_grad():
            while len(sequence) < prompt_length + N:
                stop = max(start + 1, 2) if start < prompt_length else start + 1
                logits = hf(input_ids=torch.tensor([sequence[start:stop]]), use_cache=True, cache=cache,
                            position_ids=torch.arange(start, stop)[None],
                            attention_mask={"sliding_attention": None}).logits
                start = stop
                if stop >= prompt_length:  # the prompt is read: its last logits pick the next token
                    sequence.append(int(logits[0, -1].argmax()))
        assert tuple(sequence[prompt_length:]) == value


@pytest.mark.parametrize("target", ["stock_lstm", "stock_gru"])
def test_the_stock_lstm_and_gru_answer_through_a_greedy_loop(target):
    mapping = random_map(N, VOCABULARY, 4, seed=3)
    prompts = {query: discrete_prompt(mapping, query, generate=True)[:, 0].tolist() for query in mapping}
    net = generating().to_torch(target, max_len=len(next(iter(prompts.values()))) + N, dtype=torch.float64)
    assert net.tolerance < 0.5
    for query, prompt in prompts.items():
        tokens = torch.tensor([prompt], dtype=torch.float64)[..., None]
        with torch.no_grad():
            y, state = net.run(tokens)  # the prompt, then one token at a time through the carried state
            answer = []
            for _ in range(N):
                answer.append(int(torch.round(y[0, -1, 0])))
                y, state = net.run(torch.tensor([[[answer[-1]]]], dtype=torch.float64), state)
        assert tuple(answer) == mapping[query]
        assert answer == greedy(lambda s: generating()(np.array(s).reshape(-1, 1))[-1, 0], prompt, N)


def capitals():
    words = sorted(set(CAPITALS) | set(CAPITALS.values()))
    return {word: token for token, word in enumerate(words)}


@pytest.mark.slow
def test_a_pipeline_answers_the_capitals_from_a_folder_where_lsrl_cannot_be_imported(tmp_path):
    words = capitals()
    mapping = {(words[k],): (words[v],) for k, v in CAPITALS.items()}
    program = lsrl.compile(discrete_approximator(1, robust=True, vocabulary=len(words) - 1, generate=True))
    hf = program.to_hf("mamba", max_len=2 * len(mapping) + 2, generate=True)
    folder = lsrl.hf.save(hf, tmp_path / "capitals", words=words)
    assert "pipeline(\"text-generation\"" in (folder / "README.md").read_text()
    pairs = " ".join(f"{k} {v}" for k, v in CAPITALS.items())
    code = ["import sys", "sys.modules['lsrl'] = None  # import lsrl now fails",
            "from transformers import AutoTokenizer, pipeline",
            f"generator = pipeline('text-generation', model={str(folder)!r})",
            f"assert AutoTokenizer.from_pretrained({str(folder)!r})('CAN OTT').input_ids == "
            f"[{words['CAN']}, {words['OTT']}]"]
    code += [f"print(generator({pairs + ' ' + country!r}, max_new_tokens=1, do_sample=False)[0]['generated_text'])"
             for country in CAPITALS]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", "\n".join(code)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [f"{pairs} {country} {capital}" for country, capital in CAPITALS.items()]


def test_a_token_programs_folder_has_a_tokenizer_of_the_token_numbers_by_default(tmp_path):
    from transformers import AutoTokenizer

    token = lsrl.Input(1, name="token", bounds=(3, 6), integer=True)
    hf = lsrl.compile(lsrl.ForEach(lsrl.ReLU(token))).to_hf("hawk", max_len=4)
    folder = lsrl.hf.save(hf, tmp_path / "tokens")
    words = AutoTokenizer.from_pretrained(folder)
    assert words("3 6 4").input_ids == [0, 3, 1]  # input_ids = token - token_low
    assert words.decode([2, 0]) == " 5 3"  # a space before every word


def test_a_generation_head_or_a_tokenizer_for_a_program_without_tokens_is_refused_naming_its_input(tmp_path):
    x = lsrl.Input(1, name="reading", bounds=(0, 1))
    model = lsrl.compile(lsrl.ForEach(lsrl.ReLU(x)))
    with pytest.raises(lsrl.LsrlError, match="Input 'reading' is not a token input") as refused:
        model.to_hf("mamba", max_len=4, generate=True)
    assert "\n" not in str(refused.value)
    hf = model.to_hf("hawk", max_len=4)
    with pytest.raises(lsrl.LsrlError, match="Input 'reading' of .* reads no tokens"):
        lsrl.hf.save(hf, tmp_path / "x", words={"a": 0})
    assert not (tmp_path / "x").exists()
    pair = lsrl.Input(1, name="pair", bounds=(0, 1), integer=True)
    with pytest.raises(lsrl.LsrlError, match="2 outputs"):
        lsrl.compile(lsrl.ForEach(lsrl.Concat([pair, pair]))).to_hf("mamba", max_len=4, generate=True)


@pytest.mark.parametrize("words, named", [
    ({"A": 0, "B": 0, "C": 2}, "'A' and 'B' both name token 0"),
    ({"A": 0, "B": 1}, "no word for token 2"),
    ({"A": 0, "B": 1, "C": 2, "D": 3}, "the word 'D' names token 3"),
    ({"A B": 0, "B": 1, "C": 2}, "the word 'A B'"),
])
def test_vocabulary_words_that_collide_or_miss_a_token_are_refused_naming_the_word(tmp_path, words, named):
    token = lsrl.Input(1, name="token", bounds=(0, 2), integer=True)
    hf = lsrl.compile(lsrl.ForEach(lsrl.ReLU(token))).to_hf("hawk", max_len=4)
    with pytest.raises(lsrl.LsrlError, match=named):
        lsrl.hf.save(hf, tmp_path / "words", words=words)
    assert not (tmp_path / "words").exists()


@pytest.mark.slow
def test_every_cards_code_runs_without_lsrl_and_reads_the_programs_outputs(tmp_path):
    """The README.md code of a folder (inputs_embeds in float32, tokens, a generation head), run with its
    placeholders (FOLDER, the inputs, PROMPT, N) set, in a process where lsrl cannot be imported."""
    import re

    x = lsrl.Input(2, name="x", bounds=(-1, 1))
    embedded = lsrl.compile(lsrl.ForEach(lsrl.ReLU(x[0:1] - x[1:2])))
    token = lsrl.Input(1, name="token", bounds=(0, 4), integer=True)
    counted = lsrl.compile(lsrl.ForEach(lsrl.LinState(token, A=[[1]], B=[[1]], name="total")))
    mapping = random_map(N, VOCABULARY, 3, seed=5)
    prompt = discrete_prompt(mapping, next(iter(mapping)), generate=True)[:, 0].tolist()
    xs = np.random.default_rng(0).uniform(-1, 1, (6, 2))
    folders = {
        "embeds": (lsrl.hf.save(embedded.to_hf("mamba", max_len=6, dtype=torch.float32), tmp_path / "embeds"),
                   f"xs = {xs.tolist()!r}; T = {len(xs)}", "ys", embedded(xs)),
        "tokens": (lsrl.hf.save(counted.to_hf("hawk", max_len=6), tmp_path / "tokens"),
                   "tokens = [4, 0, 3, 1, 2]", "ys", counted(np.array([[4], [0], [3], [1], [2]]))),
        "generate": (lsrl.hf.save(generating().to_hf("hawk", max_len=len(prompt) + N, generate=True),
                                  tmp_path / "generate"),
                     f"tokens = {prompt!r}; PROMPT = {' '.join(map(str, prompt))!r}; N = {N}", "next_tokens",
                     generating()(np.array(prompt).reshape(-1, 1))),
    }
    code = ["import sys", "sys.modules['lsrl'] = None  # import lsrl now fails", "import numpy as np"]
    for name, (folder, given, result, _) in folders.items():
        blocks = re.findall(r"^```python\n(.*?)^```", (folder / "README.md").read_text(), flags=re.M | re.S)
        code += [f"FOLDER = {str(folder)!r}", given, *blocks,
                 f"np.save({str(tmp_path / name)!r}, np.asarray({result}.detach().double().reshape(-1)))"]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", "\n".join(code)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    for name, (folder, _, _, expected) in folders.items():
        tolerance = json.loads((folder / "config.json").read_text())["lsrl_io"]["tolerance"]
        error = np.abs(np.load(tmp_path / f"{name}.npy") - np.asarray(expected, dtype=float).reshape(-1)).max()
        assert error <= tolerance and (name == "embeds" or tolerance == 0)


def test_a_float64_card_says_which_parts_keep_float32_class_error():
    token = lsrl.Input(1, name="token", bounds=(0, 3), integer=True)
    model = lsrl.compile(lsrl.ForEach(lsrl.ReLU(token)))
    card64 = lsrl.hf.model_card(model.to_hf("hawk", max_len=4, dtype=torch.float64))
    assert "float64 keeps float32-class error" in card64 and "RG-LRU scan (the state) in float32" in card64
    assert "float32-class" not in lsrl.hf.model_card(model.to_hf("hawk", max_len=4, dtype=torch.float32))
