"""The targets and model boundary: gate bounds and target options against their dtype,
patches checked alike by the interpreter, the compiled model and the torch targets, impossible
output paths, exact weights with no float64 form, f_ifelse conditions that never select, and the
stated tolerance of every float path. Each bad value ends in one ``LsrlError`` naming what is wrong;
each accepted value gives the interpreter's answer."""

import warnings
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

import lsrl
from lsrl.targets.onnx_export import export_onnx

# ---- 1. gate_bound and the other target options against the dtype -----------------------------


@lru_cache(maxsize=None)
def product_model():
    x = lsrl.Input(2, name="x", bounds=(0, 1))
    return lsrl.compile(lsrl.ForEach(lsrl.Multi(x, name="product")), progress=False)


def product_inputs():
    rng = np.random.default_rng(0)
    return rng.uniform(0, 1, (2, 30, 2))  # not dyadic: the products' low bits matter


def products(net, xs):
    with torch.no_grad():
        return net(torch.as_tensor(xs, dtype=next(net.parameters()).dtype)).double().numpy()


@pytest.mark.parametrize("gate_bound", [1e16, 1e20, 2.0**41 + 1, 1e300, float("inf"), float("nan"), 0, -4, 1e-320])
def test_gate_bounds_that_lose_the_product_are_refused_naming_the_range(gate_bound):
    # before: 1e16 multiplied wrongly and 1e20 gave zeros, silently
    with pytest.raises(lsrl.LsrlError, match=r"gate_bound=.*outside \[.*\].*float64"):
        product_model().to_torch("gru", gate_bound=gate_bound)


@pytest.mark.parametrize("gate_bound", [True, "1024", 3j, [1024], None.__class__])
def test_gate_bounds_that_are_no_numbers_are_refused(gate_bound):
    with pytest.raises(lsrl.LsrlError, match="gate_bound must be a positive real number"):
        product_model().to_torch("gru", gate_bound=gate_bound)


@pytest.mark.parametrize("gate_bound", [1.0, 1024, 1e8, 2.0**41])
def test_gate_bounds_in_the_range_multiply_within_the_stated_error(gate_bound):
    xs = product_inputs()
    expected = xs[..., :1] * xs[..., 1:]  # independent of the code under test
    error = np.max(np.abs(products(product_model().to_torch("gru", gate_bound=gate_bound), xs) - expected))
    rounded = 2.0 ** np.ceil(np.log2(gate_bound))
    assert error <= 5 * rounded * 2.0**-53 + 1e-15  # gru_lstm's docstring: about gate_bound * 2^-p per product


def test_a_gate_bound_outside_the_range_of_the_dtype_the_net_runs_in_is_refused():
    from lsrl.targets.precision import gate_bound_range

    low, high = gate_bound_range("float32")
    assert high == 4096 and low == 2.0**-126
    net = product_model().to_torch("gru", gate_bound=2**20)
    with pytest.raises(lsrl.LsrlError, match=r"gate_bound=.*float32"):
        net.to(torch.float32)  # refused before anything moves
    assert net.tolerance.dtype == "float64" and all(p.dtype == torch.float64 for p in net.parameters())
    fine = product_model().to_torch("gru").to(torch.float32)  # the default 1024 is within float32's range
    xs = product_inputs()
    assert np.max(np.abs(products(fine, xs) - xs[..., :1] * xs[..., 1:])) <= 5 * 1024 * 2.0**-24


@lru_cache(maxsize=None)
def state_model():
    x = lsrl.Input(2, name="x", bounds=(-4, 4))
    s = lsrl.LinState(x, [[1, 0], [0, 1]], [[1, 0], [0, 1]], name="s")
    return lsrl.compile(lsrl.ForEach(lsrl.ReLU(s, name="r") - s), progress=False)


@pytest.mark.parametrize(("options", "message"), [
    ({"max_len": float("nan"), "construction": "app_e"}, "max_len must be a positive integer"),
    ({"max_len": float("inf"), "construction": "app_e"}, "max_len must be a positive integer"),
    ({"max_len": 2.5, "construction": "app_e"}, "max_len must be a positive integer"),
    ({"max_len": "8", "construction": "app_e"}, "max_len must be a positive integer"),
    ({"max_len": 0, "construction": "app_e"}, r"max_len must be an integer in 1\.\."),
    ({"max_len": 2**70, "construction": "app_e"}, r"max_len must be an integer in 1\.\..*int64"),
    ({"window": float("inf")}, "window must be a positive integer"),
    ({"window": 2**63}, r"window must be an integer in 1\.\..*int64"),
    ({"window": -1}, r"window must be an integer in 1\.\."),
    ({"heads": float("nan")}, "heads must be a positive integer"),
    ({"heads": True}, "heads must be a positive integer"),
    ({"heads": 0}, r"heads must be an integer in 1\.\."),
])
def test_griffin_and_hawk_options_are_checked(options, message):
    # before: NaN and infinity raised a raw ValueError / OverflowError from int()
    with pytest.raises(lsrl.LsrlError, match=message):
        state_model().to_torch("griffin", **options)
    if "window" not in options and "heads" not in options:
        with pytest.raises(lsrl.LsrlError, match=message):
            state_model().to_torch("hawk", **options)


def test_griffin_refuses_more_heads_than_memory_holds_before_allocating():
    x = lsrl.Input(3, name="x", bounds=(-1, 1))
    deep = lsrl.ReLU(lsrl.ReLU(lsrl.ReLU(lsrl.LinState(x, np.eye(3), np.eye(3), name="s") * 2) * 3) * 4)
    model = lsrl.compile(lsrl.ForEach(deep), progress=False)
    with pytest.raises(lsrl.LsrlError, match=r"heads=1000000000 needs .* GiB"):
        model.to_torch("griffin", heads=10**9)
    xs = np.random.default_rng(1).uniform(-1, 1, (1, 5, 3))
    net = model.to_torch("griffin", heads=4, window=2.0)  # integral floats are read as integers
    with torch.no_grad():
        assert np.allclose(net(torch.as_tensor(xs)).numpy(), lsrl.ForEach(deep)(xs), rtol=0, atol=1e-12)


# ---- 2. patches: one check everywhere -----------------------------------------------------------


@lru_cache(maxsize=None)
def patch_case():
    x = lsrl.Input(2, name="x", bounds=(-4, 4))
    h = lsrl.Linear(x, [[1, 2], [3, 4]], name="h")
    s = lsrl.LinState(h, [[1, 0], [0, 1]], [[1, 0], [0, 1]], name="s")
    program = lsrl.ForEach(lsrl.Linear(lsrl.ReLU(s, name="r"), [[1, 1]], name="y"))
    model = lsrl.compile(program, progress=False)
    return program, model, model.to_torch("linear_rnn")


XS = np.ones((3, 2)) / 2
PATH_RUNNERS = {
    "program": lambda program, model, net, patch: program(XS, patch=patch),
    "model": lambda program, model, net, patch: model(XS, patch=patch),
    "model exact": lambda program, model, net, patch: model(XS.astype(object), exact=True, patch=patch),
    "trace": lambda program, model, net, patch: model.trace(XS, patch=patch),
    "net": lambda program, model, net, patch: net(torch.as_tensor(XS[None]), patch=patch),
    "run_with_cache": lambda program, model, net, patch: net.run_with_cache(XS, patch=patch),
}
HUGE = {"s": [[10**400, 1]] * 3}  # fine exactly, beyond float64's range otherwise
BAD_PATCHES = [
    ({"s": np.ones((3, 3))}, lsrl.DimensionError, r"'s'.*shape \(3, 2\)"),  # wider: was truncated
    ({"s": np.ones((1, 3, 5))}, lsrl.DimensionError, r"'s'.*shape \(3, 2\)"),
    ({"s": np.ones((3, 1))}, lsrl.DimensionError, r"'s'.*shape \(3, 2\)"),
    ({"s": np.ones((4, 2))}, lsrl.DimensionError, r"'s'.*shape \(3, 2\)"),
    ({"s": np.full((3, 2), np.nan)}, lsrl.SequenceError, "'s'.*NaN or infinity"),  # was accepted by the targets
    ({"s": np.full((3, 2), -np.inf)}, lsrl.SequenceError, "'s'.*NaN or infinity"),
    ({"s": [[1, None]] * 3}, lsrl.SequenceError, "'s'.*real numbers, got NoneType"),
    ({"s": [[1, "2"]] * 3}, lsrl.SequenceError, "'s'.*real numbers"),
    ({"s": "abc"}, lsrl.SequenceError, "'s'.*real numbers"),
    ({"s": [[1, 2j]] * 3}, lsrl.SequenceError, "'s'.*real numbers"),
    ({"s": [[1, 2], [1]]}, lsrl.DimensionError, "'s'.*ragged"),
    ({"s": np.ma.masked_array(np.ones((3, 2)), mask=True)}, lsrl.SequenceError, "'s'.*masked"),
    (HUGE, lsrl.SequenceError, "beyond float64's range"),  # was a raw OverflowError
    ({3: np.ones((3, 2))}, lsrl.LsrlError, "patch key must be a program node or a node's name, got int"),
    ([("s", np.ones((3, 2)))], lsrl.LsrlError, "patch must be a dict"),  # was a raw AttributeError
    ("s", lsrl.LsrlError, "patch must be a dict"),
]


@pytest.mark.parametrize("path", PATH_RUNNERS)
@pytest.mark.parametrize(("patch", "error", "message"), BAD_PATCHES)
def test_every_path_refuses_a_bad_patch_alike(path, patch, error, message):
    if path == "model exact" and patch is HUGE:
        return  # exactly, 10^400 is a fine value: checked below
    with pytest.raises(error, match=message):
        PATH_RUNNERS[path](*patch_case(), patch)


def test_a_huge_exact_patch_value_runs_exactly_and_is_refused_in_float():
    program, model, _ = patch_case()
    patch = {"s": np.array(HUGE["s"], dtype=object)}
    exact = model(XS.astype(object), exact=True, patch=patch)
    assert exact.tolist() == program(XS.astype(object), exact=True, patch=patch).tolist()


def test_good_patches_still_agree_with_the_interpreter():
    program, model, net = patch_case()
    values = np.arange(6, dtype=float).reshape(3, 2) - 2.5
    expected = program(XS, patch={"s": values})
    assert np.allclose(model(XS, patch={"s": values}), expected, rtol=0, atol=1e-12)
    with torch.no_grad():
        assert np.allclose(net(torch.as_tensor(XS[None]), patch={"s": torch.as_tensor(values)}).numpy()[0],
                           expected, rtol=0, atol=1e-12)
    outputs, _ = net.run_with_cache(XS, patch={"s": values})
    assert np.allclose(outputs.numpy(), expected, rtol=0, atol=1e-12)


def test_node_widths_survive_saving(tmp_path):
    _, model, _ = patch_case()
    loaded = lsrl.load(model.save(tmp_path / "m"))
    assert loaded.node_widths == model.node_widths == {"x": 2, "h": 2, "s": 2, "r": 2, "y": 1}
    with pytest.raises(lsrl.DimensionError, match=r"shape \(3, 2\)"):
        loaded(XS, patch={"s": np.ones((3, 3))})


# ---- 4. impossible output paths ------------------------------------------------------------------


def impossible_paths(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    read_only = Path("/proc/lsrl-cannot-write")  # no process can create files in /proc, root included
    return {"a file where a folder is needed": a_file / "sub", "a read-only location": read_only,
            "no path": 3, "an empty path": "", "bytes": b"m"}


def leftovers(folder):
    return sorted(p.name for p in folder.rglob("*") if p.name != "a_file")


def test_save_to_impossible_paths_is_one_model_file_error(tmp_path):
    _, model, _ = patch_case()
    for what, path in (impossible_paths(tmp_path) | {"an existing file": tmp_path / "a_file"}).items():
        with pytest.raises(lsrl.ModelFileError, match="save: "):
            model.save(path)
        assert leftovers(tmp_path) == [], what


def test_save_leaves_no_partial_folder_when_a_write_fails(tmp_path, monkeypatch):
    _, model, _ = patch_case()
    import lsrl.model.saving as saving

    def failing(tensors, path):
        Path(path).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(saving, "save_file", failing)
    with pytest.raises(lsrl.ModelFileError, match=r"save: cannot write .*No space left"):
        model.save(tmp_path / "new" / "model")
    assert leftovers(tmp_path) == []
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "model.json").write_text("earlier")
    with pytest.raises(lsrl.ModelFileError):
        model.save(tmp_path / "old")
    assert leftovers(tmp_path) == ["model.json", "old"] and (tmp_path / "old" / "model.json").read_text() == "earlier"


def test_export_onnx_to_impossible_paths_is_one_model_file_error(tmp_path):
    pytest.importorskip("onnx")
    net = product_model().to_torch("gru")
    paths = impossible_paths(tmp_path) | {"a folder": tmp_path, "a missing folder": tmp_path / "missing" / "m.onnx"}
    for what, path in paths.items():
        with pytest.raises(lsrl.ModelFileError, match="export_onnx: "):
            export_onnx(net, path)
        assert leftovers(tmp_path) == [], what
    assert export_onnx(net, tmp_path / "m.onnx").stat().st_size > 0
    assert leftovers(tmp_path) == ["m.onnx"]
    wide = product_model().to_torch("gru", gate_bound=2**20)  # fine in float64, not in float32
    with pytest.raises(lsrl.LsrlError, match=r"gate_bound=.*float32"):
        export_onnx(wide, tmp_path / "wide.onnx", dtype="float32")
    assert export_onnx(wide, tmp_path / "wide.onnx", dtype="float64").exists()


# ---- 5. exact weights with no float64 form ------------------------------------------------------


@pytest.mark.parametrize("weight", [Fraction(10**400), Fraction(-(10**309)), Fraction(1, 10**400)])
def test_exact_weights_beyond_float64_are_refused_on_every_float_path(weight):
    x = lsrl.Input(1, name="x", bounds=(0, 1))
    program = lsrl.ForEach(lsrl.Linear(lsrl.ReLU(lsrl.Linear(x, [[weight]], name="huge")), [[1]], name="out"))
    model = lsrl.compile(program, progress=False)
    xs = np.ones((2, 1))
    assert model(xs.astype(object), exact=True).tolist() == program(xs.astype(object), exact=True).tolist()
    runs = [lambda: model(xs), lambda: model.trace(xs)] + [
        (lambda arch=arch: model.to_torch(arch)) for arch in ("linear_rnn", "gru", "hawk")]
    for run in runs:
        with pytest.raises(lsrl.BackendError, match="weight A of Linear 'huge'.*float64"):
            run()


# ---- 6. f_ifelse conditions that never select ---------------------------------------------------


@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
@pytest.mark.parametrize("bounds", [(2, 5), (-3, -1), (0.25, 0.75)])
def test_an_ifelse_condition_that_is_never_0_or_1_is_refused(variant, bounds):
    cond = lsrl.Input(1, name="cond", bounds=bounds)
    with pytest.raises(lsrl.LsrlError, match=r"f_ifelse on Input 'cond'.*never selects a branch"):
        lsrl.f_ifelse(cond, cond * 2, cond * 3, variant=variant)


@pytest.mark.parametrize("variant", lsrl.IFELSE_VARIANTS)
def test_an_ifelse_condition_that_may_be_0_or_1_selects_exactly(variant):
    x = lsrl.Input(2, name="x", bounds=([0, -5], [1, 5]))
    program = lsrl.ForEach(lsrl.f_ifelse(x[0:1], x[1:2] * 2, x[1:2] - 1, variant=variant))
    xs = np.array([[1, 3], [0, 3], [1, -4], [0, -4]], dtype=object)
    assert program(xs, exact=True)[:, 0].tolist() == [6, 2, -8, -5]


# ---- 3. the stated tolerance of every path -------------------------------------------------------


@lru_cache(maxsize=None)
def listing1_original():
    """Listing 1 with the paper's f_ifelse (lambda_ = 1e10) on queries floats do not hold exactly: the
    float torch targets differ from the exact answer by about 4.6e-4 (4.4e-4 as reported)."""
    from lsrl.programs import continuous_approximator, continuous_prompt, continuous_query

    program = continuous_approximator(1, 1, ifelse="original")
    prompt = continuous_prompt(lambda v: np.array([0.5 + 0.5 * np.sin(3 * v[0])]), 1, 1, 4).astype(float)
    xs = np.stack([np.vstack([continuous_query([q], 1).astype(float), prompt]) for q in (0.1234567, 0.7654321)])
    return program, lsrl.compile(program, progress=False), xs


@pytest.mark.parametrize("arch", ["linear_rnn", "gated_rnn", "gru", "lstm", "hawk"])
def test_every_target_states_a_tolerance_that_holds_where_lambda_is_1e10(arch):
    program, model, xs = listing1_original()
    exact = np.array(program(xs.astype(object), exact=True), dtype=float)
    net = model.to_torch(arch)
    with torch.no_grad():
        error = np.max(np.abs(net(torch.as_tensor(xs)).numpy() - exact))
    assert net.tolerance.dtype == "float64" and error > 1e-6  # a real float error, not an exact path
    assert error <= net.tolerance.bound(xs.shape[1], np.abs(xs).max())


@pytest.mark.parametrize("seed", [0, 2, 3, 5])
def test_a_module_moved_to_float32_states_a_float32_tolerance_that_holds_on_random_programs(seed):
    """``.to(torch.float32)`` restates ``net.tolerance`` for float32 (a bound 2^29 times the float64 one) and
    it holds against the interpreter; ``.double()`` restates float64 again."""
    import random

    from lsrl.targets import STOCK
    from test_random_programs import generate_program

    program = generate_program(random.Random(seed)).program
    model = lsrl.compile(program, progress=False)
    xs = np.random.default_rng(seed).uniform(-2, 2, (2, 7, program.input.dim))
    exact = np.array(program(xs.astype(object), exact=True, check_bounds=False), dtype=float)
    multi = any(layer.kind == "Multi" for layer in model.layers)
    archs = [arch for arch in lsrl.targets.ARCHITECTURES
             if arch not in STOCK and (arch not in lsrl.targets.UNGATED or not multi)]
    for arch in archs:
        net = model.to_torch(arch)
        stated64 = net.tolerance.bound(7, np.abs(xs).max())
        net.to(torch.float32)
        stated = net.tolerance.bound(7, np.abs(xs).max())
        assert net.tolerance.dtype == "float32" and stated == stated64 * 2.0**29, arch
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the precision warning of large weights
            out = net(torch.as_tensor(xs, dtype=torch.float32), check_bounds=False).double().numpy()
        assert np.max(np.abs(out - exact)) <= stated, arch
        assert net.double().tolerance.dtype == "float64", arch


# ---- 4. promises: max_len, dtype and device moves, odd tensors ------------------------------------------


def max_len_options(arch: str, max_len: int) -> dict | None:
    """The options that build ``arch`` for sequences of at most ``max_len`` steps; None for a target that runs
    any length."""
    from lsrl.targets import STOCK

    if arch in STOCK:
        return {"max_len": max_len, "dtype": torch.float64}
    if "construction" in lsrl.targets.OPTIONS.get(arch, ()):
        return {"max_len": max_len, "construction": "app_e"}
    return None


@pytest.mark.parametrize("arch", lsrl.targets.ARCHITECTURES)
def test_every_target_refuses_sequences_past_its_max_len_and_the_others_run_any_length(arch):
    model = state_model()
    options = max_len_options(arch, 8)
    xs = np.random.default_rng(1).integers(-1, 2, size=(2, 8 if options else 300, 2)).astype(np.float64)
    net = model.to_torch(arch, **(options or {}))
    exact = np.array(model(xs, exact=True), dtype=float)
    with torch.no_grad():
        error = np.max(np.abs(net(torch.as_tensor(xs)).numpy() - exact))
    stated = net.tolerance if options and "dtype" in options else net.tolerance.bound(xs.shape[1], 1)
    assert error <= stated
    if options is None:
        return
    longer = torch.zeros(1, 9, 2, dtype=torch.float64)
    for call in (lambda: net(longer), lambda: net.run_with_cache(longer)):
        with pytest.raises(lsrl.SequenceError, match=rf"^{arch}: sequence length 9 exceeds max_len=8"):
            call()


@pytest.mark.filterwarnings("ignore:Complex modules are a new feature")  # torch's, before the refusal
@pytest.mark.parametrize("arch", lsrl.targets.ARCHITECTURES)
def test_half_precision_other_dtypes_and_the_meta_device_are_refused_before_anything_moves(arch):
    net = state_model().to_torch(arch, **(max_len_options(arch, 8) or {}))
    before, stated = {name: tensor.clone() for name, tensor in net.state_dict().items()}, net.tolerance
    moves = [(lambda: net.half(), "float16"), (lambda: net.to(torch.bfloat16), "bfloat16"),
             (lambda: net.to(torch.complex128), "complex128"), (lambda: net.to("meta"), "meta device")]
    for move, named in moves:
        with pytest.raises(lsrl.LsrlError, match=rf"^{arch}: .*{named}"):
            move()
    after = net.state_dict()
    assert all(torch.equal(after[name], kept) and after[name].dtype == kept.dtype for name, kept in before.items())
    assert net.tolerance == stated
    x = torch.ones(1, 3, 2, dtype=torch.float64)
    with pytest.raises(lsrl.SequenceError, match=rf"^{arch}: the input is on the meta device"):
        net(x.to("meta"))
    with pytest.raises(lsrl.SequenceError, match=rf"^{arch}: the module runs in torch.float64 but the input is "
                                                 "torch.bfloat16"):
        net(x.bfloat16())


@pytest.mark.parametrize("arch", lsrl.targets.ARCHITECTURES)
def test_an_input_that_requires_grad_runs_with_gradients(arch):
    """The outputs equal those without gradients, and the gradient of ``3 x - 1`` (away from the sign split's
    kink at 0) is 3 per step, to the module's tolerance."""
    x = lsrl.Input(1, name="x", bounds=(-4, 4))
    model = lsrl.compile(lsrl.ForEach(3 * x - 1), progress=False)
    net = model.to_torch(arch, **(max_len_options(arch, 6) or {}))
    xs = torch.tensor([[[1.5], [-2.0], [0.75], [3.0], [-0.5], [2.0]]], dtype=torch.float64, requires_grad=True)
    out = net(xs)
    with torch.no_grad():
        assert torch.equal(out.detach(), net(xs.detach()))
    out.sum().backward()
    assert xs.grad is not None and np.max(np.abs(xs.grad.numpy() - 3.0)) <= 1e-6, xs.grad


def test_the_interpreter_and_the_compiled_model_read_bfloat16_grad_and_meta_tensors_cleanly():
    x = lsrl.Input(2, name="x", bounds=(-4, 4))
    program = lsrl.ForEach(lsrl.LinState(x, [[1, 0], [0, 1]], [[1, 0], [0, 1]], name="s"))
    model = lsrl.compile(program, progress=False)
    values = np.array([[[1.0, -2.0], [0.5, 3.0], [-4.0, 0.25]]])  # bfloat16 numbers: read exactly
    expected = np.cumsum(values, axis=1)
    tensor = torch.as_tensor(values)
    for run in (program, model):
        for xs in (tensor.bfloat16(), tensor.clone().requires_grad_()):
            assert np.array_equal(np.array(run(xs, exact=True), dtype=float), expected)
            assert np.array_equal(run(xs), expected)
        for exact in (True, False):
            with pytest.raises(lsrl.SequenceError, match="^Input 'x': the tensor is on the meta device"):
                run(tensor.to("meta"), exact=exact)
        with pytest.raises(lsrl.SequenceError, match="meta device"):
            run(values, patch={"s": tensor.to("meta")})



def test_a_run_longer_than_the_tolerance_was_checked_for_warns_once(monkeypatch):
    from lsrl.targets import precision

    monkeypatch.setattr(precision, "CHECKED_STEPS", 4)
    net = state_model().to_torch("diagonal_linear_rnn")
    with warnings.catch_warnings():
        warnings.simplefilter("error", precision.ToleranceWarning)
        net(torch.zeros(1, 4, 2, dtype=torch.float64))  # within: no warning
    with pytest.warns(precision.ToleranceWarning, match="5 steps is beyond the 4 steps"):
        net(torch.zeros(1, 5, 2, dtype=torch.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", precision.ToleranceWarning)
        net(torch.zeros(1, 6, 2, dtype=torch.float64))  # once per module
    with pytest.raises(lsrl.LsrlError, match="no tolerance for dtype 'int8'"):
        net.tolerance.in_dtype("int8")


def test_the_tolerance_table_is_generated_and_every_row_holds():
    import csv

    table = Path(__file__).parent.parent / "docs" / "results" / "benchmarks" / "tolerances.csv"
    with open(table, newline="") as file:
        rows = list(csv.DictReader(file))
    assert {row["holds"] for row in rows} == {"True"}
    paths = {row["path"] for row in rows}
    assert {"model(xs, exact=True)", "model(xs) float runner", "to_torch('hawk')", "to_torch('gru')"} <= paths
    assert all(row["stated"] == "exact" for row in rows if row["path"] == "model(xs, exact=True)")
