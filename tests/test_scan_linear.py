"""A linear recurrence by the parallel scan (pgad/scan_linear.py) against the sequential reference
(sequences.gradient and run in order, reverse mode): exponential smoothing, AR(p) with lag fields, ARX, many ragged
sequences, a sequence of 1e6 rows, scales 1e-8 … 1e8; the same bits run to run and on any number of threads; a
non-linear step never taken by the scan. All in float64 with fixed seeds; the last test is SQL end to end."""
import json

import numpy as np
import pytest

from conftest import calls_of, peak_bytes, used_two
from pgad import limits, scan_linear, sequences
from pgad.errors import PgadError
from pgad.jit import threads
from pgad.models import sequence

RELATIVE = 1e-12    # the scan against the reference, relative to the largest number of the same sum's terms

SES = {'level': {'start': 'w.l0', 'next': 's.level + w.alpha*(d.y - s.level)'}}
HOLT = {'level': {'start': 'w.l0', 'next': 's.level + s.trend + w.alpha*(d.y - s.level - s.trend)'},
        'trend': {'start': 'w.b0', 'next': 's.trend + w.beta*(d.y - s.level - s.trend)'}}
SEASON = {f's{k}': {'start': f'w.s{k}', 'next': f's.s{k + 1}'} for k in range(1, 7)}
HOLT_WINTERS = {'level': {'start': 'w.l0', 'next': 's.level + s.trend + w.alpha*(d.y - s.level - s.trend - s.s1)'},
                'trend': {'start': 'w.b0', 'next': 's.trend + w.beta*(d.y - s.level - s.trend - s.s1)'},
                **SEASON, 's7': {'start': 'w.s7', 'next': 's.s1 + w.gamma*(d.y - s.level - s.trend - s.s1)'}}


def ar_state(p):
    return {'l1': {'start': '0', 'next': 'd.y'},
            **{f'l{k}': {'start': '0', 'next': f's.l{k - 1}'} for k in range(2, p + 1)}}


def ar_model(p, extra=''):
    return 'λ(d, w, s) w.c + ' + ' + '.join(f'w.p{k}*s.l{k}' for k in range(1, p + 1)) + extra


MODELS = {  # name: (model, state, weights, columns)
    'ses': ('λ(d, w, s) s.level', SES, {'alpha': 0.3, 'l0': 1.0}, ('y',)),
    'holt': ('λ(d, w, s) s.level + s.trend', HOLT, {'alpha': 0.4, 'beta': 0.1, 'l0': 1.0, 'b0': 0.1}, ('y',)),
    'holt_winters': ('λ(d, w, s) s.level + s.trend + s.s1', HOLT_WINTERS,
                     {'alpha': 0.3, 'beta': 0.05, 'gamma': 0.2, 'l0': 1.0, 'b0': 0.1,
                      **{f's{k}': 0.1 * k - 0.4 for k in range(1, 8)}}, ('y',)),
    'ar7': (ar_model(7), ar_state(7), {'c': 0.1, **{f'p{k}': 0.5 / k for k in range(1, 8)}}, ('y',)),
    'arx': (ar_model(2, ' + w.b*d.x'), ar_state(2), {'c': 0.1, 'p1': 0.5, 'p2': -0.2, 'b': 0.7}, ('y', 'x')),
}


def step_of(model, state, weights):
    return sequence.step_of(model, 'squared', 'y', json.dumps(state), json.dumps(weights), limits.DEFAULT,
                            1 << 30)[0]


def columns(names, rows, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return {'y': scale * (5 + np.cumsum(rng.normal(0, 1, rows)) / np.sqrt(1 + np.arange(rows)) +
                          rng.normal(0, 1, rows)),
            **({'x': scale * rng.normal(0, 1, rows)} if 'x' in names else {})}


def one(rows, names=('y',), seed=1, scale=1.0):
    return sequences.Sequences(columns(names, rows, seed, scale), np.array([0]), np.array([rows]))


def ragged(lengths, names=('y',), seed=2):
    """Sequences of the given lengths, stored in another order than theirs (starts not increasing)."""
    lengths = np.array(lengths)
    placed = np.random.default_rng(seed).permutation(len(lengths))
    starts = np.empty(len(lengths), dtype=np.int64)
    starts[placed] = np.concatenate([[0], np.cumsum(lengths[placed])[:-1]])
    return sequences.Sequences(columns(names, int(lengths.sum()), seed), starts, lengths)


def close(found, expected, terms):
    """found equals expected to RELATIVE of terms (the size of the largest term of each number's sum)."""
    assert np.all(np.abs(found - expected) <= RELATIVE * terms), np.max(np.abs(found - expected) / terms)


def weights_of(spec, scale=1.0):
    return np.array([v * (scale if k in ('l0', 'b0', 'c') or k.startswith('s') and k[1:].isdigit() else 1)
                     for k, v in spec.items()])


@pytest.mark.parametrize('name', sorted(MODELS))
def test_the_scan_equals_the_sequential_reference(name):
    model, state, weights, names = MODELS[name]
    step = step_of(model, state, weights)
    assert scan_linear.linear(step)
    w = weights_of(weights)
    for rows in (1, 7, 64, 1000, 20_000):
        seqs = one(rows, names)
        loss, grad = sequences.gradient(step, seqs, w, parallel=False)
        scan_loss, scan_grad = sequences.gradient(step, seqs, w, parallel=True)
        terms = np.abs(grad).max() + np.abs(seqs.columns['y']).max() ** 2
        close(scan_loss, loss, loss)
        close(scan_grad, grad, terms)
        ran = sequences.run(step, seqs, w, keep='predictions', parallel=False)
        scanned = sequences.run(step, seqs, w, keep='predictions', parallel=True)
        close(scanned[0], ran[0], ran[0])
        close(scanned[1], ran[1], np.abs(ran[1]).max() + 1)
        close(scanned[2], ran[2], np.abs(ran[2]).max() + 1)


@pytest.mark.parametrize('name', ['holt_winters', 'arx'])
def test_many_ragged_sequences(name):
    """Sequences of lengths 1 … 3,000 (every one cut from the others at its first and last row), one weight vector
    for all, and a weight vector a sequence (P × G)."""
    model, state, weights, names = MODELS[name]
    step = step_of(model, state, weights)
    seqs = ragged([1, 2, 31, 32, 33, 100, 3000, 5, 1200, 64, 65, 1], names)
    w = weights_of(weights)
    each = w[:, None] * (1 + 0.01 * np.arange(seqs.count))[None, :]
    for given in (w, each):
        loss, grad = sequences.gradient(step, seqs, given, parallel=False)
        scan_loss, scan_grad = sequences.gradient(step, seqs, given, parallel=True)
        close(scan_loss, loss, loss)
        close(scan_grad, grad, np.abs(grad).max(axis=0) + np.abs(seqs.columns['y']).max() ** 2)
        ran, scanned = sequences.run(step, seqs, given, 'predictions', False), \
            sequences.run(step, seqs, given, 'predictions', True)
        close(scanned[1], ran[1], np.abs(ran[1]).max() + 1)
        close(scanned[2], ran[2], np.abs(ran[2]).max() + 1)


def test_run_in_chunks_gives_predictions_like_a_column():
    """run() by the scan over a budget of several chunks, the states carried from chunk to chunk: the reference's
    loss, last states and predictions. The predictions are an array like a column, rows that are in no sequence
    included (a group of the data left out); without keep, none."""
    model, state, weights, names = MODELS['holt_winters']
    step = step_of(model, state, weights)
    seqs = ragged([20_000, 1, 31, 7_000, 33, 20_000, 1_000])
    rows = int(seqs.lengths.sum())
    seqs = sequences.Sequences({'y': np.concatenate([seqs.columns['y'], [7.0] * 10])}, seqs.starts, seqs.lengths)
    budget = 4 << 20
    assert len(scan_linear._Layout(step, seqs, weights_of(weights), budget).chunks()) > 2
    ran = sequences.run(step, seqs, weights_of(weights), keep='predictions', parallel=False)
    scanned = sequences.run(step, seqs, weights_of(weights), keep='predictions', parallel=True, tile_bytes=budget)
    close(scanned[0], ran[0], ran[0])
    close(scanned[1], ran[1], np.abs(ran[1]).max() + 1)
    assert scanned[2].shape == ran[2].shape == (rows + 10,)
    close(scanned[2][:rows], ran[2][:rows], np.abs(ran[2][:rows]).max() + 1)
    assert scan_linear.run(step, seqs, weights_of(weights), budget=budget)[2] is None
    assert sequences.run(step, seqs, weights_of(weights), parallel=True, tile_bytes=budget)[2] is None
    assert sequences.run(step, seqs, weights_of(weights), parallel=False)[2] is None
    with pytest.raises(PgadError) as caught:  # a budget below the least chunk
        scan_linear.run(step, seqs, weights_of(weights), budget=100_000)
    assert caught.value.sqlstate == '54000'


def test_a_model_that_reads_no_column_predicts_a_row_of_each_sequence():
    """With no column, the predictions are the sequences' rows, sequence after sequence: level_t = 0.6 + 1.4·0.5^t
    for next = 0.5·s.level + 0.3 from 2, by the scan and in order."""
    step = sequence.step_of('λ(d, w, s) s.level', 'λ(p, d) (p - 1)^2', None,
                            json.dumps({'level': {'start': 'w.l0', 'next': '0.5*s.level + w.a'}}),
                            json.dumps({'a': 0.3, 'l0': 2.0}), limits.DEFAULT, 1 << 30)[0]
    assert step.columns == ()
    seqs = sequences.Sequences({}, np.array([0, 100]), np.array([100, 70]))
    level = 0.6 + 1.4 * 0.5 ** np.concatenate([np.arange(100), np.arange(70)])
    for parallel in (False, True):
        loss, _, predictions = sequences.run(step, seqs, np.array([0.3, 2.0]), keep='predictions', parallel=parallel)
        np.testing.assert_allclose(predictions, level, rtol=1e-13)
        np.testing.assert_allclose(loss, [np.sum((level[:100] - 1) ** 2), np.sum((level[100:] - 1) ** 2)], rtol=1e-13)


def test_run_and_gradient_take_the_path_their_arguments_name(monkeypatch):
    """The python backend unless told otherwise (no kernel of jit/scan.py called); on it, parallel=None scans
    where the scan pays and its least chunk fits tile_bytes, else runs in order; parallel=False never scans;
    parallel=True always, within tile_bytes."""
    from pgad.jit import scan
    model, state, weights, names = MODELS['holt']
    step, w, seqs = step_of(model, state, weights), weights_of(weights), one(2000)
    assert scan_linear.takes(step, seqs)
    taken = [(module.__name__, calls_of(monkeypatch, module, name))
             for module in (scan_linear, scan) for name in ('run', 'gradient')]
    least = 1
    while not scan_linear.fits(step, seqs, least):
        least *= 2
    for call in (lambda **kw: sequences.run(step, seqs, w, **kw), lambda **kw: sequences.gradient(step, seqs, w, **kw)):
        for kw, path in (({}, 'pgad.scan_linear'), ({'backend': 'python'}, 'pgad.scan_linear'),
                         ({'parallel': False}, None), ({'tile_bytes': least // 2}, None),
                         ({'tile_bytes': least}, 'pgad.scan_linear'), ({'backend': 'llvm'}, 'pgad.jit.scan')):
            for _, calls in taken:
                calls.clear()
            call(**kw)
            assert [module for module, calls in taken for _ in calls] == ([path] if path else []), kw
        with pytest.raises(PgadError) as caught:
            call(parallel=True, tile_bytes=least // 2)
        assert caught.value.sqlstate == '54000'


@pytest.mark.parametrize('name', ['ses', 'holt'])
def test_the_reference_keeps_its_tape_while_it_fits_and_else_runs_segments_again(monkeypatch, name):
    """The reference's reverse mode keeps every row's states while T·K·G float8 fit tile_bytes (a forward and a
    backward evaluation a row, and one each for the starts and their vjp), and one byte less runs each √T segment
    again from its checkpoint (three a row): the same bits either way."""
    from pgad import python_backend
    model, state, weights, names = MODELS[name]
    step, w, seqs = step_of(model, state, weights), weights_of(weights), ragged([50, 30, 7])
    whole = 50 * len(step.states) * 3 * 8
    calls = calls_of(monkeypatch, python_backend, 'evaluate')
    found = {}
    for tile, evaluations in ((whole, 2 * 50 + 2), (whole - 1, 3 * 50 + 2)):
        calls.clear()
        found[tile] = sequences.gradient(step, seqs, w, tile_bytes=tile, parallel=False)
        assert len(calls) == evaluations, tile
    (a, b), (c, d) = found.values()
    assert np.array_equal(a, c) and np.array_equal(b, d)


def test_the_reference_past_its_budget_keeps_a_segment_of_states_not_the_whole_tape():
    """2,000 rows of one state field past tile_bytes: √T checkpoints and a segment's states (about 90 arrays of a
    number), not 2,000 (the tape kept while the forward pass runs)."""
    model, state, weights, names = MODELS['ses']
    step, w, seqs = step_of(model, state, weights), weights_of(weights), one(2000)
    kept = peak_bytes(lambda: sequences.gradient(step, seqs, w, tile_bytes=2000 * 8, parallel=False))
    checkpointed = peak_bytes(lambda: sequences.gradient(step, seqs, w, tile_bytes=2000 * 8 - 1, parallel=False))
    assert checkpointed < kept / 5, (checkpointed, kept)  # 42 kB against 424 kB


def test_the_blocked_scan_starts_at_two_blocks(monkeypatch):
    """scan() runs rows in order below two blocks; from two, only the blocks' totals (the scan of two) and the rows
    past the last whole block."""
    ran = calls_of(monkeypatch, scan_linear, '_in_order')
    block, a = scan_linear.BLOCK, np.array([[0.5]])
    for rows, in_order in ((2 * block - 1, [(0, 2 * block - 1)]), (2 * block, [(0, 2)]),
                           (2 * block + 5, [(0, 2), (2 * block, 2 * block + 5)])):
        ran.clear()
        found = scan_linear.scan(a, np.ones(rows, bool), np.ones((rows, 1)), np.zeros(1))
        assert [args[-2:] for args in ran] == in_order
        assert np.allclose(found[:, 0], 2 - 0.5 ** np.arange(rows), rtol=1e-15, atol=0)  # Σ 0.5^k


def test_a_start_that_reads_weights_and_the_first_row():
    """A start not linear in the weights (exp(w.l0) + d.y): its vjp reads the weights and the first row's columns;
    the scan's gradient and run are the reference's."""
    state = {'level': {'start': 'exp(w.l0) + d.y', 'next': 's.level + w.alpha*(d.y - s.level)'}}
    step = step_of('λ(d, w, s) s.level', state, {'alpha': 0.3, 'l0': 0.5})
    seqs, w = ragged([200, 3000, 64]), np.array([0.3, 0.5])
    loss, grad = sequences.gradient(step, seqs, w, parallel=False)
    scan_loss, scan_grad = sequences.gradient(step, seqs, w, parallel=True)
    close(scan_loss, loss, loss)
    close(scan_grad, grad, np.abs(grad).max(axis=0) + np.abs(seqs.columns['y']).max() ** 2)
    ran, scanned = sequences.run(step, seqs, w, parallel=False), sequences.run(step, seqs, w, parallel=True)
    close(scanned[1], ran[1], np.abs(ran[1]).max() + 1)


@pytest.mark.parametrize('scale', [1e-8, 1e-4, 1.0, 1e4, 1e8])
def test_scales(scale):
    model, state, weights, names = MODELS['holt']
    step = step_of(model, state, weights)
    seqs = one(5000, scale=scale)
    w = weights_of(weights, scale)
    loss, grad = sequences.gradient(step, seqs, w, parallel=False)
    scan_loss, scan_grad = sequences.gradient(step, seqs, w, parallel=True)
    close(scan_loss, loss, loss)
    close(scan_grad, grad, np.abs(grad).max() + np.abs(seqs.columns['y']).max() ** 2 / scale)


def test_a_million_rows_of_ar7_against_the_lagged_columns():
    """AR(7) along one sequence of 1e6 rows (eight chunks and a remainder, two passes): its loss and gradient are
    those of the regression on the lagged columns (the lags start at 0), a closed form in numpy."""
    model, state, weights, names = MODELS['ar7']
    step = step_of(model, state, weights)
    rows = 1_000_003
    seqs = one(rows, seed=7)
    w = weights_of(weights)
    y = seqs.columns['y']
    lags = np.zeros((rows, 8))
    lags[:, 0] = 1
    for k in range(1, 8):
        lags[k:, k] = y[:-k]
    residual = lags @ w - y
    loss, grad = sequences.gradient(step, seqs, w, parallel=True)
    close(loss, np.sum(residual ** 2), np.sum(residual ** 2))
    # a sum of a million terms in another order: to RELATIVE of the sum of their sizes
    close(grad[:, 0], 2 * lags.T @ residual, 2 * np.abs(lags * residual[:, None]).sum(axis=0))


def test_the_scan_of_a_fresh_step():
    """scan_linear.run and gradient on a Step whose Jacobian nobody built yet (its nodes grow the graph)."""
    model, state, weights, names = MODELS['holt']
    seqs, w = one(1000), weights_of(weights)
    ran = scan_linear.run(step_of(model, state, weights), seqs, w)
    loss, grad = scan_linear.gradient(step_of(model, state, weights), seqs, w,
                                      tuple(sequences.ADJOINT + str(k) for k in range(2)))
    expected = sequences.gradient(step_of(model, state, weights), seqs, w, parallel=False)
    close(ran[0], expected[0], expected[0])
    close(loss, expected[0], expected[0])
    close(grad, expected[1], np.abs(expected[1]).max() + np.abs(seqs.columns['y']).max() ** 2)


@pytest.mark.parametrize('mode', ['reverse', 'forward'])
def test_the_reference_reads_a_shifted_field_as_it_came(mode):
    """The sequential reference itself on AR(7), whose lag fields take each other's values as they came: the last
    state is the last seven values, the loss and gradient those of the regression on the lagged columns (0.16.0's
    first reference wrote each field's new value before the next field read the old one)."""
    model, state, weights, names = MODELS['ar7']
    step = step_of(model, state, weights)
    seqs = one(300, seed=8)
    w = weights_of(weights)
    y = seqs.columns['y']
    lags = np.zeros((300, 8))
    lags[:, 0] = 1
    for k in range(1, 8):
        lags[k:, k] = y[:-k]
    residual = lags @ w - y
    loss, grad = sequences.gradient(step, seqs, w, mode=mode, parallel=False)
    close(loss, np.sum(residual ** 2), np.sum(residual ** 2))
    close(grad[:, 0], 2 * lags.T @ residual, 2 * np.abs(lags * residual[:, None]).sum(axis=0))
    assert np.array_equal(sequences.run(step, seqs, w, parallel=False)[1][:, 0], y[::-1][:7])


def test_the_same_bits_run_to_run_and_on_any_number_of_threads(thread_count):
    """Holt's two fields over 300,000 rows: two chunks at the default budget, each of three pieces of blocks, taken
    by one, two or three threads (the scan's threads need two pieces in a chunk: Holt-Winters' nine fields at this
    budget have chunks of 54,464 rows, less than a piece)."""
    model, state, weights, names = MODELS['holt']
    step = step_of(model, state, weights)
    seqs = one(300_000, seed=5)
    w = weights_of(weights)
    assert len(scan_linear._Layout(step, seqs, w, sequences.TILE_BYTES).chunks()) == 2
    found = []
    for n in (1, 1, 2, 3):
        thread_count(n)
        found.append(sequences.gradient(step, seqs, w, parallel=True))
    assert used_two(thread_count.told)
    for loss, grad in found[1:]:
        assert np.array_equal(loss, found[0][0]) and np.array_equal(grad, found[0][1])


def test_the_scan_takes_a_thread_a_piece_of_rows_and_checks_interrupts_between_pieces(thread_count, monkeypatch):
    """A thread for each piece of blocks (65,536 rows), as many as pgad.max_threads gives; the pool's pieces are
    timed (threads.PIECE_NS each) and the caller checks interrupts between them."""
    model, state, weights, names = MODELS['holt']
    step, w, piece = step_of(model, state, weights), weights_of(weights), scan_linear.PIECE_BLOCKS * scan_linear.BLOCK
    thread_count(4)
    assert [scan_linear._Layout(step, one(rows), w, None).count
            for rows in (2 * piece - 1, 2 * piece, 3 * piece, 5 * piece)] == [1, 2, 3, 4]
    runs = calls_of(monkeypatch, threads, 'run')
    checked = []
    monkeypatch.setattr(limits, 'check', lambda: checked.append(1))
    sequences.gradient(step, one(300_000, seed=5), w, parallel=True)
    assert runs and all(call[3] is limits.check and call[4] == threads.PIECE_NS for call in runs)
    assert checked


def test_the_same_bits_where_the_matrix_changes_row_by_row(thread_count):
    """A decay read from a column (exp(−w.k·d.gap)): A_t a matrix a row, products of them in the blocks; 140,034
    rows, three pieces of blocks on up to three threads."""
    step = step_of('λ(d, w, s) s.level', {'level': {'start': 'w.l0', 'next': 'exp(-w.k*d.x)*s.level + w.a*d.y'}},
                   {'k': 0.1, 'a': 0.5, 'l0': 1.0})
    seqs = ragged([40_000, 1, 100_000, 33], ('y', 'x'))
    seqs.columns['x'][:] = np.abs(seqs.columns['x'])
    w = np.array([0.1, 0.5, 1.0])
    found = []
    for n in (1, 2, 3):
        thread_count(n)
        found.append(sequences.gradient(step, seqs, w, parallel=True))
    assert used_two(thread_count.told)
    for loss, grad in found[1:]:
        assert np.array_equal(loss, found[0][0]) and np.array_equal(grad, found[0][1])
    loss, grad = sequences.gradient(step, seqs, w, parallel=False)
    close(found[0][0], loss, loss)
    close(found[0][1], grad, np.abs(grad).max(axis=0) + np.abs(seqs.columns['y']).max() ** 2)


def test_a_sequence_that_overflows_leaves_the_next_alone():
    """Two sequences of a recurrence that grows tenfold a row: the first, of 2,000 rows, overflows to inf; the
    second, of 100, stays finite, as in the reference (the scan cuts the chain at a first row, it does not multiply
    the state before by 0: inf·0 is NaN)."""
    step = step_of('λ(d, w, s) s.level', {'level': {'start': 'w.l0', 'next': 'w.g*s.level + d.y'}},
                   {'g': 10.0, 'l0': 1.0})
    seqs = sequences.Sequences(columns(('y',), 2100, 4), np.array([0, 2000]), np.array([2000, 100]))
    w = np.array([10.0, 1.0])
    with np.errstate(all='ignore'):
        loss, grad = sequences.gradient(step, seqs, w, parallel=False)
        scan_loss, scan_grad = sequences.gradient(step, seqs, w, parallel=True)
    assert not np.isfinite(loss[0]) and np.isfinite(loss[1]) and np.isfinite(scan_loss[1])
    close(scan_loss[1:], loss[1:], loss[1:])
    close(scan_grad[:, 1], grad[:, 1], np.abs(grad[:, 1]).max())


@pytest.mark.parametrize('next_value', [
    's.level/(1 + w.a) + w.b*d.y',                                      # a division by what reads no state
    'CASE WHEN d.y > 0 THEN w.a*s.level ELSE s.level END + w.b*d.y',  # a CASE whose condition reads none
])
def test_a_step_affine_in_the_state_is_scanned(next_value):
    """linear() holds for a division of the state and a CASE over it: the scan gives the reference's gradient."""
    step = step_of('λ(d, w, s) s.level', {'level': {'start': 'w.a', 'next': next_value}}, {'a': 0.5, 'b': 0.3})
    assert scan_linear.linear(step)
    seqs, w = one(500), np.array([0.5, 0.3])
    scanned, ran = sequences.gradient(step, seqs, w, parallel=True), sequences.gradient(step, seqs, w, parallel=False)
    close(scanned[0], ran[0], ran[0])
    close(scanned[1], ran[1], np.abs(ran[1]).max() + 1)


@pytest.mark.parametrize('model, state', [
    ('λ(d, w, s) s.h', {'h': {'start': '0', 'next': 'tanh(w.a*s.h + w.b*d.y)'}}),
    ('λ(d, w, s) s.level + s.trend', {'level': {'start': 'w.a', 'next': 's.level*s.trend + w.b*d.y'},
                                      'trend': {'start': '1', 'next': 's.trend'}}),
    # ∂next/∂s reads no state (sign's derivative is 0), yet next is not affine in it
    ('λ(d, w, s) s.level', {'level': {'start': 'w.a', 'next': 'w.b*d.y + sign(s.level - 5)'}}),
    ('λ(d, w, s) s.level', {'level': {'start': 'w.a', 'next': 'w.b*d.y + sign(w.a*s.level - 5)'}}),
    ('λ(d, w, s) s.level', {'level': {'start': 'w.a', 'next': 'w.b*d.y + CASE WHEN w.a > s.level THEN 1 ELSE 0 END'}}),
])
def test_a_step_that_is_not_linear_runs_in_order(model, state):
    """The scan is not taken where a next value is not affine in the state: if linear() said it was, the scan's
    answer (the maps at s = 0) would differ from the reference by far more than rounding."""
    step = step_of(model, state, {'a': 0.5, 'b': 0.3})
    assert not scan_linear.linear(step)
    seqs = one(500)
    w = np.array([0.5, 0.3])
    assert all(np.array_equal(x, y) for x, y in zip(sequences.gradient(step, seqs, w),
                                                      sequences.gradient(step, seqs, w, parallel=False)))
    assert all(np.array_equal(x, y) for x, y in zip(sequences.gradient(step, seqs, w, parallel=True),
                                                      sequences.gradient(step, seqs, w, parallel=False)))


def test_the_scan_is_taken_for_a_long_sequence_and_not_for_many_short_ones():
    model, state, weights, names = MODELS['holt_winters']
    step = step_of(model, state, weights)
    assert scan_linear.takes(step, one(100_000))
    assert not scan_linear.takes(step, sequences.Sequences({'y': np.zeros(730 * 2000)},
                                                           np.arange(2000) * 730, np.full(2000, 730)))


def test_the_scan_is_taken_from_two_blocks_of_rows_up_to_its_count_of_sequences():
    """takes() at its bounds: the longest sequence 2·BLOCK rows at least; sequences × K² at most 128 × the nodes."""
    model, state, weights, names = MODELS['holt']
    step = step_of(model, state, weights)
    block = scan_linear.BLOCK
    assert not scan_linear.takes(step, one(2 * block - 1)) and scan_linear.takes(step, one(2 * block))
    most = 128 * len(step.graph) // 4  # K = 2
    assert scan_linear.takes(step, ragged([2 * block] + [1] * (most - 1)))
    assert not scan_linear.takes(step, ragged([2 * block] + [1] * most))


def test_the_scan_fits_at_the_least_budget_of_its_layout():
    """fits() says yes from the least budget at which the scan's layout (its least chunk) is made, and no below it:
    a step whose maps read no data takes no per-row matrices (the layout made with the step's weights)."""
    model, state, weights, names = MODELS['holt_winters']
    step = step_of(model, state, weights)
    seqs = one(10_000)

    def made(budget):
        try:
            scan_linear._Layout(step, seqs, weights_of(weights), budget)
            return True
        except PgadError:
            return False
    low, high = 1, 1 << 30
    while low < high:  # the least budget made
        middle = (low + high) // 2
        low, high = (low, middle) if made(middle) else (middle + 1, high)
    assert scan_linear.fits(step, seqs, low) and not scan_linear.fits(step, seqs, low - 1)


def test_the_layouts_estimate_at_its_bounds():
    """The scan's bound before anything is allocated (_Layout), for SES (K = 1 field, P = 2 weights) over G = 3
    sequences of 35,000 rows: a row 8·(10K + 4 + P + 13) bytes (states, adjoints, offsets and scans; its sequence
    and flags; the weights; the step's 13 arrays that change from row to row: s.level, y, s.level − y, its
    square, y − s.level, α·(y − s.level), the next level, λ, its three products, λ − αλ and 2·(s.level − y)), and 3K²
    more where A changes from row to row; fixed 8·(K + 2)·G·(2 + P) bytes, and the states of every row (8·K·rows)
    where they are kept, which they are while they take half the budget at most. The least budget holds 4 blocks;
    the chunk is whole blocks."""
    model, state, weights, names = MODELS['ses']
    step, w, seqs = step_of(model, state, weights), weights_of(weights), ragged([10_000, 20_000, 5_000])
    block = scan_linear.BLOCK
    assert scan_linear._arrays(step) == 13
    per_row, fixed = 8 * (10 + 4 + 2 + 13), 8 * 3 * 3 * 4
    assert scan_linear._Layout(step, seqs, w, fixed + per_row * 4 * block).chunk == 4 * block
    with pytest.raises(PgadError) as caught:
        scan_linear._Layout(step, seqs, w, fixed + per_row * 4 * block - 1)
    assert (caught.value.sqlstate, caught.value.detail) == (
        '54000', f'3 sequences, 1 state fields, {len(step.graph)} nodes a row.')
    assert caught.value.message == ('the scan of the linear recurrence needs 1 MB, more than its share of '
                                    'pgad.memory_limit (0 MB)')
    assert caught.value.hint == 'Train with fewer groups at once, or have a superuser raise pgad.memory_limit.'
    # in MB, rounded up, of a need past a MB: 50,000 sequences' fixed bytes and the least chunk
    with pytest.raises(PgadError) as caught:
        scan_linear._Layout(step, ragged([3] * 50_000), w, 3 << 20)
    assert 8 * 3 * 50_000 * 4 + per_row * 4 * block == 4_829_696
    assert caught.value.message == ('the scan of the linear recurrence needs 5 MB, more than its share of '
                                    'pgad.memory_limit (3 MB)')
    # one sequence: fixed 8·(K + 2)·1·(2 + P) bytes
    assert scan_linear._Layout(step, one(5_000), w, 8 * 3 * 4 + per_row * 4 * block).chunk == 4 * block
    with pytest.raises(PgadError):
        scan_linear._Layout(step, one(5_000), w, 8 * 3 * 4 + per_row * 4 * block - 1)
    assert scan_linear._Layout(step, seqs, w, fixed + per_row * 1000).chunk == 992
    assert scan_linear._Layout(step, seqs, w, None).chunk == scan_linear.CHUNK_PIECES * scan_linear.PIECE_BLOCKS * block
    states = 8 * 35_000
    kept = scan_linear._Layout(step, seqs, w, 2 * states, keep=True)
    assert kept.keep and kept.chunk == (2 * states - fixed - states) // per_row // block * block
    assert not scan_linear._Layout(step, seqs, w, 2 * states - 1, keep=True).keep
    assert not scan_linear._Layout(step, seqs, w, 2 * states).keep  # run() keeps none
    # states that take half the budget and would leave no room for the least chunk are not kept: where fits() says
    # yes, the gradient runs (it raised 54000 before)
    short, budget = ragged([1_500, 500]), 2 * 8 * 2000
    assert scan_linear.fits(step, short, budget) and not scan_linear._Layout(step, short, w, budget, keep=True).keep
    sequences.gradient(step, short, w, tile_bytes=budget, parallel=True)
    # where they take less than half, they are kept while the least chunk fits beside them, to the byte
    window, states = ragged([1_500, 1_000, 1_000]), 8 * 3_500
    budget = states + fixed + per_row * 4 * block
    assert states <= budget // 2
    kept = scan_linear._Layout(step, window, w, budget, keep=True)
    assert kept.keep and kept.chunk == 4 * block
    assert not scan_linear._Layout(step, window, w, budget - 1, keep=True).keep
    # A a row (a decay read from a column): 3K² numbers more a row, and the states never kept
    decay = step_of('λ(d, w, s) s.level', {'level': {'start': 'w.l0', 'next': 'exp(-w.k*d.y)*s.level + w.a*d.y'}},
                    {'k': 0.1, 'a': 0.5, 'l0': 1.0})
    arrays = scan_linear._arrays(decay)
    per_row, fixed = 8 * (3 + 10 + 4 + 3 + arrays), 8 * 3 * 3 * 5
    assert scan_linear._Layout(decay, seqs, np.array([0.1, 0.5, 1.0]), fixed + per_row * 4 * block).chunk == 4 * block
    with pytest.raises(PgadError):
        scan_linear._Layout(decay, seqs, np.array([0.1, 0.5, 1.0]), fixed + per_row * 4 * block - 1)
    assert not scan_linear._Layout(decay, seqs, np.array([0.1, 0.5, 1.0]), 1 << 30, keep=True).keep
    # K = 2 fields whose A changes from row to row: 3K² = 12 numbers more a row
    trend = step_of('λ(d, w, s) s.level',
                    {'level': {'start': 'w.l0', 'next': 'exp(-w.k*d.y)*s.level + s.trend'},
                     'trend': {'start': 'w.b0', 'next': 'exp(-w.k*d.y)*s.trend'}}, {'k': 0.1, 'l0': 1.0, 'b0': 0.0})
    per_row, fixed = 8 * (12 + 20 + 4 + 3 + scan_linear._arrays(trend)), 8 * 4 * 3 * 5
    assert scan_linear._Layout(trend, seqs, np.array([0.1, 1.0, 0.0]), fixed + per_row * 4 * block).chunk == 4 * block
    with pytest.raises(PgadError):
        scan_linear._Layout(trend, seqs, np.array([0.1, 1.0, 0.0]), fixed + per_row * 4 * block - 1)


def test_a_steps_arrays_and_linearity_are_found_once(monkeypatch):
    """_arrays(), linear() and Step.jacobian() walk the step's graph once per Step (each layout and chunk asks
    again)."""
    model, state, weights, names = MODELS['ses']
    step = step_of(model, state, weights)
    counted = calls_of(monkeypatch, scan_linear, '_count_arrays')
    decided = calls_of(monkeypatch, scan_linear, '_affine')
    assert [scan_linear._arrays(step), scan_linear._arrays(step)] == [13, 13] and len(counted) == 1
    assert scan_linear.linear(step) and scan_linear.linear(step) and len(decided) == 1
    differentiated = calls_of(monkeypatch, sequences, 'derivatives')
    step.jacobian()
    made = len(differentiated)
    assert step.jacobian() is step.jacobian() and len(differentiated) == made


def test_the_arrays_a_row_count_what_only_a_reads():
    """A row's arrays for next = s.level·y·y: s.level, y, s.level − y, its square, s.level·y, s.level·y·y, the
    adjoint, y·adjoint, y·y·adjoint, 2·(s.level − y), their sum (the vjp) and y·y, ∂next/∂s, which only A reads;
    not the constants."""
    step = step_of('λ(d, w, s) s.level', {'level': {'start': 'w.a', 'next': 's.level*d.y*d.y'}}, {'a': 0.5})
    assert scan_linear._count_arrays(step) == 12


def test_memory_past_the_budget_is_refused_before_anything_runs(monkeypatch):
    model, state, weights, names = MODELS['holt_winters']
    step = step_of(model, state, weights)
    with pytest.raises(PgadError) as caught:
        sequences.gradient(step, one(10_000), weights_of(weights), tile_bytes=100_000, parallel=True)
    assert caught.value.sqlstate == '54000' and 'pgad.memory_limit' in str(caught.value)
    # budgets of several chunks, the states carried from chunk to chunk: the forward pass's states kept for the
    # backward one (16 MB), or run again from each chunk's start (4 MB); the same numbers
    seqs = one(50_000)
    whole = sequences.gradient(step, seqs, weights_of(weights), parallel=False)
    forwards = calls_of(monkeypatch, scan_linear._Pass, 'forward')
    for budget, keeps in ((16 << 20, True), (4 << 20, False)):
        layout = scan_linear._Layout(step, seqs, weights_of(weights), budget, keep=True)
        assert layout.keep == keeps and len(layout.chunks()) > 2
        forwards.clear()
        small = sequences.gradient(step, seqs, weights_of(weights), tile_bytes=budget, parallel=True)
        assert len(forwards) == len(layout.chunks()) * (1 if keeps else 2)  # else each chunk run again backwards
        close(small[0], whole[0], whole[0])
        close(small[1], whole[1], np.abs(whole[1]).max() + np.abs(seqs.columns['y']).max() ** 2)


def test_pgad_train_of_ar7_by_the_scan_matches_statsmodels_autoreg(db):
    """pgad.train of AR(7) by conditional least squares (the first seven rows' loss masked by the data query, as
    AutoReg drops them), its gradient by the scan inside the server, against statsmodels' AutoReg(y, 7): the
    parameters to 1e-6 relative."""
    import warnings
    from statsmodels.tsa.ar_model import AutoReg
    from scipy.signal import lfilter
    rng = np.random.default_rng(11)
    y = lfilter([1.0], [1.0, -0.35, -0.2, -0.1, 0.05, -0.1, -0.05, -0.1], 1.0 + rng.normal(0, 1, 3200))[200:]
    db.execute('CREATE TABLE ar7 (t int, y float8)')
    with db.cursor().copy('COPY ar7 (t, y) FROM STDIN') as copy:
        for t, v in enumerate(y, 1):
            copy.write_row((t, float(v)))
    model, state, weights, _ = MODELS['ar7']
    found = db.execute("SELECT weights, converged FROM pgad.train('ar7', %s, 'λ(p, d) d.m*(p - d.y)^2', "
                       "'SELECT t, y, (t > 7)::int::float8 AS m FROM ar7', %s, order_by => 't', state => %s)",
                       [model, json.dumps(weights), json.dumps(state)]).fetchone()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        fit = AutoReg(y, 7).fit()
    assert found[1]
    got = np.array([found[0]['c'], *[found[0][f'p{k}'] for k in range(1, 8)]])
    assert got == pytest.approx(fit.params, rel=1e-6)


def test_pgad_train_runs_the_scan_on_the_pool_with_the_same_bits(db):
    """Simple exponential smoothing along 200,000 rows in the server: with pgad.threads = 2 the scan's pieces go to
    the pool (the split reported at DEBUG2), and the fit is the same bits as with 1."""
    rng = np.random.default_rng(12)
    y = 50 + np.cumsum(rng.normal(0, 1, 200_000))
    db.execute('CREATE TABLE long_ses (t int, y float8)')
    with db.cursor().copy('COPY long_ses (t, y) FROM STDIN') as copy:
        for t, v in enumerate(y, 1):
            copy.write_row((t, float(v)))
    splits = []
    db.add_notice_handler(lambda d: splits.append(d.message_primary) if 'threads' in d.message_primary else None)
    found = {}
    for n in (1, 2):
        db.execute(f'SET pgad.threads = {n}')
        db.execute('SET client_min_messages = debug2')
        found[n] = db.execute("SELECT weights::text, final_loss FROM pgad.train(%s, 'λ(d, w, s) s.level', "
                              "'squared', 'SELECT t, y FROM long_ses', '{\"alpha\": 0.5, \"l0\": 50}', "
                              "order_by => 't', state => %s, iterations => 20)",
                              [f'long_ses_{n}', json.dumps(SES)]).fetchone()
        db.execute('RESET client_min_messages')
        assert any('on 2 threads' in m for m in splits) == (n == 2), splits
    assert found[1] == found[2]
