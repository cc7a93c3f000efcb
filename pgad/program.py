"""A loss and its gradient as one DAG, ready for a backend: the differentiation stage.

build() parses the lambda, differentiates it by forward or reverse mode into the same graph, and returns a
Program whose outputs are the loss and ∂loss/∂w for each weight, in the order of `weights`. Programs are cached
per backend process, up to CACHED_NODES nodes in all: a second call with the same lambda, weights and mode parses
and differentiates nothing. Parsed lambdas are cached too (parsed), and copied before differentiating into them.
"""
from dataclasses import dataclass

from . import lang
from .lang.parser import Lambda
from .limits import DEFAULT
from .memo import bounded_cache

CACHED_NODES = 250_000  # about 80 MB of programs in one backend, at most


@dataclass(frozen=True, eq=False)
class Program:
    lam: Lambda      # the parsed lambda; its graph also holds the derivative nodes
    outputs: tuple   # node ids: the loss of one row, then (with a gradient) its derivative by each weight
    weights: tuple   # the weights, in the order of the weight vector a kernel is given

    @property
    def graph(self):
        return self.lam.graph

    @property
    def columns(self):
        """The columns the lambda reads, in the order of the arrays a kernel is given."""
        return tuple(self.lam.columns)


@bounded_cache(CACHED_NODES, weight=lambda lam, args: len(lam.graph))
def parsed(text, limits=DEFAULT):
    """Lambda `text`, parsed once per backend process: a call checks its weights against it and build() copies it,
    so a 20,000-term lambda is parsed once, not once per stage. Read it; never add nodes to its graph."""
    return lang.parse(text, limits)


@bounded_cache(CACHED_NODES, weight=lambda program, args: len(program.graph))
def build(text, weights, mode='reverse', gradient=True, limits=DEFAULT):
    """The Program for lambda `text` with weight names `weights` (a tuple), by `mode` ('forward' or 'reverse')."""
    lam = parsed(text, limits).copy()
    grad = lang.gradient(lam, weights, mode) if gradient else {}
    return Program(lam, (lam.root, *(grad[w] for w in weights if gradient)), tuple(weights))
