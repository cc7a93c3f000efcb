"""The llvm backend of sequence models (pgad/jit/scan.py) against the python reference (pgad/sequences.py): the same
losses, last states, predictions and gradients in reverse and forward mode (to 1e-12 relative: the sums along a
sequence are taken in the reference's order, so the bits differ only where libm's and numpy's tanh or exp do), the
tape kept or recomputed from checkpoints (the same bits), the same bits on 1 and 2 threads, a cancel within about a
second, and pgad.train with backend => 'llvm' as with 'python', on a real server."""
import dataclasses
import json
import math
import time

import numpy as np
import psycopg
import pytest

from conftest import calls_of, peak_bytes, used_two
from pgad import limits, sequences
from pgad.errors import PgadError
from pgad.jit import scan, threads
from pgad.models import sequence

SES = {'level': {'start': 'w.l0', 'next': 's.level + w.alpha*(d.y - s.level)'}}
LEVEL = 'w.alpha*d.y + (1 - w.alpha)*(s.level + s.trend)'
HOLT = {'level': {'start': 'w.l0', 'next': LEVEL},
        'trend': {'start': 'w.b0', 'next': f'w.beta*({LEVEL} - s.level) + (1 - w.beta)*s.trend'}}
SEASON = 'w.alpha*(d.y - s.s1) + (1 - w.alpha)*(s.level + s.trend)'
HOLT_WINTERS = {'level': {'start': 'w.l0', 'next': SEASON},
                'trend': {'start': 'w.b0', 'next': f'w.beta*({SEASON} - s.level) + (1 - w.beta)*s.trend'},
                **{f's{k}': {'start': f'w.i{k}', 'next': f's.s{k + 1}'} for k in range(1, 7)},
                's7': {'start': 'w.i7', 'next': 'w.gamma*(d.y - s.level - s.trend) + (1 - w.gamma)*s.s1'}}
AR3 = {'y1': {'start': 'd.y', 'next': 'd.y'}, 'y2': {'start': '0', 'next': 's.y1'},
       'y3': {'start': '0', 'next': 's.y2'}, 'n': {'start': '0', 'next': 's.n + 1'}}
# the cell's start calls libm and reads the first row: its vjp (start_vjp) reads both too
CELL = {f'h{i}': {'start': f'tanh(w.h0*{i}*d.x)', 'next': f'tanh(w.m @ [s.h1, s.h2, s.h3, d.x])[{i}]'}
        for i in (1, 2, 3)}

MODELS = {  # name: (model, state, weights at scale 1)
    'ses': ('λ(d, w, s) s.level', SES, {'alpha': 0.4, 'l0': 1.0}),
    'holt': ('λ(d, w, s) s.level + s.trend', HOLT, {'alpha': 0.4, 'beta': 0.2, 'l0': 1.0, 'b0': 0.01}),
    'holt_winters': ('λ(d, w, s) s.level + s.trend + s.s1', HOLT_WINTERS,
                     {'alpha': 0.3, 'beta': 0.1, 'gamma': 0.2, 'l0': 1.0, 'b0': 0.01,
                      **{f'i{k}': 0.1 * (k - 4) for k in range(1, 8)}}),
    'ar3': ('λ(d, w, s) CASE WHEN s.n >= 2 THEN w.c + w.a1*s.y1 + w.a2*s.y2 + w.a3*s.y3 ELSE d.y END', AR3,
            {'c': 0.1, 'a1': 0.5, 'a2': -0.2, 'a3': 0.1}),
    'cell': ('λ(d, w, s) w.v @ [s.h1, s.h2, s.h3] + w.c', CELL,
             {'m': [[0.3, -0.2, 0.1, 0.5], [0.1, 0.4, -0.3, -0.2], [-0.2, 0.1, 0.2, 0.3]], 'v': [1.0, -0.5, 0.7],
              'c': 0.1, 'h0': 0.05}),
}
LENGTHS = [1, 2, 7, 40, 365, 730]  # ragged groups
SCALES = [1e-8, 1.0, 1e8]
RTOL = 1e-12  # relative to each output's largest magnitude over the sequences


def step_of(name):
    model, state, weights = MODELS[name]
    return sequence.step_of(model, 'squared', 'y', json.dumps(state), json.dumps(weights), limits.DEFAULT, 1 << 30)


def sequences_of(lengths, scale, seed=7):
    rng = np.random.default_rng(seed)
    total = sum(lengths)
    t = np.arange(total)
    y = scale * (1 + 0.01 * t / 7 + 0.1 * np.sin(2 * np.pi * t / 7) + 0.05 * rng.standard_normal(total))
    x = np.sin(t / 5.0) + 0.1 * rng.standard_normal(total)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return sequences.Sequences({'y': y, 'x': x}, starts.astype(np.int64), np.array(lengths, dtype=np.int64))


def weights_at(name, step, given, scale, groups=None):
    """The weight vector, a level's start scaled with the data; P × G (each group its own) where groups."""
    vector = np.array([v for n, shape in step.shapes for v in np.ravel(given[n])], dtype=np.float64)
    vector[[k for k, e in enumerate(step.weights) if e in ('l0', 'b0', 'c') or e.startswith('i')]] *= scale
    if groups is None:
        return vector
    return vector[:, None] * (1 + 0.01 * np.arange(groups))[None, :]


def close(got, want):
    want = np.atleast_2d(want)
    got = np.atleast_2d(got)
    bound = RTOL * np.abs(want).max(axis=-1, keepdims=True) + 1e-300
    return np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)


@pytest.mark.parametrize('scale', SCALES)
@pytest.mark.parametrize('name', sorted(MODELS))
def test_the_llvm_scan_gives_the_reference_gradients_run_and_predictions(name, scale):
    step, _, _, given, _, _ = step_of(name)
    seqs = sequences_of(LENGTHS, scale)
    for w in (weights_at(name, step, given, scale), weights_at(name, step, given, scale, len(LENGTHS))):
        loss, grad = sequences.gradient(step, seqs, w)
        got_loss, got_grad = sequences.gradient(step, seqs, w, backend='llvm')
        assert got_grad.shape == grad.shape == (len(step.weights), len(LENGTHS))
        assert close(got_loss, loss)[0], close(got_loss, loss)
        assert close(got_grad, grad)[0], close(got_grad, grad)
        loss, grad = sequences.gradient(step, seqs, w, mode='forward')
        got_loss, got_grad = sequences.gradient(step, seqs, w, mode='forward', backend='llvm')
        assert close(got_loss, loss)[0] and close(got_grad, grad)[0], close(got_grad, grad)
        want = sequences.run(step, seqs, w, keep='predictions')
        got = sequences.run(step, seqs, w, keep='predictions', backend='llvm')
        for a, b in zip(got, want):
            assert close(a, b)[0], close(a, b)


@pytest.mark.parametrize('name', ['holt_winters', 'cell'])
def test_states_recomputed_from_checkpoints_give_the_bits_of_a_stored_tape(name):
    step, _, _, given, _, _ = step_of(name)
    seqs = sequences_of([3, 2000, 5, 900], 1.0)
    w = weights_at(name, step, given, 1.0)
    stored = sequences.gradient(step, seqs, w, backend='llvm')
    k = len(step.states)
    for tile in (8 * k * 64, 8 * k):  # segments of 64 rows, and of √T (a tile of one row: check_tape's bound)
        checkpointed = sequences.gradient(step, seqs, w, tile_bytes=tile, backend='llvm')
        assert np.array_equal(checkpointed[0], stored[0]) and np.array_equal(checkpointed[1], stored[1])
    reference = sequences.gradient(step, seqs, w, tile_bytes=8 * k * 64)
    assert close(stored[1], reference[1])[0]


def test_a_long_sequence_in_pieces_gives_the_bits_of_one_piece(monkeypatch):
    step, _, _, given, _, _ = step_of('cell')
    seqs = sequences_of([5000, 3], 1.0)
    w = weights_at('cell', step, given, 1.0)
    whole = sequences.gradient(step, seqs, w, backend='llvm')
    checks = []
    monkeypatch.setattr(threads, 'PIECE_NS', 20_000)  # pieces of some hundred rows
    monkeypatch.setattr(limits, 'check', lambda: checks.append(1))
    cut = sequences.gradient(step, seqs, w, backend='llvm')
    assert len(checks) > 20  # interrupts checked between the long sequence's pieces
    assert np.array_equal(cut[0], whole[0]) and np.array_equal(cut[1], whole[1])



def test_a_long_sequence_run_in_pieces_gives_the_bits_of_one_piece(monkeypatch):
    """run() (no gradient) walks a long sequence in pieces too: the same loss, last state and predictions."""
    step, _, _, given, _, _ = step_of('cell')
    seqs = sequences_of([5000, 3], 1.0)
    w = weights_at('cell', step, given, 1.0)
    whole = sequences.run(step, seqs, w, keep='predictions', backend='llvm')
    checks = []
    monkeypatch.setattr(threads, 'PIECE_NS', 20_000)  # pieces of some hundred rows
    monkeypatch.setattr(limits, 'check', lambda: checks.append(1))
    cut = sequences.run(step, seqs, w, keep='predictions', backend='llvm')
    assert len(checks) > 10  # interrupts checked between its pieces
    for a, b in zip(cut, whole):
        assert np.array_equal(a, b)
    assert close(whole[1], sequences.run(step, seqs, w)[1])[0]


@pytest.mark.parametrize('rows', [64, 1])
def test_a_checkpointed_gradient_allocates_its_segments_not_the_whole_tape(rows):
    """Past the tile budget a long sequence keeps a checkpoint a segment and one segment's states: segments of the
    budget's rows, √T at least (sequences.check_tape's bound, 2·√T·K doubles), never the whole tape (T·K)."""
    step, _, _, given, _, _ = step_of('cell')
    length, k = 20_000, len(step.states)
    seqs = sequences_of([length], 1.0)
    w = weights_at('cell', step, given, 1.0)
    peak = peak_bytes(lambda: sequences.gradient(step, seqs, w, tile_bytes=8 * k * rows, backend='llvm'))
    segment = max(rows, math.isqrt(length))
    assert peak < 8 * k * (2 * segment + -(-length // segment)) + 30_000 < 8 * k * length / 10, peak  # 23 kB


@pytest.mark.parametrize('lengths, states', [([1_000_000] * 5, 3), ([1], 0), ([], 2)])
def test_the_tape_check_refuses_one_byte_past_its_bound(lengths, states):
    """check_tape's bound, at the byte: 2·⌊√T⌋ checkpoints of K states a sequence and a segment's 2·T numbers, all
    float8, T the longest sequence (1 at least), K and the count of sequences 1 at least."""
    seqs = sequences.Sequences({}, np.zeros(len(lengths), np.int64), np.array(lengths, np.int64))
    t = max(lengths, default=1)
    need = 8 * (2 * math.isqrt(t) * max(states, 1) * max(len(lengths), 1) + 2 * t)
    sequences.check_tape(seqs, states, need)
    sequences.check_tape(seqs, states, None)
    with pytest.raises(PgadError) as e:
        sequences.check_tape(seqs, states, need - 1)
    assert e.value.sqlstate == '54000'
    assert e.value.message == (f'the states of the backward pass need {need >> 20} MB, more than pgad.memory_limit '
                               f'({(need - 1) >> 20} MB)')
    assert e.value.detail == (f'{len(lengths)} sequences of up to {t} rows, {states} state fields: a checkpoint '
                              f'every {math.isqrt(t)} rows.')


def test_short_sequences_keep_a_job_of_tape_within_the_tile_budget():
    """Short sequences run in jobs whose tape (all their states) fits a thread's share of the tile budget: 200
    sequences of 100 rows at a budget of 1,000 rows allocate about 1,000 rows' states, not 20,000 rows'."""
    step, _, _, given, _, _ = step_of('cell')
    k = len(step.states)
    seqs = sequences_of([100] * 200, 1.0)
    w = weights_at('cell', step, given, 1.0)
    # scan.py's jobs (sequences.gradient would run these on the lanes, whose packs' tape another test measures)
    peak = peak_bytes(lambda: scan.gradient(step, seqs, w, 8 * k * 1000, sequences.ADJOINT))
    assert peak < 8 * k * 20_000 / 2, peak  # 95 kB; 548 kB where a job took every sequence


def test_a_cancel_between_pieces_stops_a_long_sequence(monkeypatch):
    step, _, _, given, _, _ = step_of('cell')
    seqs = sequences_of([20000], 1.0)
    w = weights_at('cell', step, given, 1.0)
    sequences.gradient(step, seqs, w, backend='llvm')
    monkeypatch.setattr(threads, 'PIECE_NS', 20_000)
    calls = []

    def cancel():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt('canceled')
    monkeypatch.setattr(limits, 'check', cancel)
    with pytest.raises(KeyboardInterrupt):
        sequences.gradient(step, seqs, w, backend='llvm')
    assert len(calls) == 3


def test_the_same_bits_run_to_run_on_one_and_two_threads(thread_count):
    step, _, _, given, _, _ = step_of('holt_winters')
    lengths = [730] * 40 + [20000, 1, 3]  # enough rows for two threads (threads.LOOP_SHARE_ROWS a share)
    seqs = sequences_of(lengths, 100.0)
    w = weights_at('holt_winters', step, given, 100.0, len(lengths))
    results = []
    for n in (1, 2, 2, 1):
        thread_count(n)
        results.append(sequences.gradient(step, seqs, w, tile_bytes=1 << 20, backend='llvm'))
    assert used_two(thread_count.told)
    for loss, grad in results[1:]:
        assert np.array_equal(loss, results[0][0]) and np.array_equal(grad, results[0][1])
    assert close(results[0][1], sequences.gradient(step, seqs, w, tile_bytes=1 << 20)[1])[0]
    # scan.py's kernel alone (sequences.gradient gives most of these to the lanes): its jobs on two threads too
    thread_count.told.clear()
    thread_count(2)
    two = scan.gradient(step, seqs, w, 1 << 20, sequences.ADJOINT)
    assert used_two(thread_count.told)
    thread_count(1)
    one = scan.gradient(step, seqs, w, 1 << 20, sequences.ADJOINT)
    assert np.array_equal(one[0], two[0]) and np.array_equal(one[1], two[1])


def test_auto_runs_the_llvm_scan_and_llvm_refuses_a_step_too_large(monkeypatch):
    step, _, _, _, _, _ = step_of('ses')
    assert sequences.llvm(step, 'auto') and not sequences.llvm(step, 'python')
    monkeypatch.setattr(scan, 'SCAN_TIERS', (dataclasses.replace(scan.SCAN_TIERS[0], max_nodes=20),))
    big = step_of('holt')[0]
    assert not sequences.llvm(big, 'auto')
    with pytest.raises(PgadError) as caught:
        sequences.gradient(big, sequences_of([10], 1.0), np.full(len(big.weights), 0.1), backend='llvm')
    assert too_large(caught.value, scan.nodes(big), 20)


def too_large(error, nodes, most):
    """Is error the llvm backend's 54001 for a step of `nodes` nodes, at most `most`, with its detail and hint?"""
    return (error.sqlstate, error.message, error.detail, error.hint) == (
        '54001', f'the sequence model is too large for the llvm backend: {nodes} nodes with its derivatives',
        f'The llvm backend compiles at most {most}.',
        "Use backend => 'python', or 'auto', which picks it for models this large.")


def test_forward_mode_is_refused_where_its_own_kernel_is_too_large(monkeypatch):
    """Forward mode's kernel is its own, of its own size (Holt-Winters': 246 nodes with the tangents' products,
    against reverse mode's 114): where reverse mode's fits a tier and forward mode's does not, reverse mode trains and
    forward mode gets 54001 counting its own nodes."""
    step, _, _, given, _, _ = step_of('holt_winters')
    reverse, forward = scan.nodes(step), scan.nodes(step, tangents=True)
    # 114: the DAG's nodes under reverse mode's roots; 246: the 66 under forward mode's (the starts, the tangents'
    # starts, a row with its Jacobian) and 2·(K + 1)·K = 180 for the tangents' update (K = 9 fields)
    assert (reverse, forward) == (114, 246)
    monkeypatch.setattr(scan, 'SCAN_TIERS', (dataclasses.replace(scan.SCAN_TIERS[0], max_nodes=reverse),))
    seqs, w = sequences_of([10], 1.0), weights_at('holt_winters', step, given, 1.0)
    assert close(sequences.gradient(step, seqs, w, backend='llvm')[1], sequences.gradient(step, seqs, w)[1])[0]
    with pytest.raises(PgadError) as caught:
        sequences.gradient(step, seqs, w, mode='forward', backend='llvm')
    assert too_large(caught.value, forward, reverse)


def test_auto_asks_whether_the_modes_own_kernel_fits(monkeypatch):
    """backend 'auto' where reverse mode's kernel fits a tier and forward mode's does not: reverse mode runs the llvm
    scan (neither python pass), forward mode the python reference's forward pass, with reverse mode's gradient."""
    step, _, _, given, _, _ = step_of('holt_winters')
    monkeypatch.setattr(scan, 'SCAN_TIERS', (dataclasses.replace(scan.SCAN_TIERS[0], max_nodes=scan.nodes(step)),))
    assert sequences.llvm(step, 'auto') and not sequences.llvm(step, 'auto', tangents=True)
    reverse, forward = calls_of(monkeypatch, sequences, '_reverse'), calls_of(monkeypatch, sequences, '_forward')
    seqs, w = sequences_of([10], 1.0), weights_at('holt_winters', step, given, 1.0)
    by_llvm = sequences.gradient(step, seqs, w, backend='auto')
    assert (len(reverse), len(forward)) == (0, 0)
    by_forward = sequences.gradient(step, seqs, w, mode='forward', backend='auto')
    assert (len(reverse), len(forward)) == (0, 1) and close(by_forward[1], by_llvm[1])[0]
    sequences.gradient(step, seqs, w, backend='python')
    assert (len(reverse), len(forward)) == (1, 1)


def test_many_sequences_cut_in_jobs_give_the_bits_of_one_job(monkeypatch):
    """Short sequences are run in jobs of whole sequences (each a piece's work): sequence a > 0 of a job finds its
    weights, state, tangents and gradient at a's place, in reverse and forward mode and in run()."""
    step, _, _, given, _, _ = step_of('cell')
    seqs = sequences_of([LENGTHS[k % len(LENGTHS)] for k in range(24)], 1.0)
    w = weights_at('cell', step, given, 1.0, seqs.count)  # each its own weights
    calls = lambda: (sequences.gradient(step, seqs, w, backend='llvm'),  # noqa: E731
                     sequences.gradient(step, seqs, w, mode='forward', backend='llvm'),
                     sequences.run(step, seqs, w, keep='predictions', backend='llvm'))
    whole = calls()
    monkeypatch.setattr(threads, 'PIECE_NS', 200_000)  # jobs of some hundred rows
    for got, want in zip(calls(), whole):
        for a, b in zip(got, want):
            assert np.array_equal(a, b)


def load_series(db, table, groups):
    db.execute(f'CREATE TABLE {table} (g int, day date, y float8)')
    with db.cursor().copy(f'COPY {table} (g, day, y) FROM STDIN') as copy:
        for g, ys in enumerate(groups):
            for k, v in enumerate(ys):
                copy.write_row((g, str(np.datetime64('2024-01-01') + k), float(v)))


def holt_winters_series(n, seed):
    """A series drawn from additive Holt-Winters itself (weekly season), whose optimum is inside the parameters'
    range."""
    rng = np.random.default_rng(seed)
    level, trend, season = 50.0, 0.2, list(rng.normal(0, 5, 7))
    y = []
    for _ in range(n):
        e = rng.normal(0, 1.0)
        y.append(level + trend + season[0] + e)
        level, trend, season = level + trend + 0.4 * e, trend + 0.4 * 0.3 * e, season[1:] + [season[0] + 0.3 * e]
    return np.array(y)


def test_train_with_backend_llvm_matches_backend_python(db):
    load_series(db, "hw", [holt_winters_series(n, seed) for n, seed in ((300, 1), (250, 4), (200, 3))])
    _, state, weights = MODELS['holt_winters']
    weights = {**weights, 'l0': 50.0}
    found = {}
    for backend in ('python', 'llvm'):
        rows = db.execute("SELECT group_key, weights, final_loss, converged, options->'last_state' FROM pgad.train("
                          "%s, 'λ(d, w, s) s.level + s.trend + s.s1', 'squared', 'SELECT g, day, y FROM hw', %s, "
                          "order_by => 'day', state => %s, group_by => 'g', backend => %s) "
                          "ORDER BY group_key::text",
                          [f'hw_{backend}', json.dumps(weights), json.dumps(state), backend]).fetchall()
        found[backend] = rows
    # the python backend takes these few sequences by the parallel scan (other roundings than the llvm kernel's,
    # which Newton's Hessian from differences of the gradient amplifies along the way): the same optimum. The level
    # and the seasons' starts are the same up to a shift (level − c, every season + c predicts alike): compared as
    # level + season
    for a, b in zip(found['python'], found['llvm']):
        assert a[3] and b[3]  # both converged
        assert b[2] == pytest.approx(a[2], rel=1e-10)
        for key in ('alpha', 'beta', 'gamma', 'b0'):
            assert b[1][key] == pytest.approx(a[1][key], rel=1e-5, abs=1e-7)
        for k in range(1, 8):
            assert b[1]['l0'] + b[1][f'i{k}'] == pytest.approx(a[1]['l0'] + a[1][f'i{k}'], rel=1e-6)
            assert b[4]['level'] + b[4][f's{k}'] == pytest.approx(a[4]['level'] + a[4][f's{k}'], rel=1e-6)


@pytest.mark.parametrize('name', ['holt_winters', 'ar3'])
def test_fields_that_shift_update_at_once_in_every_mode(name):
    """s1 ← s.s2, s2 ← s.s3, …: each next value reads the state before the row (the python reference's run and
    forward mode overwrote s.s2 before s1 read it, 0.16.0 as first merged)."""
    step, _, _, given, _, _ = step_of(name)
    seqs = sequences_of([40, 9], 1.0)
    w = weights_at(name, step, given, 1.0)
    reverse = sequences.gradient(step, seqs, w, backend='llvm')
    forward = sequences.gradient(step, seqs, w, mode='forward')
    assert close(forward[0], reverse[0])[0] and np.allclose(forward[1], reverse[1], rtol=1e-10, atol=1e-12)
    python = sequences.run(step, seqs, w)
    assert close(python[1], sequences.run(step, seqs, w, backend='llvm')[1])[0]


H = 20  # a tanh cell of 20 fields: about 3 µs a row with its backward pass, 3–5 s a gradient over the table
HEAVY_FIELDS = ', '.join(f's.h{i}' for i in range(1, H + 1))
HEAVY_STATE = json.dumps({f'h{i}': {'start': '0', 'next': f'tanh(w.m @ [{HEAVY_FIELDS}, d.y])[{i}]'}
                          for i in range(1, H + 1)})
HEAVY_WEIGHTS = json.dumps({'m': [[0.01] * (H + 1)] * H, 'v': [0.1] * H})
HEAVY_ROWS = 1_000_000
LATENCY = 1.5  # seconds from the timeout to the end of the statement: a second, and margin for a loaded 2-core VM


def train_heavy(db, data, iterations):
    db.execute(f"SELECT pgad.train('heavy', 'λ(d, w, s) w.v @ [{HEAVY_FIELDS}]', 'squared', %s, %s, "
               "order_by => 't', state => %s, backend => 'llvm', iterations => %s)",
               [data, HEAVY_WEIGHTS, HEAVY_STATE, iterations])


def test_statement_timeout_ends_a_long_sequence_gradient_within_a_second(cluster, dbname):
    """One gradient over the table's one sequence takes seconds; statement_timeout acts a second into it, and the
    statement ends about a second later, between two pieces of rows (scan.py), not after the gradient."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute(f'CREATE TABLE long_series AS SELECT i AS t, sin(i / 10.0) AS y '
                   f'FROM generate_series(1, {HEAVY_ROWS}) AS i')
        train_heavy(db, 'SELECT t, y FROM long_series LIMIT 10', 1)  # compiled: the disk cache has it from now on
        started = time.monotonic()  # the load and a cheap scan over the same rows
        db.execute("SELECT pgad.train('cheap', 'λ(d, w, s) s.level', 'squared', 'long_series', "
                   "'{\"alpha\": 0.5, \"l0\": 0}', order_by => 't', backend => 'llvm', iterations => 1, "
                   "state => '{\"level\": {\"start\": \"w.l0\", \"next\": \"s.level + w.alpha*(d.y - s.level)\"}}')")
        timeout = time.monotonic() - started + 1.0
        db.execute(f"SET statement_timeout = '{int(timeout * 1000)}ms'")
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            train_heavy(db, 'long_series', 50)
        late = time.monotonic() - started - timeout
        assert late < LATENCY, f'the statement ended {late:.2f} s after its timeout'
