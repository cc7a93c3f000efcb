"""Weights at scale (issue 48): keyed weights, a vector per key read as w.p[d.user].

In process: the loss and its derivative by every key's value (a gather forward, a scatter-add backwards) against
PyTorch's embedding gradients and central differences; sparse SGD over one batch of all the rows against dense
gradient descent (1e-12); a sparse step moves only the keys its batch reads; block Newton against scipy's minimum of
a convex keyed model, and a key's Hessian block against PyTorch's.
Against a real server: a matrix factorisation with biases by pgad.train against a numpy alternating-least-squares
reference of the same objective, its scoring function against the stored tables (unseen keys, NULL keys),
pgad.recommend against a brute force over the stored weights, pgad.embeddings' pgvector text, the tables through
versions, keep_versions, drop and pg_dump, who may read them, pgad.memory_limit before anything is allocated, a
cancel within a second, and the messages of what a keyed model does not take. The keys, found in the load's own pass
(keyed.load, extension/keys.c): one query over the data, their codes the sorted keys' whatever order the rows come in
(integers as numbers, text as Python orders it, non-ASCII and empty keys among them), NULL keys skipped, 200,000 keys
against numpy, pgad.memory_limit in C (53200 naming the column) and a cancel within a second.
"""
import json
import subprocess
import threading
import time
from types import SimpleNamespace

import numpy as np
import psycopg
import pytest
import torch
from scipy.optimize import minimize

from conftest import error_of, heard, new_database, restored, settings
from pgad import categorical, keyed, program
from pgad.limits import DEFAULT
from pgad.models import blocks, descent, objective, sparse

MF = 'λ(d, w) w.mu + w.bu[d.u] + w.bi[d.i] + dot(w.p[d.u], w.q[d.i])'
START = {'mu': 0, 'bu': {}, 'bi': {}, 'p': {'shape': [3], 'seed': 1}, 'q': {'shape': [3], 'seed': 2}}


def local(model, loss, start, users, items, label='y', backend='python'):
    """(kernel, layout, start vector, local text, Keyed) of a model over users × items keys (codes 1 … n), its kernel
    on backend."""
    lam = program.parsed(objective.build(model, loss, label, DEFAULT).text, DEFAULT)
    found = keyed.found(start, lam)
    found.keys = {'u': [str(k) for k in range(1, users + 1)], 'i': [str(k) for k in range(1, items + 1)]}
    prog, layout, text = keyed.build(lam, found, {n: () for n in start if n not in found.specs}, DEFAULT)
    w = np.zeros(layout.size)
    for name in layout.keyed:
        w[layout.spans[name]] = keyed.start(found, name).ravel()
    return keyed.Kernel(prog, layout, [*prog.columns, 'u', 'i'], backend), layout, w, text, found


def ratings(n, users, items, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.integers(1, users + 1, n).astype(float)
    i = rng.integers(1, items + 1, n).astype(float)
    return u, i, rng.normal(3, 1, n)


def torch_objective(layout, t, u, i, y, loss='squared'):
    """The summed loss of the factorisation in PyTorch, its factors read by torch.nn.functional.embedding."""
    P = t[layout.spans['p']].reshape(-1, 3)
    Q = t[layout.spans['q']].reshape(-1, 3)
    bu, bi, mu = t[layout.spans['bu']], t[layout.spans['bi']], t[layout.spans['mu']][0]
    uu, ii = torch.tensor(u - 1).long(), torch.tensor(i - 1).long()
    emb = torch.nn.functional.embedding
    pred = mu + emb(uu, bu[:, None])[:, 0] + emb(ii, bi[:, None])[:, 0] + (emb(uu, P) * emb(ii, Q)).sum(1)
    y = torch.tensor(y)
    return ((pred - y) ** 2).sum() if loss == 'squared' else (torch.nn.functional.softplus(pred) - y * pred).sum()


BACKENDS = ['python', 'llvm']  # the llvm backend's kernel: jit/scatter.py (tests/test_scatter.py)


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('loss', ['squared', 'logistic'])
def test_the_scatter_derivative_is_torchs_embedding_gradient(loss, backend):
    u, i, y = ratings(500, 17, 11)
    y = y if loss == 'squared' else (y > 3).astype(float)
    kernel, layout, w, _, _ = local(MF, loss, START, 17, 11, backend=backend)
    w[layout.spans['mu']] = 0.3
    sums = kernel([y, u, i], len(y), w)
    t = torch.tensor(w, requires_grad=True)
    f = torch_objective(layout, t, u, i, y, loss)
    f.backward()
    assert sums[0] == pytest.approx(f.item(), rel=1e-13)
    np.testing.assert_allclose(sums[1:], t.grad.numpy(), rtol=1e-12, atol=1e-12)  # float64, the same sums


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('mode', ['forward', 'reverse'])
def test_a_key_vector_feeds_a_network_in_either_mode(mode, backend):
    """A user's vector as a small network's input (w.W @ …, tanh, dot), its derivatives against torch's."""
    u, i, y = ratings(300, 8, 5, seed=4)
    model = 'λ(d, w) dot(w.v, tanh(w.m @ w.p[d.u] + w.c)) + w.q[d.i]'
    start = {'v': [0.5, -0.3], 'm': [[0.2, 0.1, -0.4], [0.3, -0.2, 0.1]], 'c': [0.1, 0.0],
             'p': {'shape': [3], 'seed': 5}, 'q': {}}
    lam = program.parsed(objective.build(model, 'squared', 'y', DEFAULT).text, DEFAULT)
    found = keyed.found(start, lam)
    found.keys = {'u': [str(k) for k in range(1, 9)], 'i': [str(k) for k in range(1, 6)]}
    shapes = {'v': (2,), 'm': (2, 3), 'c': (2,)}
    prog, layout, _ = keyed.build(lam, found, shapes, DEFAULT, mode)
    w = np.zeros(layout.size)
    for name in ('v', 'm', 'c'):
        w[layout.spans[name]] = np.ravel(start[name])
    w[layout.spans['p']] = keyed.start(found, 'p').ravel()
    w[layout.spans['q']] = np.linspace(-1, 1, 5)
    sums = keyed.Kernel(prog, layout, [*prog.columns, 'u', 'i'], backend)([y, u, i], len(y), w)
    t = torch.tensor(w, requires_grad=True)
    v, W, c = (t[layout.spans[n]].reshape(shapes[n]) for n in ('v', 'm', 'c'))
    P, q = t[layout.spans['p']].reshape(8, 3), t[layout.spans['q']]
    uu, ii = torch.tensor(u - 1).long(), torch.tensor(i - 1).long()
    pred = torch.tanh(P[uu] @ W.T + c) @ v + q[ii]
    f = ((pred - torch.tensor(y)) ** 2).sum()
    f.backward()
    assert sums[0] == pytest.approx(f.item(), rel=1e-13)
    np.testing.assert_allclose(sums[1:], t.grad.numpy(), rtol=1e-11, atol=1e-12)


def test_keys_sort_as_numbers_or_as_python_orders_text_and_their_codes_follow():
    keys = ['10', '-3', '2', '0', '9007199254740993', '9007199254740992']
    assert [keys[k] for k in categorical.key_order(keys, 'pg_catalog.int8')] == \
        ['-3', '0', '2', '10', '9007199254740992', '9007199254740993']
    text = ['b', 'é', '', 'B', '日本', 'a']
    assert [text[k] for k in categorical.key_order(text, 'pg_catalog.text')] == sorted(text)
    rng = np.random.default_rng(0)
    codes = rng.integers(1, len(text) + 1, 1000).astype(float)
    recoded, ordered = categorical.coded(codes, text, 'pg_catalog.text')
    assert ordered == sorted(text)
    np.testing.assert_array_equal(recoded, [ordered.index(text[int(c) - 1]) + 1 for c in codes])
    same, ordered = categorical.coded(codes, sorted(text), 'pg_catalog.text')  # sorted already: the codes as they are
    assert same is codes and ordered == sorted(text)


@pytest.mark.parametrize('backend', BACKENDS)
def test_a_keys_derivative_is_the_central_difference(backend):
    u, i, y = ratings(300, 9, 7, seed=3)
    kernel, layout, w, _, _ = local(MF, 'squared', START, 9, 7, backend=backend)
    g = kernel([y, u, i], len(y), w)[1:]
    rng = np.random.default_rng(1)
    for k in rng.choice(layout.size, 12, replace=False):
        h = 1e-6 * max(1.0, abs(w[k]))
        up, down = w.copy(), w.copy()
        up[k] += h
        down[k] -= h
        central = (kernel([y, u, i], len(y), up)[0] - kernel([y, u, i], len(y), down)[0]) / (2 * h)
        assert g[k] == pytest.approx(central, rel=1e-6, abs=1e-6)


def test_sparse_sgd_over_one_batch_of_all_the_rows_is_gradient_descent():
    u, i, y = ratings(400, 12, 8)
    kernel, layout, w, _, _ = local(MF, 'squared', START, 12, 8)
    table = SimpleNamespace(columns=[y, u, i], rows=len(y))
    penalty = keyed.Ridge(0.01, {n: 1.0 for n in layout.spans}, layout.spans)
    clock = descent.Clock(lambda: None, lambda m: None, 5)
    fitted = sparse.fit(kernel, table, w.copy(), layout, penalty, 'sgd', 0.1, 5, len(y), np.random.default_rng(0), 0,
                        clock)
    dense = descent.fit(kernel, table, w, [str(k) for k in range(layout.size)], 'gd', 0.1, 5,
                        penalty=penalty.dense(layout.size), judge=False)
    np.testing.assert_allclose(fitted.weights, dense.weights, rtol=0, atol=1e-12)


@pytest.mark.parametrize('optimizer', sparse.RULES)
def test_a_sparse_step_moves_only_the_keys_its_batch_reads(optimizer):
    u, i, y = ratings(400, 30, 20)
    kernel, layout, w, _, _ = local(MF, 'squared', START, 30, 20)
    batch = [c[:5] for c in (y, u, i)]
    at, g = sparse.gradient(kernel, batch, 5, w, keyed.Ridge(0.1, {n: 1.0 for n in layout.spans}, layout.spans),
                            {n: np.ones(c, dtype=np.int64) for n, (_, c) in layout.keyed.items()}, len(y))
    after = w.copy()
    sparse.Rule(optimizer, 0.1, len(w)).step(after, at, g)
    moved = np.flatnonzero(after != w)
    read_users, read_items = set(batch[1].astype(int) - 1), set(batch[2].astype(int) - 1)
    for k in moved:
        name = next(n for n, s in layout.spans.items() if s.start <= k < s.stop)
        if name in layout.keyed:
            size = int(np.prod(layout.shapes[name])) or 1
            key = (k - layout.spans[name].start) // size
            assert key in (read_users if layout.keyed[name][0] == 'u' else read_items)
    assert len(moved) > 0


@pytest.mark.parametrize('conjugate', [False, True])
@pytest.mark.parametrize('backend', BACKENDS)
def test_block_newton_reaches_scipys_minimum_of_a_convex_keyed_model(backend, conjugate, monkeypatch):
    """A logistic model with an intercept per key and a global slope: convex, one minimum; each block solved from
    its Hessian, or by conjugate gradients (every block, however small: blocks.CG_FROM)."""
    monkeypatch.setattr(blocks, 'CG_FROM', 1 if conjugate else blocks.CG_FROM)
    monkeypatch.setattr(blocks, 'CG_RESIDUAL', 0.9)  # loose steps: converged is judged on tight ones all the same
    rng = np.random.default_rng(5)
    n, groups = 600, 15
    g = rng.integers(1, groups + 1, n).astype(float)
    x = rng.normal(0, 1, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.8 * x + rng.normal(0, 1, groups + 1)[g.astype(int)])))).astype(float)
    model = 'λ(d, w) w.a*d.x + w.b[d.u]'
    lam = program.parsed(objective.build(model, 'logistic', 'y', DEFAULT).text, DEFAULT)
    found = keyed.found({'a': 0, 'b': {}}, lam)
    found.keys = {'u': [str(k) for k in range(1, groups + 1)]}
    prog, layout, text = keyed.build(lam, found, {'a': ()}, DEFAULT)
    kernel = keyed.Kernel(prog, layout, [*prog.columns, 'u'], backend)
    table = SimpleNamespace(columns=[x, y, g] if list(prog.columns) == ['x', 'y'] else [y, x, g], rows=n)
    l2 = 0.01
    penalty = keyed.Ridge(l2, {n: 1.0 for n in layout.spans}, layout.spans)
    groups_ = [blocks.Group(text, ['a'], layout, DEFAULT, prog.dims),
               blocks.Group(text, ['b'], layout, DEFAULT, prog.dims, 'u')]

    fit, _ = blocks.fit(kernel, table, np.zeros(layout.size), groups_, penalty, 200, 0,
                        descent.Clock(lambda: None, lambda m: None, 200),
                        lambda w: kernel.loss(table.columns, table.rows, w))
    assert fit.converged

    def f(w):
        s = kernel(table.columns, n, w)
        return s[0] / n + l2 * w @ w, s[1:] / n + 2 * l2 * w
    best = minimize(f, np.zeros(layout.size), jac=True, method='BFGS', options={'gtol': 1e-12})
    assert fit.loss == pytest.approx(best.fun, rel=1e-12)
    np.testing.assert_allclose(fit.weights, best.x, atol=1e-6)


@pytest.mark.parametrize('backend', BACKENDS)
def test_a_keys_hessian_block_is_torchs(backend):
    u, i, y = ratings(200, 6, 5, seed=9)
    kernel, layout, w, text, _ = local(MF, 'squared', START, 6, 5, backend=backend)
    group = blocks.Group(text, ['bu', 'p'], layout, DEFAULT, kernel.prog.dims, 'u')
    table = SimpleNamespace(columns=[y, u, i], rows=len(y))
    g, h = group.sums(kernel, table, w, descent.Clock(lambda: None, lambda m: None, 1))
    key = 2
    at = group.base + key * group.stride
    chunked = group.sums(kernel, table, w, descent.Clock(lambda: None, lambda m: None, 1), 2, 4)  # keys 2 and 3
    np.testing.assert_array_equal(chunked[1], h[2:4])
    t = torch.tensor(w)

    def of(block):
        full = t.clone()
        full[at] = block
        return torch_objective(layout, full, u, i, y)
    expected = torch.autograd.functional.hessian(of, t[at])
    np.testing.assert_allclose(h[key], expected.numpy(), rtol=1e-12, atol=1e-10)
    grad = torch.autograd.functional.jacobian(of, t[at])
    np.testing.assert_allclose(g[key], grad.numpy(), rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize('backend', BACKENDS)
def test_a_keys_hessian_times_a_vector_is_its_hessian_block_times_it(backend, monkeypatch):
    """The Hessian-vector program (program.build_hvp, forward.directional over the gradient) against the Hessian
    blocks (program.build_hessian) times a vector per key, and its gradient against theirs: rank 16 (17 values a
    key, where block Newton takes conjugate gradients)."""
    start = {**START, 'p': {'shape': [16], 'seed': 1}, 'q': {'shape': [16], 'seed': 2}}
    u, i, y = ratings(400, 6, 5, seed=8)
    kernel, layout, w, text, _ = local(MF, 'logistic', start, 6, 5, backend=backend)
    y = (y > 3).astype(float)
    table = SimpleNamespace(columns=[y, u, i], rows=len(y))
    clock = descent.Clock(lambda: None, lambda m: None, 1)
    for names, column in ((['bu', 'p'], 'u'), (['bi', 'q'], 'i')):
        monkeypatch.setattr(blocks, 'CG_FROM', 10_000)
        exact = blocks.Group(text, names, layout, DEFAULT, kernel.prog.dims, column)
        monkeypatch.setattr(blocks, 'CG_FROM', 17)
        products = blocks.Group(text, names, layout, DEFAULT, kernel.prog.dims, column)
        assert products.conjugate and not exact.conjugate
        g, h = exact.sums(kernel, table, w, clock)
        v = np.random.default_rng(2).normal(size=(products.count, products.m))
        got = products.products(kernel, table, w, v, clock)
        np.testing.assert_allclose(got, np.einsum('kij,kj->ki', h, v), rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(products.gradients(kernel, table, w, clock), g, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('backend', BACKENDS)
def test_the_decrement_converged_is_judged_on_is_the_hessian_blocks(backend):
    """Where the sweeps' loose conjugate gradients say converged, the fit judges gᵀH⁻¹g again with tight solves
    (blocks.tight_decrement): against each key's Hessian block solved exactly, with the penalty's diagonal."""
    start = {**START, 'p': {'shape': [16], 'seed': 1}, 'q': {'shape': [16], 'seed': 2}}
    u, i, y = ratings(400, 6, 5, seed=8)
    kernel, layout, w, text, _ = local(MF, 'squared', start, 6, 5, backend=backend)
    table = SimpleNamespace(columns=[y, u, i], rows=len(y))
    clock = descent.Clock(lambda: None, lambda m: None, 1)
    penalty = keyed.Ridge(0.05, {n: 1.0 for n in layout.spans}, layout.spans)
    exact = blocks.Group(text, ['bu', 'p'], layout, DEFAULT, kernel.prog.dims, 'u')
    exact.conjugate = False
    products = blocks.Group(text, ['bu', 'p'], layout, DEFAULT, kernel.prog.dims, 'u')
    if not exact.conjugate and exact.prog is products.prog:  # a Hessian program of its own for the reference
        exact.prog = program.build_hessian(text, ('bu', 'p'), DEFAULT, kernel.prog.dims)
    g, h = exact.sums(kernel, table, w, clock)
    here = exact.scale(penalty)
    g = g / len(y) + 2 * penalty.l2 * here * exact.at(w, 0, exact.count)
    h = h / len(y) + 2 * penalty.l2 * np.diag(here)
    expected = float(np.sum(g * np.linalg.solve(h, g[..., None])[..., 0]))
    got = blocks.tight_decrement(products, kernel, table, w, penalty, len(y), clock)
    assert got == pytest.approx(expected, rel=1e-6)
    loose = blocks.newton_step(products, kernel, table, w, penalty, len(y), clock, 0.9, 17)[1]
    assert loose < got  # what a loose solve would have judged on


def test_conjugate_gradients_solve_every_keys_block_at_once():
    rng = np.random.default_rng(6)
    a = rng.normal(size=(50, 12, 12))
    h = a @ a.transpose(0, 2, 1) + 0.1 * np.eye(12)
    g = rng.normal(size=(50, 12))
    passes = []

    def product(p, scratch):
        passes.append(1)
        return np.einsum('kij,kj->ki', h, p)
    exact, measure = blocks.conjugate_gradients(product, g.copy(), 60, residual=0.0)
    np.testing.assert_allclose(exact, np.linalg.solve(h, g[..., None])[..., 0], rtol=1e-6, atol=1e-8)
    assert measure == pytest.approx(float(np.sum(g * exact)), rel=1e-9)  # gᵀd, without g
    passes.clear()
    rough, _ = blocks.conjugate_gradients(product, g.copy(), 12)
    assert len(passes) <= 12
    residual = np.linalg.norm(np.einsum('kij,kj->ki', h, rough) - g, axis=1)
    assert np.all(residual <= blocks.CG_RESIDUAL * np.linalg.norm(g, axis=1) * (1 + 1e-9))


# --- against a real server ------------------------------------------------------------------------------------------
USERS, ITEMS, RANK, LAMBDA = 120, 40, 2, 2.0


def make_ratings():
    rng = np.random.default_rng(48)
    pairs = rng.choice(USERS * ITEMS, 1500, replace=False)
    u, i = pairs // ITEMS, pairs % ITEMS
    P, Q = rng.normal(0, 1, (USERS, RANK)), rng.normal(0, 1, (ITEMS, RANK))
    r = 3 + rng.normal(0, 0.5, USERS)[u] + rng.normal(0, 0.5, ITEMS)[i] + (P[u] * Q[i]).sum(1) + \
        rng.normal(0, 0.3, len(u))
    return [f'user{k:03d}' for k in u], [f'item{k:02d}' for k in i], r


USER_KEYS, ITEM_KEYS, R = make_ratings()
MODEL = 'λ(d, w) w.mu + w.bu[d.user_id] + w.bi[d.item_id] + dot(w.p[d.user_id], w.q[d.item_id])'
WEIGHTS = json.dumps({'mu': 0, 'bu': {}, 'bi': {}, 'p': {'shape': [RANK], 'seed': 1},
                      'q': {'shape': [RANK], 'seed': 2}})
REGULARIZE = '["bu", "bi", "p", "q"]'


# keyed.load of the data's columns, each key column of the weights ({weight: column}) coded by its sorted keys
KEYED_LOAD = """
CREATE FUNCTION keyed_load(data text, columns text[], weights jsonb, memory_limit bigint DEFAULT NULL,
                           fallback boolean DEFAULT false)
RETURNS jsonb LANGUAGE plpython3u AS $$
import json
plpy.execute("SELECT pgad.derivatives('λ(d, w) w.a')")  # pgad's Python on sys.path
from pgad import keyed, loader
by = json.loads(weights)
found = keyed.Keyed({w: keyed.Spec((1,), 'zeros', 0) for w in by}, by)
native = loader.native_loader
if fallback:  # as outside the server: the keys by a query a column, then the load by pgad.pack
    loader.native_loader = lambda: None
try:
    table = keyed.load(found, data, columns, memory_limit)
finally:
    loader.native_loader = native
return json.dumps({'keys': found.keys, 'types': found.types, 'rows': table.rows, 'skipped': table.skipped,
                   'columns': [c.tolist() for c in table.columns]})
$$;
"""


@pytest.fixture(scope='module', autouse=True)
def data(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE ratings (user_id text, item_id text, rating float8)')
        with db.cursor().copy('COPY ratings FROM STDIN') as copy:
            for row in zip(USER_KEYS, ITEM_KEYS, R):
                copy.write_row(row)
        db.execute('GRANT SELECT ON ratings TO PUBLIC')
        db.execute(KEYED_LOAD)


def train(db, name, data='ratings', **options):
    args = ''.join(f', {k} => %({k})s' for k in options)
    return db.execute(f"SELECT version, final_loss, converged, iterations FROM pgad.train(%(name)s, %(model)s, "
                      f"'squared', %(data)s, %(w)s, label => 'rating', l2 => %(l2)s, regularize => %(reg)s{args})",
                      dict(name=name, model=MODEL, data=data, w=WEIGHTS, l2=LAMBDA / len(R), reg=REGULARIZE,
                           **options)).fetchone()


def als():
    """numpy alternating least squares of Σ (r − μ − b_u − c_i − p_u·q_i)² + λ(Σ|p|² + Σ|q|² + Σb² + Σc²), μ
    unpenalised, to convergence: the objective at its optimum."""
    uk, u = np.unique(USER_KEYS, return_inverse=True)
    ik, i = np.unique(ITEM_KEYS, return_inverse=True)
    rng = np.random.default_rng(1)
    P, Q = rng.normal(0, 0.1, (len(uk), RANK)), rng.normal(0, 0.1, (len(ik), RANK))
    bu, bi, mu = np.zeros(len(uk)), np.zeros(len(ik)), R.mean()

    def solve(idx, other, target, n):
        X = np.c_[np.ones(len(idx)), other]
        A = np.zeros((n, RANK + 1, RANK + 1))
        b = np.zeros((n, RANK + 1))
        np.add.at(A, idx, X[:, :, None] * X[:, None, :])
        np.add.at(b, idx, X * target[:, None])
        return np.linalg.solve(A + LAMBDA * np.eye(RANK + 1), b[..., None])[..., 0]
    for _ in range(3000):
        mu = (R - bu[u] - bi[i] - (P[u] * Q[i]).sum(1)).mean()
        x = solve(u, Q[i], R - mu - bi[i], len(uk))
        bu, P = x[:, 0], x[:, 1:]
        x = solve(i, P[u], R - mu - bu[u], len(ik))
        bi, Q = x[:, 0], x[:, 1:]
    e = R - mu - bu[u] - bi[i] - (P[u] * Q[i]).sum(1)
    return e @ e + LAMBDA * ((P ** 2).sum() + (Q ** 2).sum() + (bu ** 2).sum() + (bi ** 2).sum())


def stored(db, name, version=None):
    """(global weights, {weight: {key: value}}) of a version, read from its row and its tables."""
    row = db.execute('SELECT weights, functions FROM pgad.model_versions WHERE name = %s AND '
                     'version = coalesce(%s, (SELECT version FROM pgad.models WHERE name = %s))',
                     [name, version, name]).fetchone()
    weights, functions = row
    tables = {}
    for w, entry in weights.items():
        if isinstance(entry, dict):
            table = f'pgad_models."{functions[""]}.{w}"'
            tables[w] = {k: np.atleast_1d(v) for k, v in db.execute(f'SELECT key, value FROM {table}').fetchall()}
    return {w: v for w, v in weights.items() if not isinstance(v, dict)}, tables


def predict(g, t, user, item):
    zero = np.zeros(RANK)
    return g['mu'] + t['bu'].get(user, [0])[0] + t['bi'].get(item, [0])[0] + \
        t['p'].get(user, zero) @ t['q'].get(item, zero)


def test_a_factorisation_reaches_the_alternating_least_squares_optimum(db):
    version, final, converged, _ = train(db, 'mf')
    assert converged
    assert final * len(R) == pytest.approx(als(), rel=1e-9)
    assert db.execute("SELECT options->>'backend' FROM pgad.models WHERE name = 'mf'").fetchone()[0] == 'auto'
    for backend in BACKENDS:  # each backend's own passes: the same optimum
        _, final, converged, _ = train(db, f'mf_{backend}', backend=backend)
        assert converged and final * len(R) == pytest.approx(als(), rel=1e-9)
    g, t = stored(db, 'mf')
    assert len(t['p']) == len(set(USER_KEYS)) and len(t['q']) == len(set(ITEM_KEYS))
    assert db.execute("SELECT weights->'p' FROM pgad.models WHERE name = 'mf'").fetchone()[0] == \
        {'keyed_by': 'user_id', 'keys': len(set(USER_KEYS)), 'shape': [RANK]}


def test_every_optimizer_reaches_the_same_optimum(db):
    train(db, 'mf_opt')
    best = db.execute("SELECT final_loss FROM pgad.models WHERE name = 'mf_opt'").fetchone()[0]
    _, final, _, _ = train(db, 'mf_opt', optimizer='lbfgs')
    assert final == pytest.approx(best, rel=1e-7)
    _, final, converged, _ = train(db, 'mf_opt', optimizer='adam', learning_rate=0.02, iterations=60,
                                   batch_size=64, seed=3)
    assert final == pytest.approx(best, rel=0.05) and not converged  # stopped short: said so
    train(db, 'mf_opt', optimizer='gd', learning_rate=0.003, iterations=1)
    assert db.execute("SELECT options->>'learning_rate', options->>'optimizer' FROM pgad.models "
                      "WHERE name = 'mf_opt'").fetchone() == ('0.003', 'gd')  # the rate given, not a default


def test_the_scoring_function_reads_the_stored_tables(db):
    train(db, 'mf_score')
    g, t = stored(db, 'mf_score')
    got = db.execute('SELECT user_id, item_id, pgad_models.mf_score(user_id, item_id) FROM ratings').fetchall()
    for user, item, value in got:
        assert value == pytest.approx(predict(g, t, user, item), rel=1e-13, abs=1e-13)
    unseen = db.execute("SELECT pgad_models.mf_score('nobody', 'item01'), pgad_models.mf_score('nobody', 'nothing'), "
                        "pgad_models.mf_score(NULL, 'item01'), pgad_models.mf_score('user001', NULL)").fetchone()
    assert unseen[0] == pytest.approx(g['mu'] + t['bi']['item01'][0], rel=1e-13)
    assert unseen[1] == pytest.approx(g['mu'], rel=1e-13)
    assert unseen[2] is None and unseen[3] is None
    volatility = db.execute("SELECT DISTINCT provolatile FROM pg_proc WHERE proname LIKE 'mf_score%'").fetchall()
    assert volatility == [('s',)]


def test_recommend_is_the_brute_force_over_the_stored_weights(db):
    train(db, 'mf_rec')
    g, t = stored(db, 'mf_rec')
    items = sorted(t['q'])
    seen = {}
    for user, item in zip(USER_KEYS, ITEM_KEYS):
        seen.setdefault(user, set()).add(item)
    users = sorted(set(USER_KEYS))[:20] + ['nobody']
    got = db.execute("SELECT user_key, item, score, rank FROM pgad.recommend('mf_rec', %s::text[], 10, "
                     "seen => 'SELECT user_id, item_id FROM ratings')", [users]).fetchall()
    for user in users:
        scores = {item: predict(g, t, user, item) for item in items if item not in seen.get(user, ())}
        expected = sorted(scores, key=lambda item: (-scores[item], items.index(item)))[:10]
        mine = [(item, score) for u, item, score, _ in got if u == user]
        assert [item for item, _ in mine] == expected
        for item, score in mine:
            assert score == pytest.approx(scores[item], rel=1e-12)
    one = db.execute("SELECT item, rank FROM pgad.recommend('mf_rec', 'user001', 3)").fetchall()
    assert [r for _, r in one] == [1, 2, 3]


def test_predict_scores_a_keyed_model_by_its_scoring_function(db):
    train(db, 'mf_pred')
    data = ("SELECT user_id, item_id, user_id || '/' || item_id AS pair FROM ratings "
            "UNION ALL SELECT 'nobody', 'item01', 'nobody/item01'")
    got = db.execute("SELECT key->>'pair', prediction FROM pgad.predict('mf_pred', %s)", [data]).fetchall()
    assert len(got) == len(R) + 1  # the key: the columns the model does not read
    g, t = stored(db, 'mf_pred')
    for pair, value in got:
        assert value == pytest.approx(predict(g, t, *pair.split('/')), rel=1e-13, abs=1e-13)


def test_embeddings_are_pgvectors_text(db):
    train(db, 'mf_vec')
    _, t = stored(db, 'mf_vec')
    got = db.execute("SELECT key, vector FROM pgad.embeddings('mf_vec', 'q')").fetchall()
    assert len(got) == len(t['q'])
    for key, vector in got:
        assert vector.startswith('[') and vector.endswith(']')
        np.testing.assert_array_equal(np.array(vector[1:-1].split(','), dtype=float), t['q'][key])


def tables(db, name):
    return sorted(r[0] for r in db.execute("SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE %s "
                                           "AND relnamespace = 'pgad_models'::regnamespace", [name + '@%']).fetchall())


def test_versions_keep_their_tables_and_drop_them_with_their_functions(db):
    train(db, 'mf_v')
    train(db, 'mf_v')
    assert tables(db, 'mf_v') == [f'mf_v@{v}.{w}' for v in (1, 2) for w in ('bi', 'bu', 'p', 'q')]
    db.execute("SELECT pgad.deploy('mf_v', 1)")
    g, t = stored(db, 'mf_v', 1)
    assert db.execute("SELECT pgad_models.mf_v('user001', 'item01')").fetchone()[0] == \
        pytest.approx(predict(g, t, 'user001', 'item01'), rel=1e-13)
    db.execute("SELECT pgad.deploy('mf_v', 2)")
    with settings(db, {'pgad.keep_versions': 1}):
        train(db, 'mf_v')
    assert tables(db, 'mf_v') == [f'mf_v@{v}.{w}' for v in (2, 3) for w in ('bi', 'bu', 'p', 'q')]  # 1 pruned
    db.execute("SELECT pgad.drop_model('mf_v')")
    assert tables(db, 'mf_v') == []


def test_a_keyed_model_survives_pg_dump_and_restore(cluster, dbname, db):
    train(db, 'mf_dump')
    before = db.execute("SELECT pgad_models.mf_dump('user001', 'item01')").fetchone()[0]
    with restored(cluster, dbname) as copy:
        assert copy.execute("SELECT pgad_models.mf_dump('user001', 'item01')").fetchone()[0] == before
        assert len(copy.execute("SELECT * FROM pgad.recommend('mf_dump', 'user001', 5)").fetchall()) == 5


def test_a_role_that_may_not_read_the_data_reads_no_weight(cluster, dbname, db):
    db.execute('CREATE TABLE private_ratings AS SELECT * FROM ratings')
    train(db, 'mf_private', data='private_ratings')
    db.execute('DROP ROLE IF EXISTS keyed_outsider')
    db.execute('CREATE ROLE keyed_outsider LOGIN')
    try:
        with psycopg.connect(cluster.conninfo(dbname, user='keyed_outsider'), autocommit=True) as outsider:
            d = error_of(outsider, "SELECT pgad_models.mf_private('user001', 'item01')")
            assert d.sqlstate == '42501' and 'mf_private' in d.message_primary
            d = error_of(outsider, 'SELECT * FROM pgad_models."mf_private@1.p"')
            assert d.sqlstate == '42501'
            d = error_of(outsider, "SELECT * FROM pgad.recommend('mf_private', 'user001')")
            assert d.sqlstate == '42501'
        db.execute('GRANT SELECT ON private_ratings TO keyed_outsider')
        with psycopg.connect(cluster.conninfo(dbname, user='keyed_outsider'), autocommit=True) as reader:
            assert reader.execute("SELECT pgad_models.mf_private('user001', 'item01')").fetchone()[0] is not None
        owner = db.execute("SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class "
                           "WHERE relname LIKE 'mf_private@%'").fetchall()
        assert owner == [('postgres',)]
    finally:
        db.execute('DROP OWNED BY keyed_outsider')
        db.execute('DROP ROLE keyed_outsider')


def test_the_memory_limit_refuses_the_keyed_weights_before_any_value_is_drawn(db):
    with settings(db, {'pgad.memory_limit': '1MB'}):  # its least
        d = error_of(db, "SELECT * FROM pgad.train('mf_big', %s, 'squared', 'ratings', %s, label => 'rating')",
                     [MODEL, WEIGHTS.replace(f'[{RANK}]', '[512]')])  # 6 copies of 160 keys × 512: 3.9 MB
    assert d.sqlstate == '53200' and 'keyed weights need' in d.message_primary
    assert tables(db, 'mf_big') == []
    with settings(db, {'pgad.memory_limit': '1MB'}):  # 6 copies of 160 × 121 fit, conjugate gradients' 7 do not
        d = error_of(db, "SELECT * FROM pgad.train('mf_big', %s, 'squared', 'ratings', %s, label => 'rating', "
                         "optimizer => 'block_newton')", [MODEL, WEIGHTS.replace(f'[{RANK}]', '[120]')])
    assert d.sqlstate == '53200' and d.message_primary.startswith('optimizer "block_newton" needs 1.0 MB')
    assert tables(db, 'mf_big') == []


def test_a_training_is_cancelled_within_a_second(cluster, dbname, db):
    db.execute('CREATE TABLE many AS SELECT (g % 5000)::text AS user_id, (g % 997)::text AS item_id, '
               '(g % 7)::float8 AS rating FROM generate_series(1, 400000) AS g')
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
        pid = other.execute('SELECT pg_backend_pid()').fetchone()[0]
        timer = threading.Timer(3.0, lambda: db.execute('SELECT pg_cancel_backend(%s)', [pid]))
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            other.execute("SELECT * FROM pgad.train('mf_cancel', %s, 'squared', 'many', %s, label => 'rating', "
                          "iterations => 1000)", [MODEL, WEIGHTS.replace(f'[{RANK}]', '[16]')])
        assert time.monotonic() - started < 3.0 + 1.0
        timer.join()


def keyed_load(db, data, columns, weights, memory_limit=None, fallback=False):
    return db.execute('SELECT keyed_load(%s, %s, %s, %s, %s)', (data, columns, json.dumps(weights), memory_limit,
                                                                fallback)).fetchone()[0]


def test_the_codes_are_the_sorted_keys_whatever_order_the_rows_come_in(db):
    """Each row's code is its key's place among the sorted keys, in either order of the rows; the keys' values are
    drawn in code order, so a table read in two orders trains the same model (two sweeps: not yet at the optimum,
    where the start would no longer show)."""
    users, items = sorted(set(USER_KEYS)), sorted(set(ITEM_KEYS))
    for order in ('user_id, item_id', 'item_id DESC, user_id DESC', 'rating'):
        data = f'SELECT * FROM ratings ORDER BY {order}'
        rows = db.execute(data).fetchall()
        got = keyed_load(db, data, ['rating', 'user_id', 'item_id'], {'p': 'user_id', 'q': 'item_id'})
        assert got['keys'] == {'user_id': users, 'item_id': items}
        assert got['types'] == {'user_id': 'pg_catalog.text', 'item_id': 'pg_catalog.text'}
        assert got['columns'][1] == [users.index(u) + 1 for u, _, _ in rows]
        assert got['columns'][2] == [items.index(i) + 1 for _, i, _ in rows]
    models = []
    for k, order in enumerate(('user_id, item_id', 'item_id DESC, user_id DESC')):
        _, final, converged, _ = train(db, f'mf_order{k}', data=f'SELECT * FROM ratings ORDER BY {order}',
                                       iterations=2)
        assert not converged
        models.append((final, stored(db, f'mf_order{k}')))
    (first, (g1, t1)), (second, (g2, t2)) = models
    assert second == pytest.approx(first, rel=1e-9) and g2['mu'] == pytest.approx(g1['mu'], rel=1e-9)
    for weight in ('bu', 'bi', 'p', 'q'):
        assert t1[weight].keys() == t2[weight].keys()
        for key in t1[weight]:
            np.testing.assert_allclose(t2[weight][key], t1[weight][key], rtol=1e-9, atol=1e-12)


def test_integer_keys_sort_as_numbers(db):
    data = ('SELECT (g % 25 - 12)::int2 AS s, (g * 37 % 101)::int4 AS i, (g % 7)::int8 * 1000000000000 AS b, '
            'g::float8 AS y FROM generate_series(1, 500) AS g ORDER BY pg_catalog.md5(g::text)')
    got = keyed_load(db, data, ['y', 's', 'i', 'b'], {'ws': 's', 'wi': 'i', 'wb': 'b'})
    assert got['keys'] == {'s': [str(v) for v in range(-12, 13)], 'i': [str(v) for v in range(101)],
                           'b': [str(v * 10 ** 12) for v in range(7)]}
    assert got['types'] == {'s': 'pg_catalog.int2', 'i': 'pg_catalog.int4', 'b': 'pg_catalog.int8'}
    rows = db.execute(f'SELECT s, i, b FROM ({data}) AS d').fetchall()
    assert got['columns'][1:] == [[s + 13 for s, _, _ in rows], [i + 1 for _, i, _ in rows],
                                  [b // 10 ** 12 + 1 for _, _, b in rows]]


def test_null_keys_skip_their_rows_and_text_keys_sort_as_python_orders_them(db):
    """Non-ASCII and empty keys are keys; a NULL key skips its row (a NOTICE says so); a key whose rows are all
    skipped for another NULL is no key ('ghost')."""
    data = ("SELECT * FROM (VALUES ('b', 1.0), ('é', 2), (NULL, 3), ('', 4), ('日本', 5), ('B', 6), ('b', 7), "
            "(NULL, 8), ('ghost', NULL), ('é', 9)) AS v(k, y)")
    with heard(db) as said:
        got = keyed_load(db, data, ['y', 'k'], {'p': 'k'})
    assert got['keys'] == {'k': sorted(['b', 'é', '', '日本', 'B'])} == {'k': ['', 'B', 'b', 'é', '日本']}
    assert (got['rows'], got['skipped']) == (7, 3)
    assert got['columns'] == [[1, 2, 4, 5, 6, 7, 9], [3, 4, 1, 5, 2, 3, 4]]
    assert said == ['skipped 3 of 10 rows with NULL in "y" (1 row), "k" (2 rows)']
    d = error_of(db, "SELECT * FROM pgad.train('nulls', 'λ(d, w) w.p[d.k]', 'squared', %s, "
                     "'{\"p\": {\"shape\": []}}', label => 'y')", ["SELECT NULL::text AS k, 1.0::float8 AS y"])
    assert (d.sqlstate, d.message_primary) == ('22000', 'every row of the data has NULL in column "k", which the '
                                                        'lambda reads')
    d = error_of(db, "SELECT * FROM pgad.train('nulls', 'λ(d, w) w.p[d.k]', 'squared', %s, "
                     "'{\"p\": {\"shape\": []}}', label => 'y')", ["SELECT 'a'::text AS k, NULL::float8 AS y"])
    assert (d.sqlstate, d.message_primary) == ('22000', 'model "nulls": no rows without NULL in the columns it reads')


def test_keys_their_type_holds_equal_are_one_key(db):
    """citext's 'Ann' is 'ann': the keys the load tells apart by their text are grouped by the type's equality (one
    query over the keys), the first in text order standing for its group, and the training stores one value each."""
    db.execute('CREATE EXTENSION IF NOT EXISTS citext')
    data = ("SELECT k::citext AS k, y FROM (VALUES ('Ann', 1.0), ('bob', 2.0), ('ann', 3.0), ('ANN', 4.0), "
            "('Bob', 5.0), ('cy', 6.0)) AS v(k, y)")
    got = keyed_load(db, data, ['y', 'k'], {'p': 'k'})
    assert got['keys'] == {'k': ['ANN', 'Bob', 'cy']} and got['types'] == {'k': 'public.citext'}
    assert got['columns'][1] == [1, 2, 1, 1, 2, 3]
    db.execute("SELECT * FROM pgad.train('by_name', 'λ(d, w) w.p[d.k]', 'squared', %s, "
               "'{\"p\": {\"shape\": []}}', label => 'y')", [data])
    _, t = stored(db, 'by_name')
    assert {k: v[0] for k, v in t['p'].items()} == pytest.approx({'ANN': 8 / 3, 'Bob': 3.5, 'cy': 6.0}, rel=1e-9)
    for key in ('ann', 'Ann', 'ANN'):  # the scoring function looks a key up by the type's equality, not its text
        assert db.execute('SELECT pgad_models.by_name(%s::citext)', [key]).fetchone()[0] == pytest.approx(8 / 3)


def test_recommend_matches_keys_and_seen_pairs_by_their_types_equality(db):
    """A citext factorisation: pgad.recommend finds 'ann' as the stored 'ANN', echoes the key given, and leaves out
    what seen pairs with it in another case."""
    db.execute('CREATE EXTENSION IF NOT EXISTS citext')
    db.execute('CREATE TABLE cased AS SELECT u::citext AS u, i::citext AS i, r::float8 AS r FROM (VALUES '
               "('Ann', 'x', 5), ('ann', 'y', 1), ('bob', 'X', 4), ('bob', 'z', 2), ('Cy', 'y', 3), ('cy', 'z', 5)) "
               'AS v(u, i, r)')
    db.execute("SELECT * FROM pgad.train('cased', 'λ(d, w) dot(w.p[d.u], w.q[d.i])', 'squared', 'cased', "
               "'{\"p\": {\"shape\": [2], \"seed\": 1}, \"q\": {\"shape\": [2], \"seed\": 2}}', label => 'r', "
               "l2 => 0.01, iterations => 5)")
    upper = db.execute("SELECT user_key, item, score FROM pgad.recommend('cased', 'ANN', 3)").fetchall()
    lower = db.execute("SELECT user_key, item, score FROM pgad.recommend('cased', 'ann', 3)").fetchall()
    assert [r[0] for r in lower] == ['ann'] * 3 and [r[1:] for r in lower] == [r[1:] for r in upper]
    assert lower[0][2] != 0 or lower[1][2] != 0  # found, not scored as an unseen user
    hidden = db.execute("SELECT item FROM pgad.recommend('cased', 'aNn', 3, seen => 'SELECT ''ANN''::citext AS u, "
                        "''x''::citext AS i')").fetchall()
    assert sorted(r[0] for r in hidden) == sorted(r[1] for r in upper if r[1].lower() != 'x')


def test_200000_keys_are_coded_as_numpy_codes_them(db):
    data = ('SELECT pg_catalog.md5((g % 200000)::text) AS k, (g % 5)::float8 AS y FROM generate_series(1, 400000) '
            'AS g ORDER BY pg_catalog.hashint4(g), g')
    rows = np.array([k for k, in db.execute(f'SELECT k FROM ({data}) AS d').fetchall()])
    got = keyed_load(db, data, ['y', 'k'], {'p': 'k'})
    keys, codes = np.unique(rows, return_inverse=True)
    assert got['keys']['k'] == keys.tolist() and got['rows'] == 400000
    np.testing.assert_array_equal(got['columns'][1], codes + 1)


def test_without_the_native_load_the_keys_query_codes_the_same_keys(db):
    """Outside the server the keys are read first, a query a column, in the type's order, and the load codes them:
    each row's key is the same as the native load's."""
    data = "SELECT * FROM ratings UNION ALL SELECT 'é' || user_id, '', 1.0 FROM ratings WHERE rating > 4"
    native = keyed_load(db, data, ['rating', 'user_id', 'item_id'], {'p': 'user_id', 'q': 'item_id'})
    query = keyed_load(db, data, ['rating', 'user_id', 'item_id'], {'p': 'user_id', 'q': 'item_id'}, fallback=True)
    assert native['rows'] == query['rows'] and native['columns'][0] == query['columns'][0]
    for k, column in ((1, 'user_id'), (2, 'item_id')):
        assert sorted(native['keys'][column]) == sorted(query['keys'][column])
        assert [native['keys'][column][int(c) - 1] for c in native['columns'][k]] == \
            [query['keys'][column][int(c) - 1] for c in query['columns'][k]]


def test_one_query_reads_the_data_of_a_keyed_training(db):
    """Each row of the data advances a sequence once: the keys are found in the load's own pass."""
    db.execute('CREATE SEQUENCE IF NOT EXISTS scans')
    db.execute("SELECT setval('scans', 1, false)")
    train(db, 'mf_once', data="SELECT *, nextval('scans') AS n FROM ratings")
    assert db.execute('SELECT last_value, is_called FROM scans').fetchone() == (len(R), True)


def test_keys_past_the_memory_limit_stop_the_load_in_c(db):
    db.execute('CREATE TABLE IF NOT EXISTS crowd AS SELECT pg_catalog.md5(g::text) AS user_id, '
               '(g % 40)::text AS item_id, (g % 5)::float8 AS rating FROM generate_series(1, 100000) AS g')
    with settings(db, {'pgad.memory_limit': '1MB'}):
        d = error_of(db, "SELECT * FROM pgad.train('mf_crowd', %s, 'squared', 'crowd', %s, label => 'rating')",
                     [MODEL, WEIGHTS])
    assert d.sqlstate == '53200'
    assert d.message_primary.startswith('the keys of column "user_id" need ')
    assert d.message_primary.endswith(' with the rows, more than pgad.memory_limit (1.0 MB)')
    assert d.message_detail.startswith('Loading stopped at row ') and 'Group rare keys' in d.message_hint
    assert tables(db, 'mf_crowd') == []


def test_a_cancel_stops_a_keyed_trainings_load_within_a_second(cluster, dbname, db):
    """Nine million rows of distinct keys, streamed by a nested loop: cancelled while they load."""
    data = ('SELECT pg_catalog.md5((a * 3000 + b)::text) AS user_id, (b % 50)::text AS item_id, '
            '(a % 5)::float8 AS rating FROM generate_series(1, 3000) AS a, generate_series(1, 3000) AS b')
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
        pid = other.execute('SELECT pg_backend_pid()').fetchone()[0]
        other.execute("SELECT pgad.derivatives('λ(d, w) w.a')")
        timer = threading.Timer(1.5, lambda: db.execute('SELECT pg_cancel_backend(%s)', [pid]))
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            other.execute("SELECT * FROM pgad.train('mf_cancel_load', %s, 'squared', %s, %s, label => 'rating')",
                          [MODEL, data, WEIGHTS])
        assert time.monotonic() - started < 1.5 + 1.0
        timer.join()
        assert other.execute('SELECT 1').fetchone() == (1,)


@pytest.mark.parametrize('start, options, sqlstate, words', [
    ({'p': {'shape': [0]}}, '', '22023', 'has shape [0]'),
    ({'p': {'shape': [2], 'init': 'gamma(1)'}}, '', '22023', "init 'gamma(1)'"),
    ({'p': {'shape': [2], 'seed': -1}}, '', '22023', 'seed -1'),
    ({'p': {'shape': [2], 'scale': 1}}, '', '22023', 'unknown field "scale"'),
    ({}, ", group_by => 'user_id'", '0A000', 'no group_by for a keyed model'),
    ({}, ", optimizer => 'newton'", '0A000', 'optimizer "newton" cannot train a keyed model'),
    ({}, ', l1 => 0.1', '0A000', 'no l1 for a keyed model'),
])
def test_what_a_keyed_model_does_not_take_is_refused_by_name(db, start, options, sqlstate, words):
    weights = {**json.loads(WEIGHTS), **start}
    d = error_of(db, f"SELECT * FROM pgad.train('mf_bad', %s, 'squared', 'ratings', %s, label => 'rating'{options})",
                 [MODEL, json.dumps(weights)])
    assert d.sqlstate == sqlstate and words in d.message_primary, d.message_primary
    assert tables(db, 'mf_bad') == []


def test_recommend_refuses_a_model_without_keys(db):
    db.execute("SELECT * FROM pgad.train('plain', 'λ(d, w) w.a', 'squared', 'SELECT 1.0::float8 AS y', '{\"a\": 0}')")
    d = error_of(db, "SELECT * FROM pgad.recommend('plain', 'x')")
    assert d.sqlstate == '0A000' and 'no keyed weight' in d.message_primary
    d = error_of(db, "SELECT * FROM pgad.recommend('plain', 'x', 0)")
    assert d.sqlstate == '22023'


# --- docs/sql.md's examples, against oracles ------------------------------------------------------------------------
SECTION = '## Weights at scale: keyed weights, pgad.recommend, pgad.embeddings'


@pytest.fixture(scope='module')
def documented(cluster, tmp_path_factory):
    """The section's examples run through psql in a database of their own: (psql's result, a connection to it)."""
    from test_docs_sql import output_blocks, section_sql
    name = new_database(cluster, 'docs_keyed')
    with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        script = tmp_path_factory.mktemp('keyed') / 'section.sql'
        script.write_text(section_sql(SECTION))
        result = subprocess.run(['psql', '-X', '-v', 'ON_ERROR_STOP=1', '-h', '127.0.0.1', '-p',
                                 str(cluster.settings['port']), '-U', 'postgres', '-d', name, '-f', str(script)],
                                capture_output=True, text=True)
        yield result, db, output_blocks(SECTION)
    with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


def test_the_sections_examples_run_as_shown(documented):
    result, _, shown = documented
    assert result.returncode == 0, result.stderr
    printed = [line.strip() for line in result.stdout.splitlines()]
    lines = [line.strip() for block in shown[1:] for line in block.splitlines()]  # [0]: the signatures
    assert lines and [line for line in lines if line not in printed] == []


def weighted_als(u, i, r, c, rank, lam, biases, sweeps=4000):
    """numpy's alternating least squares of Σ c·(r − μ − b_u − b_i − p_u·q_i)² + λ(Σ|p|² + Σ|q|² + Σb²) (μ
    unpenalised; without biases, of Σ c·(r − p_u·q_i)² + λ(Σ|p|² + Σ|q|²)): the objective at its optimum."""
    uk, u = np.unique(u, return_inverse=True)
    ik, i = np.unique(i, return_inverse=True)
    rng = np.random.default_rng(3)
    P, Q = rng.normal(0, 0.3, (len(uk), rank)), rng.normal(0, 0.3, (len(ik), rank))
    bu, bi, mu = np.zeros(len(uk)), np.zeros(len(ik)), 0.0
    extra = 1 if biases else 0

    def solve(idx, other, target, n):
        X = np.c_[np.ones(len(idx)), other] if biases else other
        A = np.zeros((n, rank + extra, rank + extra))
        b = np.zeros((n, rank + extra))
        np.add.at(A, idx, c[:, None, None] * X[:, :, None] * X[:, None, :])
        np.add.at(b, idx, (c * target)[:, None] * X)
        return np.linalg.solve(A + lam * np.eye(rank + extra), b[..., None])[..., 0]
    for _ in range(sweeps):
        if biases:
            mu = np.sum(c * (r - bu[u] - bi[i] - (P[u] * Q[i]).sum(1))) / np.sum(c)
        x = solve(u, Q[i], r - mu - bi[i], len(uk))
        bu, P = (x[:, 0], x[:, 1:]) if biases else (bu, x)
        x = solve(i, P[u], r - mu - bu[u], len(ik))
        bi, Q = (x[:, 0], x[:, 1:]) if biases else (bi, x)
    e = r - mu - bu[u] - bi[i] - (P[u] * Q[i]).sum(1)
    return np.sum(c * e * e) + lam * ((P ** 2).sum() + (Q ** 2).sum() + (bu ** 2).sum() + (bi ** 2).sum())


def test_the_factorisation_example_is_alternating_least_squares(documented):
    _, db, _ = documented
    rows = np.array([(uu, ff) for uu in range(1, 41) for ff in range(1, 16) if (uu + 2 * ff) % 3 != 0])
    uu, ff = rows[:, 0], rows[:, 1]
    stars = 3 + 0.4 * (uu % 3 - 1) + 0.3 * (ff % 4 - 1.5) + 1.5 * np.cos(uu) * np.sin(ff)
    final, n = db.execute("SELECT final_loss, rows FROM pgad.models WHERE name = 'films'").fetchone()
    assert n == len(rows)
    expected = weighted_als(uu, ff, stars, np.ones(len(rows)), 2, 0.001 * n, True)
    assert final * n == pytest.approx(expected, rel=1e-7)


def test_the_implicit_example_is_weighted_alternating_least_squares(documented):
    _, db, _ = documented
    seen = {(uu, b): (uu * b) % 4 for uu in range(1, 26) for b in range(1, 11)
            if (uu + b) % 3 == 0 or uu % 5 == b % 5}
    readers = sorted({uu for uu, _ in seen})
    books = sorted({b for _, b in seen})
    pairs = np.array([(uu, b) for uu in readers for b in books])
    borrowed = np.array([seen.get((uu, b), 0) for uu, b in pairs], dtype=float)
    final, n = db.execute("SELECT final_loss, rows FROM pgad.models WHERE name = 'shelf'").fetchone()
    assert n == len(pairs)
    expected = weighted_als(pairs[:, 0], pairs[:, 1], np.minimum(borrowed, 1), 1 + 10 * borrowed, 2, 0.01 * n,
                            False)
    assert final * n == pytest.approx(expected, rel=1e-7)


def test_the_embeddings_example_is_scikit_learns_logistic_regression(documented):
    from sklearn.linear_model import LogisticRegression
    _, db, _ = documented
    data = db.execute('SELECT t.taste, s.renewed FROM tastes AS t JOIN subscribers AS s USING (user_id)').fetchall()
    X = np.array([np.r_[taste, 1.0] for taste, _ in data])  # the intercept as a column: pgad's l2 takes it too
    y = np.array([renewed for _, renewed in data], dtype=int)
    oracle = LogisticRegression(C=1 / (2 * 0.01 * len(y)), fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    weights = db.execute("SELECT weights FROM pgad.models WHERE name = 'renewal'").fetchone()[0]
    np.testing.assert_allclose([*weights['v'], weights['b']], oracle.coef_[0], rtol=1e-5, atol=1e-6)
