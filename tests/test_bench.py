"""The benchmark suite: every folder reloaded with plain torch (no lsrl classes) reproduces its data,
the data agree with hand-written references of the tasks, and ``lsrl.bench.load`` round-trips."""

import ast
import importlib.util
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import lsrl
from lsrl.bench import TASKS, load
from lsrl.bench.build import task_models
from lsrl.bench.labels import unit_labels
from lsrl.cli import main
from bench_builds import whole_suite

pytestmark = pytest.mark.slow  # every test here is slow (see pyproject.toml's markers)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return whole_suite(tmp_path_factory)  # every task, a short test split; once per session (bench_builds)


def _standalone(root):
    spec = importlib.util.spec_from_file_location("suite_load_model", root / "load_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_suite_has_thirty_tasks_and_complete_folders(suite):
    root, folders = suite
    assert len(TASKS) >= 30 and len({folder.parent.name for folder in folders}) == len(TASKS)
    for folder in folders:
        names = {path.name for path in folder.iterdir()}
        assert names == {"model.safetensors", "config.json", "labels.json", "circuit.json", "data.npz", "program.py",
                         "README.md", "manifest.json", "load_model.py"}
        config = json.loads((folder / "config.json").read_text())
        assert config["architecture"] == folder.name and config["task"] == folder.parent.name
        assert config["tier"] == "compiled"
        task = TASKS[folder.parent.name]
        assert task.test_lengths[0] > task.train_lengths[1]  # test sequences are longer than training ones
        if task.build is not None:
            assert f"def {task.build.__name__}" in (folder / "program.py").read_text()
        assert folder.parent.name in (folder / "README.md").read_text()


def test_loader_needs_only_torch_and_safetensors(suite):
    root, _ = suite
    tree = ast.parse((root / "load_model.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"__future__", "hashlib", "json", "pathlib", "typing", "torch", "safetensors"}


def test_every_suite_model_reproduces_its_data(suite):
    """Float64 models to 1e-9 (their values are small integers or the prompts' dyadic numbers), the
    float32 automaton networks exactly (0/1 outputs), on training and on longer test sequences."""
    root, folders = suite
    standalone = _standalone(root)
    for folder in folders:
        net = standalone.load_folder(folder)
        assert not any(type(m).__module__.startswith("lsrl") for m in net.modules()), folder
        with np.load(folder / "data.npz") as data:
            for split in ("train", "test"):
                with torch.no_grad():
                    outputs = net(torch.as_tensor(data[f"{split}_inputs"])).double().numpy()
                expected = data[f"{split}_outputs"]
                real = ~np.isnan(expected)
                assert real.sum() == data[f"{split}_lengths"].sum() * expected.shape[-1]
                np.testing.assert_allclose(outputs[real], expected[real], rtol=0, atol=1e-9,
                                           err_msg=f"{folder.parent.name}/{folder.name} {split}")


def _prefixes(x):
    return [x[: t + 1] for t in range(len(x))]


def _kth(k):
    return lambda x: [sorted(p)[k - 1] if len(p) >= k else 5 for p in _prefixes(x)]


def _depth(x):
    return np.cumsum(1 - 2 * np.asarray(x))


REFERENCES = {  # token tasks: the output per step, from the token list, written independently
    "parity": lambda x: np.cumsum(np.equal(x, 1)) % 2,
    "count_mod_3": lambda x: np.cumsum(np.equal(x, 1)) % 3,
    "count_mod_4": lambda x: np.cumsum(np.equal(x, 2)) % 4,
    "majority": lambda x: np.cumsum(2 * np.asarray(x) - 1) > 0,
    "count_ones": np.cumsum,
    "count_token_2": lambda x: np.cumsum(np.equal(x, 2)),
    "histogram": lambda x: [p.count(p[-1]) for p in _prefixes(x)],
    "at_least_3_ones": lambda x: np.cumsum(x) >= 3,
    "equal_counts": lambda x: np.cumsum(2 * np.asarray(x) - 1) == 0,
    "seen_token_3": lambda x: [3 in p for p in _prefixes(x)],
    "all_ones": lambda x: [all(v == 1 for v in p) for p in _prefixes(x)],
    "mode": lambda x: [max(range(3), key=lambda v: (p.count(v), -v)) for p in _prefixes(x)],
    "balanced_parens": lambda x: [d[-1] == 0 and min(d) >= 0 for d in _prefixes(list(_depth(x)))],
    "paren_depth": _depth,
    "max_depth": lambda x: [max(0, max(d)) for d in _prefixes(list(_depth(x)))],
    "running_min": _kth(1), "second_smallest": _kth(2), "third_smallest": _kth(3),
    "running_max": lambda x: [max(p) for p in _prefixes(x)],
    "running_median": lambda x: [sorted(p)[(len(p) - 1) // 2] for p in _prefixes(x)],
    "rank_of_token": lambda x: [sum(v < p[-1] for v in p) for p in _prefixes(x)],
    "first_one_position": lambda x: [p.index(1) + 1 if 1 in p else 0 for p in _prefixes(x)],
    "last_one_position": lambda x: [len(p) - p[::-1].index(1) if 1 in p else 0 for p in _prefixes(x)],
    "first_token_1": lambda x: [p[-1] == 1 and p.count(1) == 1 for p in _prefixes(x)],
    "position_mod_3": lambda x: [t % 3 for t in range(len(x))],
    "copy_delay_1": lambda x: [x[t - 1] if t >= 1 else 0 for t in range(len(x))],
    "copy_delay_3": lambda x: [x[t - 3] if t >= 3 else 0 for t in range(len(x))],
    "reverse_blocks_3": lambda x: [x[t - 2 * (t % 3) - 1] if t - 2 * (t % 3) - 1 >= 0 else 0 for t in range(len(x))],
    "previous_equals_current": lambda x: [t >= 1 and x[t] == x[t - 1] for t in range(len(x))],
    "bigram_01": lambda x: [t >= 1 and x[t - 1] == 0 and x[t] == 1 for t in range(len(x))],
    "running_sum_window_3": lambda x: [sum(x[max(0, t - 2): t + 1]) for t in range(len(x))],
}


def test_task_programs_compute_what_their_docstrings_say(suite):
    root, _ = suite
    assert len(REFERENCES) >= 30
    for name, reference in REFERENCES.items():
        with np.load(root / name / TASKS[name].archs[0] / "data.npz") as data:
            for split in ("train", "test"):
                for x, y, length in zip(data[f"{split}_inputs"], data[f"{split}_outputs"], data[f"{split}_lengths"]):
                    tokens = [int(v) for v in x[:length, 0]]
                    assert list(y[:length, 0]) == [float(v) for v in reference(tokens)], (name, tokens)


def test_automaton_data_and_transition_labels(suite):
    """The automata's data agree with ``DFA.accepts``; in the stock RNN, the unit labelled (p, a) is the
    one on at a step exactly when the automaton was in state p and read symbol a."""
    root, _ = suite
    for name in ("parity_unbounded", "tomita_3", "tomita_5"):
        machine = TASKS[name].automaton()
        net, labels, data, _ = load(f"{name}/rnn", root=root)
        x = data["test_inputs"]
        for sequence, expected, length in zip(x, data["test_outputs"], data["test_lengths"]):
            word = [machine.alphabet[int(np.argmax(v))] for v in sequence[:length]]
            assert [machine.accepts(word[: t + 1]) for t in range(length)] == list(expected[:length, 0] == 1)
        symbols = np.argmax(x, axis=-1)
        before = np.concatenate([np.full((len(x), 1), machine.start), machine.states_after(symbols)[:, :-1]], axis=1)
        with torch.no_grad():
            hidden = net.layers[0](torch.as_tensor(x, dtype=torch.float32)).numpy()
        assert len(labels["core"]) == hidden.shape[-1]
        on = np.argmax(hidden, axis=-1)
        real = np.arange(x.shape[1])[None] < data["test_lengths"][:, None]  # not padding
        assert np.all(hidden.max(axis=-1)[real] == 1) and np.all(hidden.sum(axis=-1)[real] == 1)  # one unit on
        for b, t in zip(*np.nonzero(real)):
            assert labels["core"][on[b, t]] == (str(machine.states[before[b, t]]), int(symbols[b, t]), "transition")


def test_load_round_trip_and_errors(suite, tmp_path):
    root, _ = suite
    net, labels, data, _ = load("majority/rnn", root=root)
    with np.load(root / "majority" / "rnn" / "data.npz") as stored:
        assert sorted(data) == sorted(stored.files) and np.array_equal(data["test_lengths"], stored["test_lengths"])
    with torch.no_grad():
        outputs = net(torch.as_tensor(data["train_inputs"])).numpy()
    real = ~np.isnan(data["train_outputs"])
    assert np.array_equal(outputs[real], data["train_outputs"][real])
    labelled = json.loads((root / "majority" / "rnn" / "labels.json").read_text())
    assert (labels is None) == (not labelled["available"])
    fresh, _, fresh_data, _ = load("count_ones", root=tmp_path)  # missing: built on demand; "task" = its path model
    assert (tmp_path / "count_ones" / "path" / "config.json").is_file() and "train_inputs" in fresh_data
    with pytest.raises(lsrl.LsrlError, match="unknown benchmark task 'nothing'"):
        load("nothing", root=tmp_path)
    with pytest.raises(lsrl.LsrlError, match="no architecture 'hawk'"):
        load("count_ones/hawk", root=tmp_path)


def test_cli_bench_build(tmp_path):
    result = CliRunner().invoke(main, ["bench", "build", str(tmp_path), "--task", "parity", "--task", "tomita_1"])
    assert result.exit_code == 0, result.output
    assert "wrote 8 models" in result.output
    assert sorted(p.name for p in (tmp_path / "parity").iterdir()) == sorted(TASKS["parity"].archs)
    bad = CliRunner().invoke(main, ["bench", "build", str(tmp_path), "--task", "nothing"])
    assert bad.exit_code != 0 and "unknown benchmark task" in bad.output


def test_suite_path_labels_hold_where_the_model_has_them(suite):
    """Each path folder's labels.json holds the compiled model's labels; where present, they must hold
    exactly on the test data (against the program's trace)."""
    root, _ = suite
    for name, task in TASKS.items():
        if "path" not in task.archs:
            continue
        prog = task.build()
        model = lsrl.compile(prog)
        stored = json.loads((root / name / "path" / "labels.json").read_text())
        assert stored["available"] and stored["hooks"] == unit_labels(model)  # stable names: same every build
        with np.load(root / name / "path" / "data.npz") as data:
            xs = data["test_inputs"][:2, : int(data["test_lengths"][:2].min())]
        assert model.label_violations(prog, xs) == [], name


def test_suite_target_labels_hold(suite):
    """Each torch-target folder's labels.json is the target's ``net.labels``, and they hold on the
    folder's test data (float64, against the program's trace)."""
    from tests.test_target_labels import violations

    root, _ = suite
    checked = 0
    for name, task in TASKS.items():
        if task.build is None:  # the automata: their transition labels are checked above
            continue
        prog = task.build()
        for arch, net in task_models(task).items():
            if arch == "path":
                continue
            stored = json.loads((root / name / arch / "labels.json").read_text())
            assert stored["available"] and stored["hooks"] == unit_labels(net), (name, arch)
            with np.load(root / name / arch / "data.npz") as data:
                xs = data["test_inputs"][:2, : int(data["test_lengths"][:2].min())]
            assert violations(net, xs, prog.trace(xs, check_bounds=False)) == [], (name, arch)
            checked += 1
    assert checked >= 100
