"""The hand-built multiple pattern NTM of Sec. 4.2 (issue: a controller by construction)."""

import pytest
import torch

from lsrl.errors import LsrlError
from lsrl.llrnn.forms import llrnn_form
from lsrl.llrnn.handbuilt import swap_solution
from lsrl.llrnn.tasks import Alphabet, MultiplePattern
from lsrl.llrnn.train import TrainConfig, Trainer


def predictions(model, readout, inputs):
    h0 = model.parts(model(inputs))["h0"]
    return (torch.relu(h0 @ readout["W_y"].T + readout["B_y"]) @ readout["W_o"].T + readout["B_o"]).argmax(-1)


def wrong_symbols(model, readout, batch):
    return int(((predictions(model, readout, batch.inputs.double()) != batch.targets) & batch.mask).sum())


def test_the_paper_example_is_solved():
    task = MultiplePattern()
    model, readout = swap_solution(task, max_length=5)
    letters = task.alphabet
    prompt, output = task.example([letters.encode("abcde"), letters.encode("abcde"), letters.encode("abcde")])
    assert letters.decode(output) == "abcde" + "aabbccddee" + "abcde"
    batch = task.collate([(prompt, output)])
    emitted = predictions(model, readout, batch.inputs.double())[0][batch.mask[0]]
    assert letters.decode(emitted) == "abcdeaabbccddeeabcde"


@pytest.mark.slow
def test_zero_errors_on_1000_random_strings_up_to_length_20():
    task = MultiplePattern()
    model, readout = swap_solution(task, max_length=20)
    generator = torch.Generator().manual_seed(2026)
    batches = [task.batch(50, length, generator) for length in range(1, 21)]
    assert sum(len(b.tokens) for b in batches) == 1000
    assert sum(wrong_symbols(model, readout, batch) for batch in batches) == 0


@pytest.mark.parametrize("segments", [2, 4, 5])
def test_other_numbers_of_segments_and_alphabets(segments):
    task = MultiplePattern(Alphabet(data=3), segments=segments)
    model, readout = swap_solution(task, max_length=6)
    generator = torch.Generator().manual_seed(segments)
    assert all(wrong_symbols(model, readout, task.batch(20, length, generator)) == 0 for length in (1, 2, 6))


@pytest.mark.slow
def test_training_started_from_it_keeps_its_accuracy():
    """The construction's loss underflows to 0 (margin 50), so RMSProp leaves it where it is."""
    task = MultiplePattern()
    model, readout = swap_solution(task, max_length=20)
    config = TrainConfig(model="multiple_pattern_ntm", task="multiple_pattern", min_length=1, max_length=20,
                         start_length=20, steps=8, batch_size=8, dtype="float64", readout_dim=task.alphabet.data,
                         test_batch_size=4)
    trainer = Trainer(config, model=model)
    with torch.no_grad():
        for layer, (weight, bias) in zip((trainer.net.readout[0], trainer.net.readout[2]), (("W_y", "B_y"), ("W_o", "B_o"))):
            layer.weight.copy_(readout[weight])
            layer.bias.copy_(readout[bias])
    trainer.run(progress=False)
    assert max(row["symbol_error"] for row in trainer.history) == 0
    score = trainer.score(range(1, 21))
    assert score.symbols > 0 and score.wrong_symbols == 0


@pytest.mark.slow
def test_its_llrnn_form_runs_the_swap_through_feed():
    """The same weights as an LLRNN: ring 1's read address is moved by ⟦feed⟧ of rings 2, 3, 4."""
    task = MultiplePattern()
    model, readout = swap_solution(task, max_length=3)
    cell = llrnn_form(model)
    assert "decode4" in str(cell.masters["out"])
    batch = task.batch(3, 3, torch.Generator().manual_seed(5))
    assert wrong_symbols(cell, readout, batch) == 0


def test_unsupported_tasks_are_refused():
    with pytest.raises(LsrlError, match="repeats"):
        swap_solution(MultiplePattern(repeats=(1, 3)))
    with pytest.raises(LsrlError, match="at least 2 segments"):
        swap_solution(MultiplePattern(segments=1))
