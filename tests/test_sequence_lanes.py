"""The lane kernels of sequence models (pgad/jit/lanes.py: W sequences side by side in SIMD lanes) against the python
reference (pgad/sequences.py) and scan.py's one-at-a-time kernel: the same losses and gradients (to 1e-12 relative,
and scan.py's bits), ragged packs whose shorter lanes end early, each sequence its own weights, the same bits run to
run and on 1 and 2 threads, interrupts between pieces, and pgad.train over many groups as with backend => 'python',
on a real server. The counts of sequences are multiples of lanes.width() plus a rest, whatever the CPU's width."""
import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from conftest import peak_bytes, used_two
from pgad import limits, sequences
from pgad.jit import lanes, scan, targets, threads
from pgad.models import sequence
from test_sequence_llvm import MODELS, close, load_series, sequences_of, step_of, weights_at

W = lanes.width()  # 2, 4 or 8: every count below is made of it
LENGTHS = [1, 2, 7, 40, 365, 730]


def ragged(packs, scale, seed=7):
    """packs·W sequences and 3 more (a pack with spare lanes), of the LENGTHS in turn: sorted longest first, each
    pack has lanes that end before its longest."""
    count = packs * W + 3
    return sequences_of([LENGTHS[k % len(LENGTHS)] for k in range(count)], scale, seed)


def counted(monkeypatch):
    """The lengths of the sequences scan.gradient is given, call after call (the rest the lanes do not take)."""
    given = []
    inner = scan.gradient

    def gradient(step, seqs, *args, **kwargs):
        given.append(sorted(seqs.lengths))
        return inner(step, seqs, *args, **kwargs)
    monkeypatch.setattr(scan, 'gradient', gradient)
    return given


@pytest.mark.parametrize('scale', [1e-8, 1.0, 1e8])
@pytest.mark.parametrize('name', sorted(MODELS))
def test_the_lanes_give_the_reference_gradient(name, scale, monkeypatch):
    step, _, _, given, _, _ = step_of(name)
    seqs = ragged(3, scale)
    rest = counted(monkeypatch)
    for w in (weights_at(name, step, given, scale), weights_at(name, step, given, scale, seqs.count)):
        loss, grad = sequences.gradient(step, seqs, w)
        got_loss, got_grad = sequences.gradient(step, seqs, w, backend='llvm')
        assert got_grad.shape == grad.shape == (len(step.weights), seqs.count)
        assert close(got_loss, loss)[0], close(got_loss, loss)
        assert close(got_grad, grad)[0], close(got_grad, grad)
        auto = sequences.gradient(step, seqs, w, backend='auto')
        assert np.array_equal(auto[0], got_loss) and np.array_equal(auto[1], got_grad)
    assert not rest  # 3·W + 3 sequences in lanes, the last pack's spare lanes running its last sequence again


@pytest.mark.parametrize('name', sorted(MODELS))
def test_the_lanes_give_the_bits_of_the_one_at_a_time_kernel(name):
    """Each lane computes its sequence's operations in scan.py's order, with libm's scalar functions (the cell's
    tanh), so the bits are the same whichever kernel runs a sequence (the tile budget and the count decide), ragged
    lanes and spare ones included."""
    step, _, _, given, _, _ = step_of(name)
    seqs = ragged(4, 3.0, seed=11)
    for w in (weights_at(name, step, given, 3.0), weights_at(name, step, given, 3.0, seqs.count)):
        got = lanes.gradient(step, seqs, w, sequences.TILE_BYTES, sequences.ADJOINT)
        want = scan.gradient(step, seqs, w, sequences.TILE_BYTES, sequences.ADJOINT)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_an_ended_lane_keeps_its_state_and_adds_nothing():
    """One long sequence and W − 1 of one row in one pack: the short lanes read their one row again for 729 rows and
    must not change their loss, state or gradient; each against the reference over that sequence alone."""
    step, _, _, given, _, _ = step_of('holt_winters')
    seqs = sequences_of([730] + [1] * (W - 1) + [730] * W, 5.0)
    w = weights_at('holt_winters', step, given, 5.0, seqs.count)
    loss, grad = lanes.gradient(step, seqs, w, sequences.TILE_BYTES, sequences.ADJOINT)
    for g in range(seqs.count):
        one = sequences.Sequences(seqs.columns, seqs.starts[[g]], seqs.lengths[[g]])
        want = sequences.gradient(step, one, w[:, [g]])
        assert close(loss[g], want[0][0])[0] and close(grad[:, [g]], want[1])[0], g


def test_the_same_bits_run_to_run_on_one_and_two_threads(thread_count):
    step, _, _, given, _, _ = step_of('cell')
    seqs = ragged(-(-144 // W), 1.0)  # 144 + 3 sequences whatever W: enough rows (28,000) for two threads
    w = weights_at('cell', step, given, 1.0, seqs.count)
    results = []
    for n in (1, 2, 2, 1):
        thread_count(n)
        results.append(sequences.gradient(step, seqs, w, backend='llvm'))
    assert used_two(thread_count.told)
    for loss, grad in results[1:]:
        assert np.array_equal(loss, results[0][0]) and np.array_equal(grad, results[0][1])
    assert close(results[0][1], sequences.gradient(step, seqs, w)[1])[0]


def test_a_tape_past_the_tile_budget_goes_to_the_one_at_a_time_kernel(monkeypatch):
    """A pack whose tape (rows·K·W doubles) passes a thread's tile budget runs on scan.py's kernel, which
    recomputes from checkpoints: the same bits as with the whole tape."""
    step, _, _, given, _, _ = step_of('holt_winters')
    seqs = ragged(2, 1.0)
    w = weights_at('holt_winters', step, given, 1.0)
    whole = sequences.gradient(step, seqs, w, backend='llvm')
    rest = counted(monkeypatch)
    small = sequences.gradient(step, seqs, w, tile_bytes=8 * len(step.states) * 64 * W, backend='llvm')
    # the packs with 730 rows: one at a time; those of 40 rows at most in lanes
    assert len(rest) == 1 and 730 in rest[0] and len(rest[0]) < seqs.count
    assert rest[0].count(730) == list(seqs.lengths).count(730)
    assert np.array_equal(small[0], whole[0]) and np.array_equal(small[1], whole[1])



def one_pack(step, given):
    """One pack: a sequence of 40 rows and W − 1 of 7 (lane 0 the longest), with the weights of holt_winters."""
    return sequences_of([40] + [7] * (W - 1), 1.0), weights_at('holt_winters', step, given, 1.0)


def test_a_pack_runs_in_lanes_while_its_longest_tape_fits_to_the_double(monkeypatch):
    """A pack is laned where its longest sequence's tape, 40·K·W doubles, fits a thread's share of tile_bytes: at
    8·40·K·W bytes it does, at 8 less its sequences go to scan.py's kernel (the bits the same either way)."""
    step, _, _, given, _, _ = step_of('holt_winters')
    seqs, w = one_pack(step, given)
    tape = 8 * 40 * len(step.states) * W
    want = scan.gradient(step, seqs, w, sequences.TILE_BYTES, sequences.ADJOINT)
    rest = counted(monkeypatch)
    fits = lanes.gradient(step, seqs, w, tape, sequences.ADJOINT)
    assert not rest
    past = lanes.gradient(step, seqs, w, tape - 8, sequences.ADJOINT)
    assert rest == [sorted(seqs.lengths)]
    for got in (fits, past):
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_pack_runs_in_lanes_while_its_estimated_work_fits_a_piece(monkeypatch):
    """A pack is laned where its longest sequence's estimated work, 40 rows of W lanes, fits threads.PIECE_NS: at
    exactly that it does, a hair below its sequences go to scan.py's kernel, which cuts long sequences in pieces."""
    step, _, _, given, _, _ = step_of('holt_winters')
    seqs, w = one_pack(step, given)
    one = scan.compiled(step, sequences.ADJOINT)
    work = 40 * ((one.forward_ns + one.backward_ns) * W)  # as lanes.gradient estimates it
    rest = counted(monkeypatch)
    monkeypatch.setattr(threads, 'PIECE_NS', work)
    lanes.gradient(step, seqs, w, sequences.TILE_BYTES, sequences.ADJOINT)
    assert not rest
    monkeypatch.setattr(threads, 'PIECE_NS', np.nextafter(work, 0))
    lanes.gradient(step, seqs, w, sequences.TILE_BYTES, sequences.ADJOINT)
    assert rest == [sorted(seqs.lengths)]



def fresh_ses(constant=None):
    """step_of('ses') for a step whose kernels this process has compiled nowhere before (its constant is new)."""
    model, state, weights = MODELS['ses']
    constant = uuid.uuid4().int % 10**9 if constant is None else constant
    state = json.loads(json.dumps(state).replace('w.l0', f'(w.l0 + {constant}e-20)'))
    return sequence.step_of(model, 'squared', 'y', json.dumps(state), json.dumps(weights), limits.DEFAULT, 1 << 30)


# A process that computes fresh_ses(constant)'s lane gradient with the disk cache in a directory, and prints what
# its two kernels' compilations took (ms) and the gradient
CACHED = """
import json, sys
import numpy as np
from pgad import sequences
from pgad.jit import cache as disk, lanes, scan
from test_sequence_lanes import fresh_ses, sequences_of, weights_at
directory, constant = sys.argv[1], int(sys.argv[2])
step, _, _, given, _, _ = fresh_ses(constant)
cache = disk.DiskCache(directory, 1 << 26)
seqs = sequences_of([5] * 2 * lanes.width(), 1.0)
loss, grad = lanes.gradient(step, seqs, weights_at('ses', step, given, 1.0), sequences.TILE_BYTES,
                            sequences.ADJOINT, cache)
kept = lanes.compiled(step, sequences.ADJOINT, cache)
print(json.dumps({'lanes': kept.ms, 'ir': kept.optimised_ir != '', 'scan': scan.compiled(step, sequences.ADJOINT).ms,
                  'bits': [loss.tobytes().hex(), grad.tobytes().hex()]}))
"""


def test_a_process_loads_the_kernels_another_put_in_the_disk_cache(tmp_path):
    """The first process compiles both kernels (the lanes' and scan.py's), timing their IR's generation, and puts
    them in the cache; the next loads them (a cache hit, no IR generated) and gives the same bits."""
    import pgad
    constant = uuid.uuid4().int % 10**9
    tests, tree = os.path.dirname(__file__), os.path.dirname(os.path.dirname(pgad.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, tests]))

    def child():
        done = subprocess.run([sys.executable, '-c', CACHED, str(tmp_path), str(constant)], env=env, cwd=tree,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.splitlines()[-1])
    began = time.perf_counter()
    first = child()
    took = (time.perf_counter() - began) * 1e3
    second = child()
    for kernel in ('lanes', 'scan'):
        assert set(first[kernel]) >= {'IR generation'} and 'cache hit' not in first[kernel]
        assert 0.05 < first[kernel]['IR generation'] < took  # ms: building a module's IR in Python takes more
        assert 'IR generation' not in second[kernel] and 0 <= second[kernel]['cache hit'] < took
    assert first['ir'] and not second['ir']  # the optimised IR: where compiled, not where loaded
    assert second['bits'] == first['bits']


def test_the_lane_and_scan_kernels_are_kept_in_the_disk_cache_given():
    """The lanes' gradient compiles two kernels, the lanes' and scan.py's (for the packs it does not take), and
    hands each to the cache sequences.gradient is given: a step compiled nowhere before (its constant is new) puts
    two keys; forward mode a third, its own."""
    step, _, _, given, _, _ = fresh_ses()

    class Remembered:  # a DiskCache that has nothing and keeps the keys it is asked for and given
        def __init__(self):
            self.asked, self.given = [], []

        def get(self, key):
            self.asked.append(key)

        def put(self, key, code):
            self.given.append(key)
    cache = Remembered()
    seqs, w = sequences_of([5] * W, 1.0), weights_at('ses', step, given, 1.0)
    assert lanes.pays(step, seqs)
    sequences.gradient(step, seqs, w, backend='llvm', cache=cache)  # by the lanes
    assert len(set(cache.asked)) == 2 and sorted(cache.asked) == sorted(cache.given)
    sequences.gradient(step, seqs, w, mode='forward', backend='llvm', cache=cache)  # forward mode's kernel: a third
    assert len(set(cache.asked)) == 3 and sorted(cache.asked) == sorted(cache.given)
    fresh = fresh_ses()[0]  # run() compiles scan.py's kernel for a step that has none yet, with the cache given
    cache = Remembered()
    sequences.run(fresh, seqs, w, backend='llvm', cache=cache)
    assert len(cache.asked) == 1 and cache.asked == cache.given
    fresh = fresh_ses()[0]  # and so does scan.gradient, for fewer sequences than lanes
    cache = Remembered()
    sequences.gradient(fresh, sequences_of([5], 1.0), w, backend='llvm', cache=cache)
    assert len(cache.asked) == 1 and cache.asked == cache.given

def test_interrupts_are_checked_between_pieces_of_packs(monkeypatch):
    step, _, _, given, _, _ = step_of('holt_winters')
    seqs = sequences_of([730] * (8 * W), 1.0)
    w = weights_at('holt_winters', step, given, 1.0)
    whole = sequences.gradient(step, seqs, w, backend='llvm')
    one = scan.compiled(step, sequences.ADJOINT)
    # a piece a pack (the estimated cost of its 730 rows fits a piece, two packs' do not), whose cut changes no bit
    monkeypatch.setattr(threads, 'PIECE_NS', 1.5 * 730 * (one.forward_ns + one.backward_ns) * W)
    rest = counted(monkeypatch)
    checks = []
    monkeypatch.setattr(limits, 'check', lambda: checks.append(1))
    cut = sequences.gradient(step, seqs, w, backend='llvm')
    assert not rest and len(checks) >= 7  # 8 packs, a run each (two packs' estimate passes a piece's), in 6 pieces
    assert np.array_equal(cut[0], whole[0]) and np.array_equal(cut[1], whole[1])

    def cancel():
        checks.append(1)
        if len(checks) == 3:
            raise KeyboardInterrupt('canceled')
    checks.clear()
    monkeypatch.setattr(limits, 'check', cancel)
    with pytest.raises(KeyboardInterrupt):
        sequences.gradient(step, seqs, w, backend='llvm')
    assert len(checks) == 3



def test_the_packs_tape_is_kept_a_run_at_a_time():
    """The packs run in runs whose tape stays within RUN_BYTES (what a core's cache keeps), one buffer a thread: the
    call allocates about that, never the tape of every pack (8 MB here)."""
    step, _, _, given, _, _ = step_of('holt_winters')
    seqs = sequences_of([730] * 160, 1.0)
    w = weights_at('holt_winters', step, given, 1.0)
    every = 730 * len(step.states) * 8 * seqs.count
    peak = peak_bytes(lambda: lanes.gradient(step, seqs, w, sequences.TILE_BYTES, sequences.ADJOINT))
    assert peak < lanes.RUN_BYTES + 400_000 < every / 2, (peak, every)


def test_a_step_keeps_a_lane_kernel_for_each_target():
    """The lane kernel kept with a Step is the one compiled for the target of the call: x86-64 (two lanes) and the
    host's each have their own."""
    step = step_of('ses')[0]
    kept = {}
    for name in ('x86-64', 'host'):
        replaced = targets.on_name(lambda name=name: name)
        try:
            kept[name] = lanes.compiled(step, sequences.ADJOINT)
            assert kept[name].width == lanes.width()
        finally:
            targets.on_name(replaced)
    assert kept['x86-64'].width == 2 and kept['x86-64'] is not kept['host']

def test_the_lane_loop_is_vectorised():
    """The optimised IR of the lane functions computes on vectors of doubles (the loop vectoriser took the lane
    loop), at whatever width the CPU has."""
    step, _, _, _, _, _ = step_of('holt_winters')
    compiled = lanes.compiled(step, sequences.ADJOINT)
    assert compiled.optimised_ir == '' or ' x double>' in compiled.optimised_ir  # '': loaded from the disk cache


def test_fewer_sequences_than_lanes_run_one_at_a_time(monkeypatch):
    step, _, _, given, _, _ = step_of('ses')
    assert not lanes.pays(step, sequences_of([5] * (W - 1), 1.0))
    assert lanes.pays(step, sequences_of([5] * W, 1.0))
    monkeypatch.setattr(lanes, 'MAX_NODES', 10)
    assert not lanes.pays(step_of('holt')[0], sequences_of([5] * W, 1.0))



def test_the_lanes_ask_whether_reverse_modes_kernel_fits_not_forward_modes(monkeypatch):
    """The lanes run reverse mode's functions: a step whose reverse-mode kernel fits a tier runs there even where
    forward mode's (K + 1 rows of K products a weight more) fits none."""
    step = step_of('holt_winters')[0]
    reverse, forward = scan.nodes(step), scan.nodes(step, tangents=True)
    assert reverse < forward
    monkeypatch.setattr(scan, 'SCAN_TIERS', (dataclasses.replace(scan.SCAN_TIERS[0], max_nodes=reverse),))
    assert scan.fits(step) and not scan.fits(step, tangents=True)
    assert lanes.pays(step, sequences_of([5] * W, 1.0))

def holt_series(n, seed, alpha=0.4, beta=0.3):
    """A series drawn from Holt's model itself, whose least squares lie inside (0, 1)²."""
    rng = np.random.default_rng(seed)
    level, trend, y = 50.0, 0.3, []
    for _ in range(n):
        e = rng.normal()
        y.append(level + trend + e)
        level, trend = level + trend + alpha * e, trend + alpha * beta * e
    return np.array(y)


def test_train_many_groups_with_backend_llvm_matches_backend_python(db):
    """pgad.train over 2·W + 1 groups (lockstep's Newton, its gradients by the lanes) as with the python reference,
    at the optimum: the python backend takes these sequences by the parallel scan, whose roundings Newton's Hessian
    from differences of the gradient carries along the way, so the paths may part in the last digits."""
    count = 2 * W + 1
    load_series(db, 'many', [holt_series(120 + 7 * (g % 5), 13 + g) for g in range(count)])
    _, state, weights = MODELS['holt']
    weights = {**weights, 'l0': 50.0}
    found = {}
    for backend in ('python', 'llvm'):
        found[backend] = db.execute(
            "SELECT group_key, weights, final_loss, converged FROM pgad.train(%s, 'λ(d, w, s) s.level + s.trend', "
            "'squared', 'SELECT g, day, y FROM many', %s, order_by => 'day', state => %s, group_by => 'g', "
            "backend => %s) ORDER BY group_key::text",
            [f'many_{backend}', json.dumps(weights), json.dumps(state), backend]).fetchall()
    assert len(found['llvm']) == count
    for a, b in zip(found['python'], found['llvm']):
        assert a[3] and b[3]
        assert b[2] == pytest.approx(a[2], rel=1e-10)
        for key in a[1]:
            assert b[1][key] == pytest.approx(a[1][key], rel=1e-5, abs=1e-7)
