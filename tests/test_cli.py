import numpy as np
import pytest
from click.testing import CliRunner

from lsrl.cli import main

PROGRAM = '''
import lsrl
bits = lsrl.Input(1, name="bits")
counter = lsrl.ForEach(lsrl.LinState(2 * bits - 1, [[1]], [[1]]))
'''


def test_compile_run_inspect(tmp_path):
    source = tmp_path / "prog.py"
    source.write_text(PROGRAM)
    runner = CliRunner()
    result = runner.invoke(main, ["compile", f"{source}:counter", "-o", str(tmp_path / "m"), "--target", "rnn"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "model.json").exists() and (tmp_path / "m" / "rnn.onnx").exists()
    np.save(tmp_path / "xs.npy", np.array([[1.0], [1.0], [0.0]]))
    result = runner.invoke(main, ["run", str(tmp_path / "m"), "--input", str(tmp_path / "xs.npy"), "--exact"])
    assert result.exit_code == 0, result.output
    assert result.output.split() == ["1", "2", "1"]
    result = runner.invoke(main, ["inspect", str(tmp_path / "m")])
    assert result.exit_code == 0 and "rnn: 1 layers" in result.output


def test_errors_are_one_line(tmp_path):
    source = tmp_path / "prog.py"
    source.write_text(PROGRAM)
    runner = CliRunner()
    runner.invoke(main, ["compile", str(source), "-o", str(tmp_path / "m")])
    (tmp_path / "bad.txt").write_text("1 2\n3 4\n")
    result = runner.invoke(main, ["run", str(tmp_path / "m"), "--input", str(tmp_path / "bad.txt")])
    assert result.exit_code != 0
    assert "Traceback" not in result.output and result.output.count("\n") == 1
    assert "Input 'bits'" in result.output
    result = runner.invoke(main, ["compile", f"{source}:nothing", "-o", str(tmp_path / "n")])
    assert result.exit_code != 0 and "nothing" in result.output and result.output.count("\n") == 1


@pytest.mark.slow
def test_demo_plots(tmp_path):
    from lsrl.demo import write_plots

    errors, stages = write_plots(tmp_path, side=12)
    assert all(later < earlier for earlier, later in zip(errors, errors[1:]))  # finer grids, smaller error
    assert all(later < earlier for earlier, later in zip(stages, stages[1:]))  # streaming refines
    assert errors[-1] <= (1 / 16) * np.hypot(3, 2) * np.sqrt(2) / 2  # App. B
    for name in ("heatmaps.png", "error_vs_grid.png", "streaming.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_the_llrnn_group_is_part_of_lsrl():
    result = CliRunner().invoke(main, ["llrnn", "sample", "repeat_copy", "--length", "3", "--count", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("∘") and "->" in line for line in lines)
    prompt, output = lines[0].split("->")
    letters = prompt.strip()[1:4]
    assert output.strip() == "".join(letter * 2 for letter in letters)  # each symbol repeated twice
    failed = CliRunner().invoke(main, ["llrnn", "train", "--model", "nope", "-o", "unused"])
    assert failed.exit_code != 0 and "unknown model 'nope'" in failed.output and "Traceback" not in failed.output


TOKENS = '''
import lsrl
x = lsrl.Input(1, name="x", bounds=(0, 2), integer=True)
mirror = lsrl.ForEach(2 - x)
'''
WORDS = {"rock": 0, "paper": 1, "scissors": 2}


def test_compile_writes_a_generating_stock_folder_with_words(tmp_path):
    """``--generate --words``: greedy generate, through the folder's own tokenizer, answers each word with the
    word of the program's output token (``2 - x``, read from the interpreter)."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    import lsrl
    from lsrl.cli_program import load_program

    source = tmp_path / "tokens.py"
    source.write_text(TOKENS)
    (tmp_path / "words.json").write_text(json.dumps(WORDS))
    result = CliRunner().invoke(main, ["compile", str(source), "--target", "hf-hawk", "--max-len", "4", "--generate",
                                       "--words", str(tmp_path / "words.json"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / "hf-hawk"
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    program, word_of = load_program(str(source)), {token: word for word, token in WORDS.items()}
    for word, token in WORDS.items():
        ids = tokenizer(f"paper {word}", return_tensors="pt").input_ids
        answer = model.generate(ids, max_new_tokens=1, do_sample=False)[0, ids.shape[1]:]
        expected = int(program(np.array([[WORDS["paper"]], [token]]))[-1, 0])
        assert tokenizer.decode(answer) == f" {word_of[expected]}"
    assert lsrl.hf.load(folder).config.lsrl_io["generation"]["margin"] > 0


def _one_line_error(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("Error: "), result.output
    return result.output


def test_generate_and_words_refuse_bad_input_in_one_line(tmp_path):
    source, plain = tmp_path / "tokens.py", tmp_path / "prog.py"
    source.write_text(TOKENS)
    plain.write_text(PROGRAM)
    hf = ["compile", str(source), "--target", "hf-mamba", "--max-len", "4", "-o", str(tmp_path / "out")]
    contents = {"list.json": "[1, 2]", "broken.json": "{\"rock\": ", "short.json": '{"rock": 0, "paper": 1}',
                "outside.json": '{"rock": 0, "paper": 1, "scissors": 2, "lizard": 3}'}
    for name, text in contents.items():
        (tmp_path / name).write_text(text)
    for name, expected in [("list.json", "JSON object"), ("broken.json", "could not read"),
                           ("short.json", "no word for token 2"), ("outside.json", "'lizard' names token 3")]:
        output = _one_line_error([*hf, "--words", str(tmp_path / name)])
        assert f"--words {tmp_path / name}" in output and expected in output, output
    output = _one_line_error(["compile", str(source), "--words", str(tmp_path / "short.json"), "-o",
                              str(tmp_path / "p")])
    assert "--words" in output and "--target" in output
    output = _one_line_error(["compile", str(source), "--target", "rnn", "--generate", "-o", str(tmp_path / "r")])
    assert "--generate" in output and "hf-mamba" in output
    output = _one_line_error(["compile", f"{plain}:counter", "--target", "hf-mamba", "--max-len", "4", "--generate",
                              "-o", str(tmp_path / "c")])
    assert "Input 'bits'" in output and "token" in output
    assert not any((tmp_path / name).exists() for name in ("out", "p", "r", "c"))  # nothing written
