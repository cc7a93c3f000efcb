"""pgad.init_weights: starting weights of given shapes, the same for the same shapes, scheme and seed.

The shapes jsonb maps each weight to its shape: [] a number, [n] (or n) a vector, [m, n] an m×n matrix
(m rows: the matrix of w.m @ x, x of length n). Matrices start at random, by scheme:
- 'glorot': uniform on ±sqrt(6 / (n + m)) (Glorot and Bengio, 2010), for tanh and sigmoid layers;
- 'he': normal with standard deviation sqrt(2 / n) (He et al., 2015), for relu layers;
- 'zeros': every weight 0.
Vectors and numbers (biases) start at 0 under every scheme. The random numbers come from numpy's PCG64 seeded with
seed, drawn weight after weight in the jsonb's order of keys.
"""
import json

import numpy as np

from .. import arguments, limits as bounds
from ..errors import PgadError

SCHEMES = {
    'glorot': lambda rng, m, n: rng.uniform(-np.sqrt(6 / (n + m)), np.sqrt(6 / (n + m)), (m, n)),
    'he': lambda rng, m, n: rng.normal(0.0, np.sqrt(2 / n), (m, n)),
    'zeros': lambda rng, m, n: np.zeros((m, n)),
}
HINT = 'Write the shapes as {"w1": [20, 4], "b1": [20], "c": []}: a matrix of 20 rows of 4, a vector of 20, a number.'


def weights(text, scheme, seed, limits=bounds.DEFAULT, memory_limit=None):
    """The weights jsonb (as text) of the shapes jsonb text; memory_limit (bytes, pgad.memory_limit) bounds what
    parsing it may cost (arguments.parsed)."""
    if scheme not in SCHEMES:
        *others, last = [f"'{s}'" for s in SCHEMES]
        raise PgadError('22023', f'unknown scheme "{scheme}"', hint=f'scheme is {", ".join(others)} or {last}.')
    if seed < 0:
        raise PgadError('22023', f'seed must be 0 or a positive integer, not {seed}')
    found = shapes(text, limits, memory_limit)
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in found.items():
        if len(shape) == 2:
            out[name] = SCHEMES[scheme](rng, *shape).tolist()
        else:
            out[name] = [0.0] * shape[0] if shape else 0.0
    return json.dumps(out)


def shapes(text, limits, memory_limit=None):
    """{name: shape tuple} of a shapes jsonb; at most pgad.max_lambda_nodes numbers in all (no lambda reads more)."""
    value = arguments.parsed(text, 'shapes', 'weight', memory_limit)
    if not isinstance(value, dict):
        raise PgadError('22023', 'shapes must be a JSON object', detail=f'The shapes are {text[:80]}.', hint=HINT)
    found, total = {}, 0
    for name, shape in value.items():
        shape = [shape] if isinstance(shape, int) and not isinstance(shape, bool) else shape
        if not (isinstance(shape, list) and len(shape) <= 2 and
                all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in shape)):
            raise PgadError('22023', f'the shape of weight "{name}" must be [], [n] or [m, n] with positive n and m, '
                                     f'not {json.dumps(shape)[:40]}', hint=HINT)
        found[name] = tuple(shape)
        total += int(np.prod(shape, dtype=object))
        if total > limits.lambda_nodes:
            raise bounds.too_large(f'the shapes hold more than {limits.lambda_nodes} numbers',
                                   'pgad.max_lambda_nodes', limits.lambda_nodes)
    return found
