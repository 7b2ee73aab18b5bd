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


@pytest.mark.parametrize("name", sorted(name for name in TASKS if not name.startswith("tf_")))  # blank-padded tasks
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


# ---- the TF tasks: the examples of /work/shared/llrnn-tf-tasks.md ---------------------------------------

from lsrl.llrnn.tasks import AssociativeRecall, PrioritySort, multiple_pattern, repetition_pattern  # noqa: E402


def digits(text):
    return [int(c) for c in text.split()]


S = digits("3 1 4 1 5 2 6")
TF_EXAMPLES = {  # task: (f(3 1 4 1 5 2 6), N_out at content 28 and 33)
    "tf_copy": ("3 1 4 1 5 2 6", 28, 33),
    "tf_repeat_copy": ("3 3 1 1 4 4 1 1 5 5 2 2 6 6", 56, 66),
    "tf_pattern1": ("3 3 1 4 4 1 5 5 2 6 6", 42, 49),
    "tf_pattern2": ("3 3 4 4 5 5 6 6", 42, 49),
    "tf_pattern3": ("3 3 4 1 1 1 4 4 5 1 1 2 5 5 6 2 2", 82, 97),
    "tf_pattern4": ("3 3 4 1 2 1 4 4 5 2", 76, 88),
    "tf_pattern5": ("3 5 2 6 4 6", 47, 58),
}


@pytest.mark.parametrize("name", TF_EXAMPLES)
def test_tf_pattern_tasks_give_the_documented_outputs(name):
    expected, out28, out33 = TF_EXAMPLES[name]
    task = TASKS[name]()
    assert repetition_pattern(S, task.steps, 1000) == digits(expected)
    assert (task.output_length(28), task.output_length(33)) == (out28, out33)


def test_tf_pattern5_reads_a_to_l_as_documented():
    assert "".join("abcdefghijkl"[i] for i in repetition_pattern(list(range(12)), (4, 1, 1, -4), 100)) \
        == "aefgcghieijkgkl"


def test_wrap_around_reads_a_fixed_count_modulo_the_length():
    assert repetition_pattern([0, 1, 2], (2,), 5, wrap=True) == [0, 2, 1, 0, 2]
    assert repetition_pattern([0, 1, 2], (2,), 5) == [0, 2]  # TF: stops past the end


def test_a_wrapping_tape_pattern_keeps_the_prompt_wrapper():
    # the wrap-around switch of a tape pattern is its own attribute, not Task.wrap (∘ parts •)
    task = TASKS["tf_copy"](tape_content=8, wrap=True)
    alphabet = task.alphabet
    assert task.wrap([1, 2]) == [alphabet.index("∘"), 1, 2, alphabet.index("•")]
    symbols, output = task.content(5, torch.Generator().manual_seed(0))
    assert output == symbols  # copy with wrap-around: exactly output_length(5) = 5 reads


@pytest.mark.parametrize("patterns, content, expected", [
    (((1,), (0, 1)), "3 1 7 4 2 7 5 6", "3 1 4 4 2 2 5 6"),
    (((1,), (0, 1)), "7 3 4 7", "3 3 4 4"),
    (((1,), (0, 1), (0, 2)), "3 1 7 4 2 7 5 6 0 1 7 2 3", "3 1 4 4 2 2 5 5 0 0 2 3"),
    (((0, 1), (2, -1)), "3 1 4 7 5 6 0 2", "3 3 1 1 4 4 5 0 6 2 0"),
])
def test_tf_multiple_pattern_examples(patterns, content, expected):
    assert multiple_pattern(digits(content), patterns, 100) == digits(expected)


@pytest.mark.parametrize("pattern, content, expected", [
    ([0, 2], "3 1 4 1 5 2 6", "3 3 4 4 5 5 6 6"),
    ([0, 1, 2], "3 1 4 1 5 2 6 0", "3 3 1 1 1 5 6 6 0"),
    ([2, 0, 1], "3 1 4 1 5 2 6 0 4 4", "3 4 4 1 2 2 6 4 4 4"),
    ([-1, 2], "3 1 4 1 5 2 6", "3 6 1 3 4 1 1 4 5 1 2 5 6 2"),
])
def test_tf_variable_pattern_examples(pattern, content, expected):
    assert repetition_pattern(digits(content), pattern, 100) == digits(expected)


def test_tf_tape_of_the_notebook_copy_example():
    """The notebook's example (N = 10, content 8) on copy's own tape, N + N_out = 10 + 8 (the example
    itself used N_out = 10): input 8 x 9…, target 9… x 9…, the mask on the output window."""
    task = TASKS["tf_copy"](tape_content=8)
    content = digits("4 4 5 6 3 3 6 7")
    batch = task.collate([([8] + content + [9], content)])
    assert batch.tokens[0].tolist() == digits("8 4 4 5 6 3 3 6 7 9 9 9 9 9 9 9 9 9 9 9")[:18]
    assert batch.targets[0].tolist() == digits("9 9 9 9 9 9 9 9 9 4 4 5 6 3 3 6 7 9 9 9")[:18]
    assert batch.mask[0].tolist() == [False] * 9 + [True] * 8 + [False]
    assert task.alphabet.size == 10


def test_tf_mask_is_the_union_of_the_batch_windows_and_outputs_are_cut_to_the_tape():
    task = TASKS["tf_multiple_pattern1"](tape_content=6)
    with pytest.raises(TaskError, match="share one content length"):
        task.collate([([8, 1, 7, 9], [1]), ([8, 2, 9], [2, 2])])
    batch = task.collate([([8, 1, 7, 9], [1]), ([8, 0, 1, 9], [0, 1, 1])])
    assert batch.mask[0].tolist() == batch.mask[1].tolist() == [False] * 3 + [True] * 3 + [False] * 14
    assert batch.targets[0, 3:6].tolist() == [1, 9, 9]  # the first sequence must emit • after its output
    pattern1 = TASKS["tf_pattern1"](tape_content=5)  # |f| = 50 at content 33, N_out = 33 + 16 = 49
    prompt, output = pattern1.sample(33, torch.Generator().manual_seed(0))
    assert pattern1.tape_length(33) == 35 + 49 and len(output) == 49
    assert output == repetition_pattern(prompt[1:-1], (0, 1, 1), 100)[:49]


def test_tf_variable_pattern_tape_codes_the_pattern_as_symbols():
    task = TASKS["tf_variable_pattern4"]()
    for seed in range(20):
        prompt, output = task.sample(20, torch.Generator().manual_seed(seed))
        separator = len(prompt) - 1 - prompt[::-1].index(8)  # the last ∘: B holds content symbols only
        pattern = [c - 10 if c >= 8 else c for c in prompt[1:separator]]  # 9 -> -1, 8 -> -2
        assert 1 <= len(pattern) <= 8 and sum(pattern) > 0
        assert output == repetition_pattern(prompt[separator + 1:-1], pattern, task.tape_length(20))[:len(output)]


def test_associative_recall_and_priority_sort():
    recall = AssociativeRecall(item_length=2)
    items = [recall.alphabet.encode(w) for w in ("ab", "cd", "ef")]
    assert decoded(recall, recall.example(items, 1)) == ("∘abScdSef|cd•", "ef")
    with pytest.raises(TaskError):
        recall.example(items, 2)  # the last item has no successor
    sort = PrioritySort(kept=0.75)
    prompt, output = decoded(sort, sort.example(sort.alphabet.encode("abcd"), [3, 9, 3, 5]))
    assert prompt == "∘a3b9c3d5•" and output == "bda"  # 9, 5, then the first of the two 3s


def test_a_batch_with_no_output_to_score_is_refused_naming_the_length():
    # tf_multiple_pattern2 at content length 1: the one symbol is the forced divider, so nothing is output
    task = TASKS["tf_multiple_pattern2"]()
    with pytest.raises(TaskError, match="length 1 gives samples with no output to score"):
        task.batch(4, 1, torch.Generator().manual_seed(0))
    assert task.batch(4, 5, torch.Generator().manual_seed(0)).mask.any()
