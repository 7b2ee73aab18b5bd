"""Stage 2, debranching (App. A): ``cases`` holds the cases, each a named rewrite at a branching
op; ``walk`` decides where and in which order they apply, and why that ends."""

from lsrl.compiler.debranch.walk import debranch

__all__ = ["debranch"]
