"""The cuda backend (pgad/gpu/), proven without a GPU: its kernels on numba's CUDA simulator against the python and
llvm backends on every test lambda, in both modes; compiled to PTX for sm_80 and sm_90 (numba's NVVM and ptxas
need no GPU) and checked for spills, local memory and float64 atomics; and through SQL, on servers that run the
simulator and on one that has neither GPU nor simulator. Where a GPU is present (conftest.py) the same tests run
on it instead of the simulator.
"""
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import tokenize

import numpy as np
import psycopg
import pytest

from conftest import GPU, error_of, new_database
from pgad import backends, program
from pgad.models import descent
from pgad.errors import PgadError
from pgad.gpu import codegen, compiler
from pgad.lang import rules
from pgad.loader import Table
from pgad.throwaway import Cluster
from test_rules import CASES, DATA, NESTED_UNTAKEN, TIES, W, WEIGHTS

MODES = ('forward', 'reverse')
SIMULATED = os.environ.get('NUMBA_ENABLE_CUDASIM') == '1'


def run(text, mode, w=W, data=DATA, weights=WEIGHTS, backends_=('python', 'llvm', 'cuda'), **cuda):
    """Each backend's sums for the lambda over data at w; cuda options (precision, combine) go to its compile."""
    prog = program.build(text, tuple(weights), mode)
    columns = [np.asarray(data[c], dtype=np.float64) for c in prog.columns]
    rows = len(next(iter(data.values())))
    w = np.asarray(w, dtype=np.float64)
    return [(compiler.compile(prog, **cuda).kernel if b == 'cuda' else backends.compile(prog, b))(columns, rows, w)
            for b in backends_]


# --- 1. the kernels: every rule, both modes, against the python and llvm backends ----------------------------------

def test_every_primitive_has_a_cuda_rule():
    assert set(codegen.EMIT) == set(rules.PRIMITIVES)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('text, fn', CASES)
def test_cuda_matches_python_and_llvm(text, fn, mode):
    python, llvm, cuda = run(text, mode)
    # 1e-12 relative: the same float64 arithmetic, the sums added in another order (a thread's rows, then a tree)
    np.testing.assert_allclose(cuda, python, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(cuda, llvm, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('text', NESTED_UNTAKEN)
def test_cuda_matches_python_through_untaken_branches(text, mode):
    python, cuda = run(text, mode, w=[0.7, 0.3], data={'x': np.array([-1.0, 0.0, 0.5, 2.0])},
                       backends_=('python', 'cuda'))
    assert np.all(np.isfinite(cuda))
    np.testing.assert_allclose(cuda, python, rtol=1e-12)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('body, w, expected', TIES)
def test_cuda_ties_follow_the_first_argument(body, w, expected, mode):
    python, cuda = run('λ(d, w) ' + body, mode, w=w, data={'x': np.zeros(3)}, weights=('a', 'b', 'c'),
                       backends_=('python', 'cuda'))
    np.testing.assert_allclose(cuda, python, rtol=1e-12)


@pytest.mark.parametrize('text', ['λ(d, w) ln(w.a*d.x - 1)', 'λ(d, w) w.a/(d.x - d.x)', 'λ(d, w) sqrt(-w.a*d.x)',
                                  'λ(d, w) exp(w.a*d.x*1000)'])
def test_nan_and_infinity_come_out_as_on_the_cpu(text):
    """Outside the domain the GPU gives NaN or infinity as IEEE arithmetic does (numba-cuda's numpy error model; the
    simulator's numpy scalars), never an exception: the descent then names the cause (domain.py)."""
    python, cuda = run(text, 'reverse', w=[1.0, 0.0], data={'x': np.array([0.5, 2.0])}, backends_=('python', 'cuda'))
    np.testing.assert_array_equal(np.isnan(cuda), np.isnan(python))
    np.testing.assert_array_equal(cuda[~np.isnan(cuda)], python[~np.isnan(python)])


@pytest.mark.parametrize('rows', [0, 1, 2, 7, 8, 9, 100])
def test_any_number_of_rows(rows):
    """Fewer rows than threads, a partial last stride, more rows than the grid has threads."""
    x = np.linspace(-1, 1, rows)
    python, cuda = run('λ(d, w) (w.a*d.x + w.b - d.x^2)^2', 'reverse', data={'x': x}, backends_=('python', 'cuda'))
    np.testing.assert_allclose(cuda, python, rtol=1e-12, atol=1e-15)


@pytest.mark.skipif(not SIMULATED, reason='the simulator\'s threads; a GPU has shared memory')
def test_a_blocks_threads_share_one_array_on_the_simulator(monkeypatch):
    """numba-cuda's simulator creates a block's cuda.shared.array when the first thread asks for it, with no lock: a
    thread switched out there (under load, now and then: test_rules.py's finite differences failed once) let a second
    thread create its own, and the block summed uninitialised memory. Here every thread is switched out there (a
    slow np.empty in the simulator's threads): the sums must still be the python backend's."""
    empty = np.empty

    def slow(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.01)
        return empty(*args, **kwargs)
    monkeypatch.setattr(np, 'empty', slow)
    text = 'λ(d, w) CASE d.t WHEN 1 THEN w.a*exp(w.b*d.x) WHEN 0.5 THEN 0 ELSE w.b*d.y^2 END'
    for mode in MODES:
        python, cuda = run(text, mode, backends_=('python', 'cuda'))
        np.testing.assert_allclose(cuda, python, rtol=1e-12, atol=1e-15)


def test_the_partials_combine_gives_the_atomic_sums():
    text = 'λ(d, w) (tanh(w.a*d.x + w.b)*w.a + sigmoid(w.b*d.y - w.a) - d.t)^2'
    atomic, partials = (run(text, 'reverse', backends_=('cuda',), combine=c)[0] for c in codegen.COMBINES)
    np.testing.assert_allclose(partials, atomic, rtol=1e-12)


def test_many_outputs_are_summed_in_groups():
    """More outputs than one shared-memory group holds (codegen.GROUP): each group is summed on its own."""
    names = [f'w{k}' for k in range(2 * codegen.GROUP + 3)]
    text = 'λ(d, w) (' + ' + '.join(f'w.{n}*d.x^{k % 3}' for k, n in enumerate(names)) + ' - d.y)^2'
    w = np.linspace(-0.5, 0.5, len(names))
    for combine in codegen.COMBINES:
        python, cuda = run(text, 'reverse', w=w, weights=names, backends_=('python', 'cuda'), combine=combine)
        np.testing.assert_allclose(cuda, python, rtol=1e-12)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('text, fn', CASES[::4])
def test_float32_within_its_tolerance(text, fn, mode):
    """precision float32: the columns, weights and every node in float32, the sums in float64. Each row's values
    carry float32's relative rounding (6e-8) through a few dozen operations: 1e-5 of the largest sum, documented in
    docs/sql.md."""
    python, cuda = run(text, mode, backends_=('python', 'cuda'), precision='float32')
    np.testing.assert_allclose(cuda, python, rtol=1e-5, atol=1e-5 * np.max(np.abs(python)))


# --- 2. the source numba compiles holds no text of the user's ------------------------------------------------------

PYTHONIC = ('λ(d, w) w."__import__(\'os\').system(\'id\')" * d."exec(open(1))" + ln(w."import os")^2 '
            '+ 1e300*d."lambda: 0" + \'NaN\' * 0 + \'Infinity\'')


def test_the_kernel_source_holds_generated_names_only():
    prog = program.build(PYTHONIC, tuple(program.parsed(PYTHONIC).weights), 'reverse')
    for combine in codegen.COMBINES:
        source, constants = codegen.kernel_source(prog, 32, combine)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        names = {t.string for t in tokens if t.type == tokenize.NAME}
        generated = {n for n in names if n[0] in 'vcwak' and n[1:].isdigit()}
        fixed = set(codegen.NAMES) | {codegen.KERNEL, codegen.COMBINE, 'rows', 'io', 'i', 'stride', 't', 'shared',
                                      'half', 'partials', 'k', 'b', 'total', 'range', 'threadIdx', 'blockIdx',
                                      'blockDim', 'x', 'grid', 'gridsize', 'syncthreads', 'atomic', 'add', 'array',
                                      'shape', 'dtype'}
        assert names - generated - fixed <= {'def', 'while', 'if', 'else', 'not', 'and', 'or', 'for', 'in'}
        assert not [t.string for t in tokens if t.type == tokenize.STRING]
        assert all(float(t.string).is_integer() for t in tokens if t.type == tokenize.NUMBER)  # indices, sizes
        assert {type(v) for v in constants.values()} <= {float, bool}


def test_a_pythonic_lambda_runs_as_its_arithmetic():
    lam = program.parsed(PYTHONIC)
    data = {name: np.array([0.5, 1.5]) for name in lam.columns}
    w = np.full(len(lam.weights), 0.25)
    python, cuda = run(PYTHONIC, 'reverse', w=w, data=data, weights=lam.weights, backends_=('python', 'cuda'))
    np.testing.assert_array_equal(np.isnan(cuda), np.isnan(python))


# --- 3. real targets: PTX for sm_80 and sm_90, with no GPU ---------------------------------------------------------

@pytest.fixture(scope='module')
def ptx_reports():
    """Every test lambda's kernel in both modes, for sm_80 and sm_90; one in float32 and one with the partials
    combine: tests/ptx_report.py, in a process of its own (this one runs the simulator)."""
    jobs = [dict(text=p.values[0], weights=WEIGHTS, mode=mode, precision='float64', combine='atomic', cc=cc)
            for p in CASES for mode in MODES for cc in ((8, 0), (9, 0))]
    linear = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
    jobs += [dict(text=linear, weights=WEIGHTS, mode='reverse', precision='float32', combine='atomic', cc=(9, 0)),
             dict(text=linear, weights=WEIGHTS, mode='reverse', precision='float64', combine='partials', cc=(9, 0))]
    script = os.path.join(os.path.dirname(__file__), 'ptx_report.py')
    result = subprocess.run([sys.executable, script], input=json.dumps(jobs), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_every_kernel_compiles_for_sm_80_and_sm_90(ptx_reports):
    assert len(ptx_reports) == 4 * len(CASES) + 2
    for r in ptx_reports:
        assert r['target'] == f'sm_{r["cc"][0]}{r["cc"][1]}'
        assert r['ptxas'] == 0, (r['text'], r['ptxas_errors'])


def test_no_kernel_spills_or_uses_local_memory(ptx_reports):
    """The design keeps a row's values and the accumulators in registers: ptxas spills nothing (the test lambdas
    need at most 64 registers), and the PTX uses no local memory but the one array libdevice's sin, cos and tan keep
    for reducing huge arguments (Payne–Hanek), which the design expects."""
    for r in ptx_reports:
        assert (r['spill_stores'], r['spill_loads']) == (0, 0), (r['text'], r['mode'], r['cc'])
        assert 0 < r['registers'] <= 128
        trig = re.search(r'\b(?:sin|cos|tan)\(', r['text'])
        assert (r['local'] > 0) == bool(trig), (r['text'], r['mode'], r['cc'])


def test_the_atomic_combine_adds_float64_atomically_once_per_output(ptx_reports):
    for r in ptx_reports:
        outputs = 1 + len(r['weights'])
        if r['combine'] == 'atomic':
            assert r['f64_atomics'] == outputs == r['atomics'], (r['text'], r['mode'])
        else:
            assert r['atomics'] == 0  # a second kernel adds the blocks' partials, in order


# --- 4. selection, caching, the data on the device once, errors -----------------------------------------------------

def test_auto_picks_cuda_only_on_a_gpu_from_gpu_rows(monkeypatch):
    prog = program.build('λ(d, w) (w.a*d.x - d.y)^2', ('a',), 'reverse')
    assert backends.choose(prog, 'auto', 10 ** 9) == ('cuda' if GPU else 'llvm')  # never the simulator
    monkeypatch.setattr(backends.gpu, 'present', lambda: True)
    assert backends.choose(prog, 'auto', backends.GPU_ROWS) == 'cuda'
    assert backends.choose(prog, 'auto', backends.GPU_ROWS - 1) == 'llvm'
    assert backends.choose(prog, 'auto') == 'llvm'  # rows not known yet
    big = program.build('λ(d, w) ' + ' + '.join(f'sin(w.a*d.x + {k})' for k in range(compiler.MAX_NODES)), ('a',),
                        'reverse')
    assert backends.choose(big, 'auto', 10 ** 9) == backends.choose(big, 'auto') != 'cuda'  # the CPU's choice


def test_kernels_are_cached_per_program_and_precision():
    prog = program.build('λ(d, w) (w.a*d.x - d.y)^2', ('a',), 'forward')
    f64 = backends.compile(prog, 'cuda')
    assert backends.compile(prog, 'cuda') is f64
    assert backends.compile(prog, 'cuda', precision='float32') is not f64
    assert backends.compile(program.build('λ(d, w) (w.a*d.x - d.y)^2', ('a',), 'reverse'), 'cuda') is not f64


def test_a_fit_copies_the_columns_to_the_device_once(monkeypatch):
    """Per iteration only the io array (weights in, sums out) crosses; the columns cross once per fit."""
    prog = program.build('λ(d, w) (w.a*d.x + w.b - d.y)^2', ('a', 'b'), 'reverse')
    kernel = backends.compile(prog, 'cuda')
    copies = []
    real = kernel.module.to_device
    monkeypatch.setattr(kernel.module, 'to_device', lambda a, *args: copies.append(len(a)) or real(a, *args))
    x = np.linspace(0, 1, 50)
    fit = descent.fit(kernel, Table([x, 2 * x + 1], 50, 0), [0.0, 0.0], ['a', 'b'], 'gd', 0.5, 30, judge=False)
    assert sorted(copies) == [5] * 31 + [50, 50]  # io (2 weights, 3 sums) for 30 steps and the final loss; x, y once
    cpu = descent.fit(backends.compile(prog, 'llvm'), Table([x, 2 * x + 1], 50, 0), [0.0, 0.0], ['a', 'b'], 'gd',
                      0.5, 30, judge=False)  # the judge's passes (fit's default) cross the io array too
    np.testing.assert_allclose(fit.weights, cpu.weights, rtol=1e-12)


def test_lbfgs_and_mini_batches_match_the_cpu():
    prog = program.build('λ(d, w) softplus(w.a*d.x + w.b) - d.y*(w.a*d.x + w.b)', ('a', 'b'), 'reverse')
    rng = np.random.default_rng(0)
    x = rng.normal(size=300)
    table = Table([x, (rng.uniform(size=300) < 1 / (1 + np.exp(-2 * x))).astype(float)], 300, 0)
    for optimizer in ('lbfgs', 'adam'):
        fits = [descent.fit(backends.compile(prog, b), table, [0.0, 0.0], ['a', 'b'], optimizer, 0.1, 5,
                            batch_size=64, seed=1) for b in ('llvm', 'cuda')]
        np.testing.assert_allclose(fits[1].weights, fits[0].weights, rtol=1e-10)


def test_without_numba_cuda_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, 'numba.cuda', None)  # import numba.cuda raises ImportError
    with pytest.raises(PgadError) as caught:
        compiler.cuda()
    assert caught.value.sqlstate == '0A000' and caught.value.message == 'the cuda backend is not installed'
    assert 'make install CUDA=1' in caught.value.hint


def test_without_a_gpu_the_error_says_so(monkeypatch):
    class NoGPU:
        implementation = 'NVIDIA'
        is_available = staticmethod(lambda: False)
        cuda_error = staticmethod(lambda: 'CUDA driver library cannot be found')
    monkeypatch.setattr(compiler, 'cuda', lambda: NoGPU)
    with pytest.raises(PgadError) as caught:
        compiler.compile(program.build('λ(d, w) w.a*d.x', ('a',), 'reverse'))
    assert (caught.value.sqlstate, caught.value.message) == ('58000', 'no CUDA GPU is available to the server')
    assert caught.value.detail == 'CUDA says: CUDA driver library cannot be found.'
    assert "backend => 'llvm'" in caught.value.hint


def test_a_kernel_too_large_for_cuda_is_refused():
    big = program.build('λ(d, w) ' + ' + '.join(f'sin(w.a*d.x + {k})' for k in range(compiler.MAX_NODES)), ('a',),
                        'reverse')
    with pytest.raises(PgadError) as caught:
        backends.compile(big, 'cuda')
    assert caught.value.sqlstate == '54001' and 'too large for the cuda backend' in caught.value.message


# --- 5. through SQL: a server that runs the simulator (or the GPU), and one with neither ---------------------------

DATA_SQL = 'SELECT x / 100.0 AS x, sin(x) AS y FROM generate_series(1, 500) AS x'
LOGISTIC = 'λ(d, w) softplus(w.a*d.x + w.b) - CASE WHEN d.y > 0 THEN w.a*d.x + w.b ELSE 0 END'
LINEAR = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'


@pytest.mark.parametrize('mode', MODES)
def test_cuda_trains_through_sql_as_llvm_does(db, mode):
    fits = {}
    for backend in ('llvm', 'cuda'):
        fits[backend] = db.execute(
            "SELECT weights, loss, iterations FROM pgad.gradient_descent(%s, %s, '{\"a\": 0, \"b\": 0}', 0.5, 20, "
            "%s, %s)", (LINEAR, DATA_SQL, mode, backend)).fetchone()
    (w_llvm, loss_llvm, n_llvm), (w_cuda, loss_cuda, n_cuda) = fits['llvm'], fits['cuda']
    assert n_llvm == n_cuda == 20
    assert loss_cuda == pytest.approx(loss_llvm, rel=1e-12)
    assert w_cuda == pytest.approx(w_llvm, rel=1e-12)
    grads = [db.execute('SELECT pgad.gradient(%s, %s, \'{"a": 0.3, "b": -0.2}\', %s, %s)',
                        (LINEAR, DATA_SQL, mode, b)).fetchone()[0] for b in ('llvm', 'cuda')]
    assert grads[1] == pytest.approx(grads[0], rel=1e-12)


def test_train_and_the_aggregates_run_on_cuda(db):
    rows = {}
    for backend in ('llvm', 'cuda'):
        db.execute("SELECT pgad.train(%s, 'λ(d, w) w.a*d.x + w.b', 'squared', %s, '{\"a\": 0, \"b\": 0}', "
                   "optimizer => 'lbfgs', iterations => 50, backend => %s)", (f'gpu_{backend}', DATA_SQL, backend))
        rows[backend] = db.execute("SELECT weights, final_loss, options->>'backend' FROM pgad.models WHERE name = %s",
                                   (f'gpu_{backend}',)).fetchone()
    assert rows['cuda'][2] == 'cuda'
    assert rows['cuda'][1] == pytest.approx(rows['llvm'][1], rel=1e-10)
    agg = [db.execute("SELECT pgad.gradient_agg(%s, '{\"a\": 0.5, \"b\": 0}', t, %s) FROM (" + DATA_SQL + ") AS t",
                      (LINEAR, json.dumps({'backend': b}))).fetchone()[0] for b in ('llvm', 'cuda')]
    assert agg[1] == pytest.approx(agg[0], rel=1e-12)


def test_float32_through_sql(db):
    args = (LOGISTIC, DATA_SQL, '{"a": 0.3, "b": -0.2}')
    f64 = db.execute("SELECT pgad.gradient(%s, %s, %s, backend => 'llvm')", args).fetchone()[0]
    f32 = db.execute("SELECT pgad.gradient(%s, %s, %s, backend => 'cuda', dtype => 'float32')",
                     args).fetchone()[0]
    assert f32 == pytest.approx(f64, rel=1e-5)
    assert error_of(db, "SELECT pgad.gradient(%s, %s, %s, backend => 'llvm', dtype => 'float32')",
                    args).sqlstate == '22023'
    assert error_of(db, "SELECT pgad.gradient(%s, %s, %s, dtype => 'float16')", args).message_primary == \
        'unknown dtype "float16"'


def test_explain_shows_the_cuda_stages(db):
    rows = db.execute("SELECT stage, detail FROM pgad.explain(%s, 'reverse', 'cuda')", (LINEAR,)).fetchall()
    stages = dict(rows)
    assert [s for s, _ in rows] == ['parse', 'differentiate', 'backend', 'kernel source', 'PTX', 'compilation']
    assert stages['backend'] == 'cuda: asked for'
    assert 'def pgad_kernel(rows, io, c0, c1):' in stages['kernel source']
    auto = dict(db.execute("SELECT stage, detail FROM pgad.explain(%s, rows => 1000000)", (LINEAR,)).fetchall())
    assert auto['backend'].startswith('cuda: auto' if GPU else 'llvm: auto, for 1000000 rows; no GPU is there')


@pytest.fixture(scope='module')
def no_gpu_server():
    """A server with no GPU and no simulator: what a server without one sees."""
    if GPU:
        pytest.skip('this machine has a GPU')
    os.environ['NUMBA_ENABLE_CUDASIM'] = '0'
    try:
        with Cluster() as pg:
            os.environ['NUMBA_ENABLE_CUDASIM'] = '1'
            name = new_database(pg)
            with psycopg.connect(pg.conninfo(name), autocommit=True) as conn:
                conn.execute('CREATE EXTENSION pgad CASCADE')
                yield conn
    finally:
        os.environ['NUMBA_ENABLE_CUDASIM'] = '1'


def test_without_a_gpu_backend_cuda_is_a_clear_error(no_gpu_server):
    diag = error_of(no_gpu_server, "SELECT pgad.gradient(%s, %s, '{\"a\": 0, \"b\": 0}', backend => 'cuda')",
                    (LINEAR, DATA_SQL))
    assert (diag.sqlstate, diag.message_primary) == ('58000', 'no CUDA GPU is available to the server')
    assert diag.message_detail.startswith('CUDA says: ') and "backend => 'llvm'" in diag.message_hint
    assert diag.context is None or diag.context.count('\n') == 0
    fit = no_gpu_server.execute("SELECT (pgad.gradient_descent(%s, %s, '{\"a\": 0, \"b\": 0}')).iterations",
                                (LINEAR, DATA_SQL)).fetchone()[0]
    assert fit == 100  # auto runs on the CPU


def test_without_a_gpu_explain_still_shows_the_ptx(no_gpu_server):
    stages = dict(no_gpu_server.execute("SELECT stage, detail FROM pgad.explain(%s, 'forward', 'cuda')",
                                        (LINEAR,)).fetchall())
    assert 'PTX instructions for sm_80' in stages['PTX'] and '.target sm_80' in stages['PTX']
    assert stages['compilation'].startswith('none: no CUDA GPU is available to the server')
