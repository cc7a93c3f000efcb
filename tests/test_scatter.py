"""The llvm backend's kernel of a keyed model (pgad/jit/scatter.py): a row's keys' values gathered, its derivatives
added at its keys, compiled.

Against the python backend's kernel (keyed.Kernel's numpy plan and np.bincount) on generated ratings: the loss and
the gradient of a factorisation under the squared and logistic losses, and block Newton's Hessian sums of each group,
read through an index or from the rows arranged in key order, by chunks of keys. A key's rows are added in row order
by one thread, so the sums of a keyed group are the same bits on 1, 2 and 3 threads (what the docstring promises).
A key out of range (0, past K, NaN, ∞, negative) skips its row and reads and writes nothing outside the arrays; arrays
too small for the places a key reaches are refused before the machine code runs; a call over many rows is cut in
pieces and a cancel stops it. Run under each llvm target by `make test` (EQUALITY_TESTS).
"""
from types import SimpleNamespace

import numpy as np
import pytest

from pgad import keyed, limits, program
from pgad.jit import scatter, threads
from pgad.limits import DEFAULT
from pgad.models import blocks, descent, objective

MF = 'λ(d, w) w.mu + w.bu[d.u] + w.bi[d.i] + dot(w.p[d.u], w.q[d.i])'
START = {'mu': 0, 'bu': {}, 'bi': {}, 'p': {'shape': [4], 'seed': 1}, 'q': {'shape': [4], 'seed': 2}}
USERS, ITEMS = 300, 80
CLOCK = descent.Clock(lambda: None, lambda m: None, 1)


def kernels(loss='squared', users=USERS, items=ITEMS, rank=4):
    """(python Kernel, llvm Kernel, layout, w, local text) of the factorisation, its vectors of `rank` values."""
    lam = program.parsed(objective.build(MF, loss, 'y', DEFAULT).text, DEFAULT)
    found = keyed.found(dict(START, p={'shape': [rank], 'seed': 1}, q={'shape': [rank], 'seed': 2}), lam)
    found.keys = {'u': [str(k) for k in range(1, users + 1)], 'i': [str(k) for k in range(1, items + 1)]}
    prog, layout, text = keyed.build(lam, found, {'mu': ()}, DEFAULT)
    w = np.zeros(layout.size)
    for name in layout.keyed:
        w[layout.spans[name]] = keyed.start(found, name).ravel()
    w[layout.spans['mu']] = 0.2
    w[layout.spans['bu']] = np.linspace(-0.5, 0.5, users)
    columns = [*prog.columns, 'u', 'i']
    return keyed.Kernel(prog, layout, columns, 'python'), keyed.Kernel(prog, layout, columns, 'llvm'), layout, w, text


def ratings(n, loss='squared', seed=0):
    rng = np.random.default_rng(seed)
    u = rng.integers(1, USERS + 1, n).astype(float)
    i = rng.integers(1, ITEMS + 1, n).astype(float)
    y = rng.normal(3, 1, n)
    return [y if loss == 'squared' else (y > 3).astype(float), u, i]


@pytest.mark.parametrize('loss', ['squared', 'logistic'])
def test_the_loss_and_gradient_are_the_python_backends(loss):
    python, llvm, _, w, _ = kernels(loss)
    columns = ratings(5000, loss)
    expected = python(columns, 5000, w)
    got = llvm(columns, 5000, w)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    assert llvm.loss(columns, 5000, w) == pytest.approx(expected[0], rel=1e-13)


def groups_of(kernel, layout, text):
    return [blocks.Group(text, ['mu'], layout, DEFAULT, kernel.prog.dims),
            blocks.Group(text, ['bu', 'p'], layout, DEFAULT, kernel.prog.dims, 'u'),
            blocks.Group(text, ['bi', 'q'], layout, DEFAULT, kernel.prog.dims, 'i')]


@pytest.mark.parametrize('loss', ['squared', 'logistic'])
def test_the_hessian_sums_are_the_python_backends_indexed_arranged_and_by_chunks(loss):
    python, llvm, layout, w, text = kernels(loss)
    same_hessian_sums(python, llvm, layout, w, text, ratings(20_000, loss, seed=1))


def same_hessian_sums(python, kernel, layout, w, text, columns):
    """Each group's Hessian sums by kernel (llvm's, or cuda's: tests/test_gpu_keyed.py) are the python backend's:
    the rows read through their order, by chunks of keys, and arranged in key order."""
    rows = len(columns[0])
    table = SimpleNamespace(columns=list(columns), rows=rows)
    for slow, fast in zip(groups_of(python, layout, text), groups_of(kernel, layout, text)):
        g, h = slow.sums(python, table, w, CLOCK)
        for k0, k1 in [(0, slow.count), (0, 1), (slow.count // 3, slow.count)]:
            got = fast.sums(kernel, table, w, CLOCK, k0, k1)  # the rows read through their order
            np.testing.assert_allclose(got[0], g[k0:k1], rtol=1e-12, atol=1e-9)
            np.testing.assert_allclose(got[1], h[k0:k1], rtol=1e-12, atol=1e-9)
    arranged = SimpleNamespace(columns=list(columns), rows=rows)
    fast = groups_of(kernel, layout, text)
    blocks.arrange(fast, kernel, arranged, spare=None)  # the table in the users' order, a copy in the items'
    assert fast[1].columns is not None and fast[2].columns is not None
    np.testing.assert_array_equal(np.diff(arranged.columns[1]) >= 0, True)
    for slow, group in zip(groups_of(python, layout, text), fast):
        g, h = slow.sums(python, table, w, CLOCK)
        got = group.sums(kernel, arranged, w, CLOCK)
        np.testing.assert_allclose(got[0], g, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(got[1], h, rtol=1e-12, atol=1e-9)


def test_a_group_past_the_spare_bytes_reads_its_rows_through_its_order():
    _, llvm, layout, w, text = kernels()
    table = SimpleNamespace(columns=ratings(1000), rows=1000)
    groups = groups_of(llvm, layout, text)
    blocks.arrange(groups, llvm, table, spare=8 * 1000 * 3 - 1)  # the table permuted in place, no room for a copy
    assert groups[1].columns is not None and groups[2].columns is None


def test_a_keyed_groups_sums_are_the_same_bits_on_any_thread_count():
    _, llvm, layout, w, text = kernels()
    columns = ratings(3 * threads.SHARE_ROWS + 5, seed=2)
    found = []
    for count in (1, 2, 3):
        outer = threads.on_count(lambda: count)
        try:
            for arranged in (False, True):
                table = SimpleNamespace(columns=list(columns), rows=len(columns[0]))
                groups = groups_of(llvm, layout, text)
                if arranged:
                    blocks.arrange(groups, llvm, table)
                found.append([groups[k].sums(llvm, table, w, CLOCK)[1] for k in (1, 2)])
        finally:
            threads.on_count(*outer)
    for k, other in enumerate(found[2:]):  # indexed and arranged, each on 1, 2 and 3 threads
        for a, b in zip(found[k % 2], other):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('bad', [0.0, USERS + 1.0, np.nan, np.inf, -np.inf, -3.0, 1e300, -0.5])
def test_a_key_out_of_range_skips_its_row_and_touches_nothing_outside(bad):
    python, llvm, layout, w, text = kernels()
    y, u, i = ratings(400, seed=3)
    u[::7] = bad
    good = np.isfinite(u) & (u >= 1) & (u <= USERS)
    expected = python([y[good], u[good], i[good]], int(good.sum()), w)
    np.testing.assert_allclose(llvm([y, u, i], 400, w), expected, rtol=1e-12, atol=1e-12)
    table = SimpleNamespace(columns=[y, u, i], rows=400)
    group = groups_of(llvm, layout, text)[2]  # the items' blocks, each row reading its user's values
    g, _ = group.sums(llvm, table, w, CLOCK)
    kept = SimpleNamespace(columns=[y[good], u[good], i[good]], rows=int(good.sum()))
    reference = groups_of(python, layout, text)[2].sums(python, kept, w, CLOCK)[0]
    np.testing.assert_allclose(g, reference, rtol=1e-12, atol=1e-12)


def test_arrays_too_small_for_the_places_a_key_reaches_are_refused_before_it_runs():
    _, llvm, layout, w, _ = kernels()
    columns = ratings(100)
    compiled = llvm.compiled(llvm.prog.graph, llvm.prog.outputs, llvm.places())
    with pytest.raises(ValueError, match='outside its array'):
        compiled(columns, 100, w[:-1], np.zeros(1 + layout.size), llvm.keys)   # the last key's value missing
    with pytest.raises(ValueError, match='outside its array'):
        compiled(columns, 100, w, np.zeros(layout.size), llvm.keys)             # no room for the last derivative
    with pytest.raises(ValueError, match='outside its array'):
        compiled(columns, 100, w, np.zeros(1 + layout.size), {c: k + 1 for c, k in llvm.keys.items()})  # a K past
    with pytest.raises(ValueError, match='fewer than'):
        compiled(columns, 101, w, np.zeros(1 + layout.size), llvm.keys)
    with pytest.raises(ValueError, match='contiguous float64'):
        compiled(columns, 100, w, np.zeros(1 + layout.size, dtype=np.float32), llvm.keys)
    indexed = llvm.compiled(llvm.prog.graph, llvm.prog.outputs[:1], [(None, 0, 0)], indexed=True)
    for index in (np.array([0, 100]), np.array([-1, 0])):
        with pytest.raises(ValueError, match='rows the columns do not have'):
            indexed(columns, 2, w, np.zeros(1), llvm.keys, index=index)


def test_a_call_over_many_rows_runs_in_pieces_and_a_cancel_stops_it():
    _, llvm, _, w, _ = kernels()
    compiled = llvm.compiled(llvm.prog.graph, llvm.prog.outputs, llvm.places())
    rows = 4 * int(threads.PIECE_NS / compiled.row_ns)  # four pieces' worth
    columns = ratings(rows, seed=4)
    assert interrupt_checks(lambda: llvm(columns, rows, w)) == 1  # stopped after its first piece


def interrupt_checks(call):
    """How often call() checked for interrupts, each check a cancel: it raises at the first."""
    checks = []

    def cancel():
        checks.append(1)
        raise KeyboardInterrupt
    outer = limits.on_interrupts(cancel)
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        limits.on_interrupts(outer)
    return len(checks)


def test_a_kernel_no_tier_compiles_is_54001_on_llvm_and_python_on_auto(monkeypatch):
    python, llvm, layout, w, _ = kernels()
    monkeypatch.setattr(scatter, 'tier', lambda *args: None)
    with pytest.raises(Exception) as caught:
        llvm(ratings(10), 10, w)
    assert getattr(caught.value, 'sqlstate', None) == '54001'
    auto = keyed.Kernel(llvm.prog, layout, llvm.columns, 'auto')
    columns = ratings(10)
    np.testing.assert_array_equal(auto(columns, 10, w), python(columns, 10, w))
