"""A loss and its gradient as one DAG, ready for a backend: the differentiation stage.

build() parses the lambda, unrolls its vectors and matrices into scalars at the shapes it is given (vectors.py),
differentiates it by forward or reverse mode into the same graph, and returns a Program whose outputs are the loss
and ∂loss/∂w for each weight element, in the order of `weights` (each weight's elements row-major). Programs are cached
per backend process, up to CACHED_NODES nodes in all: a second call with the same lambda, weights and mode parses
and differentiates nothing. Parsed lambdas are cached too (parsed), and copied before differentiating into them.
"""
import math
from dataclasses import dataclass

import numpy as np

from . import lang
from .lang import vectors
from .lang.parser import Lambda
from .limits import DEFAULT
from .memo import bounded_cache

CACHED_NODES = 250_000  # about 80 MB of programs in one backend, at most



def spans(shapes):
    """((name, shape, its slice of the weight vector), …) of weights of these shapes ((name, shape), …), in order:
    the vector holds each weight's elements row-major, one weight after another."""
    out, at = [], 0
    for name, shape in shapes:
        size = int(np.prod(shape, dtype=np.int64))
        out.append((name, shape, slice(at, at + size)))
        at += size
    return out

@dataclass(frozen=True, eq=False)
class Program:
    lam: Lambda      # the parsed lambda; its graph also holds the derivative nodes
    outputs: tuple   # node ids: the loss of one row, then (with a gradient) its derivative by each weight
    weights: tuple   # the weights' elements, in the order of the weight vector a kernel is given
    shapes: tuple = ()  # each weight's (name, shape), in order: () a number, (n,) a vector, (m, n) a matrix
    tape: str = 'auto'      # the llvm kernel's tape: 'auto' (jit/tiers.py's form() decides), or a loop kernel's
    tensor: Lambda = None   # the lambda as parsed, vector operations and all, where a loop kernel may run it
    dims: vectors.Shapes = vectors.Shapes()  # the shapes it was unrolled at

    def nest(self, vector):
        """{weight: number, or nested lists row-major} of a vector in the order of weights: what a jsonb shows."""
        return {name: vector[at.start] if not shape else np.asarray(vector[at]).reshape(shape).tolist()
                for name, shape, at in spans(self.shapes)}

    @property
    def columns_of(self):
        """((element column 'pixels[3]', (column, 3)), …) for each element of each float8[] column."""
        return tuple((e, (c, k + 1)) for c, n in self.dims.columns for k, e in enumerate(vectors.elements(c, (n,))))

    @property
    def shaped(self):
        """Does a weight have a shape, or a column hold arrays?"""
        return bool(self.columns_of) or any(shape for _, shape in self.shapes)

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


def categorical_names(name, keys):
    """The names of a categorical weight's entries, one per category (keys, as the column's text): 'region[north]'."""
    return [f'{name}[{k}]' for k in keys]


TAPES = ('auto', 'store', 'recompute', 'reversible')


@bounded_cache(CACHED_NODES, weight=lambda program, args: len(program.graph))
def build(text, weights, mode='reverse', gradient=True, limits=DEFAULT, shapes=vectors.Shapes(), tape='auto'):
    """The Program for lambda `text` with weight names `weights` (a tuple), by `mode` ('forward' or 'reverse'),
    at `shapes` (a vectors.Shapes: those of the weights that are vectors or matrices, the lengths of float8[]
    columns), its llvm kernel by `tape`: 'auto' for the llvm backend to choose (jit/tiers.py's form()), or
    'store', 'recompute' or 'reversible', a loop kernel with that tape (reverse mode only)."""
    parsed_lam = lam = parsed(text, limits)
    weight_shape = dict(shapes.weights)
    shaped = tuple((w, tuple(weight_shape.get(w, ()))) for w in weights)
    if shapes or vectors.needed(lam):
        lam = vectors.unroll(lam, shapes, limits)
    else:
        lam = lam.copy()
    flat = tuple(e for w, shape in shaped for e in vectors.elements(w, shape))
    grad = lang.gradient(lam, flat, mode) if gradient else {}
    loops = tape != 'auto' or (mode == 'reverse' and (shapes or vectors.needed(parsed_lam)))
    return Program(lam, (lam.root, *(grad[w] for w in flat if gradient)), flat, shaped, tape,
                   parsed_lam if loops else None, shapes)


DIRECTION = '\x00d:'  # starts the names of a direction's components in build_hvp: no weight's name has it


@bounded_cache(CACHED_NODES, weight=lambda program, args: len(program.graph))
def build_hvp(text, weights, limits=DEFAULT, shapes=vectors.Shapes()):
    """The Program for lambda `text` whose outputs are the loss, its reverse-mode gradient in `weights` (as
    build()'s), then the Hessian in them times a direction: Σ_j ∂²loss/∂w_i∂w_j · v_j for each element w_i, v_j read
    as the weight DIRECTION + w_j (forward.directional over the gradient's nodes: a node an element, where the
    Hessian holds p(p+1)/2). Always the unrolled kernel."""
    lam = parsed(text, limits)
    weight_shape = dict(shapes.weights)
    shaped = tuple((w, tuple(weight_shape.get(w, ()))) for w in weights)
    flat = tuple(e for w, shape in shaped for e in vectors.elements(w, shape))
    lam = vectors.unroll(lam, shapes, limits) if shapes or vectors.needed(lam) else lam.copy()
    grad = lang.gradient(lam, flat, 'reverse')
    seeds = {e: lam.graph.weight(DIRECTION + e) for e in flat}
    product = lang.forward.directional(lam.graph, [grad[e] for e in flat], seeds)
    return Program(lam, (lam.root, *(grad[e] for e in flat), *(product[grad[e]] for e in flat)), flat, shaped,
                   'auto', None, shapes)


@bounded_cache(CACHED_NODES, weight=lambda program, args: len(program.graph))
def build_hessian(text, weights, limits=DEFAULT, shapes=vectors.Shapes()):
    """The Program for lambda `text` whose outputs are the loss, its reverse-mode gradient (as build()'s) and then
    the upper half of its Hessian, ∂²loss/∂w_i∂w_j for i ≤ j in the order of lang.hessian.upper: forward mode over
    the gradient's nodes (lang/hessian.py). Always the unrolled kernel (no loop kernel's tape)."""
    lam = parsed(text, limits)
    weight_shape = dict(shapes.weights)
    shaped = tuple((w, tuple(weight_shape.get(w, ()))) for w in weights)
    lang.hessian.check_size(sum(math.prod(shape) for _, shape in shaped))
    flat = tuple(e for w, shape in shaped for e in vectors.elements(w, shape))
    lam = vectors.unroll(lam, shapes, limits) if shapes or vectors.needed(lam) else lam.copy()
    grad = lang.gradient(lam, flat, 'reverse')
    second = lang.hessian.hessian(lam.graph, grad, flat)
    return Program(lam, (lam.root, *(grad[w] for w in flat), *second), flat, shaped, 'auto', None, shapes)
