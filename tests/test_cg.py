"""The llvm backend's Newton step of a keyed group (pgad/jit/cg.py): every key's conjugate gradients in one kernel,
over its rows in key order; and block Newton's step without a line search where a group's objective is quadratic.

Against numpy's conjugate gradients over the python backend's Hessian-vector passes (blocks.conjugate_gradients,
what the python backend runs) under the squared and logistic losses, for the rows arranged in key order and read
through their order; solved tightly, against numpy's solve of each key's whole Hessian block (the python backend's
sums). A key's step has the same bits on 1, 2 and 3 threads. A row whose own key is not the key it is summed for, or
whose other key is out of range, is skipped; starts out of order, an index or columns too short, weights too small
are refused before the machine code runs; a call over many rows runs in pieces and a cancel stops it. Run under each
llvm target by `make test` (EQUALITY_TESTS).
"""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from pgad import keyed, program
from pgad.jit import scatter, threads
from pgad.limits import DEFAULT
from pgad.models import blocks, descent
from test_scatter import groups_of, interrupt_checks, kernels, ratings

CLOCK = descent.Clock(lambda: None, lambda m: None, 1)
L2 = 0.3
RANK = 20  # the vectors' values: a key's block of 21, solved by conjugate gradients (blocks.CG_FROM)


def by_user(rows, seed, count):
    """(ratings(rows) in the users' order, where each of the `count` users' rows begin, the order)."""
    y, u, i = ratings(rows, seed=seed)
    order = np.argsort(u, kind='stable')
    columns = [y[order], u[order], i[order]]
    return columns, np.searchsorted(columns[1], np.arange(1, count + 2)), order


def ridge(group, layout):
    penalty = keyed.Ridge(L2, {k: 0.0 if k == 'mu' else 1.0 for k in layout.spans}, layout.spans)
    return penalty, 2 * L2 * group.scale(penalty)


@pytest.mark.parametrize('arranged', [True, False])
@pytest.mark.parametrize('loss', ['squared', 'logistic'])
def test_each_keys_step_is_numpys_conjugate_gradients(loss, arranged):
    python, llvm, layout, w, text = kernels(loss, rank=RANK)
    columns = ratings(6000, loss, seed=5)
    for k in (1, 2):
        table = SimpleNamespace(columns=list(columns), rows=6000)
        fast = groups_of(llvm, layout, text)
        if arranged:
            blocks.arrange(fast, llvm, table)
        slow = groups_of(python, layout, text)[k]
        assert fast[k].conjugate
        penalty, _ = ridge(slow, layout)
        d, measure = blocks.newton_step(slow, python, SimpleNamespace(columns=list(columns), rows=6000), w, penalty,
                                        6000, CLOCK, blocks.CG_RESIDUAL, slow.m)
        got, got_measure = blocks.newton_step(fast[k], llvm, table, w, penalty, 6000, CLOCK, blocks.CG_RESIDUAL,
                                              slow.m)
        np.testing.assert_allclose(got, d, rtol=1e-9, atol=1e-12 * np.abs(d).max())
        assert got_measure == pytest.approx(measure, rel=1e-11)


def test_a_tight_step_is_each_keys_block_solved():
    python, llvm, layout, w, text = kernels(rank=17)
    table = SimpleNamespace(columns=ratings(3000, seed=6), rows=3000)
    group = groups_of(llvm, layout, text)[1]
    penalty, scale = ridge(group, layout)
    g, h = _hessian_group(text, layout, python).sums(python, table, w, CLOCK)
    g = g / 3000 + scale * group.at(w, 0, group.count)
    h = h / 3000 + np.diag(scale)
    d, measure = blocks.newton_step(group, llvm, table, w, penalty, 3000, CLOCK, 1e-12, group.m)
    np.testing.assert_allclose(d, np.linalg.solve(h, g[..., None])[..., 0], rtol=1e-8, atol=1e-12)
    assert measure == pytest.approx(float(np.sum(g * d)), rel=1e-10)


def _hessian_group(text, layout, kernel):
    """The users' group solved from its whole Hessian blocks, whatever its size."""
    original = blocks.CG_FROM
    blocks.CG_FROM = math.inf
    try:
        return blocks.Group(text, ['bu', 'p'], layout, DEFAULT, kernel.prog.dims, 'u')
    finally:
        blocks.CG_FROM = original


def test_a_keys_step_is_the_same_bits_on_any_thread_count():
    _, llvm, layout, w, text = kernels(rank=RANK)
    columns = ratings(3 * threads.LOOP_SHARE_ROWS + 7, seed=7)
    found = []
    for count in (1, 2, 3):
        outer = threads.on_count(lambda: count)
        try:
            table = SimpleNamespace(columns=list(columns), rows=len(columns[0]))
            groups = groups_of(llvm, layout, text)
            blocks.arrange(groups, llvm, table)
            penalty, _ = ridge(groups[1], layout)
            found.append([blocks.newton_step(groups[k], llvm, table, w, penalty, table.rows, CLOCK,
                                             blocks.CG_RESIDUAL, 20) for k in (1, 2)])
        finally:
            threads.on_count(*outer)
    for other in found[1:]:
        for (d, m), (e, n) in zip(found[0], other):
            np.testing.assert_array_equal(d, e)
            assert m == n


@pytest.mark.parametrize('bad', [0.0, 81.0, np.nan, np.inf, -3.0, 1e300])
def test_a_row_of_another_key_or_an_item_out_of_range_is_skipped(bad):
    _, llvm, layout, w, text = kernels(rank=RANK)
    group = groups_of(llvm, layout, text)[1]
    (y, u, i), starts, _ = by_user(2000, 8, group.count)
    solver = group.solver(llvm, False)
    _, scale = ridge(group, layout)
    clean = solver([y, u, i], starts, w, llvm.keys, 1 / 2000, 0.01, scale, 20)
    keep = np.ones(2000, dtype=bool)
    keep[::9] = False
    i_bad, u_bad = i.copy(), u.copy()
    i_bad[::9] = bad            # every ninth row's item out of range
    u_bad[1::9] = u[1::9] + 1   # and the next one's user another key's, though it lies among this key's rows
    keep[1::9] = False
    got = solver([y, u_bad, i_bad], starts, w, llvm.keys, 1 / 2000, 0.01, scale, 20)
    # the reference: those rows gone, each key's rows where they were
    kept_starts = np.concatenate([[0], np.cumsum([keep[a:b].sum() for a, b in zip(starts[:-1], starts[1:])])])
    expected = solver([y[keep], u[keep], i[keep]], kept_starts, w, llvm.keys, 1 / 2000, 0.01, scale, 20)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12, atol=1e-15)  # the rows' sums grouped otherwise
    assert not np.array_equal(got[0], clean[0])


def test_arrays_that_do_not_fit_are_refused_before_it_runs():
    _, llvm, layout, w, text = kernels(rank=RANK)
    group = groups_of(llvm, layout, text)[1]
    columns, starts, order = by_user(500, 9, group.count)
    y, u, i = ratings(500, seed=9)
    solver = group.solver(llvm, False)
    _, scale = ridge(group, layout)
    args = (llvm.keys, 1 / 500, 0.01, scale, 20)
    with pytest.raises(ValueError, match='offset a key'):
        solver(columns, starts[:-1], w, *args)
    backwards = starts.copy()
    backwards[5], backwards[6] = backwards[6] + 1, backwards[5]
    with pytest.raises(ValueError, match='offset a key'):
        solver(columns, backwards, w, *args)
    with pytest.raises(ValueError, match='fewer than'):
        solver([c[:-1] for c in columns], starts, w, *args)
    with pytest.raises(ValueError, match='outside the weights'):
        solver(columns, starts, w[:-1], *args)
    with pytest.raises(ValueError, match='ridge'):
        solver(columns, starts, w, llvm.keys, 1 / 500, 0.01, scale[:-1], 20)
    indexed = group.solver(llvm, True)
    for index in (np.append(order[:-1], 500), np.append(order[:-1], -1), order[:-1]):
        with pytest.raises(ValueError, match='rows the columns do not have'):
            indexed([y, u, i], starts, w, *args, index=index)


def test_a_call_over_many_rows_runs_in_pieces_and_a_cancel_stops_it():
    _, llvm, layout, w, text = kernels(rank=RANK)
    group = groups_of(llvm, layout, text)[1]
    solver = group.solver(llvm, False)
    rows = 4 * int(threads.PIECE_NS / (solver.row_ns * 21)) + 1000  # four pieces' worth at 20 steps
    columns, starts, _ = by_user(rows, 10, group.count)
    _, scale = ridge(group, layout)
    checks = interrupt_checks(lambda: solver(columns, starts, w, llvm.keys, 1 / rows, 0.0, scale, 20))
    assert checks == 1  # stopped after its first piece


def test_no_tier_is_54001_on_llvm_and_numpys_steps_on_auto(monkeypatch):
    _, llvm, layout, w, text = kernels(rank=RANK)
    auto = keyed.Kernel(llvm.prog, layout, llvm.columns, 'auto')
    table = SimpleNamespace(columns=ratings(300, seed=11), rows=300)
    group = groups_of(auto, layout, text)[1]
    penalty, _ = ridge(group, layout)
    expected = blocks.newton_step(group, auto, table, w, penalty, 300, CLOCK, 0.1, 20)
    monkeypatch.setattr(scatter, 'tier', lambda *args: None)
    with pytest.raises(Exception) as caught:
        group.solver(llvm, False)
    assert getattr(caught.value, 'sqlstate', None) == '54001'
    auto = keyed.Kernel(llvm.prog, layout, llvm.columns, 'auto')
    got = blocks.newton_step(groups_of(auto, layout, text)[1], auto, table, w, penalty, 300, CLOCK, 0.1, 20)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize('text, names, degree', [
    ('λ(d, w) (w.a*d.x + w.b - d.y)^2', {'w.a', 'w.b'}, 2),
    ('λ(d, w) (w.a*w.c*d.x - d.y)^2', {'w.a'}, 2),
    ('λ(d, w) (w.a*w.c*d.x - d.y)^2', {'w.a', 'w.c'}, 4),
    ('λ(d, w) (w.a*d.x - d.y)^2 / d.z + exp(w.c)', {'w.a'}, 2),
    ('λ(d, w) (w.a*d.x - d.y)^2 / d.z + exp(w.c)', {'w.c'}, math.inf),
    ('λ(d, w) abs(w.a*d.x - d.y)', {'w.a'}, math.inf),
    ('λ(d, w) (w.a - d.y)^3', {'w.a'}, math.inf),
    ('λ(d, w) d.x / w.a', {'w.a'}, math.inf),
    ('λ(d, w) CASE WHEN d.x > 0 THEN w.a^2 ELSE 0 END', {'w.a'}, math.inf),
    ('λ(d, w) ln(1 + exp(-d.y * w.a * d.x))', {'w.a'}, math.inf),
])
def test_a_groups_objective_is_quadratic_only_where_it_is_a_polynomial_of_degree_two(text, names, degree):
    lam = program.parsed(text, DEFAULT)
    leaves = {lam.graph.nodes[n].value for n in lam.graph.ancestors([lam.root]) if lam.graph.nodes[n].op == 'weight'}
    assert blocks.degree(lam.graph, lam.root, {e for e in leaves if 'w.' + e in names or e in names}) == degree


@pytest.mark.parametrize('backend', ['python', 'llvm'])
def test_a_quadratic_fit_reports_the_objective_it_measures(backend):
    python, llvm, layout, w, text = kernels(rank=RANK)
    kernel = llvm if backend == 'llvm' else python
    columns = ratings(4000, seed=12)
    table = SimpleNamespace(columns=list(columns), rows=4000)
    groups = groups_of(kernel, layout, text)
    assert all(g.quadratic for g in groups)
    penalty = keyed.Ridge(L2 / 4000, {k: 0.0 if k == 'mu' else 1.0 for k in layout.spans}, layout.spans)
    passes = []

    def loss_only(v):
        passes.append(1)
        return kernel.loss(table.columns, table.rows, v)
    fit, start = blocks.fit(kernel, table, w, groups, penalty, 6, 0, CLOCK, loss_only)
    assert len(passes) < 3 * 6  # no line search: the objective's value predicted from the step
    assert fit.loss == kernel.loss(table.columns, table.rows, fit.weights) / 4000 + penalty.value(fit.weights)
    assert all(b < a for a, b in zip([start, *fit.history], fit.history))


def test_a_logistic_groups_step_is_still_searched():
    python, llvm, layout, w, text = kernels('logistic')
    table = SimpleNamespace(columns=ratings(3000, 'logistic', seed=13), rows=3000)
    groups = groups_of(llvm, layout, text)
    assert [g.quadratic for g in groups] == [False, False, False]
    penalty = keyed.Ridge(L2 / 3000, {k: 0.0 if k == 'mu' else 1.0 for k in layout.spans}, layout.spans)
    fit, start = blocks.fit(llvm, table, w, groups, penalty, 4, 0, CLOCK,
                            lambda v: llvm.loss(table.columns, table.rows, v))
    assert all(b <= a for a, b in zip([start, *fit.history], fit.history))
