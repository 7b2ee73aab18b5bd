"""Randomised differential tests: the ForEach interpreter against the compiled path graph.

A seeded generator (a pure function of ``random.Random(seed)``) builds LSRL programs that use
all six node types and deliberately produce every branching configuration of App. A of the
LSRL paper (Cases 1A-10) and every fusion of the preparation step.  For each seed the program
is compiled and the compiled model must reproduce the interpreter *exactly* (exact backend)
or to 1e-9 relative error (float backend).

A failing seed can be replayed outside pytest (from the repository root)::

    import random, sys; sys.path.insert(0, "tests")
    from test_random_programs import generate_program
    gen = generate_program(random.Random(SEED), mixed_formats=(SEED % 5 == 0))
    print(gen.source_code())          # the program as a Python script
"""

from __future__ import annotations

import functools
import random
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse

import lsrl
from lsrl.compiler import run_passes, to_graph, to_layers

N_SEEDS = 300
FLOAT_SEEDS = range(60)
X_NUM = 6          # input values are Fraction(randint(-X_NUM, X_NUM), randint(1, 3))
X_BOUND = float(X_NUM)
T_MAX = 8
LIMIT = 100.0      # weights are scaled (by powers of two) so |values| stay below this
MULTI_LIMIT = 10.0  # a Multi's input is kept below this, so its output stays below LIMIT
MAX_CONCAT_DIM = 10

CASES = [
    "case_1a", "case_1b", "case_2", "case_3", "case_4", "case_5a", "case_5b",
    "case_6", "case_7a", "case_7b", "case_8", "case_9", "case_10",
]
FUSIONS = ["fuse_linear_linear", "fuse_relu_relu", "fuse_linear_linstate", "fuse_concat_identical",
           "fuse_slice_concat", "fuse_concat_concat", "fuse_identity", "merge_duplicates",
           "fuse_stateless_linstate", "fuse_linstate_linstate"]

# Branching patterns the generator attaches on purpose (one per App. A case).
PATTERNS = [
    "multi_only",        # 1A
    "multi_mix",         # 1B
    "linstate_only",     # 2
    "relu_only",         # 3
    "concat_only",       # 4
    "slices_only",       # 5A
    "lins",              # 5B
    "linstate_mix",      # 6
    "lin_relu_7a",       # 7A
    "lin_relu_7b",       # 7B
    "lin_concat",        # 8
    "relu_concat",       # 9
    "lin_relu_concat",   # 10
]

_STATE_WEIGHTS = [Fraction(1), Fraction(1, 2), Fraction(1, 3), Fraction(2, 3), Fraction(1, 4), Fraction(3, 4)]


def _is_dyadic(v: Fraction) -> bool:
    d = Fraction(v).denominator
    return d & (d - 1) == 0


def _abs_matvec(M, v):
    return [sum(abs(float(a)) * x for a, x in zip(row, v)) for row in M]


class _Info:
    __slots__ = ("bound", "users", "var")

    def __init__(self, bound, var):
        self.bound = bound      # per-coordinate upper bound on |value| over T_MAX steps
        self.users = 0          # users created by this generator (sugar may add hidden ones)
        self.var = var          # variable name in source_code()


class ProgramGenerator:
    """Builds one random LSRL program. Every random choice comes from ``rng``."""

    pattern_choices = PATTERNS

    def __init__(self, rng: random.Random, mixed_formats: bool = False):
        self.rng = rng
        self.mixed = mixed_formats
        self.order: list = []       # every node created here, in creation order
        self.info: dict = {}        # id(node) -> _Info
        self.pool: list = []        # nodes open to new users
        self.lines: list[str] = []  # the program as Python source
        self.count = 0              # nodes created (not counting the Input)
        self.patterns: list[str] = []
        self.x = None
        self.d_in = 0
        self.output = None
        self.program = None

    # ------------------------------------------------------------------ bookkeeping
    def _name(self):
        return f"n{self.count}" if self.rng.random() < 0.4 else None

    def _register(self, node, bound, parents, code, open_=True):
        bound = [float(b) for b in bound]
        assert node.dim == len(bound), f"generator/library disagree on dim of {code!r}: {node.dim} vs {len(bound)}"
        var = f"v{len(self.order)}"
        self.order.append(node)
        self.info[id(node)] = _Info(bound, var)
        for p in parents:
            self.info[id(p)].users += 1
        if open_:
            self.pool.append(node)
        self.lines.append(f"{var} = {code}")
        if not isinstance(node, lsrl.Input):
            self.count += 1
        return node

    def _var(self, node):
        return self.info[id(node)].var

    def _bound(self, node):
        return self.info[id(node)].bound

    def _close(self, node):
        self.pool = [n for n in self.pool if n is not node]

    def _pick(self, pred=None):
        cands = [n for n in self.pool if pred is None or pred(n)]
        if not cands:
            cands = [n for n in self.order if pred is None or pred(n)]
        if not cands:
            return None
        if self.rng.random() < 0.5:
            return self.rng.choice(cands[-4:])
        return self.rng.choice(cands)

    # ------------------------------------------------------------------ numbers
    def _frac(self):
        return Fraction(self.rng.randint(-4, 4), self.rng.randint(1, 3))

    def _matrix(self, rows, cols, density=0.6):
        return [[self._frac() if self.rng.random() < density else Fraction(0) for _ in range(cols)]
                for _ in range(rows)]

    def _vector(self, n):
        return [self._frac() for _ in range(n)]

    def _fmt_matrix(self, M):
        """Hand the matrix over in one of the accepted formats; returns (value, source)."""
        r = self.rng.random()
        flat = [v for row in M for v in row]
        if self.mixed:
            if all(_is_dyadic(v) for v in flat):
                if r < 0.25:
                    return np.array([[float(v) for v in row] for row in M], dtype=np.float64), f"np.array({_src(M)}, dtype=float)"
                if r < 0.45:
                    return (scipy.sparse.csr_matrix(np.array([[float(v) for v in row] for row in M], dtype=np.float64)),
                            f"scipy.sparse.csr_matrix(np.array({_src(M)}, dtype=float))")
                if r < 0.55:
                    floats = [[float(v) for v in row] for row in M]
                    return floats, repr(floats)
            if r < 0.75:
                return np.array(M, dtype=object), f"np.array({_src(M)}, dtype=object)"
        if all(v.denominator == 1 for v in flat) and r > 0.6:
            return [[int(v) for v in row] for row in M], _src(M)
        return [list(row) for row in M], _src(M)

    def _fmt_vector(self, v):
        r = self.rng.random()
        if self.mixed:
            if all(_is_dyadic(a) for a in v) and r < 0.4:
                return np.array([float(a) for a in v], dtype=np.float64), f"np.array({_src(v)}, dtype=float)"
            if r < 0.6:
                return np.array(v, dtype=object), f"np.array({_src(v)}, dtype=object)"
        return list(v), _src(v)

    @staticmethod
    def _scale_to(bound_fn, limit):
        """Smallest power-of-two shrink factor f (1, 1/2, 1/4, ...) with max(bound_fn(f)) <= limit."""
        f = Fraction(1)
        while max(bound_fn(f), default=0.0) > limit:
            f /= 2
        return f

    # ------------------------------------------------------------------ node builders
    def _density(self):
        """Mostly 0.6; sometimes sparse, sometimes exactly zero (a node that reads nothing)."""
        r = self.rng.random()
        return 0.0 if r < 0.04 else 0.25 if r < 0.25 else 0.6

    def linear(self, p, out=None, limit=LIMIT, open_=True, density=None):
        out = out if out is not None else self.rng.randint(1, 4)
        A = self._matrix(out, p.dim, density if density is not None else self._density())
        b = self._vector(out) if self.rng.random() < 0.5 else None
        bp = self._bound(p)
        base = _abs_matvec(A, bp)
        bb = [abs(float(v)) for v in b] if b is not None else [0.0] * out

        def bound(f):
            return [float(f) * (x + y) for x, y in zip(base, bb)]

        f = self._scale_to(bound, limit)
        A = [[a * f for a in row] for row in A]
        b = [v * f for v in b] if b is not None else None
        Av, As = self._fmt_matrix(A)
        name = self._name()
        if b is None:
            node = lsrl.Linear(p, Av, name=name)
            code = f"lsrl.Linear({self._var(p)}, {As}, name={name!r})"
        else:
            bv, bs = self._fmt_vector(b)
            node = lsrl.Linear(p, Av, b=bv, name=name)
            code = f"lsrl.Linear({self._var(p)}, {As}, b={bs}, name={name!r})"
        return self._register(node, bound(f), [p], code, open_)

    def selection(self, p, open_=True):
        """A Linear whose rows are rows of the identity (a slice / gather built by hand)."""
        d = p.dim
        if d >= 2 and self.rng.random() < 0.5:
            a = self.rng.randrange(d)
            b = self.rng.randint(a + 1, d)
            rows = list(range(a, b))
        else:
            rows = self.rng.sample(range(d), self.rng.randint(1, d))
        A = [[Fraction(int(c == r)) for c in range(d)] for r in rows]
        Av, As = self._fmt_matrix(A)
        name = self._name()
        node = lsrl.Linear(p, Av, name=name)
        bp = self._bound(p)
        return self._register(node, [bp[r] for r in rows], [p], f"lsrl.Linear({self._var(p)}, {As}, name={name!r})", open_)

    def slice_(self, p, length=None, open_=True):
        """Sugar slice p[a:b] or p[i]."""
        d = p.dim
        bp = self._bound(p)
        if length is None:
            if self.rng.random() < 0.3:
                i = self.rng.randrange(d)
                node = p[i]
                return self._register(node, [bp[i]], [p], f"{self._var(p)}[{i}]", open_)
            length = self.rng.randint(1, d)
        a = self.rng.randint(0, d - length)
        node = p[a:a + length]
        return self._register(node, bp[a:a + length], [p], f"{self._var(p)}[{a}:{a + length}]", open_)

    def relu(self, p, open_=True):
        name = self._name()
        node = lsrl.ReLU(p, name=name)
        return self._register(node, self._bound(p), [p], f"lsrl.ReLU({self._var(p)}, name={name!r})", open_)

    def _state_matrix(self, d):
        rng = self.rng
        if rng.random() < 0.2:
            return [[Fraction(int(i == j)) for j in range(d)] for i in range(d)]
        A = [[Fraction(0)] * d for _ in range(d)]
        for i in range(d):
            for c in rng.sample(range(d), rng.randint(0, min(2, d))):
                A[i][c] = rng.choice([1, -1]) * rng.choice(_STATE_WEIGHTS)
            while sum(abs(v) for v in A[i]) > 1:  # infinity norm <= 1: no blow-up
                A[i] = [v / 2 for v in A[i]]
        return A

    def linstate(self, p, d=None, limit=LIMIT, open_=True, relu=False):
        """A LinState reading ``p`` (a ReLUState with ``relu``: its initial state made non-negative;
        the LinState's bound on ``|s|`` holds for it, since ``|ReLU(y)| <= |y|``)."""
        rng = self.rng
        d = d if d is not None else rng.randint(1, 4)
        A = self._state_matrix(d)
        B = self._matrix(d, p.dim, self._density())
        b = self._vector(d) if rng.random() < 0.4 else None
        init = [Fraction(rng.randint(-3, 3), rng.randint(1, 3)) for _ in range(d)] if rng.random() < 0.4 else None
        if relu and init is not None:
            init = [abs(v) for v in init]
        drive = _abs_matvec(B, self._bound(p))
        if b is not None:
            drive = [x + abs(float(y)) for x, y in zip(drive, b)]
        s0 = [abs(float(v)) for v in init] if init is not None else [0.0] * d

        def bound(f):
            s, mx = list(s0), list(s0)
            for _ in range(T_MAX):
                s = [x + float(f) * y for x, y in zip(_abs_matvec(A, s), drive)]
                mx = [max(u, v) for u, v in zip(mx, s)]
            return mx

        f = self._scale_to(bound, limit)
        B = [[v * f for v in row] for row in B]
        b = [v * f for v in b] if b is not None else None
        Av, As = self._fmt_matrix(A)
        Bv, Bs = self._fmt_matrix(B)
        kw, ks = {}, ""
        if b is not None:
            kw["b"], s = self._fmt_vector(b)
            ks += f", b={s}"
        if init is not None:
            kw["init_state"], s = self._fmt_vector(init)
            ks += f", init_state={s}"
        name = self._name()
        kind = lsrl.ReLUState if relu else lsrl.LinState
        node = kind(p, Av, Bv, name=name, **kw)
        return self._register(node, bound(f), [p],
                              f"lsrl.{kind.__name__}({self._var(p)}, {As}, {Bs}{ks}, name={name!r})", open_)

    def multi(self, p, open_=True):
        assert p.dim % 2 == 0 and max(self._bound(p)) <= MULTI_LIMIT
        name = self._name()
        node = lsrl.Multi(p, name=name)
        bp = self._bound(p)
        h = p.dim // 2
        return self._register(node, [bp[i] * bp[i + h] for i in range(h)], [p],
                              f"lsrl.Multi({self._var(p)}, name={name!r})", open_)

    def concat(self, parts, open_=True, name=None):
        name = name if name is not None else self._name()
        node = lsrl.Concat(list(parts), name=name)
        bound = [b for q in parts for b in self._bound(q)]
        return self._register(node, bound, list(parts),
                              f"lsrl.Concat([{', '.join(self._var(q) for q in parts)}], name={name!r})", open_)

    def sugar(self, p, open_=True, unary=False):
        """Operator sugar. ``unary``: only ops whose single input is p (x + y may hide a Concat)."""
        rng = self.rng
        bp = self._bound(p)
        big = max(bp) > LIMIT / 4
        ops = ["div", "neg"] + ([] if big else ["add_const", "mul"])
        if not unary:
            ops += ["sub"] + ([] if big else ["add"])
        op = rng.choice(ops)
        v = self._var(p)
        if op in ("add", "sub"):
            same = [q for q in self.pool if q.dim == p.dim and max(self._bound(q)) <= LIMIT / 4]
            q = rng.choice(same) if same and rng.random() < 0.85 else p
            if max(self._bound(q)) > LIMIT / 4:
                q = p
            bq = self._bound(q)
            node = p + q if op == "add" else p - q
            return self._register(node, [x + y for x, y in zip(bp, bq)], [p, q],
                                  f"{v} {'+' if op == 'add' else '-'} {self._var(q)}", open_)
        if op == "add_const":
            return self._register(p + 1, [x + 1 for x in bp], [p], f"{v} + 1", open_)
        if op == "mul":
            return self._register(2 * p, [2 * x for x in bp], [p], f"2 * {v}", open_)
        if op == "div":
            return self._register(p / 3, [x / 3 for x in bp], [p], f"{v} / 3", open_)
        return self._register(-p, list(bp), [p], f"-{v}", open_)

    def shrink(self, p, limit, open_=True):
        """p / 2**k (sugar) so that the result is below ``limit``."""
        k = 0
        while max(self._bound(p)) / 2 ** k > limit:
            k += 1
        if k == 0:
            return p
        return self._register(p / (2 ** k), [x / 2 ** k for x in self._bound(p)], [p],
                              f"{self._var(p)} / {2 ** k}", open_)

    def multi_behind_slice(self, p, open_=True):
        """Multi(p[a:a+2k]) -- or Multi(Concat([p, p])) (a square) for a 1-d p."""
        if p.dim >= 2 and self.rng.random() < 0.85:
            L = 2 * self.rng.randint(1, p.dim // 2)
            s = self.slice_(p, length=L, open_=False)
        else:
            s = self.concat([p, p], open_=False)
        s = self.shrink(s, MULTI_LIMIT, open_=False)
        return self.multi(s, open_)

    def other_user(self, p):
        """One more user of ``p`` of a random kind: a Lin, a Slice, a ReLU or a Concat."""
        kind = self.rng.choice(["linear", "slice", "relu", "concat"])
        if kind == "linear":
            self._lin_user(p)
        elif kind == "slice":
            self.slice_(p)
        elif kind == "relu":
            self.relu(p)
        else:
            self.other_concat(p)

    def other_concat(self, p, open_=True, extra_max=2):
        """Concat that has p as one input, plus others from the pool (maybe p twice, maybe a Concat)."""
        parts = [p]
        dim = p.dim
        for _ in range(self.rng.randint(1, extra_max)):
            if self.rng.random() < 0.15 and dim + p.dim <= MAX_CONCAT_DIM:
                q = p
            else:
                q = self._pick(lambda n, dim=dim: n.dim + dim <= MAX_CONCAT_DIM and n is not p)
                if q is None:
                    break
            parts.append(q)
            dim += q.dim
        if len(parts) == 1:
            parts.append(p)  # Concat([p, p])
        self.rng.shuffle(parts)
        return self.concat(parts, open_)

    # ------------------------------------------------------------------ moves
    def chain_move(self):
        rng = self.rng
        p = self._pick()
        op = rng.choice([
            "linear", "linear", "selection", "slice", "sugar", "sugar", "relu", "linstate", "linstate",
            "multi", "multi", "concat", "concat_nested", "fuse_ll", "fuse_rr", "fuse_ls", "concat_same",
        ])
        if op == "linear":
            self.linear(p)
        elif op == "selection":
            self.selection(p)
        elif op == "slice":
            self.slice_(p)
        elif op == "sugar":
            self.sugar(p)
        elif op == "relu":
            self.relu(p)
        elif op == "linstate":
            self.linstate(p)
        elif op == "multi":
            self.multi_behind_slice(p)
        elif op == "concat":
            self.other_concat(p)
        elif op == "concat_nested":
            c1 = self.other_concat(p, open_=False, extra_max=1)
            q = self._pick(lambda n: n.dim + c1.dim <= 2 * MAX_CONCAT_DIM and n is not c1)
            parts = [c1, q] if q is not None else [c1, p]
            rng.shuffle(parts)
            self.concat(parts)
        elif op == "fuse_ll":   # Lin followed by a single Lin
            self.linear(self.linear(p, open_=False))
        elif op == "fuse_rr":   # ReLU followed by ReLU
            self.relu(self.relu(p, open_=False))
        elif op == "fuse_ls":   # Lin followed by LinState
            self.linstate(self.linear(p, open_=False))
        elif op == "concat_same":  # Concat of identical inputs
            k = 2 if p.dim * 3 > MAX_CONCAT_DIM else rng.randint(2, 3)
            self.concat([p] * k)

    def fresh_base(self, even=False, limit=LIMIT, min_dim=1):
        """A new branching node with no users yet (kept out of the pool)."""
        rng = self.rng

        def ok_dim(d):
            return d >= min_dim and (not even or d % 2 == 0)

        def ok(n):
            return ok_dim(n.dim) and max(self._bound(n)) <= limit

        kind = rng.choice(["linear", "linear", "relu", "linstate", "slice", "concat", "input"])
        if self.info[id(self.x)].users == 0 and rng.random() < 0.5:
            # The Input (or a Lin that is its only user) as branching node: it is the first branching
            # point, so the pattern reaches the debranching walk untouched by earlier rewrites.
            self._close(self.x)
            if ok(self.x):
                return self.x
            out = rng.choice([2, 4]) if even else rng.randint(max(1, min_dim), 4)
            return self.linear(self.x, out=out, limit=limit, open_=False)
        if kind == "input" and self.info[id(self.x)].users == 0 and ok(self.x):
            self._close(self.x)
            return self.x
        if kind == "relu":
            q = self._pick(ok)
            if q is not None:
                return self.relu(q, open_=False)
        if kind == "linstate":
            q = self._pick()
            d = rng.choice([2, 4]) if even else rng.randint(max(1, min_dim), 4)
            return self.linstate(q, d=d, limit=limit, open_=False)
        if kind == "slice":
            q = self._pick(lambda n: n.dim >= min_dim + 1 and max(self._bound(n)) <= limit)
            if q is not None:
                lengths = [L for L in range(min_dim, q.dim + 1) if ok_dim(L)]
                if lengths:
                    return self.slice_(q, length=rng.choice(lengths), open_=False)
        if kind == "concat":
            q = self._pick(lambda n: max(self._bound(n)) <= limit)
            r = self._pick(lambda n: max(self._bound(n)) <= limit and n.dim + (q.dim if q else 0) <= MAX_CONCAT_DIM)
            if q is not None and r is not None and ok_dim(q.dim + r.dim):
                return self.concat([q, r], open_=False)
        q = self._pick()
        out = rng.choice([2, 4]) if even else rng.randint(max(1, min_dim), 4)
        return self.linear(q, out=out, limit=limit, open_=False)

    def _lin_user(self, p, open_=True):
        r = self.rng.random()
        if r < 0.6:
            return self.linear(p, open_=open_)
        if r < 0.8:
            return self.sugar(p, open_=open_, unary=True)
        return self.selection(p, open_=open_)

    def _any_user(self, p, allow_multi=False):
        kinds = ["linear", "slice", "relu", "linstate", "concat"] + (["multi"] if allow_multi else [])
        kind = self.rng.choice(kinds)
        if kind == "linear":
            return self._lin_user(p)
        if kind == "slice":
            return self.slice_(p)
        if kind == "relu":
            return self.relu(p)
        if kind == "linstate":
            return self.linstate(p)
        if kind == "concat":
            return self.other_concat(p)
        return self.multi(p)

    def _follow_slice(self, s):
        """Give a slice a follower of a random kind (Case 5A pushes slices into their users)."""
        kind = self.rng.choice(["linear", "linstate", "relu", "concat", "multi", "none"])
        if kind == "multi" and not (s.dim % 2 == 0 and max(self._bound(s)) <= MULTI_LIMIT):
            kind = "linear"
        if kind == "none":
            return
        self._close(s)
        if kind == "linear":
            self.linear(s)
        elif kind == "linstate":
            self.linstate(s)
        elif kind == "relu":
            self.relu(s)
        elif kind == "concat":
            self.other_concat(s)
        else:
            self.multi(s)

    def pattern_move(self, pattern):
        rng = self.rng
        self.patterns.append(pattern)
        self.lines.append(f"# --- pattern {pattern}")
        if pattern in ("multi_only", "multi_mix"):
            p = self.fresh_base(even=True, limit=MULTI_LIMIT)
        elif pattern == "slices_only":
            p = self.fresh_base(min_dim=2)
        else:
            p = self.fresh_base()
        if pattern == "multi_only":
            for _ in range(rng.randint(2, 3)):
                self.multi(p)
        elif pattern == "multi_mix":
            for _ in range(rng.randint(1, 2)):
                self.multi(p)
            for _ in range(rng.randint(1, 3)):
                self._any_user(p)
        elif pattern == "linstate_only":
            for _ in range(rng.randint(2, 3)):
                self.linstate(p)
        elif pattern == "linstate_mix":
            for _ in range(rng.randint(1, 2)):
                self.linstate(p)
            for _ in range(rng.randint(1, 3)):
                self.other_user(p)
        elif pattern == "relu_only":
            for _ in range(rng.randint(2, 3)):
                self.relu(p)
        elif pattern == "concat_only" and rng.random() < 0.5:
            # Concats over duplicate users (ReLUs / Multis of p): once Case 3 / 1A merges the
            # duplicates, the survivor's users are Concats that read only it (Case 4), some nested.
            if p.dim % 2 == 0 and max(self._bound(p)) <= MULTI_LIMIT and rng.random() < 0.5:
                dups = [self.multi(p, open_=False) for _ in range(rng.randint(2, 3))]
            else:
                dups = [self.relu(p, open_=False) for _ in range(rng.randint(2, 3))]
            inner = self.concat(dups[:2], open_=rng.random() < 0.3)
            if rng.random() < 0.6:
                self.concat([inner] + dups[1:] if rng.random() < 0.5 else dups[::-1] + [inner])
            else:
                for d in dups[2:]:
                    self.concat([d, d])
        elif pattern == "concat_only":
            first = self.other_concat(p)
            for _ in range(rng.randint(1, 2)):
                if rng.random() < 0.4 and first.dim + p.dim <= 2 * MAX_CONCAT_DIM:
                    parts = [first, p]          # a Concat that depends on another Concat *and* on p
                    rng.shuffle(parts)
                    self.concat(parts)
                else:
                    self.other_concat(p)
        elif pattern == "slices_only":
            for _ in range(rng.randint(2, 4)):
                s = self.slice_(p) if rng.random() < 0.8 else self.selection(p)
                self._follow_slice(s)
        elif pattern == "lins":
            for _ in range(rng.randint(2, 3)):
                self.linear(p)
            for _ in range(rng.randint(0, 2)):
                self.slice_(p)
        elif pattern == "lin_relu_7a":
            for _ in range(rng.randint(1, 2)):
                self.relu(p)
            for _ in range(rng.randint(1, 2)):
                lin = self._lin_user(p, open_=False)   # its only user is the ReLU below
                self.relu(lin)
        elif pattern == "lin_relu_7b":
            for _ in range(rng.randint(1, 2)):
                self.relu(p)
            for _ in range(rng.randint(1, 2)):
                lin = self._lin_user(p, open_=False)
                r = rng.random()
                if r < 0.4:
                    self.linear(lin)                  # followed by a Lin
                elif r < 0.7:
                    self.relu(lin)
                    self._any_user(lin)               # a ReLU and something else
                else:
                    self.pool.append(lin)             # left open (maybe an output)
        elif pattern == "lin_concat":
            for _ in range(rng.randint(1, 2)):
                self._lin_user(p) if rng.random() < 0.6 else self.slice_(p)
            for _ in range(rng.randint(1, 2)):
                self.other_concat(p)
        elif pattern == "relu_concat":
            for _ in range(rng.randint(1, 2)):
                self.relu(p)
            for _ in range(rng.randint(1, 2)):
                self.other_concat(p)
        elif pattern == "lin_relu_concat":
            for _ in range(rng.randint(1, 2)):
                self._lin_user(p) if rng.random() < 0.6 else self.slice_(p)
            for _ in range(rng.randint(1, 2)):
                self.relu(p)
            for _ in range(rng.randint(1, 2)):
                self.other_concat(p)
        else:  # pragma: no cover
            raise AssertionError(pattern)
        self.lines.append("# ---")

    # ------------------------------------------------------------------ whole program
    def build(self):
        rng = self.rng
        self.d_in = rng.randint(1, 3)
        self.x = lsrl.Input(self.d_in, name="x")
        self._register(self.x, [X_BOUND] * self.d_in, [], f"lsrl.Input({self.d_in}, name='x')")
        target = rng.randint(4, 25)
        first = True
        while self.count < target:
            if (first and rng.random() < 0.85) or (not first and rng.random() < 0.35):
                self.pattern_move(rng.choice(self.pattern_choices))
            else:
                self.chain_move()
            first = False
        sinks = [n for n in self.order if self.info[id(n)].users == 0]
        if rng.random() < 0.4:
            # the output Concat also reads inner nodes (the Input, branching nodes) directly
            inner_nodes = [n for n in self.order if self.info[id(n)].users > 0]
            for _ in range(rng.randint(1, 2)):
                sinks.insert(rng.randint(0, len(sinks)), rng.choice(inner_nodes))
        if len(sinks) == 1:
            out = sinks[0]
        else:
            if len(sinks) >= 4 and rng.random() < 0.3:
                k = rng.randint(2, len(sinks) - 2)
                inner = self.concat(sinks[:k], open_=False)
                out = self.concat([inner] + sinks[k:], open_=False, name="out")
            else:
                out = self.concat(sinks, open_=False, name="out")
        if rng.random() < 0.25 or isinstance(out, lsrl.Input):
            out = self.linear(out, out=out.dim, open_=False, density=0.5)
        self.output = out
        self.lines.append(f"prog = lsrl.ForEach({self._var(out)})")
        self.program = lsrl.ForEach(out)
        return self

    def source_code(self):
        head = ["import numpy as np", "import scipy.sparse", "from fractions import Fraction", "import lsrl", ""]
        return "\n".join(head + self.lines)


def _src(obj):
    """Short Python source for nested lists of Fractions."""
    if isinstance(obj, list):
        return "[" + ", ".join(_src(v) for v in obj) + "]"
    v = Fraction(obj)
    if v.denominator == 1:
        return str(v.numerator)
    return f"Fraction({v.numerator}, {v.denominator})"


def generate_program(rng: random.Random, mixed_formats: bool = False) -> ProgramGenerator:
    """A random LSRL program; a pure function of ``rng``'s state. Returns the generator
    (``.program``, ``.d_in``, ``.patterns``, ``.source_code()``)."""
    return ProgramGenerator(rng, mixed_formats).build()


# ---------------------------------------------------------------------- inputs and comparison
def compile_verified(program, backend):
    """``lsrl.compile(program, backend)`` with ``Graph.verify()`` after every stage (to_graph and
    each of ``PASSES``): a broken invariant fails the seed at the stage that broke it."""
    return to_layers(run_passes(to_graph(program, backend), verify=True))


def _random_sequence(rng, T, d, use_ints):
    seq = []
    for _ in range(T):
        row = []
        for _ in range(d):
            v = Fraction(rng.randint(-X_NUM, X_NUM), rng.randint(1, 3))
            row.append(int(v) if use_ints and v.denominator == 1 else v)
        seq.append(row)
    return seq


def _as_object_array(seq):
    arr = np.empty((len(seq), len(seq[0])), dtype=object)
    for t, row in enumerate(seq):
        for j, v in enumerate(row):
            arr[t, j] = v
    return arr


def _exact(arr):
    a = np.asarray(arr, dtype=object)
    return a.shape, [Fraction(str(v)) for v in a.ravel()]


def _assert_exact_equal(got, ref, what, seed):
    gs, gv = _exact(got)
    rs, rv = _exact(ref)
    assert gs == rs, f"seed {seed}: {what}: shape {gs} != reference shape {rs}"
    if gv != rv:
        idx = next(i for i, (a, b) in enumerate(zip(gv, rv)) if a != b)
        pos = np.unravel_index(idx, rs)
        bad = sum(a != b for a, b in zip(gv, rv))
        raise AssertionError(
            f"seed {seed}: {what}: {bad}/{len(rv)} entries differ; first at {tuple(int(i) for i in pos)}: "
            f"got {gv[idx]} expected {rv[idx]}")


def _inputs_for(seed, d_in):
    rng = random.Random(1_000_003 * seed + 17)
    use_ints = seed % 2 == 1
    T1, T2 = rng.randint(1, T_MAX), rng.randint(1, T_MAX)
    return _random_sequence(rng, T1, d_in, use_ints), _random_sequence(rng, T2, d_in, use_ints)


@functools.lru_cache(maxsize=None)
def _generated(seed):
    return generate_program(random.Random(seed), mixed_formats=(seed % 5 == 0))


def _reference_outputs(prog, seqs):
    a, b = seqs
    T = min(len(a), len(b))
    batch = np.array([_as_object_array(a[:T]), _as_object_array(b[:T])], dtype=object)
    return {
        "single0": prog(_as_object_array(a), exact=True),
        "single1": prog(_as_object_array(b), exact=True),
        "batch": prog(batch, exact=True),
    }


@functools.lru_cache(maxsize=None)
def _compiled_exact(seed):
    """(generator, model, reference outputs computed *before* compiling)."""
    gen = _generated(seed)
    ref = _reference_outputs(gen.program, _inputs_for(seed, gen.d_in))
    return gen, compile_verified(gen.program, backend="exact"), ref


@functools.lru_cache(maxsize=None)
def _compiled_float(seed):
    gen = _generated(seed)
    return gen, compile_verified(gen.program, backend="float")


def _check_path_graph(model, d_in, d_out, seed):
    allowed = (lsrl.Linear, lsrl.ReLU, lsrl.LinState, lsrl.Multi, lsrl.ReLUState)
    layers = list(model.layers)
    assert layers, f"seed {seed}: compiled model has no layers"
    for i, layer in enumerate(layers):
        assert isinstance(layer, allowed) and not isinstance(layer, lsrl.Concat), \
            f"seed {seed}: layer {i} is a {type(layer).__name__}"
        assert len(layer.inputs) == 1, f"seed {seed}: layer {i} has {len(layer.inputs)} inputs"
        if i == 0:
            assert isinstance(layer.inputs[0], lsrl.Input), f"seed {seed}: first layer does not read the Input"
            assert layer.inputs[0].dim == d_in
        else:
            assert layer.inputs[0] is layers[i - 1], f"seed {seed}: layer {i} does not read layer {i - 1}"
        if isinstance(layer, lsrl.Multi):
            assert 2 * layer.dim == layer.inputs[0].dim, f"seed {seed}: Multi layer {i} has wrong dim"
        if isinstance(layer, lsrl.ReLU):
            assert layer.dim == layer.inputs[0].dim, f"seed {seed}: ReLU layer {i} has wrong dim"
    assert layers[-1].dim == d_out, f"seed {seed}: last layer dim {layers[-1].dim} != output dim {d_out}"


# ---------------------------------------------------------------------- tests
def test_generator_is_deterministic():
    for seed in (0, 1, 7, 123):
        a = generate_program(random.Random(seed), mixed_formats=True).source_code()
        b = generate_program(random.Random(seed), mixed_formats=True).source_code()
        assert a == b


@pytest.mark.slow
def test_generator_uses_every_node_type_and_pattern():
    kinds = set()
    patterns = set()
    for seed in range(N_SEEDS):
        gen = _generated(seed)
        patterns.update(gen.patterns)
        for cls in (lsrl.Input, lsrl.Linear, lsrl.ReLU, lsrl.LinState, lsrl.Concat, lsrl.Multi):
            if any(isinstance(n, cls) for n in gen.order):
                kinds.add(cls.__name__)
        assert 4 <= gen.count <= 60, (seed, gen.count)
    assert kinds == {"Input", "Linear", "ReLU", "LinState", "Concat", "Multi"}
    assert patterns == set(PATTERNS)


@pytest.mark.parametrize("seed", range(N_SEEDS))
def test_random_program_exact(seed):
    gen, model, ref = _compiled_exact(seed)
    prog = gen.program
    seq_a, seq_b = _inputs_for(seed, gen.d_in)
    T = min(len(seq_a), len(seq_b))
    d_out = gen.output.dim

    # compile did not change what the program computes
    again = _reference_outputs(prog, (seq_a, seq_b))
    for key in ref:
        _assert_exact_equal(again[key], ref[key], f"program output after compile ({key})", seed)

    _check_path_graph(model, gen.d_in, d_out, seed)

    single = []
    for k, seq in enumerate((seq_a, seq_b)):
        got = model(_as_object_array(seq), exact=True)
        assert np.asarray(got).shape == (len(seq), d_out)
        _assert_exact_equal(got, ref[f"single{k}"], f"single sequence {k} (T={len(seq)})", seed)
        single.append(got)

    batch = np.array([_as_object_array(seq_a[:T]), _as_object_array(seq_b[:T])], dtype=object)
    got = model(batch, exact=True)
    assert np.asarray(got).shape == (2, T, d_out)
    _assert_exact_equal(got, ref["batch"], f"batch (B=2, T={T})", seed)
    # batch rows are the single runs' prefixes (causality, batch independence)
    for k in range(2):
        _assert_exact_equal(np.asarray(got, dtype=object)[k], np.asarray(single[k], dtype=object)[:T],
                            f"batch row {k} vs single run prefix", seed)


@pytest.mark.parametrize("seed", FLOAT_SEEDS)
def test_random_program_float(seed):
    gen, model = _compiled_float(seed)
    prog = gen.program
    _check_path_graph(model, gen.d_in, gen.output.dim, seed)
    seq_a, seq_b = _inputs_for(seed, gen.d_in)
    T = min(len(seq_a), len(seq_b))
    exact_refs = _reference_outputs(prog, (seq_a, seq_b))
    runs = [
        (np.array(seq_a, dtype=np.float64), exact_refs["single0"]),
        (np.array(seq_b, dtype=np.float64), exact_refs["single1"]),
        (np.array([seq_a[:T], seq_b[:T]], dtype=np.float64), exact_refs["batch"]),
    ]
    for xs, exact_ref in runs:
        ref = np.asarray(prog(xs))
        got = np.asarray(model(xs))
        assert ref.dtype == np.float64 and got.dtype == np.float64
        assert got.shape == ref.shape == xs.shape[:-1] + (gen.output.dim,)
        assert np.all(np.isfinite(ref))
        err = np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref)))
        assert err <= 1e-9, f"seed {seed}: compiled float model deviates by {err:.3g} (shape {xs.shape})"
        # the float interpreter agrees with the exact interpreter
        exact = np.array([float(Fraction(str(v))) for v in np.asarray(exact_ref, dtype=object).ravel()]
                         ).reshape(ref.shape)
        err = np.max(np.abs(exact - ref) / np.maximum(1.0, np.abs(exact)))
        assert err <= 1e-9, f"seed {seed}: float interpreter deviates from exact by {err:.3g}"


# ---------------------------------------------------------------------- small hand-written programs
def _lin(x, rows):
    return lsrl.Linear(x, rows)


def _cols(d, k=1):
    return [[Fraction(j + 1, i + 1) * (-1) ** j for j in range(d)] for i in range(k)]


# (label, input dim, builder): shapes the random generator may reach only rarely.
SMALL_PROGRAMS = [
    ("concat_lin_x", 2, lambda x: lsrl.Concat([_lin(x, _cols(2)), x])),
    ("concat_x_lin", 3, lambda x: lsrl.Concat([x, _lin(x, _cols(3, 2))])),
    ("concat_lin_lin_x", 2, lambda x: lsrl.Concat([_lin(x, _cols(2)), _lin(x, [[3, 1]]), x])),
    ("concat_scaled_pick_x", 2, lambda x: lsrl.Concat([_lin(x, [[2, 0]]), x])),
    ("concat_relu_x", 3, lambda x: lsrl.Concat([lsrl.ReLU(x), x])),
    ("concat_x_relu", 3, lambda x: lsrl.Concat([x, lsrl.ReLU(x)])),
    ("concat_relu_relu_x", 2, lambda x: lsrl.Concat([lsrl.ReLU(x), lsrl.ReLU(x), x])),
    ("concat_multi_x", 2, lambda x: lsrl.Concat([lsrl.Multi(x), x])),
    ("concat_x_multi_multi", 2, lambda x: lsrl.Concat([x, lsrl.Multi(x), lsrl.Multi(x)])),
    ("concat_state_x", 2, lambda x: lsrl.Concat([lsrl.LinState(x, [[1]], [[1, -1]]), x])),
    ("concat_lin_relu_x", 2, lambda x: lsrl.Concat([_lin(x, _cols(2)), x, lsrl.ReLU(x)])),
    ("relu_of_concat_lin_x", 2, lambda x: lsrl.ReLU(lsrl.Concat([_lin(x, _cols(2)), x]))),
    ("lin_of_concat_lin_x", 2, lambda x: _lin(lsrl.Concat([_lin(x, _cols(2)), x]), [[1, 1, 1]])),
    ("concat_slices", 3, lambda x: lsrl.Concat([x[2], x[0:2], x[1:3], x])),
    ("concat_single", 2, lambda x: lsrl.Concat([x])),
    ("relu_relu_branch", 2, lambda x: (lambda r: lsrl.Concat([lsrl.ReLU(r), r, _lin(r, [[1, 1]])]))(lsrl.ReLU(x))),
    ("state_of_state", 2, lambda x: (lambda s: lsrl.Concat([lsrl.LinState(s, [[1]], [[1, 1]]), s]))(
        lsrl.LinState(x, [[1, 0], [0, Fraction(1, 2)]], [[1, 0], [0, 1]], init_state=[1, 0]))),
    ("multi_of_state_and_x", 1, lambda x: lsrl.Multi(lsrl.Concat([lsrl.LinState(x, [[1]], [[1]]), x]))),
    ("sugar_mix", 2, lambda x: lsrl.Concat([2 * x - 1, x / 3, -x, x + x, x[1], x[0:1] + 1])),
    ("input_is_output", 2, lambda x: x),
    # a Lin that reads nothing of a ReLU / programs whose output is identically zero
    ("lin_reads_nothing_after_relu", 1, lambda x: lsrl.Linear(lsrl.ReLU(x), [[0], [0]], b=[-4, Fraction(-1, 2)])),
    ("zero_lin_after_relu", 2, lambda x: lsrl.Linear(lsrl.ReLU(x), [[0, 0]])),
    ("relu_minus_relu", 2, lambda x: lsrl.ReLU(x) - lsrl.ReLU(x)),
    ("concat_minus_itself", 2, lambda x: (lambda c: c - c)(lsrl.Concat([x, lsrl.ReLU(x)]))),
    ("x_minus_x", 2, lambda x: x - x),
    # slices of a Concat of duplicate ReLUs
    ("input_free_state_after_relu", 3,
     lambda x: lsrl.LinState(lsrl.ReLU(x), [[0]], [[0, 0, 0]], b=[Fraction(1, 3)])),
    ("zero_lin_after_multi", 2, lambda x: lsrl.Linear(lsrl.Multi(x), [[0], [0], [0]])),
    ("slice_of_concat_of_dup_relus", 2, lambda x: lsrl.Concat([lsrl.ReLU(x), lsrl.ReLU(x)])[3:4]),
    ("index_of_concat_of_dup_relus", 2, lambda x: lsrl.Concat([lsrl.ReLU(x), lsrl.ReLU(x)])[1]),
    # a LinState that ignores its input (B = 0), read through slices and ReLUs
    ("input_free_state_sliced", 2, lambda x: (lambda s: lsrl.Concat([lsrl.ReLU(s[2:3]), lsrl.ReLU(s[0:1])]))(
        lsrl.LinState(x, [[Fraction(-1, 2), 0, Fraction(-1, 6)], [0, Fraction(2, 3), 0], [0, Fraction(-1, 4), 0]],
                      [[0, 0], [0, 0], [0, 0]], b=[Fraction(1, 2), 0, Fraction(-1, 2)], init_state=[0, -1, -1]))),
]


@pytest.mark.parametrize("label,d_in,build", SMALL_PROGRAMS, ids=[p[0] for p in SMALL_PROGRAMS])
def test_small_program(label, d_in, build):
    x = lsrl.Input(d_in, name="x")
    prog = lsrl.ForEach(build(x))
    seq = [[Fraction(t + j + 2, 3) * (-1) ** (t + j) for j in range(d_in)] for t in range(4)]
    xs = _as_object_array(seq)
    ref = prog(xs, exact=True)
    d_out = np.asarray(ref).shape[-1]
    model = compile_verified(prog, backend="exact")
    if model.layers:
        _check_path_graph(model, d_in, d_out, label)
    _assert_exact_equal(model(xs, exact=True), ref, "exact model", label)
    fmodel = compile_verified(prog, backend="float")
    xf = np.array(seq, dtype=np.float64)
    got, want = np.asarray(fmodel(xf)), np.asarray(prog(xf))
    assert got.shape == want.shape
    err = np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))
    assert err <= 1e-9, f"{label}: float model deviates by {err:.3g}"


def _compiled_seeds():
    """(seed, compiled) for every seed that compiles; a seed that does not is reported by
    test_random_program_exact, not again here."""
    out = []
    for seed in range(N_SEEDS):
        try:
            out.append((seed, _compiled_exact(seed)))
        except lsrl.LsrlError:
            pass
    assert len(out) >= 0.9 * N_SEEDS, f"only {len(out)} of {N_SEEDS} random programs compile"
    return out


def _total_stats():
    total = {}
    for _, (_, model, _) in _compiled_seeds():
        for rule, n in dict(model.stats).items():
            total[rule] = total.get(rule, 0) + int(n)
    return total


# Identical Multi users (Case 1A) and identical ReLU users (Case 3) are merged as common
# subexpressions while preparing, so on generated programs those two cases are done by that rule
# (their own unit tests are in test_compiler_stages.py).
DONE_BY_MERGE_DUPLICATES = {"case_1a", "case_3"}


@pytest.mark.slow
def test_every_debranching_case_fires():
    total = _total_stats()
    missing = [c for c in CASES if total.get(c, 0) < 1 and c not in DONE_BY_MERGE_DUPLICATES]
    assert total.get("merge_duplicates", 0) > 0 and total.get("wait_for_later_layer", 0) > 0
    assert not missing, f"cases never fired over {N_SEEDS} random programs: {missing}; totals: {total}"


def test_every_fusion_fires():
    total = _total_stats()
    missing = [c for c in FUSIONS if total.get(c, 0) < 1]
    assert not missing, f"fusions never fired over {N_SEEDS} random programs: {missing}; totals: {total}"


# ---------------------------------------------------------------------- programs with ReLUStates
# An extra generator (the one above is unchanged, so its seeds keep their programs): ReLUStates
# as chain moves, as users in the patterns, and three patterns of their own.
RELU_SEEDS = range(80)
RELU_FLOAT_SEEDS = range(25)
RELU_CASES = ["case_2r", "case_6r"]
RELU_FUSIONS = ["fuse_linear_relustate", "fuse_relustate_relu"]
RELU_PATTERNS = [
    "relustate_only",      # 2R
    "relustate_mix",       # 6R
    "relustate_linstate",  # 6 with ReLUState users, then 2
]


class ReLUStateProgramGenerator(ProgramGenerator):
    """``ProgramGenerator`` with ReLUStates: a third of the chain moves and of the patterns' users."""

    pattern_choices = PATTERNS + RELU_PATTERNS * 3

    def relustate(self, p, open_=True):
        return self.linstate(p, open_=open_, relu=True)

    def chain_move(self):
        rng = self.rng
        if rng.random() >= 0.35:
            return super().chain_move()
        p = self._pick()
        move = rng.choice(["relustate", "fuse_lr", "fuse_rs_relu"])
        if move == "relustate":
            self.relustate(p)
        elif move == "fuse_lr":  # Lin followed by a ReLUState
            self.relustate(self.linear(p, open_=False))
        else:  # ReLUState followed by a ReLU
            self.relu(self.relustate(p, open_=False))

    def _any_user(self, p, allow_multi=False):
        if self.rng.random() < 0.3:
            return self.relustate(p)
        return super()._any_user(p, allow_multi)

    def pattern_move(self, pattern):
        if pattern not in RELU_PATTERNS:
            return super().pattern_move(pattern)
        rng = self.rng
        self.patterns.append(pattern)
        self.lines.append(f"# --- pattern {pattern}")
        p = self.fresh_base()
        for _ in range(rng.randint(1, 2) if pattern != "relustate_only" else rng.randint(2, 3)):
            self.relustate(p)
        if pattern == "relustate_linstate":
            for _ in range(rng.randint(1, 2)):
                self.linstate(p)
        if pattern != "relustate_only":
            for _ in range(rng.randint(1, 2)):
                self.other_user(p)
        self.lines.append("# ---")


@functools.lru_cache(maxsize=None)
def _relu_generated(seed):
    return ReLUStateProgramGenerator(random.Random(seed), mixed_formats=(seed % 5 == 0)).build()


@functools.lru_cache(maxsize=None)
def _relu_compiled(seed):
    gen = _relu_generated(seed)
    ref = _reference_outputs(gen.program, _inputs_for(seed, gen.d_in))
    return gen, compile_verified(gen.program, backend="exact"), ref


@pytest.mark.slow
def test_relustate_generator_uses_relustates_and_its_patterns():
    patterns, with_states = set(), 0
    for seed in RELU_SEEDS:
        gen = _relu_generated(seed)
        patterns.update(gen.patterns)
        with_states += any(isinstance(n, lsrl.ReLUState) for n in gen.order)
    assert set(RELU_PATTERNS) <= patterns
    assert with_states >= 0.75 * len(RELU_SEEDS)


@pytest.mark.slow
@pytest.mark.parametrize("seed", RELU_SEEDS)
def test_random_relustate_program_exact(seed):
    gen, model, ref = _relu_compiled(seed)
    _check_path_graph(model, gen.d_in, gen.output.dim, seed)
    seq_a, seq_b = _inputs_for(seed, gen.d_in)
    T = min(len(seq_a), len(seq_b))
    for k, seq in enumerate((seq_a, seq_b)):
        _assert_exact_equal(model(_as_object_array(seq), exact=True), ref[f"single{k}"], f"single sequence {k}", seed)
    batch = np.array([_as_object_array(seq_a[:T]), _as_object_array(seq_b[:T])], dtype=object)
    _assert_exact_equal(model(batch, exact=True), ref["batch"], f"batch (B=2, T={T})", seed)


@pytest.mark.parametrize("seed", RELU_FLOAT_SEEDS)
def test_random_relustate_program_float_and_targets(seed):
    """The float runner and the four non-linear targets (float64) against the exact interpreter, to
    1e-9 relative (floored at 1)."""
    import torch

    gen, model, ref = _relu_compiled(seed)
    seq_a, seq_b = _inputs_for(seed, gen.d_in)
    T = min(len(seq_a), len(seq_b))
    xs = np.array([seq_a[:T], seq_b[:T]], dtype=np.float64)
    exact = np.array([float(Fraction(str(v))) for v in np.asarray(ref["batch"], dtype=object).ravel()]
                     ).reshape(xs.shape[:-1] + (gen.output.dim,))
    runs = {"float runner": model(xs)}
    has_multi = any(layer.kind == "Multi" for layer in model.layers)
    for arch in ("gated_rnn", "gru", "lstm") + (() if has_multi else ("rnn",)):
        runs[arch] = model.to_torch(arch)(torch.tensor(xs)).detach().numpy()
    for what, got in runs.items():
        err = np.max(np.abs(got - exact) / np.maximum(1.0, np.abs(exact)))
        assert err <= 1e-9, f"seed {seed}: {what} deviates by {err:.3g}"


def test_every_relustate_rule_fires():
    total = {}
    for seed in RELU_SEEDS:
        for rule, n in _relu_compiled(seed)[1].stats.items():
            total[rule] = total.get(rule, 0) + int(n)
    missing = [rule for rule in RELU_CASES + RELU_FUSIONS + ["case_6"] if total.get(rule, 0) < 1]
    assert not missing, f"never fired over {len(RELU_SEEDS)} random ReLUState programs: {missing}; totals: {total}"
