"""The extraction round trip: AALpy's L* learns a DFA back from a compiled network.

The network is the membership oracle: a query's answers are the network's outputs after each
prefix (its hidden state is carried from symbol to symbol, one step per symbol); the equivalence
oracle samples random words, runs them through the network as one batch, and returns the shortest
prefix on which the hypothesis disagrees (AALpy's ``RandomWordEqOracle`` does the same word by word,
a hundred times slower with one network call per symbol). This is the workflow researchers run
to extract automata from trained RNNs, here on networks whose answer is known: the learned DFA must
be equivalent to the compiled one (``DFA.equivalent`` decides it exactly).
"""

from __future__ import annotations

import numpy as np
import torch

from lsrl.automata.machines import DFA
from lsrl.errors import LsrlError


def _network_sul(network, alphabet):
    from aalpy.base import SUL

    index = {symbol: i for i, symbol in enumerate(alphabet)}

    class NetworkSUL(SUL):
        """Membership queries answered by ``network``, one symbol at a time."""

        def pre(self):
            self.state = network.initial_state(1)

        def post(self):
            self.state = None

        def step(self, letter):
            if letter is None:  # the empty word
                return bool(network.initial_output()[0])
            x = torch.zeros(1, 1, len(alphabet), dtype=network.h0.dtype)
            x[0, 0, index[letter]] = 1
            with torch.no_grad():
                hidden, self.state = network.hidden(x, self.state)
                return bool(network.read(hidden)[0, -1, 0])

    return NetworkSUL()


def _sampling_oracle(network, alphabet, words: int, length: int, rng: np.random.Generator, sul):
    from aalpy.base import Oracle

    class SamplingOracle(Oracle):
        """Random words of ``length`` symbols; every prefix is compared with the hypothesis."""

        def find_cex(self, hypothesis):
            indices = rng.integers(0, len(alphabet), size=(words, length))
            with torch.no_grad():
                answers = network(torch.nn.functional.one_hot(torch.as_tensor(indices), len(alphabet)))[..., 0]
            answers = answers.numpy() > 0.5
            self.num_queries += words
            for word, expected in zip(indices, answers):
                hypothesis.reset_to_initial()
                for t, symbol in enumerate(word):
                    if hypothesis.step(alphabet[symbol]) != expected[t]:
                        return tuple(alphabet[i] for i in word[: t + 1])
            return None

    return SamplingOracle(alphabet, sul)


def learn_back(network, alphabet, *, words: int = 1000, length: int = 50, seed: int = 0) -> DFA:
    """The DFA that AALpy's L* learns from ``network`` (a DFA's ``AutomatonNetwork``) over ``alphabet``;
    each equivalence query samples ``words`` random words of ``length`` symbols (every prefix counts)."""
    from aalpy.learning_algs import run_Lstar

    if network.readout.out_features != 1:
        raise LsrlError(f"learn_back: needs a DFA's network (one acceptance channel), this one has "
                        f"{network.readout.out_features} channels")
    alphabet = list(alphabet)
    sul = _network_sul(network, alphabet)
    oracle = _sampling_oracle(network, alphabet, words, length, np.random.default_rng(seed), sul)
    learned = run_Lstar(alphabet, sul, oracle, automaton_type="dfa", print_level=0)
    names = {state: i for i, state in enumerate(learned.states)}
    transitions = {names[state]: {a: names[state.transitions[a]] for a in alphabet} for state in learned.states}
    accepting = [names[state] for state in learned.states if state.is_accepting]
    return DFA(range(len(names)), alphabet, transitions, names[learned.initial_state], accepting, check_reachable=False)
