import pytest
import torch

from lsrl.llrnn.tasks import TASKS, Alphabet, Copy, MultiplePattern, Pattern, RepeatCopy, TaskError, VariablePattern


def decoded(task, prompt_and_output):
    prompt, output = prompt_and_output
    return task.alphabet.decode(prompt), task.alphabet.decode(output)


def test_copy_and_repeat_copy_examples():
    copy, repeat = Copy(), RepeatCopy(repeats=2)
    abc = copy.alphabet.encode("abc")
    assert decoded(copy, copy.example(abc)) == ("∘abc•", "abc")
    assert decoded(repeat, repeat.example(abc)) == ("∘abc•", "aabbcc")


def test_pattern_reads_the_sec_4_1_example():
    task = Pattern(steps=(1, 0, 0, 2, 0), output_factor=2)
    assert decoded(task, task.example(task.alphabet.encode("abcde")))[1] == "abbbddeeeb"


def test_default_pattern_never_wraps():
    task = Pattern()
    for length in range(1, 30):
        output = task.example(list(range(length)))[1]  # symbol i at position i: reads are positions
        assert output == sorted(output) and len(output) == length


def test_multiple_pattern_is_the_sec_4_2_swap_example():
    task = MultiplePattern(segments=3, repeats=(1, 2))
    abcde = task.alphabet.encode("abcde")
    prompt, output = decoded(task, task.example([abcde, abcde, abcde]))
    assert prompt == "∘abcdeSabcdeSabcde•"
    assert output == "abcde" "aabbccddee" "abcde"


def test_variable_pattern_reads_with_the_given_steps():
    task = VariablePattern(pattern_length=2, max_step=2)
    prompt, output = decoded(task, task.example([0, 1], task.alphabet.encode("abcd")))
    assert prompt == "∘01|abcd•" and output == "aabb"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_masks_cover_exactly_the_output_blanks(name):
    task = TASKS[name]()
    batch = task.batch(5, 4, torch.Generator().manual_seed(0))
    blank, end = task.alphabet.encode("_•")
    assert batch.inputs.shape == (*batch.tokens.shape, task.alphabet.size)
    assert torch.equal(batch.inputs.argmax(-1), batch.tokens)
    assert torch.equal(batch.mask, batch.tokens == blank)
    for row, mask, targets in zip(batch.tokens, batch.mask, batch.targets):
        first_output = int(mask.nonzero()[0])
        assert int(row[first_output - 1]) == end and bool(mask[first_output:].all())
        assert bool((targets[mask] < task.alphabet.data).all()) and bool((targets[~mask] == 0).all())


def test_batch_targets_match_the_examples():
    task = RepeatCopy(repeats=3)
    batch = task.batch(4, 3, torch.Generator().manual_seed(1))
    for tokens, targets, mask in zip(batch.tokens, batch.targets, batch.mask):
        string = tokens[1:4].tolist()
        assert targets[mask].tolist() == task.example(string)[1]


def test_same_seed_same_batch_and_length_ranges():
    task = MultiplePattern()
    first, second = task.test_set([2, 5], batch_size=3, seed=7), task.test_set([2, 5], batch_size=3, seed=7)
    assert all(torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets) for a, b in zip(first, second))
    assert not torch.equal(task.test_set([5], batch_size=3, seed=8)[0].tokens, first[1].tokens)
    generator = torch.Generator().manual_seed(0)
    lengths = {(task.batch(2, (3, 5), generator).mask.sum(1)[0] // 4).item() for _ in range(40)}
    assert lengths == {3, 4, 5}  # 3 segments, repeats (1, 2): output length 4k


def test_alphabet_round_trip_and_errors():
    alphabet = Alphabet(data=4, digits=2)
    assert alphabet.symbols == "abcd01∘•S|_"
    assert alphabet.decode(alphabet.encode("∘ ab 1 | •")) == "∘ab1|•"
    with pytest.raises(TaskError, match="unknown symbol 'z'"):
        alphabet.encode("z")
    with pytest.raises(TaskError, match="lengths"):
        Copy().batch(2, (4, 2))
