"""Random programs through every boundary after the language: the torch targets, saved files, the stock
``transformers`` models, the finite automata and the benchmark suite's names. Where tests/test_fuzz_api.py
spoils one argument of a fixed program, these draw the programs themselves (the random-program generator of
tests/test_random_programs.py, inputs declared in [-X_NUM, X_NUM]), and with them options, dtypes, shapes,
out-of-bounds and non-finite inputs, and edits of saved files. Each call ends in an ``LsrlError`` whose
one-line message names what was wrong, or in an answer checked against an independent reference: the DAG
interpreter within the target's stated tolerance, the automaton walked by hand, Python's ``re``.

Time: the "ci" hypothesis profile (tests/conftest.py) draws a few examples of each; ``HYPOTHESIS_PROFILE=deep``
fuzzes longer.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lsrl
import lsrl.bench
import lsrl.bench.eval
from fuzz_strategies import bad_sequence, in_a_scratch_folder, user_error_or_answer  # noqa: F401 (autouse)
from lsrl import automata
from lsrl.targets.hawk import CONSTRUCTIONS
from test_hf_mamba import bounded_random_program
from test_random_programs import X_NUM

SEEDS = st.integers(0, 2**32 - 1)
INPUT_WORDS = ("input", "x", "sequence", "batch", "dtype", "bounds", "steps", "max_len")


@functools.lru_cache(maxsize=32)
def random_model(seed: int, backend: str = "exact") -> tuple[lsrl.ForEach, lsrl.CompiledProgram]:
    """The generator's program of ``seed`` (Input declared in [-X_NUM, X_NUM]) and its compiled model."""
    program = bounded_random_program(seed)
    return program, lsrl.compile(program, backend=backend, progress=False)


def interpreted(program: lsrl.ForEach, xs: np.ndarray) -> np.ndarray:
    """The exact interpreter's answer on the float64 values ``xs``, as float64."""
    return np.array(program(np.asarray(xs, dtype=np.float64).astype(object), exact=True), dtype=np.float64)


@st.composite
def program_inputs(draw: st.DrawFn, d: int, max_steps: int) -> Any:
    """An input for a width-d program: a (B, T, d) tensor of values within the declared bounds (quarters of
    [-X_NUM, X_NUM]) in a drawn dtype, one with a value beyond the bounds or not finite, or a wrong one."""
    kind = draw(st.sampled_from(["within"] * 4 + ["outside", "non-finite", "wrong"]))
    if kind == "wrong":
        return draw(bad_sequence(d))
    batch = draw(st.integers(1, 2))
    steps = draw(st.sampled_from([0, *range(1, max_steps + 1), *range(1, max_steps + 1)]))  # T = 0 now and then
    quarters = draw(st.lists(st.integers(-4 * X_NUM, 4 * X_NUM), min_size=batch * steps * d,
                             max_size=batch * steps * d))
    xs = np.array(quarters, dtype=np.float64).reshape(batch, steps, d) / 4
    if xs.size and kind != "within":
        spoilt = draw(st.sampled_from([X_NUM + 0.25, -X_NUM - 1, 1e300]) if kind == "outside"
                      else st.sampled_from([np.nan, np.inf, -np.inf]))
        xs.reshape(-1)[draw(st.integers(0, xs.size - 1))] = spoilt
    dtype = draw(st.sampled_from([torch.float64, torch.float64, torch.float32, torch.float16, torch.int64]))
    return torch.tensor(xs).to(dtype) if kind == "within" or dtype.is_floating_point else torch.tensor(xs)


# ---------------------------------------------------------------- the torch targets

ARCHITECTURES = lsrl.targets.ARCHITECTURES
STOCK = ("stock_lstm", "stock_gru")
VALID_OPTIONS = {  # valid values of every target option
    "gate_bound": st.sampled_from([10.0**3, 10.0**6]), "max_len": st.integers(1, 10),
    "construction": st.sampled_from(CONSTRUCTIONS), "window": st.integers(1, 4), "heads": st.just(1),
    "dtype": st.sampled_from([torch.float32, torch.float64]), "amplitude": st.sampled_from([None, 2.0**-6]),
    "gate_amplitude": st.sampled_from([None, 2.0**-8]), "gain": st.sampled_from([1.0, 2.0]),
    "runtime": st.sampled_from(["torch", "onnxruntime"]),
}
ODD_OPTIONS = {  # values of each option a user might wrongly try
    "gate_bound": [1.0, 0.0, -1.0, float("nan")], "max_len": [0, -1, 2.5, 10**9], "construction": ["exact", ""],
    "window": [0, 10**6], "heads": [2, 0], "dtype": [torch.float16, torch.bfloat16, torch.int32, "float64"],
    "amplitude": [0.0, 2.0, -1.0], "gate_amplitude": [-1.0, 1.0], "gain": [0.0, float("inf")], "runtime": ["jax"],
}
assert set(VALID_OPTIONS) == set(ODD_OPTIONS) == {option for options in lsrl.targets.OPTIONS.values()
                                                 for option in options}, \
    "a target option this fuzzer does not know: add its values to VALID_OPTIONS and ODD_OPTIONS"


@st.composite
def target_options(draw: st.DrawFn, arch: str) -> dict[str, Any]:
    """Some of ``arch``'s options with valid values (a stock target always gets max_len, which it needs), and
    now and then one with a wrong value."""
    names = lsrl.targets.OPTIONS.get(arch, ())
    options = {name: draw(VALID_OPTIONS[name]) for name in names if draw(st.booleans())}
    if arch in STOCK and "max_len" not in options:
        options["max_len"] = draw(st.integers(1, 10))
    if names and draw(st.integers(0, 3)) == 0:
        name = draw(st.sampled_from(names))
        options[name] = draw(st.sampled_from(ODD_OPTIONS[name]))
    return options


def as_batch(xs: Any) -> np.ndarray:
    """An input a call accepted, as the float64 ``(B, T, d)`` array of its values."""
    values = xs.double().numpy() if isinstance(xs, torch.Tensor) else np.asarray(xs, dtype=np.float64)
    return values if values.ndim == 3 else values[None]


def promised(net: torch.nn.Module, xs: Any, max_len: Any) -> bool:
    """Whether ``net`` must run ``xs``: a (B, T, d_in) tensor in the module's dtype, 1 <= T <= max_len (if the
    target was given one), every value finite and within the declared bounds."""
    return (isinstance(xs, torch.Tensor) and xs.dtype == module_dtype(net) and xs.ndim == 3
            and xs.shape[-1] == net.declared_input.dim and 1 <= xs.shape[1] <= (max_len or xs.shape[1])
            and bool(torch.isfinite(xs).all()) and float(xs.abs().max()) <= X_NUM)


def module_dtype(module: torch.nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


def stated_error(module: torch.nn.Module, steps: int, magnitude: float) -> float:
    """The error ``module`` states for a run of ``steps`` steps of inputs up to ``magnitude`` in the dtype it
    runs in: a stock target's own number, the others' ``Tolerance`` in that dtype."""
    if isinstance(module.tolerance, float):
        return module.tolerance
    return module.tolerance.in_dtype(str(module_dtype(module)).removeprefix("torch.")).bound(steps, magnitude)


@pytest.mark.slow
@settings(max_examples=max(8, settings().max_examples * 3))
@given(seed=SEEDS, arch=st.sampled_from(ARCHITECTURES), data=st.data())
def test_every_target_of_a_random_program_answers_within_its_tolerance_or_refuses(seed: int, arch: str,
                                                                                 data: st.DataObject) -> None:
    program, model = random_model(seed)
    options = data.draw(target_options(arch), label="options")
    built = user_error_or_answer(lambda: model.to_torch(arch, **options),
                                 (arch, "Multi", "to_torch", *options, *model.node_widths))
    if built is None:
        return
    net = built.value
    if data.draw(st.booleans(), label="float32 after build"):  # moved, it restates its tolerance or refuses
        moved = user_error_or_answer(lambda: net.to(torch.float32), (arch, "float32", "dtype", *options))
        if moved is None:
            return
        net = moved.value
    xs = data.draw(program_inputs(program.input.dim, max_steps=10), label="xs")
    xs_dtype = data.draw(st.sampled_from(["the module's"] * 3 + ["as drawn"]), label="xs dtype")
    if isinstance(xs, torch.Tensor) and xs.is_floating_point() and xs_dtype == "the module's":
        xs = xs.to(module_dtype(net))
    with torch.no_grad():
        answered = user_error_or_answer(lambda: net(xs), (*INPUT_WORDS, arch, str(module_dtype(net)), *options,
                                                          *model.node_widths))
    if answered is None:
        # a GRU given its gate_bound checks it at run time against the gate factors the inputs reach (documented)
        assert "gate_bound" in options or not promised(net, xs, options.get("max_len")), \
            f"{arch} {options} refused an input it promises to run"
        return
    values = as_batch(xs)
    expected = interpreted(program, values)
    error = np.abs(answered.value.double().numpy().reshape(expected.shape) - expected).max(initial=0.0)
    assert error <= stated_error(net, values.shape[1], np.abs(values).max(initial=0.0)), (arch, options, error)


def other_states(state: Any) -> list[Any]:
    """States a stock target's ``run(x, state)`` must refuse: the final state's core (``h``, or the LSTM's
    ``(h, c)``: its ``h`` spoilt) of another batch size, width or dtype, not finite or a numpy array; a step count
    that is negative, no integer or runs past max_len; a bare core; no state at all."""
    from lsrl.targets.promises import StockState

    core = state.core
    h = core[0] if isinstance(core, tuple) else core
    spoilt = [h[:, :1].repeat(1, 3, 1), h[..., :-1], h.half(), h * float("nan"), h.numpy()]
    cores = [(wrong, *core[1:]) if isinstance(core, tuple) else wrong for wrong in spoilt]
    return ([StockState(wrong, state.steps) for wrong in cores]
            + [StockState(core, -1), StockState(core, "1"), StockState(core, 10**6), core, "state", 0, ()])


@given(seed=SEEDS, arch=st.sampled_from(STOCK), data=st.data())
def test_a_stock_target_run_in_two_parts_answers_as_in_one_or_refuses_the_state(seed: int, arch: str,
                                                                                 data: st.DataObject) -> None:
    """``net.run(x[:, :k])`` then ``net.run(x[:, k:], state)`` with the first part's final state answers as the
    interpreter on the whole sequence; with no state, as on the second part alone; any other state is refused."""
    program, model = random_model(seed)
    steps = data.draw(st.integers(2, 6), label="steps")
    net = user_error_or_answer(lambda: model.to_torch(arch, max_len=steps, dtype=torch.float64), (arch, "max_len"))
    if net is None:
        return
    net = net.value
    quarters = data.draw(st.lists(st.integers(-4 * X_NUM, 4 * X_NUM), min_size=2 * steps * program.input.dim,
                                  max_size=2 * steps * program.input.dim), label="xs")
    xs = torch.tensor(quarters, dtype=torch.float64).reshape(2, steps, program.input.dim) / 4
    k = data.draw(st.integers(1, steps - 1), label="k")
    with torch.no_grad():
        head, state = net.run(xs[:, :k])
        given_state = data.draw(st.sampled_from(["final", "none", *range(len(other_states(state)))]), label="state")
        if given_state in ("final", "none"):
            tail, _ = net.run(xs[:, k:], state if given_state == "final" else None)
            answer = torch.cat([head, tail], 1) if given_state == "final" else tail
            expected = interpreted(program, (xs if given_state == "final" else xs[:, k:]).numpy())
            assert np.abs(answer.numpy() - expected).max() <= net.tolerance
            return
        wrong = other_states(state)[given_state]
        refused = user_error_or_answer(lambda: net.run(xs[:, k:], wrong), ("state", arch))
    assert refused is None, f"{arch}.run took the state {wrong!r}"


# ---------------------------------------------------------------- saved models

def fingerprint(model: lsrl.CompiledProgram) -> tuple:
    """Everything a loaded model computes with and names: its input, every layer's kind, name, width, weights
    (exact fractions or float64 bits) and unit labels, and which nodes are patchable."""
    def weights(layer):
        matrices = {name: getattr(layer, name, None) for name in ("A", "B", "b", "init_state")}
        return tuple((name, None if matrix is None else
                      (matrix.to_fractions() if model.backend == "exact" else matrix.to_numpy().tobytes()))
                     .__repr__() for name, matrix in matrices.items())

    declared = model.input
    return (model.backend, declared.name, declared.dim, repr(getattr(declared, "bounds", None)),
            tuple((layer.kind, layer.name, layer.dim, weights(layer)) for layer in model.layers),
            repr(model.labels), repr(model.node_widths))


def saved_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


@given(seed=SEEDS, backend=st.sampled_from(["exact", "float"]))
def test_a_random_model_saved_and_loaded_is_the_same_model(seed: int, backend: str, tmp_path: Path) -> None:
    program, model = random_model(seed, backend)
    model.save(tmp_path / "first")
    loaded = lsrl.load(tmp_path / "first")
    assert fingerprint(loaded) == fingerprint(model)
    loaded.save(tmp_path / "second")  # and saving it again writes the same bytes
    assert saved_files(tmp_path / "second") == saved_files(tmp_path / "first")
    xs = np.random.default_rng(seed % 2**32).integers(-4 * X_NUM, 4 * X_NUM + 1, (2, 5, program.input.dim)) / 4
    assert np.array_equal(np.asarray(loaded(xs)), np.asarray(model(xs)))


def json_leaves(value: Any, path: tuple = ()) -> list[tuple]:
    """The paths (keys and indices) of every value inside a JSON document, containers included."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += json_leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += json_leaves(item, (*path, index))
    return found


def edited(document: Any, path: tuple, replacement: Any, delete: bool) -> Any:
    """``document`` with the value at ``path`` replaced, or deleted from its container."""
    if not path:
        return replacement
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return document


REPLACEMENTS = st.one_of(st.sampled_from([None, True, 0, 1, -1, 2, 0.5, "", "x", "ReLU", "LinState", "Linear", "Multi",
                                          "value", "pos", "1/3", "-7", "1e400", [], {}, [[]], ["x", 0, "value"]]),
                         st.integers(-3, 3), st.text(max_size=3))


@st.composite
def model_json_edit(draw: st.DrawFn, text: str) -> str:
    """``model.json``'s text with one drawn edit: a value replaced or deleted, or the text cut or spliced."""
    how = draw(st.sampled_from(["replace", "replace", "delete", "cut", "splice"]))
    if how in ("cut", "splice"):
        at = draw(st.integers(0, len(text)))
        inserted = draw(st.sampled_from(["0", "-", "]", "{", "\"", " ", "9"]))
        return text[:at] if how == "cut" else text[:at] + inserted + text[at:]
    document = json.loads(text)
    path = draw(st.sampled_from(json_leaves(document)))
    delete = how == "delete" and bool(path)
    return json.dumps(edited(document, path, None if delete else draw(REPLACEMENTS), delete), indent=1)


@st.composite
def bytes_edit(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with one drawn edit: a byte changed, the file cut, or bytes appended."""
    how = draw(st.sampled_from(["flip", "flip", "cut", "append"]))
    if how == "cut":
        return data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    if how == "append":
        return data + draw(st.binary(min_size=1, max_size=8))
    at = draw(st.integers(0, len(data) - 1))
    return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]


@given(seed=SEEDS, backend=st.sampled_from(["exact", "float"]), data=st.data())
def test_an_edited_saved_model_is_refused_or_loads_as_the_same_model(seed: int, backend: str, data: st.DataObject,
                                                                     tmp_path: Path) -> None:
    """A saved model whose model.json or weights are edited either fails to load with a one-line error naming
    the file, or loads as exactly the saved model: never as a silently different one."""
    _, model = random_model(seed, backend)
    folder = Path(model.save(tmp_path / "model"))
    name = data.draw(st.sampled_from(sorted(saved_files(folder))), label="file")
    target = folder / name
    if name.endswith(".json"):
        target.write_text(data.draw(model_json_edit(target.read_text()), label="edit"))
    else:
        target.write_bytes(data.draw(bytes_edit(target.read_bytes()), label="edit"))
    loaded = user_error_or_answer(lambda: lsrl.load(folder), (name, "model", str(folder), "weights", "manifest"))
    if loaded is not None:
        assert fingerprint(loaded.value) == fingerprint(model), f"{name} edited, and loaded as a different model"


# ---------------------------------------------------------------- the stock transformers models

@functools.cache
def transformers_models() -> None:
    """Import the stock model classes once, before any timed call: a first import takes seconds (tens on a
    loaded machine), no hang, and one cut short by the deadline leaves transformers half imported."""
    from transformers import Mamba2ForCausalLM, MambaForCausalLM, RecurrentGemmaForCausalLM  # noqa: F401


@settings(max_examples=max(3, settings().max_examples // 2))
@given(seed=SEEDS, arch=st.sampled_from(lsrl.hf.ARCHITECTURES), max_len=st.sampled_from([1, 3, 5, 0, -2]),
       dtype=st.sampled_from([None, torch.float32, torch.float64, "float64", torch.float16]), data=st.data())
def test_a_random_program_in_transformers_answers_within_its_tolerance_or_refuses(
        seed: int, arch: str, max_len: int, dtype: Any, data: st.DataObject) -> None:
    transformers_models()
    program, model = random_model(seed)
    built = user_error_or_answer(lambda: model.to_hf(arch, max_len=max_len, dtype=dtype),
                                 (arch, "max_len", "dtype", "to_hf", "Multi", *model.node_widths))
    if built is None:
        return
    hf_model = built.value
    xs = data.draw(program_inputs(program.input.dim, max_steps=max_len + 2), label="xs")
    if isinstance(xs, torch.Tensor) and data.draw(st.booleans(), label="as (T, d)"):
        xs = xs[0]
    given_inputs = user_error_or_answer(lambda: lsrl.hf.inputs(hf_model, xs), ("xs", *INPUT_WORDS, arch))
    if given_inputs is None:
        return
    with torch.no_grad():
        result = hf_model(**given_inputs.value)
    forms = {"the forward's result": result, "its logits": result.logits, "float32 logits": result.logits.float(),
             "float64 logits": result.logits.double(), "integer logits": result.logits.long()}
    form = data.draw(st.sampled_from(sorted(forms)), label="result")
    answered = user_error_or_answer(lambda: lsrl.hf.outputs(hf_model, forms[form]), ("result", "logits", "dtype"))
    if answered is None:  # only logits of another dtype than the model's may be refused
        assert form not in ("the forward's result", "its logits"), f"lsrl.hf.outputs refused {form}"
        return
    answer = answered.value
    values = as_batch(xs)
    tolerance = hf_model.config.lsrl_io["tolerance"]
    assert np.abs(answer.double().numpy().reshape(values.shape[0], values.shape[1], -1)
                  - interpreted(program, values)).max(initial=0.0) <= tolerance


def hf_answers(hf_model: Any, xs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return lsrl.hf.outputs(hf_model, hf_model(**lsrl.hf.inputs(hf_model, xs))).double().numpy()


@pytest.mark.slow
@settings(max_examples=max(3, settings().max_examples // 4))
@given(seed=SEEDS, arch=st.sampled_from(lsrl.hf.ARCHITECTURES), data=st.data())
def test_an_edited_saved_transformers_folder_is_refused_or_answers_as_saved(seed: int, arch: str, data: st.DataObject,
                                                                           tmp_path: Path) -> None:
    """A folder of ``lsrl.hf.save`` whose config.json (its ``lsrl_io`` record above all) or weights are edited
    either fails to load or to run with a one-line ``LsrlError``, or answers as the saved model did."""
    from transformers import AutoModelForCausalLM

    transformers_models()
    program, model = random_model(seed)
    built = user_error_or_answer(lambda: model.to_hf(arch, max_len=4, dtype=torch.float64), (arch, "to_hf", "Multi",
                                                                                             *model.node_widths))
    if built is None:
        return
    folder = lsrl.hf.save(built.value, tmp_path / "hf")
    xs = np.random.default_rng(seed).integers(-4 * X_NUM, 4 * X_NUM + 1, (2, 4, program.input.dim)) / 4
    saved = hf_answers(built.value, xs)
    name = data.draw(st.sampled_from(sorted(name for name in saved_files(folder) if name != "README.md")), label="file")
    target = folder / name
    if name == "config.json":
        record = json.loads(target.read_text())
        fields = [("lsrl_io", *path) for path in json_leaves(record["lsrl_io"])]
        path = data.draw(st.sampled_from(fields), label="field")
        delete = data.draw(st.booleans(), label="delete") and len(path) > 1
        target.write_text(json.dumps(edited(record, path, None if delete else data.draw(REPLACEMENTS, label="value"),
                                            delete)))
    else:
        target.write_bytes(data.draw(bytes_edit(target.read_bytes()), label="edit"))
    words = (name, "lsrl_io", "config", str(folder), "weights", "manifest", "xs", "result")
    try:
        loaded = AutoModelForCausalLM.from_pretrained(folder)
    except Exception:  # noqa: BLE001 (transformers refused the edited folder itself: nothing was loaded)
        return
    answered = user_error_or_answer(lambda: hf_answers(loaded, xs), words)
    if answered is not None:
        assert np.abs(answered.value - saved).max() <= built.value.config.lsrl_io["tolerance"], f"{name} edited"


# ---------------------------------------------------------------- finite automata

def walked(transitions: dict, start: Any, accepting: set, word: list) -> list[float]:
    """Per prefix of ``word``, 1.0 if the automaton walked by hand accepts it, else 0.0."""
    state, answers = start, []
    for symbol in word:
        state = transitions[state][symbol]
        answers.append(float(state in accepting))
    return answers


def accepting_states(dfa: automata.DFA) -> set:
    return {state for state, accepts in zip(dfa.states, dfa.accepting, strict=True) if accepts}


def network_answers(net: torch.nn.Module, dfa: automata.DFA, words: list[list]) -> np.ndarray:
    """The network's outputs on equal-length ``words`` fed as one-hot symbols."""
    indices = torch.tensor([[dfa.alphabet.index(symbol) for symbol in word] for word in words], dtype=torch.long)
    with torch.no_grad():
        return net(torch.eye(len(dfa.alphabet), dtype=module_dtype(net))[indices]).double().numpy()[..., 0]


@st.composite
def words_over(draw: st.DrawFn, alphabet: tuple) -> list[list]:
    length = draw(st.integers(0, 12))
    return draw(st.lists(st.lists(st.sampled_from(alphabet), min_size=length, max_size=length), min_size=1, max_size=3))


@given(n_states=st.integers(1, 6), n_symbols=st.integers(1, 3), rng=SEEDS,
       architecture=st.sampled_from(automata.ARCHITECTURES), dtype=st.sampled_from([torch.float32, torch.float64]),
       data=st.data())
def test_the_networks_of_a_random_dfa_accept_what_it_accepts(n_states: int, n_symbols: int, rng: int, architecture: str,
                                                            dtype: torch.dtype, data: st.DataObject) -> None:
    dfa = automata.random_dfa(n_states, n_symbols, rng)
    net = automata.to_torch(dfa, architecture, dtype=dtype)
    words = data.draw(words_over(dfa.alphabet), label="words")
    expected = [walked(dfa.transitions, dfa.start, accepting_states(dfa), word) for word in words]
    assert network_answers(net, dfa, words).tolist() == expected


@st.composite
def regular_expressions(draw: st.DrawFn, depth: int = 3) -> str:
    """A pattern over {a, b} in the syntax shared by automata-lib and Python's ``re``."""
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["a", "b"]))
    left, right = draw(regular_expressions(depth - 1)), draw(regular_expressions(depth - 1))
    return draw(st.sampled_from([f"{left}{right}", f"({left}|{right})", f"({left})*", f"({left})+", f"({left})?"]))


@given(pattern=regular_expressions(), architecture=st.sampled_from(automata.ARCHITECTURES), data=st.data())
def test_the_networks_of_a_random_regular_expression_match_what_re_matches(pattern: str, architecture: str,
                                                                          data: st.DataObject) -> None:
    dfa = automata.from_regex(pattern, ["a", "b"])
    words = data.draw(words_over(("a", "b")), label="words")
    expected = [[float(bool(re.fullmatch(pattern, "".join(word[:t + 1])))) for t in range(len(word))] for word in words]
    assert network_answers(automata.to_torch(dfa, architecture), dfa, words).tolist() == expected


@given(pattern=st.text(alphabet="ab()|*+?.&\\[]{}^$ ", max_size=8), alphabet=st.sampled_from([["a", "b"], ["a"], []]))
def test_a_random_pattern_compiles_to_what_re_matches_or_is_refused(pattern: str, alphabet: list) -> None:
    dfa = user_error_or_answer(lambda: automata.from_regex(pattern, alphabet),
                               ("pattern", "regex", "symbol", "alphabet", repr(pattern)))
    if dfa is None or any(c in pattern for c in "&.[]{}^$\\ "):  # syntax Python's re reads otherwise
        return
    python = re.compile(pattern)  # automata-lib accepted it: re (a superset of this syntax) must too
    for length in range(4):
        for word in np.ndindex(*(len(alphabet),) * length):
            text = "".join(alphabet[i] for i in word)
            assert dfa.value.accepts(list(text)) == bool(python.fullmatch(text)), (pattern, text)


# ---------------------------------------------------------------- the benchmark suite's names

@functools.cache
def bench_root() -> str:
    """A suite folder holding the parity task's compiled tier (built once)."""
    import tempfile

    root = tempfile.mkdtemp(prefix="lsrl-fuzz-bench-")
    lsrl.bench.build_suite(root, ["parity"], progress=False)
    return root


class WouldBuild(Exception):
    """``bench.load`` decided to build a task missing from the root (minutes, by design): not run here."""


def bench_name_parts() -> st.SearchStrategy[str]:
    from lsrl.bench.tiers import FOLDER_TIERS

    archs = sorted({arch for task in lsrl.bench.TASKS.values() for arch in task.archs})
    return st.one_of(st.sampled_from(["parity", "parity", *sorted(lsrl.bench.TASKS)[:3], *archs, *FOLDER_TIERS, "",
                                      "..", "/", "parity/", "/parity", "parity/rnn/x"]), st.text(max_size=5))


@functools.cache
def other_folders() -> list[str]:
    """Folders that hold no suite or not the one asked for: empty, missing, a file, a task's folder, a folder of
    another architecture."""
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="lsrl-fuzz-folders-"))
    (scratch / "a-file").write_text("not a folder")
    return [str(scratch), str(scratch / "missing"), str(scratch / "a-file"), str(Path(bench_root()) / "parity"),
            str(Path(bench_root()) / "parity" / "path")]


@given(task=bench_name_parts(), arch=st.one_of(st.none(), bench_name_parts()), tier=bench_name_parts(),
       elsewhere=st.one_of(st.none(), st.integers(0, 4)))
@pytest.mark.slow
def test_a_random_benchmark_name_loads_its_folder_or_is_refused(task: str, arch: str | None, tier: str,
                                                                elsewhere: int | None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``lsrl.bench.load(name, root, tier)``: the parity folder (the only one built under the suite's root) is
    loaded and reproduces its own test outputs; a task of the suite missing under the root is built (not run
    here); any other name, tier or root is refused in one line."""
    def refuse_to_build(*args, **kwargs):
        raise WouldBuild

    root = bench_root() if elsewhere is None else other_folders()[elsewhere]
    monkeypatch.setattr(lsrl.bench, "build_suite", refuse_to_build)
    name = task if arch is None else f"{task}/{arch}"
    try:
        loaded = user_error_or_answer(lambda: lsrl.bench.load(name, root, tier=tier),
                                      ("task", "tier", "architecture", "name", "root", repr(name), repr(tier), root))
    except WouldBuild:
        task = name.partition("/")[0]
        assert task in lsrl.bench.TASKS and (root, task, tier) != (bench_root(), "parity", "compiled"), (name, tier)
        return
    if loaded is not None:
        folder = loaded.value
        assert (root, name.partition("/")[0], tier) == (bench_root(), "parity", "compiled"), (name, tier)
        assert folder.circuit.task == "parity"
        with torch.no_grad():
            outputs = folder.model(torch.as_tensor(folder.data["test_inputs"], dtype=torch.float64)).numpy()
        for sequence, length in enumerate(folder.data["test_lengths"]):
            assert np.allclose(outputs[sequence, :length], folder.data["test_outputs"][sequence, :length], atol=1e-6)


@st.composite
def transition_tables(draw: st.DrawFn) -> tuple[list, list, dict, Any, list]:
    """``DFA(states, alphabet, transitions, start, accepting)`` arguments: a complete random table, or one
    with an entry missing, pointing to an unknown state or reading an unknown symbol, an unknown start or
    accepting state, repeated states or symbols."""
    states = list(range(draw(st.integers(1, 4))))
    alphabet = ["a", "b"][:draw(st.integers(1, 2))]
    transitions = {p: {a: draw(st.sampled_from(states)) for a in alphabet} for p in states}
    start, accepting = draw(st.sampled_from(states)), draw(st.lists(st.sampled_from(states), unique=True))
    spoil = draw(st.sampled_from(["none", "none", "missing", "unknown target", "unknown symbol", "start", "accepting",
                                  "repeated state", "repeated symbol"]))
    if spoil == "missing":
        del transitions[draw(st.sampled_from(states))][draw(st.sampled_from(alphabet))]
    elif spoil == "unknown target":
        transitions[draw(st.sampled_from(states))][draw(st.sampled_from(alphabet))] = 99
    elif spoil == "unknown symbol":
        transitions[draw(st.sampled_from(states))]["z"] = states[0]
    elif spoil == "start":
        start = 99
    elif spoil == "accepting":
        accepting = [*accepting, 99]
    elif spoil == "repeated state":
        states = [*states, states[0]]
    elif spoil == "repeated symbol":
        alphabet = [*alphabet, alphabet[0]]
    return states, alphabet, transitions, start, accepting


@given(table=transition_tables(), architecture=st.sampled_from(automata.ARCHITECTURES), data=st.data())
def test_a_drawn_transition_table_builds_a_dfa_its_networks_follow_or_is_refused(table: tuple, architecture: str,
                                                                                 data: st.DataObject) -> None:
    states, alphabet, transitions, start, accepting = table
    dfa = user_error_or_answer(lambda: automata.DFA(states, alphabet, transitions, start, accepting,
                                                    check_reachable=False), ("state", "symbol", "transition",
                                                                             "accepting", "start", "states"))
    if dfa is None:
        return
    words = data.draw(words_over(tuple(alphabet)), label="words")
    expected = [walked(transitions, start, set(accepting), word) for word in words]
    assert [[float(dfa.value.accepts(word[:t + 1])) for t in range(len(word))] for word in words] == expected
    assert network_answers(automata.to_torch(dfa.value, architecture), dfa.value, words).tolist() == expected


# ---------------------------------------------------------------- the benchmark suite's evaluation options

@settings(max_examples=max(3, settings().max_examples // 2))
@given(method=st.one_of(st.sampled_from(sorted(lsrl.bench.eval.METHODS)), st.text(max_size=4)),
       pairs=st.sampled_from([2, 3, 1, 0, -1, 2.5, "2", None, True]),
       tier=st.sampled_from([None, "compiled", "rotated", "trained", "x"]),
       arch=st.sampled_from([None, "rnn", "path", "lstm", ""]), elsewhere=st.one_of(st.none(), st.integers(0, 4)))
@pytest.mark.slow
def test_a_benchmark_folder_is_scored_with_drawn_options_or_they_are_refused(method: str, pairs: Any, tier: Any,
                                                                             arch: Any, elsewhere: int | None) -> None:
    """``evaluate(HookedSubject.from_folder(folder, tier, arch), method, pairs)`` on the parity task's rnn folder
    (or one of ``other_folders``):
    a row for that folder whose rates and AUROCs lie in [0, 1] (or are NaN: a level the method does not score),
    or a one-line error naming the option."""
    from lsrl.bench.eval import evaluate
    from lsrl.bench.eval.hooked import HookedSubject

    folder = str(Path(bench_root()) / "parity" / "rnn") if elsewhere is None else other_folders()[elsewhere]
    subject = user_error_or_answer(lambda: HookedSubject.from_folder(folder, tier=tier, arch=arch),
                                   ("tier", "arch", "architecture", "folder", folder, repr(tier), repr(arch)))
    if subject is None:
        return
    row = user_error_or_answer(lambda: evaluate(subject.value, method, pairs),
                               ("method", "pairs", repr(method), *([method] if method.strip() else [])))
    if row is None:
        return
    expected_arch = "rnn" if elsewhere is None else Path(folder).name
    assert (row.value["task"], row.value["arch"], row.value["method"]) == ("parity", expected_arch, method)
    for column in ("node_auroc", "node_tpr", "node_fpr", "unit_auroc", "edge_auroc", "interchange_accuracy"):
        value = row.value[column]
        assert np.isnan(value) or 0 <= value <= 1, (column, value)


@pytest.mark.parametrize("pattern", ["(  ", "?  ", "a  )"])
def test_an_unparsable_pattern_is_named_as_it_was_typed(pattern: str) -> None:
    """The error shows the pattern itself: its spaces are not squeezed, as a multi-line repr's breaks are."""
    with pytest.raises(lsrl.LsrlError) as error:
        automata.from_regex(pattern, ["a", "b"])
    assert f"cannot parse the pattern {pattern!r}:" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("which", ["empty", "missing", "a task's folder"])
def test_scoring_a_folder_that_holds_no_suite_model_is_a_model_file_error(which: str, tmp_path: Path) -> None:
    from lsrl.bench.eval.hooked import HookedSubject

    folder = {"empty": tmp_path, "missing": tmp_path / "missing", "a task's folder": Path(bench_root()) / "parity"}[which]
    with pytest.raises(lsrl.errors.ModelFileError, match="config.json") as error:
        HookedSubject.from_folder(folder)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("pairs", ["2", 2.5, None, True, 1, 10**9])
def test_a_pairs_count_that_is_no_whole_number_in_range_is_a_one_line_error(pairs: Any) -> None:
    from lsrl.bench.eval import evaluate
    from lsrl.bench.eval.hooked import HookedSubject

    subject = HookedSubject.from_folder(Path(bench_root()) / "parity" / "rnn")
    with pytest.raises(lsrl.LsrlError, match=r"^pairs: .*must be a whole number from 2 to \d+") as error:
        evaluate(subject, "random", pairs)
    assert "\n" not in str(error.value)
