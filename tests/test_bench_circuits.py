"""The suite's circuits and hooks: ``circuit.json`` names only units that exist, the hook names of the standalone
loader are exactly the keys of ``labels.json``, ``lsrl.bench.load`` gives ``UnitLabel``s, and patching through
the standalone loader's hooks (inside the recurrence) equals lsrl's ``net(xs, patch=...)`` and the program's
interpreter."""

import json
from collections import defaultdict

import numpy as np
import pytest
import torch

from lsrl.bench import TASKS, build_suite, load, standalone
from lsrl.bench.build import task_models
from lsrl.ir.labels import ROLES as LABEL_ROLES, UnitLabel
from lsrl.targets.patch import patched_units

pytestmark = pytest.mark.slow  # every test here is slow (see pyproject.toml's markers)

TASK_NAMES = ("parity", "majority", "histogram", "tomita_3")
ROLES = LABEL_ROLES + ("transition", "start")  # and the automata's


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    return root, build_suite(root, TASK_NAMES, progress=False)


def test_circuits_name_existing_units_and_hooks_equal_labels(folders):
    _, paths = folders
    assert len(paths) == 4 * 5 - 2
    for folder in paths:
        net = standalone.load_folder(folder)
        labels = json.loads((folder / "labels.json").read_text())["hooks"]
        circuit = json.loads((folder / "circuit.json").read_text())
        assert sorted(labels) == sorted(net.hook_names) == sorted(h["name"] for h in circuit["hooks"]), folder
        _, cache = net.run_with_cache(np.zeros((1, 3, json.loads((folder / "config.json").read_text())["input_size"])))
        widths = {name: values.shape[-1] for name, values in cache.items()}
        assert widths == {h["name"]: h["width"] for h in circuit["hooks"]} == {k: len(v) for k, v in labels.items()}
        units = {(u["hook"], u["unit"]) for u in circuit["units"]}
        assert units == {(hook, i) for hook, width in widths.items() for i in range(width)}
        for a, i, b, j, delay in circuit["unit_edges"]:
            assert ((a, i) in units or (a == "input" and i < net_input(folder))) and (b, j) in units and delay in (0, 1)
        for variable in circuit["variables"]:
            assert all(tuple(unit) in units for unit in variable["units"])
        names = {node["name"] for node in circuit["nodes"]}
        assert all(u["node"] in names for u in circuit["units"] if u["node"] and TASKS[folder.parent.name].build)
        assert all(a in names and b in names for a, b in circuit["edges"])
        assert circuit["output_hook"] in widths


def net_input(folder):
    return json.loads((folder / "config.json").read_text())["input_size"]


def test_load_gives_unit_labels_and_the_circuit(folders):
    root, _ = folders
    for name in ("parity/rnn", "parity/path", "parity/lstm", "tomita_3/gru"):
        net, labels, _, circuit = load(name, root=root)
        assert sorted(labels) == sorted(net.hook_names)
        assert all(isinstance(label, UnitLabel) and isinstance(label.index, int) and label.role in ROLES
                   for units in labels.values() for label in units)
        assert circuit.labels() == labels
    _, labels, _, _ = load("parity/rnn", root=root)
    assert labels["blocks.0.rnn"] == [UnitLabel("token", 0, "pos"), UnitLabel("token", 0, "neg")]


def _reaching_output(circuit):
    readers = defaultdict(set)
    for a, i, b, j, _ in circuit.unit_edges:
        readers[(b, j)].add((a, i))
    width = {h["name"]: h["width"] for h in circuit.hooks}
    found = {(circuit.output_hook, u) for u in range(width[circuit.output_hook])}
    frontier = list(found)
    while frontier:
        for source in readers[frontier.pop()] - found:
            found.add(source)
            frontier.append(source)
    return found


def test_units_off_every_path_to_the_output_do_not_matter(folders):
    """Noise on units from which no unit edge leads to the output leaves the outputs unchanged; the circuit
    marks them out of the circuit. (If the unit edges missed a weight, some of them would matter.)"""
    root, paths = folders
    rng = np.random.default_rng(0)
    checked = 0
    for folder in paths:
        net, _, data, circuit = load(f"{folder.parent.name}/{folder.name}", root=root)
        xs = data["test_inputs"][:4]
        reference, cache = net.run_with_cache(xs)
        reaching = _reaching_output(circuit)
        for hook in net.hook_names:
            off = [u for u in range(cache[hook].shape[-1]) if (hook, u) not in reaching]
            if not off:
                continue
            values = np.full(tuple(cache[hook].shape), np.nan)
            values[..., off] = rng.normal(size=values[..., off].shape) * 10
            patched, _ = net.run_with_cache(xs, patch={hook: values})
            assert torch.equal(patched, reference), (folder, hook, off)
            assert not any(u["in_circuit"] for u in circuit.units if u["hook"] == hook and u["unit"] in off)
            checked += 1
    assert checked >= 10


def test_live_labelled_units_are_in_the_circuit(folders):
    root, _ = folders
    _, _, _, circuit = load("majority/rnn", root=root)
    held = {(u["node"], u["role"]) for u in circuit.units if u["in_circuit"]}
    assert {("ones_minus_zeros", "pos"), ("ones_minus_zeros", "neg"), ("more_ones", "value")} <= held
    variables = {(v["node"], v["index"]): v["units"] for v in circuit.variables}
    assert sorted(map(tuple, variables[("ones_minus_zeros", 0)])) == [("blocks.0.rnn", 0), ("blocks.0.rnn", 1),
                                                                      ("blocks.0.state", 0)]
    assert [("linear_2", 0), ("linear_3", 0), ("ones_minus_zeros", 0)] in circuit.equivalent


@pytest.mark.parametrize("name", ["parity", "histogram", "majority"])
def test_standalone_hook_patches_equal_lsrl_node_patches(folders, name):
    """Every patchable node of every torch target, patched with another sequence's trace: lsrl's
    ``net(xs, patch=...)``, the program's interpreter and the standalone loader's ``run_with_cache`` with the
    same units set at the hooks agree (float64, to 1e-9)."""
    root, _ = folders
    task = TASKS[name]
    program = task.build()
    rng = np.random.default_rng(1)
    xs = np.stack([task.sample(rng, 10) for _ in range(3)]).astype(np.float64)
    donors = np.stack([task.sample(rng, 10) for _ in range(3)]).astype(np.float64)
    trace = program.trace(donors, check_bounds=False)
    for arch, net in task_models(task).items():
        if arch == "path":
            continue
        loaded, _, _, _ = load(f"{name}/{arch}", root=root)
        for node in sorted(net.patchable):
            expected = program(xs, patch={node: trace[node]}, check_bounds=False)
            with torch.no_grad():
                reference = net(torch.as_tensor(xs), patch={node: trace[node]}).numpy()
            np.testing.assert_allclose(reference, expected, atol=1e-9)
            hooks = {}
            for hook, pairs in patched_units(net, {node: trace[node]}, *xs.shape[:2]).items():
                width = len(loaded.run_with_cache(xs[:1, :1])[1][hook][0, 0])
                values = np.full(xs.shape[:2] + (width,), np.nan)
                for unit, held in pairs:
                    values[..., unit] = held
                hooks[hook] = values
            outputs, _ = loaded.run_with_cache(xs, patch=hooks)
            np.testing.assert_allclose(outputs.numpy(), expected, atol=1e-9, err_msg=f"{name}/{arch} {node}")


def test_a_patched_state_is_carried_to_the_next_step(folders):
    """Setting the parity counter's state at step 0 changes every later output (patched inside the recurrence),
    in every architecture, through the loader's hooks and through lsrl's ``net.run_with_cache`` by the same name."""
    root, _ = folders
    xs = np.zeros((1, 5, 1))
    targets = task_models(TASKS["parity"])
    for arch, hook, unit in (("linear_rnn", "blocks.1.state", 0), ("lstm", "rnn.l2", 0), ("gru", "rnn.l2", 0)):
        net, labels, _, _ = load(f"parity/{arch}", root=root)
        assert labels[hook][unit] == UnitLabel("count_1", 0, "value" if arch == "linear_rnn" else "pos")
        values = np.full((1, 5, len(labels[hook])), np.nan)
        values[0, 0, unit] = 1.0  # one 1 read at step 0: the parity is odd from there on
        for run in (net.run_with_cache, targets[arch].run_with_cache):
            outputs, cache = run(torch.as_tensor(xs), patch={hook: values})
            assert outputs[0, :, 0].tolist() == [1.0] * 5, arch
            assert cache[hook][0, :, unit].tolist() == [1.0] * 5


@pytest.mark.parametrize("name", ["parity", "histogram", "tomita_3"])
def test_lsrl_run_with_cache_patches_every_hook_as_the_standalone_loader(folders, name):
    """lsrl's ``net.run_with_cache`` has every hook of the folder's loader under the same name with the same values,
    and patching one hook there (a few units at a few steps, NaN elsewhere: states, gates, cells and layers, inside
    the recurrence) gives the loader's outputs and cache (float64 to 1e-9; the float32 automata to 1e-5)."""
    root, _ = folders
    task = TASKS[name]
    rng = np.random.default_rng(5)
    xs = np.stack([task.sample(rng, 7) for _ in range(2)])
    xs = np.eye(len(task.automaton().alphabet))[xs] if task.automaton else xs.astype(np.float64)
    for arch, net in task_models(task).items():
        if arch == "path":
            continue
        loaded = load(f"{name}/{arch}", root=root).model
        tolerance = 1e-5 if task.automaton else 1e-9
        _, own = net.run_with_cache(torch.as_tensor(xs))
        _, theirs = loaded.run_with_cache(xs)
        assert set(loaded.hook_names) <= set(own), sorted(set(loaded.hook_names) - set(own))
        carried = 0
        for hook in loaded.hook_names:
            values = np.full(theirs[hook].shape, np.nan)
            units = rng.choice(values.shape[-1], size=min(2, values.shape[-1]), replace=False)
            values[:, 1, units] = rng.uniform(0, 2, size=(2, len(units)))
            values[:, 4, units[0]] = 0.5
            expected, expected_cache = loaded.run_with_cache(xs, patch={hook: values})
            outputs, cache = net.run_with_cache(torch.as_tensor(xs), patch={hook: values})
            np.testing.assert_allclose(outputs.double().numpy(), expected.double().numpy(), rtol=0, atol=tolerance,
                                       err_msg=f"{name}/{arch} {hook}")
            for key in loaded.hook_names:
                np.testing.assert_allclose(cache[key].double().numpy(), expected_cache[key].double().numpy(),
                                           rtol=0, atol=tolerance, err_msg=f"{name}/{arch} {hook}: {key}")
            np.testing.assert_allclose(cache[hook][:, 1, units].double().numpy(), values[:, 1, units], rtol=tolerance)
            unpatched = own[next(reversed(own))].double().numpy()
            patched_last = cache[next(reversed(cache))].double().numpy()
            carried += not np.allclose(patched_last[:, 2:4], unpatched[:, 2:4])  # a step after 1, before 4 moved
        assert carried, f"{name}/{arch}: no patch at step 1 reached the outputs of steps 2-3"
