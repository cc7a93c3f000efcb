"""Vectors and matrices in the lambda, in process (no database): every vector operation at random shapes, both modes,
every backend, against central finite differences and against PyTorch autograd in float64; the python backend
against the others; the parser's and printer's syntax (@, [a, b], v[i]); and the shape errors, with their place.

Adding a vector operation means a row in rules.OPERATIONS and a row in CASES (test_cases_cover_every_operation).
"""
import os

import numpy as np
import pytest
import torch

import pgad.lang  # noqa: F401  (binds pgad.lang)
from pgad import backends, program
from pgad.errors import PgadError
from pgad.limits import Limits
from pgad.lang import parse, parser, printer, rules, vectors

torch.set_default_dtype(torch.float64)
MODES = ('forward', 'reverse')
BACKENDS = ('python', 'llvm', 'cuda')
N = 30
_rng = np.random.default_rng(14)
K = int(_rng.integers(2, 6))   # a random hidden size, and a random array-column length, fixed by the seed
P = int(_rng.integers(3, 7))
DATA = {**{f'x{k}': _rng.uniform(-1, 1, N) for k in range(1, 5)},
        'label': _rng.integers(0, 3, N).astype(np.float64),
        'i': _rng.integers(0, 3, N).astype(np.float64),
        'pix': _rng.uniform(0, 1, (N, P))}
X3 = '[d.x1, d.x2, d.x3]'


def x(d, *names):
    """The rows' vector [d.x1, …] as torch, one row per data row."""
    return torch.stack([d[n] for n in names], 1)


def case(name, text, shapes, fn):
    """(name, lambda text, {weight: shape}, fn(d, w) → the loss per row, in torch)."""
    return pytest.param(text, shapes, fn, id=name)


def ce(z, d):
    return torch.logsumexp(z, 1) - z.gather(1, d['label'].long()[:, None])[:, 0]


MLP = f'(w.w2 @ relu(w.w1 @ {X3} + w.b1) + w.b2)'
CASES = [
    case('matrix-vector', f'λ(d, w) sum(tanh(w.m @ {X3} + w.b))', {'m': (K, 3), 'b': (K,)},
         lambda d, w: torch.tanh(x(d, 'x1', 'x2', 'x3') @ w['m'].T + w['b']).sum(1)),
    case('vector-matrix', 'λ(d, w) sum(([d.x1, d.x2] @ w.m)^2)', {'m': (2, K)},
         lambda d, w: ((x(d, 'x1', 'x2') @ w['m']) ** 2).sum(1)),
    case('matrix-matrix', 'λ(d, w) sum(w.a @ w.b @ [d.x1, d.x2] * d.x3)', {'a': (K, 3), 'b': (3, 2)},
         lambda d, w: (x(d, 'x1', 'x2') @ (w['a'] @ w['b']).T * d['x3'][:, None]).sum(1)),
    case('vector-vector', f'λ(d, w) (w.v @ {X3} - d.x4)^2', {'v': (3,)},
         lambda d, w: (x(d, 'x1', 'x2', 'x3') @ w['v'] - d['x4']) ** 2),
    case('dot', f'λ(d, w) dot(w.v, {X3}) * dot(w.v, w.v)', {'v': (3,)},
         lambda d, w: (x(d, 'x1', 'x2', 'x3') @ w['v']) * (w['v'] @ w['v'])),
    case('sum-of-matrix', 'λ(d, w) sum(w.m * d.x1)^2', {'m': (2, K)},
         lambda d, w: (w['m'].sum() * d['x1']) ** 2),
    case('softmax', f'λ(d, w) dot(softmax(w.m @ {X3}), [1, 2, 3, 4, 5][1:{K}])', {'m': (K, 3)}, None),
    case('logsumexp', 'λ(d, w) logsumexp(w.v * d.x1 + w.u)', {'v': (K,), 'u': (K,)},
         lambda d, w: torch.logsumexp(d['x1'][:, None] * w['v'] + w['u'], 1)),
    case('cross-entropy', f'λ(d, w) logsumexp({MLP}) - {MLP}[d.label + 1]',
         {'w1': (K, 3), 'b1': (K,), 'w2': (3, K), 'b2': (3,)},
         lambda d, w: ce(torch.relu(x(d, 'x1', 'x2', 'x3') @ w['w1'].T + w['b1']) @ w['w2'].T + w['b2'], d)),
    case('index', 'λ(d, w) w.m[2][1]*d.x1 + (w.v*d.x2)[K] + w.m[1][2]^2'.replace('K', str(K)),
         {'m': (2, 2), 'v': (K,)},
         lambda d, w: w['m'][1, 0] * d['x1'] + w['v'][K - 1] * d['x2'] + w['m'][0, 1] ** 2),
    case('index-of-row', 'λ(d, w) (softmax(w.v)[d.label + 1] - d.x1)^2', {'v': (3,)},
         lambda d, w: (torch.softmax(w['v'], 0)[d['label'].long()] - d['x1']) ** 2),
    case('stack-of-vectors', f'λ(d, w) sum(exp([w.u, w.v, w.u * w.v] @ {X3}))', {'u': (3,), 'v': (3,)},
         lambda d, w: torch.exp(x(d, 'x1', 'x2', 'x3') @ torch.stack([w['u'], w['v'], w['u'] * w['v']]).T).sum(1)),
    case('elementwise', f'λ(d, w) sum(sigmoid(w.v) * softplus({X3}) / (1 + w.v^2) - 0.5 * sin(w.v) + sqrt(2 + w.v))',
         {'v': (3,)},
         lambda d, w: (torch.sigmoid(w['v']) * torch.nn.functional.softplus(x(d, 'x1', 'x2', 'x3')) / (1 + w['v'] ** 2)
                       - 0.5 * torch.sin(w['v']) + torch.sqrt(2 + w['v'])).sum(1)),
    case('case-elementwise', f'λ(d, w) sum(CASE WHEN w.v > 0 THEN w.v ELSE 0.1 * w.v END * {X3})', {'v': (3,)},
         lambda d, w: (torch.where(w['v'] > 0, w['v'], 0.1 * w['v']) * x(d, 'x1', 'x2', 'x3')).sum(1)),
    case('transpose', 'λ(d, w) sum(tanh(transpose(w.m) @ [d.x1, d.x2]))', {'m': (2, K)},
         lambda d, w: torch.tanh(x(d, 'x1', 'x2') @ w['m']).sum(1)),
    case('outer', 'λ(d, w) sum(outer(w.v, [d.x1, d.x2]) * w.m)', {'v': (K,), 'm': (K, 2)},
         lambda d, w: (w['v'][None, :, None] * x(d, 'x1', 'x2')[:, None, :] * w['m']).sum((1, 2))),
    case('broadcast-weight', 'λ(d, w) sum(tanh(w.v * w.a + [d.x1, d.x2]))', {'v': (2,), 'a': ()},
         lambda d, w: torch.tanh(w['v'] * w['a'] + x(d, 'x1', 'x2')).sum(1)),
    case('matrix-row', 'λ(d, w) sum(w.m[d.i + 1] * [d.x1, d.x2])', {'m': (3, 2)},
         lambda d, w: (w['m'][d['i'].long()] * x(d, 'x1', 'x2')).sum(1)),
    case('stack-of-numbers', 'λ(d, w) sum([w.a, w.b * d.x1])^2', {'a': (), 'b': ()},
         lambda d, w: (w['a'] + w['b'] * d['x1']) ** 2),
    case('sum-of-matrix-product', 'λ(d, w) sum(w.a @ w.b) * d.x1', {'a': (2, 3), 'b': (3, 4)},
         lambda d, w: (w['a'] @ w['b']).sum() * d['x1']),
    case('array-column', 'λ(d, w) (w.v @ d.pix + w.c - d.x1)^2', {'v': (P,), 'c': ()},
         lambda d, w: (d['pix'] @ w['v'] + w['c'] - d['x1']) ** 2),
    case('array-column-elements', 'λ(d, w) (d.pix[2] * w.c - exp(sum(d.pix) / 10))^2', {'c': ()},
         lambda d, w: (d['pix'][:, 1] * w['c'] - torch.exp(d['pix'].sum(1) / 10)) ** 2),
]
# softmax's reference: [1, 2, …, K] written out, and torch's softmax
CASES[6] = case('softmax', f'λ(d, w) dot(softmax(w.m @ {X3}), [{", ".join(str(k + 1.0) for k in range(K))}])',
                {'m': (K, 3)},
                lambda d, w: torch.softmax(x(d, 'x1', 'x2', 'x3') @ w['m'].T, 1) @ torch.arange(1.0, K + 1))


def start(shapes, seed=0):
    """Weights at random, ±1."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, shape) for name, shape in shapes.items()}


def build(text, shapes, mode, tape='auto'):
    lengths = (('pix', P),) if 'd.pix' in text else ()
    return program.build(text, tuple(shapes), mode, True,
                         shapes=vectors.Shapes(tuple((n, s) for n, s in shapes.items() if s), lengths), tape=tape)


def sums(text, shapes, w, mode='reverse', backend='python', tape='auto'):
    """[Σ loss, Σ ∂loss/∂element…] over the rows, the weights' elements flat, row-major; backend 'llvm' with a
    tape other than 'auto' runs the loop kernel with that tape (jit/loops/)."""
    prog = build(text, shapes, mode, tape)
    elements = dict(prog.columns_of)
    columns = [DATA[elements[c][0]][:, elements[c][1] - 1] if c in elements else DATA[c] for c in prog.columns]
    vector = np.concatenate([np.ravel(w[n]) for n in shapes])
    return backends.compile(prog, backend)(columns, N, vector)


def torch_reference(fn, shapes, w):
    """(Σ loss, ∇ Σ loss flat) by PyTorch autograd, in float64."""
    tw = {n: torch.tensor(np.asarray(v, dtype=np.float64), requires_grad=True) for n, v in w.items()}
    d = {k: torch.tensor(v) for k, v in DATA.items()}
    total = fn(d, tw).sum()
    grads = torch.autograd.grad(total, [tw[n] for n in shapes], allow_unused=True)
    return float(total.detach()), np.concatenate([np.zeros(np.prod(shapes[n], dtype=int)) if g is None else
                                         g.numpy().ravel() for n, g in zip(shapes, grads)])


# The cuda backend runs on numba's CUDA simulator without a GPU: slow, so there one mode. The llvm backend's loop
# kernels (reverse mode) with the tapes 'store' and 'recompute'; 'reversible' has lambdas of its own below.
BACKEND_MODE = [(b, m, 'auto') for b in BACKENDS for m in MODES
                if b != 'cuda' or m == 'reverse' or os.environ.get('NUMBA_ENABLE_CUDASIM') != '1']
BACKEND_MODE += [('llvm', 'reverse', 'store'), ('llvm', 'reverse', 'recompute')]


def test_cases_cover_every_operation():
    used = set()
    for param in CASES:
        lam = parse(param.values[0])
        used |= {lam.graph.nodes[i].op for i in lam.graph.ancestors([lam.root])}
    assert set(rules.OPERATIONS) - used == set()
    texts = ' '.join(param.values[0] for param in CASES)
    assert [fn for fn, (op, _) in parser.FUNCTIONS.items() if op in rules.OPERATIONS and f'{fn}(' not in texts] == []


@pytest.mark.parametrize('backend, mode, tape', BACKEND_MODE)
@pytest.mark.parametrize('text, shapes, fn', CASES)
def test_matches_torch(text, shapes, fn, backend, mode, tape):
    w = start(shapes)
    result = sums(text, shapes, w, mode, backend, tape)
    loss, grad = torch_reference(fn, shapes, w)
    # 1e-10 relative: the same functions in float64, summed in a different order
    np.testing.assert_allclose(result[0], loss, rtol=1e-10)
    np.testing.assert_allclose(result[1:], grad, rtol=1e-9, atol=1e-10 * max(1.0, np.max(np.abs(grad))))


@pytest.mark.parametrize('backend, tape', [('python', 'auto'), ('llvm', 'auto'), ('llvm', 'store')])
@pytest.mark.parametrize('text, shapes, fn', CASES)
def test_matches_finite_differences(text, shapes, fn, backend, tape):
    """Along a random direction u (autograd's check_grads): (L(w + hu) − L(w − hu)) / 2h against ∇L·u."""
    w = start(shapes, seed=1)
    flat = np.concatenate([np.ravel(w[n]) for n in shapes])
    u = np.random.default_rng(2).normal(size=flat.size)
    u /= np.linalg.norm(u)
    h = 1e-6

    def at(vector):
        out, k = {}, 0
        for n, s in shapes.items():
            size = int(np.prod(s, dtype=int))
            out[n] = vector[k:k + size].reshape(s)
            k += size
        return out
    grad = sums(text, shapes, w, 'reverse', backend, tape)[1:]
    fd = (sums(text, shapes, at(flat + h * u), 'reverse', backend, tape)[0] -
          sums(text, shapes, at(flat - h * u), 'reverse', backend, tape)[0]) / (2 * h)
    # truncation ~h², rounding ~1e-16·|L|/h: 1e-6 relative is far above both
    np.testing.assert_allclose(grad @ u, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize('text, shapes, fn', CASES)
def test_forward_matches_reverse(text, shapes, fn):
    w = start(shapes)
    forward, reverse = sums(text, shapes, w, 'forward'), sums(text, shapes, w, 'reverse')
    np.testing.assert_allclose(forward, reverse, rtol=1e-10, atol=1e-10 * np.max(np.abs(reverse)))


def test_shared_logits_are_built_once():
    """The cross-entropy writes the network twice; the DAG holds it once: its nodes are those of writing it once."""
    shapes = {'w1': (K, 3), 'b1': (K,), 'w2': (3, K), 'b2': (3,)}
    twice = build(f'λ(d, w) logsumexp({MLP}) - {MLP}[d.label + 1]', shapes, 'reverse')
    once = build(f'λ(d, w) logsumexp({MLP}) - sum({MLP})', shapes, 'reverse')
    def products(prog):
        return sum(prog.graph.nodes[i].op == 'mul' for i in prog.graph.ancestors([prog.outputs[0]]))
    assert products(twice) == products(once) == 3 * K + K * 3


# --- syntax ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('text, shapes, fn', CASES)
def test_printer_round_trip(text, shapes, fn):
    """The printer writes vector operations as the parser reads them: printed and parsed again, the same DAG."""
    lam = parse(text)
    again = parse('λ(d, w) ' + printer.to_lambda(lam, lam.root))
    assert len(again.graph) == len(lam.graph) and printer.to_lambda(again, again.root) == printer.to_lambda(
        lam, lam.root)


@pytest.mark.parametrize('body, expected', [
    ('-w.v[2]', '-w.v[2]'),                         # indexing binds tighter than unary minus
    ('(w.m @ w.v)[1]', '(w.m @ w.v)[1]'),
    ('softmax(w.v)[1]^2', 'softmax(w.v)[1]^2'),
    ('w.m @ w.v * 2', '2*(w.m @ w.v)'),             # @ is as * and /: left to right (constants go first)
    ('2 * w.m @ w.v', '2*w.m @ w.v'),
    ('[w.a, 2][1] + [[1, 2], [3, 4]][2][1]', '[w.a, 2][1] + [[1, 2], [3, 4]][2][1]'),
])
def test_vector_syntax(body, expected):
    lam = parse('λ(d, w) ' + body)
    assert printer.to_lambda(lam, lam.root) == expected


@pytest.mark.parametrize('body, value', [
    ('[w.a, 2][1] + [[1, 2], [3, 4]][2][1]', 1.5 + 3),
    ('sum([[1, 2], [3, 4]] @ [1, w.a])', 1 + 3 + 1.5 * 6),
    ('dot([1, 2, 3], [w.a, w.a, 1])', 1.5 * 3 + 3),
    ('-[1, 2][2]^2', 4),                            # as -2^2 is 4 in PostgreSQL: unary minus first, ^ after
    ('logsumexp([0, ln(3)])', np.log(4)),
    ('softmax([0, ln(3)])[2]', 0.75),
])
def test_vector_values(body, value):
    prog = build('λ(d, w) ' + body, {'a': ()}, 'reverse')
    assert backends.compile(prog, 'python')([], 1, np.array([1.5]))[0] == pytest.approx(value, rel=1e-14)


# --- shape errors: SQLSTATE 2202E, the operation, both shapes, the place -----------------------------------------

@pytest.mark.parametrize('body, shapes, message, at', [
    ('sum(w.m @ [d.x1, d.x2])', {'m': (3, 4)}, 'cannot multiply a 3×4 matrix by a vector of 2 with @', '@'),
    ('sum(w.v + w.u)', {'v': (3,), 'u': (2,)}, 'cannot apply + to a vector of 3 and a vector of 2', '+'),
    ('w.v * 2', {'v': (3,)}, 'the body of a lambda must be a number, not a vector of 3', '*'),
    ('w.v[4]', {'v': (3,)}, 'index 4 is out of range for a vector of 3', '['),
    ('w.v[1.5]', {'v': (3,)}, 'index 1.5 is out of range for a vector of 3', '['),
    ('w.a[1]', {'a': ()}, 'cannot index a number by a number', '['),
    ('logsumexp(w.m)', {'m': (2, 3)}, 'logsumexp takes a vector, not a 2×3 matrix', 'logsumexp'),
    ('sum(softmax(w.a))', {'a': ()}, 'softmax takes a vector, not a number', 'softmax'),
    ('dot(w.v, w.u)', {'v': (3,), 'u': (2,)}, 'dot takes two vectors of the same length, not a vector of 3 and a '
                                               'vector of 2', 'dot'),
    ('sum([w.v, d.x1])', {'v': (3,)}, 'the elements of [...] must be numbers, or vectors of one length, not a '
                                      'vector of 3, a number', '['),
    ('sum(w.v[d.x1 + [1, 2]])', {'v': (3,)}, 'cannot index a vector of 3 by a vector of 2', '['),
    ('sum(w.a @ w.a)', {'a': ()}, 'cannot multiply a number by a number with @', '@'),
    ('sum(atan2(w.v, w.u))', {'v': (3,), 'u': (2,)}, 'cannot apply atan2 to a vector of 3 and a vector of 2',
     'atan2'),
])
def test_shape_errors(body, shapes, message, at):
    text = 'λ(d, w) ' + body
    with pytest.raises(PgadError) as caught:
        build(text, shapes, 'reverse')
    e = caught.value
    assert (e.sqlstate, e.message) == ('2202E', message)
    assert text[e.position - 1:].startswith(at), (e.position, at)
    assert e.detail.splitlines()[1].index('^') == e.position - 1
    assert e.hint == ('Sum it with sum(…), or pick an element with […].' if 'body' in message else None)
    if 'out of range' in message:  # a constant index is checked where it is unrolled, not by the shapes alone
        return
    with pytest.raises(PgadError) as again:  # the same error where the shapes alone are worked out (tensors.py)
        from pgad.lang import tensors
        tensors.gradient(parse(text).copy(), vectors.Shapes(tuple((n, s) for n, s in shapes.items() if s)))
    assert (again.value.sqlstate, again.value.message, again.value.position) == ('2202E', message, e.position)


def test_elements_are_named_like_postgresql_subscripts():
    prog = build('λ(d, w) sum(w.m @ d.pix) + w.c', {'m': (2, P), 'c': ()}, 'reverse')
    assert prog.weights[:3] == ('m[1][1]', 'm[1][2]', 'm[1][3]') and prog.weights[-1] == 'c'
    assert prog.columns[:2] == ('pix[1]', 'pix[2]') and dict(prog.columns_of)['pix[2]'] == ('pix', 2)
    nested = prog.nest(list(range(2 * P + 1)))
    assert nested == {'m': [list(range(P)), list(range(P, 2 * P))], 'c': 2 * P}


def test_a_scalar_lambda_is_not_unrolled():
    """A lambda of numbers keeps the parser's graph: nothing changes for it."""
    lam = program.parsed('λ(d, w) (w.a*d.x + w.b - d.y)^2')
    prog = program.build('λ(d, w) (w.a*d.x + w.b - d.y)^2', ('a', 'b'))
    assert prog.graph.nodes[:len(lam.graph)] == lam.graph.nodes


# --- the loop kernels' tapes -----------------------------------------------------------------------------------------

REVERSIBLE = [  # every value the reverse sweep reads is recomputed from values at hand, or inverted exactly
    ('λ(d, w) exp(w.a*d.x1 + w.b)', {'a': (), 'b': ()},  # nothing to recover: exp's reverse reads the loss
     lambda d, w: torch.exp(w['a'] * d['x1'] + w['b'])),
    ('λ(d, w) -tanh(w.a*d.x1 - w.b)', {'a': (), 'b': ()},  # tanh's value from the loss's, by negation
     lambda d, w: -torch.tanh(w['a'] * d['x1'] - w['b'])),
    ('λ(d, w) logsumexp(w.v)', {'v': (K,)},  # its extra slots (the exps) recomputed: a NaN gradient once
     lambda d, w: torch.logsumexp(w['v'], 0) + 0 * d['x1']),
    ('λ(d, w) sum(outer(d.pix, d.pix) * w.m)', {'m': (P, P)},  # the outer product recomputed from the columns
     lambda d, w: (d['pix'][:, :, None] * d['pix'][:, None, :] * w['m']).sum((1, 2))),
    ('λ(d, w) relu(w.a*d.x1) * 2', {'a': ()},  # relu's argument recomputed from the leaves
     lambda d, w: torch.relu(w['a'] * d['x1']) * 2),
]


@pytest.mark.parametrize('text, shapes, fn', REVERSIBLE)
@pytest.mark.parametrize('tape', ['store', 'recompute', 'reversible'])
def test_every_tape_gives_the_gradient(text, shapes, fn, tape):
    w = {name: np.float64(v) if not shape else start(shapes)[name] for (name, shape), v in zip(shapes.items(),
                                                                                                (0.7, -0.3, 1.2))}
    result = sums(text, shapes, w, 'reverse', 'llvm', tape)
    loss, grad = torch_reference(fn, shapes, w)
    # running a step backwards rounds: x = ln(exp(x)) is exact to a few ulp, so 1e-12 relative
    np.testing.assert_allclose(result, [loss, *grad], rtol=1e-12)


@pytest.mark.parametrize('tile', [1, 3, 7, 8, 12, 19])
def test_a_store_tile_of_any_rows_gives_the_same_sums(tile, monkeypatch):
    """N = 30 rows in tiles of 1 (a record a row), or 3 to 19 kept lane by lane: fewer rows than a SIMD register, whole
    registers and one by one, the last tile short: the same sums as the unrolled kernel."""
    from pgad.jit import loops
    monkeypatch.setattr(loops.layout, 'TILE', tile)
    text, shapes, _ = CASES[8].values  # the cross-entropy MLP
    w = start(shapes)
    program.build.cache_clear()
    backends.compile.cache_clear()
    np.testing.assert_allclose(sums(text, shapes, w, 'reverse', 'llvm', 'store'),
                               sums(text, shapes, w, 'reverse', 'llvm'), rtol=1e-12)


@pytest.mark.parametrize('body, shapes, step, at', [
    (f'logsumexp({MLP}) - {MLP}[d.label + 1]', {'w1': (K, 3), 'b1': (K,), 'w2': (3, K), 'b2': (3,)}, '-', '- ('),
    ('(w.a*d.x1 + w.b - d.x2)^2', {'a': (), 'b': ()}, '^', '^2'),
    ('relu(w.a*d.x1 + w.b)', {'a': (), 'b': ()}, 'relu', 'relu'),
    ('sum(w.v * [d.x1, d.x2 * d.x3])', {'v': (2,)}, '*', '* ['),
    # the steps whose inverse rounds or loses the value: x·0 (d.x2 may be 0), exp underflowing, tanh and sigmoid
    # saturating, cancellation in x + y
    ('exp(w.a*d.x1) * d.x2', {'a': ()}, '*', '* d.x2'),
    ('sigmoid(tanh(w.a*d.x1 - w.b) * w.c) / w.a', {'a': (), 'b': (), 'c': ()}, '/', '/ w.a'),
    ('ln(2 + sinh(w.a + d.x2 * w.b))', {'a': (), 'b': ()}, 'ln', 'ln'),
    ('tanh(w.a*d.x1 + w.b) + 1e20', {'a': (), 'b': ()}, '+', '+ 1e20'),
    ('logsumexp(w.v * d.x1)', {'v': (2,)}, 'logsumexp', 'logsumexp'),
])
def test_reversible_names_the_step_it_cannot_run_backwards(body, shapes, step, at):
    text = 'λ(d, w) ' + body
    with pytest.raises(PgadError) as caught:
        sums(text, shapes, start(shapes), 'reverse', 'llvm', 'reversible')
    e = caught.value
    assert (e.sqlstate, e.message) == ('0A000', f'tape "reversible" cannot run "{step}" backwards')
    assert text[e.position - 1:].startswith(at)


# --- random vector lambdas: every kernel agrees ------------------------------------------------------------------

def random_lambda(r, n):
    """A random lambda of vectors of length n, matrices n×n and numbers, from a small grammar whose every function
    keeps values bounded (tanh, sigmoid, softmax), with its weights' shapes."""
    def scalar(depth):
        pick = r.randrange(9 if depth else 3)
        if pick == 0:
            return 'w.a'
        if pick == 1:
            return r.choice(['d.x1', 'd.x2', '0.5', '2'])
        if pick == 2:
            return f'{vector(depth)}[{r.randint(1, n)}]' if depth else 'd.x3'
        if pick == 3:
            return f'sum({vector(depth - 1)})'
        if pick == 4:
            return f'dot({vector(depth - 1)}, {vector(depth - 1)})'
        if pick == 5:
            return f'logsumexp({vector(depth - 1)})'
        if pick == 6:
            return f'({scalar(depth - 1)} {r.choice("+-*")} {scalar(depth - 1)})'
        if pick == 7:
            return f'{r.choice(["tanh", "sigmoid", "sin"])}({scalar(depth - 1)})'
        return f'softmax({vector(depth - 1)})[d.i + 1]'

    def vector(depth):
        pick = r.randrange(8 if depth else 3)
        if pick == 0:
            return 'w.v'
        if pick == 1:
            return 'd.pix'
        if pick == 2:
            return '[' + ', '.join(r.choice(['d.x1', 'w.a', '1', 'd.x2']) for _ in range(n)) + ']'
        if pick == 3:
            return f'(w.m @ {vector(depth - 1)})'
        if pick == 4:
            return f'({vector(depth - 1)} {r.choice("+-*")} {r.choice([vector, scalar])(depth - 1)})'
        if pick == 5:
            return f'{r.choice(["tanh", "sigmoid", "relu", "softplus"])}({vector(depth - 1)})'
        if pick == 6:
            return f'softmax({vector(depth - 1)})'
        return f'({vector(depth - 1)} @ w.m)'
    return 'λ(d, w) ' + scalar(4), {'a': (), 'v': (n,), 'm': (n, n)}


RANDOM_DATA = {**{c: DATA[c] for c in ('x1', 'x2', 'x3')}, 'i': _rng.integers(0, 3, N).astype(np.float64)}


@pytest.mark.parametrize('seed', range(int(os.environ.get('PGAD_VECTOR_SEEDS', 30))))
def test_random_vector_lambdas_agree_on_every_kernel(seed):
    import random
    r = random.Random(seed)
    n = 3
    text, shapes = random_lambda(r, n)
    w = start(shapes, seed)
    lengths = (('pix', n),) if 'd.pix' in text else ()

    def run(mode, backend, tape):
        prog = program.build(text, tuple(shapes), mode, True, shapes=vectors.Shapes(
            tuple((k, s) for k, s in shapes.items() if s), lengths), tape=tape)
        elements = dict(prog.columns_of)
        columns = [DATA['pix'][:, elements[c][1] - 1] if c in elements else RANDOM_DATA[c] for c in prog.columns]
        return backends.compile(prog, backend)(columns, N, np.concatenate([np.ravel(w[k]) for k in shapes]))
    reference = run('reverse', 'python', 'auto')
    assert np.all(np.isfinite(reference)), text
    for mode, backend, tape in [('forward', 'python', 'auto'), ('reverse', 'llvm', 'auto'),
                                ('reverse', 'llvm', 'store'), ('reverse', 'llvm', 'recompute')]:
        # 1e-9 relative to the largest sum: the same arithmetic, summed and fused in other orders
        np.testing.assert_allclose(run(mode, backend, tape), reference, rtol=1e-9,
                                   atol=1e-9 * np.max(np.abs(reference)), err_msg=f'{mode} {backend} {tape}: {text}')


# --- pgad.derivatives: vector expressions that read back ---------------------------------------------------------

@pytest.mark.parametrize('text, shapes, fn', CASES)
def test_printed_vector_derivatives_evaluate_to_the_gradient(text, shapes, fn):
    """Each weight's derivative printed as one vector expression (tensors.py), parsed again and unrolled at the same
    shapes, gives, element by element and summed over the rows, the program's gradient."""
    from pgad.lang import tensors
    lengths = (('pix', P),) if 'd.pix' in text else ()
    given = vectors.Shapes(tuple((n, s) for n, s in shapes.items() if s), lengths)
    lam = parse(text).copy()
    found = tensors.gradient(lam, given)
    printed = dict(zip(found, printer.to_lambdas(lam, list(found.values()))))
    w = start(shapes)
    vector = np.concatenate([np.ravel(w[n]) for n in shapes])
    expected = dict(zip(build(text, shapes, 'reverse').weights, sums(text, shapes, w)[1:]))
    for name, body in printed.items():
        again = parse(f'λ(d, w) {body}')
        unrolled, root = vectors.unrolled_value(again, given)
        outputs = tuple(e.id for e in root.flat)
        prog = program.Program(unrolled, outputs, build(text, shapes, 'reverse').weights)
        elements = dict(build(text, shapes, 'reverse').columns_of)
        columns = [DATA[elements[c][0]][:, elements[c][1] - 1] if c in elements else DATA[c] for c in prog.columns]
        got = backends.compile(prog, 'python')(columns, N, vector)
        want = [expected[e] for e in vectors.elements(name, shapes[name])]
        if len(got) == 1:  # a number stands for every element (sum's adjoint)
            got = np.repeat(got, len(want))
        # the same derivative, written as vectors: 1e-10 relative
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f'∂/∂{name} = {body}')


def test_the_mlp_derivatives_read_as_the_textbook_rules():
    from pgad.lang import tensors
    text = f'λ(d, w) logsumexp({MLP}) - {MLP}[d.label + 1]'
    lam = parse(text).copy()
    found = tensors.gradient(lam, vectors.Shapes((('w1', (K, 3)), ('b1', (K,)), ('w2', (3, K)), ('b2', (3,)))))
    printed = dict(zip(found, printer.to_lambdas(lam, list(found.values()))))
    logits = 'w.w2 @ relu(w.w1 @ [d.x1, d.x2, d.x3] + w.b1) + w.b2'
    b2 = f'CASE WHEN [1, 2, 3] = d.label + 1 THEN -1 ELSE 0 END + softmax({logits})'
    assert printed['b2'] == b2                                            # softmax(z) − onehot(label)
    assert printed['w2'] == f'outer({b2}, relu(w.w1 @ [d.x1, d.x2, d.x3] + w.b1))'  # ḡ hᵀ
    assert printed['w1'].startswith('outer(CASE WHEN w.w1 @ [d.x1, d.x2, d.x3] + w.b1 > 0 THEN transpose(w.w2) @ (')


def test_the_users_expression_keeps_its_nans_when_unrolled():
    """ln(w.v)*0 is NaN where w.v < 0, as in PostgreSQL, and unrolling keeps it so (no x*0 = 0 rule)."""
    result = sums('λ(d, w) sum(ln(w.v) * 0) + w.a*d.x1', {'v': (2,), 'a': ()},
                  {'v': np.array([-1.0, 1.0]), 'a': np.float64(1.0)})
    assert np.isnan(result[0])


def test_an_error_without_a_place_has_no_caret():
    """A named loss on a model that predicts a vector: the body's error, whose node no operator of the text built."""
    from pgad.models import objective
    goal = objective.build('λ(d, w) w.v * d.x1', 'squared', 'x2', Limits())
    with pytest.raises(PgadError) as caught:
        program.build(goal.text, ('v',), shapes=vectors.Shapes((('v', (2,)),)))
    assert caught.value.message == 'the body of a lambda must be a number, not a vector of 2'


def test_an_unread_weight_has_the_derivative_0():
    from pgad.lang import tensors
    lam = parse('λ(d, w) sum(w.v * [d.x1, d.x2])').copy()
    found = tensors.gradient(lam, vectors.Shapes((('v', (2,)), ('m', (2, 2)))))
    assert dict(zip(found, printer.to_lambdas(lam, list(found.values())))) == {'v': '[d.x1, d.x2]', 'm': '0'}


def test_vector_derivatives_name_their_functions_as_the_language_does():
    from pgad.lang import tensors
    lam = parse('λ(d, w) sum(tanh(w.v * w.a) + w.m[d.i + 1] * d.x1)').copy()
    found = tensors.gradient(lam, vectors.Shapes((('v', (2,)), ('m', (3, 2)))))
    printed = dict(zip(found, printer.to_lambdas(lam, list(found.values()))))
    assert printed['a'] == 'sum(w.v*(1 - tanh(w.v*w.a)^2))'   # a number broadcast over a vector: its sum
    assert printed['m'] == 'outer(CASE WHEN [1, 2, 3] = d.i + 1 THEN 1 ELSE 0 END, d.x1*[1, 1])'


def test_unrolling_counts_against_max_lambda_nodes():
    with pytest.raises(PgadError) as caught:
        program.build('λ(d, w) sum(w.m @ [d.x1, d.x2, d.x3])', ('m',), limits=Limits(lambda_nodes=40),
                      shapes=vectors.Shapes((('m', (10, 3)),)))
    assert caught.value.sqlstate == '54001'


def test_an_unrolled_lambda_prints_with_its_parameters_and_elements():
    prog = program.build('λ(row, p) sum(p.v * [row.x1, 1])', ('v',), shapes=vectors.Shapes((('v', (2,)),)))
    assert printer.to_lambda(prog.lam, prog.outputs[0]) == 'p."v[1]"*row.x1 + p."v[2]"'


@pytest.mark.parametrize('tape', ['store', 'recompute'])
@pytest.mark.parametrize('fn, reference', [
    ('logsumexp(z)', lambda z: torch.logsumexp(z, 1)),
    ('dot(softmax(z), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])', lambda z: torch.softmax(z, 1) @ torch.arange(1.0, 12))])
def test_a_long_vectors_exps_run_a_simd_register_at_a_time(fn, reference, tape):
    """11 elements: whole vectors of exps through libmvec (8 or 4 at once, jit/loops/simd.py's exps), the rest one by
    one — against PyTorch, and the python backend's sums."""
    shapes = {'v': (11,), 'u': (11,)}
    w = start(shapes)
    text = 'λ(d, w) ' + fn.replace('z', '(w.v * d.x1 + w.u)')
    expected = torch_reference(lambda d, w: reference(d['x1'][:, None] * w['v'] + w['u']), shapes, w)
    got = sums(text, shapes, w, 'reverse', 'llvm', tape)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    np.testing.assert_allclose(got[1:], expected[1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, sums(text, shapes, w), rtol=1e-12, atol=1e-12)


LANES = [  # blocked products of a weight matrix and a vector over a tile (jit/loops/lanes.py: lane_product,
    # lane_gradient, block_gradient) at shapes around their blocks: 4 outputs, 2 registers of rows, 16 inputs written
    # out, 4 by 4 gradient sums, 2 registers of an array column's elements
    ('sum(tanh(w.w @ [d.x1] + w.b))', {'w': (5, 1), 'b': (5,)}),  # a 1-wide input
    ('sum(w.o @ tanh(w.w @ [d.x1, d.x2, d.x3] + w.b))^2', {'o': (1, 9), 'w': (9, 3), 'b': (9,)}),  # a 1-wide output
    ('sum(sin(w.o @ tanh(w.w @ [d.x1, d.x2, d.x3])))', {'o': (6, 17), 'w': (17, 3)}),  # 17 inputs: a loop over them
    ('sum(tanh(w.w @ d.wide + w.b)) * d.x1', {'w': (5, 11), 'b': (5,)}),  # an array column: 8 along it, 3 by lanes
    ('sum(tanh(w.w @ d.wide)^2)', {'w': (9, 27)}),  # 3 registers of it: 2 at once and 1, and 3 more by lanes
    ('sum(w.m @ [d.x1, d.x2]) + sum(w.m * d.x3)^2', {'m': (3, 2)}),  # W in a product and elsewhere
    ('sum(w.m @ [d.x1, d.x2] * (w.m @ [d.x2, d.x1]))', {'m': (6, 2)}),  # W in two products
]


@pytest.mark.parametrize('body, shapes', LANES)
@pytest.mark.parametrize('rows', [5, 30, 133])
def test_a_tiles_blocked_products_give_the_python_backends_sums(body, shapes, rows):
    """W @ x over a 'store' tile, blocked, at shapes around the blocks and rows around the tile (fewer rows than a
    SIMD register, one short tile, two whole tiles and a short one): the python backend's sums."""
    blocked_products_agree(body, shapes, rows)


@pytest.mark.parametrize('body, shapes', [LANES[3], LANES[4]])
@pytest.mark.parametrize('tile', [8, 12, 19])
def test_an_array_column_into_tiles_of_any_rows(body, shapes, tile, monkeypatch):
    """An array column's block into the tile's lanes and its W̄ along the block, in tiles of whole registers of rows
    and not: the python backend's sums."""
    from pgad.jit import loops
    monkeypatch.setattr(loops.layout, 'TILE', tile)
    program.build.cache_clear()
    backends.compile.cache_clear()
    blocked_products_agree(body, shapes, 133)
    program.build.cache_clear()
    backends.compile.cache_clear()


def blocked_products_agree(body, shapes, rows):
    rng = np.random.default_rng(rows)
    width = 27 if '(9, 27)' in str(shapes) else 11
    prog = program.build('λ(d, w) ' + body, tuple(shapes), 'reverse', True, tape='store', shapes=vectors.Shapes(
        tuple((n, s) for n, s in shapes.items()), (('wide', width),) if 'd.wide' in body else ()))
    data = {f'x{k}': rng.uniform(-1, 1, rows) for k in range(1, 4)}
    data.update({f'wide[{k}]': rng.uniform(-1, 1, rows) for k in range(1, width + 1)})
    columns = [data[c if c not in dict(prog.columns_of) else f'wide[{dict(prog.columns_of)[c][1]}]']
               for c in prog.columns]
    w = np.concatenate([np.ravel(v) for v in start(shapes, seed=rows).values()])
    np.testing.assert_allclose(backends.compile(prog, 'llvm')(columns, rows, w),
                               backends.compile(prog, 'python')(columns, rows, w), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('body, shapes', [('w.a', {'a': ()}), ('w.a * d.x1 + w.a^2', {'a': ()})])
def test_a_lanes_tile_sums_a_weights_adjoint_over_its_rows(body, shapes):
    """A weight's adjoint a row, in its lanes, summed over the tile's rows: the loss a weight itself, and a weight
    read twice (the random lambdas found the first)."""
    w = {'a': np.float64(0.7)}
    np.testing.assert_allclose(sums('λ(d, w) ' + body, shapes, w, 'reverse', 'llvm', 'store'),
                               sums('λ(d, w) ' + body, shapes, w), rtol=1e-12)


@pytest.mark.parametrize('body, shapes', [LANES[1], LANES[4]])
def test_a_store_kernels_sums_over_a_split_of_its_rows_add_up(body, shapes):
    """The kernel over rows [0, k) and over [k, n) sums to the kernel over [0, n), for a split inside a tile, at
    its end and in the next one: what a pool of threads splitting the rows relies on (its tiles start at the rows
    it is given)."""
    rng, rows = np.random.default_rng(7), 150
    prog = program.build('λ(d, w) ' + body, tuple(shapes), 'reverse', True, tape='store', shapes=vectors.Shapes(
        tuple(shapes.items()), (('wide', 27),) if 'd.wide' in body else ()))
    columns = [rng.uniform(-1, 1, rows) for _ in prog.columns]
    w = np.concatenate([np.ravel(v) for v in start(shapes).values()])
    kernel = backends.compile(prog, 'llvm')
    whole = kernel(columns, rows, w)
    for k in (1, 37, 64, 100):
        parts = (np.asarray(kernel([c[:k] for c in columns], k, w))
                 + np.asarray(kernel([np.ascontiguousarray(c[k:]) for c in columns], rows - k, w)))
        np.testing.assert_allclose(parts, whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('body, shapes, lengths, rows', [
    (f'logsumexp({MLP}) - {MLP}[d.label + 1]', {'w1': (20, 3), 'b1': (20,), 'w2': (3, 20), 'b2': (3,)}, (), 64),
    ('sum(outer(d.x, d.u) * w.a)', {'a': (110, 110)}, (('x', 110), ('u', 110)), 2)])
def test_a_store_tile_keeps_its_buffers_within_tape_bytes(body, shapes, lengths, rows):
    """A tile of TILE rows, or fewer where their tape, adjoints and weights' lanes would pass TAPE_BYTES (the scratch
    buffer, allocated a call, grows with the tile)."""
    from pgad.jit import loops
    prog = program.build('λ(d, w) ' + body, tuple(shapes), 'reverse', True, tape='store',
                         shapes=vectors.Shapes(tuple(shapes.items()), lengths))
    assert loops.rows_of(prog, 'store') == rows
    assert loops.buffer_bytes(prog, 'store') <= loops.TAPE_BYTES + 8 * len(prog.weights)


def test_an_array_columns_block_is_packed_once_and_let_go_with_its_columns():
    """The loop kernel reads an array column as one row-major block: made once for the same column arrays (the
    descent's every step), made again for others, and dropped when the columns it copies are."""
    import gc
    from pgad.jit import loops
    prog = build('λ(d, w) (w.v @ d.pix + w.c - d.x1)^2', {'v': (P,), 'c': ()}, 'reverse', 'store')
    to_arguments = loops.blocks(prog)
    columns = [DATA['x1'].copy() if c == 'x1' else np.ascontiguousarray(DATA['pix'][:, dict(prog.columns_of)[c][1] - 1])
               for c in prog.columns]
    first = to_arguments(columns)
    block = first[-1]
    assert block.shape == (N * P,) and np.array_equal(block.reshape(N, P), DATA['pix'])
    assert to_arguments(columns)[-1] is block  # the same arrays: the same block
    del columns, first, block
    gc.collect()
    assert not to_arguments.kept


# --- columns the lambda names but never reads (issue 34, 5(b)) -------------------------------------------------------

UNREAD = [  # the lambda names an array column q (and a number column) that no kernel reads, but the loader loads
    'CASE WHEN false THEN sum(d.q) ELSE sum(w.a * d.pix) END',  # only in a branch never taken
    'sum(w.a * d.pix) + w.b * CASE WHEN false THEN sum(d.q) + d.x2 ELSE 1 END',  # in a derivative's untaken branch
    'sum(w.a * d.pix) + CASE WHEN false THEN w.b * sum(d.q) ELSE w.b END',  # in a derivative that is never taken
    'sum(w.a * d.pix) + w.b * 0 * sum(d.q)',  # in a derivative that is zero
    'CASE WHEN d.x1 > 100 THEN sum(d.q) ELSE sum(w.a * d.pix) + w.b END',  # a branch the data never takes
    'sum(w.a) * w.b + CASE WHEN false THEN sum(d.q) + sum(d.pix) ELSE 0 END',  # no column read at all
]


@pytest.mark.parametrize('wide', [False, True])
@pytest.mark.parametrize('body', UNREAD)
def test_an_array_column_the_kernel_never_reads(body, wide):
    """An array column the lambda names but no kernel reads — in a branch never taken, in a derivative that is 0 —
    is not among a loop kernel's arguments (it was, with no elements to pack: XX000 'need at least one array to
    stack'). Every tape, 'auto' unrolled and, past 39 weights, 'auto' on the loop kernel, and the cuda backend: the
    python backend's sums."""
    from pgad.jit import compiler
    length = 40 if wide else P  # 41 weights: 'auto' runs the loop kernel ('store')
    rng = np.random.default_rng(3)
    data = {'x1': DATA['x1'], 'x2': DATA['x2'], 'pix': rng.uniform(-1, 1, (N, length)),
            'q': rng.uniform(-1, 1, (N, 3))}
    shapes = {'a': (length,), 'b': ()}
    w = np.concatenate([rng.uniform(-1, 1, length), [0.5]])
    results = {}
    for backend, tape in [('python', 'auto'), ('llvm', 'auto'), ('llvm', 'store'), ('llvm', 'recompute'),
                          ('llvm', 'reversible'), ('cuda', 'auto')]:
        prog = program.build('λ(d, w) ' + body, tuple(shapes), 'reverse', True, tape=tape, shapes=vectors.Shapes(
            (('a', (length,)),), (('pix', length), ('q', 3))))
        if backend == 'llvm' and tape == 'auto':
            assert compiler.form(prog) == ('store' if wide else 'unrolled')
        elements = dict(prog.columns_of)
        columns = [data[elements[c][0]][:, elements[c][1] - 1] if c in elements else data[c] for c in prog.columns]
        results[backend, tape] = backends.compile(prog, backend)(columns, N, w)
    for (backend, tape), got in results.items():  # the same sums, added in other orders
        np.testing.assert_allclose(got, results['python', 'auto'], rtol=1e-12, atol=1e-12, err_msg=f'{backend} {tape}')
