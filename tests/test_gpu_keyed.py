"""The cuda backend's kernel of a keyed model (pgad/gpu/scatter.py), proven on numba's CUDA simulator (or a GPU where
conftest.py finds one): against the python backend's kernel (keyed.Kernel's numpy plan and np.bincount) on generated
ratings, the loss and gradient of a factorisation under the squared and logistic losses, block Newton's Hessian sums
of each group read through an index, arranged in key order and by chunks of keys, and the Hessian-vector products of
conjugate gradients (a direction read from the other array); a key out of range skips its row; arrays too small for
the places a key reaches are refused before the kernel runs. Through SQL, pgad.train of a keyed model with backend
'cuda' reaches the llvm backend's fit. The atomic adds sum in any order: equal to rounding, never bit for bit."""
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import psycopg
import pytest

from pgad import keyed, program
from test_scatter import CLOCK, ITEMS, USERS, groups_of, kernels, ratings, same_hessian_sums

ROWS = 600  # the simulator runs each GPU thread as a Python thread: a few hundred rows a pass


def cuda_of(python):
    return keyed.Kernel(python.prog, python.layout, python.columns, 'cuda')


@pytest.mark.parametrize('loss', ['squared', 'logistic'])
def test_the_loss_and_gradient_are_the_python_backends(loss):
    python, _, _, w, _ = kernels(loss)
    cuda = cuda_of(python)
    columns = ratings(ROWS, loss)
    expected = python(columns, ROWS, w)
    np.testing.assert_allclose(cuda(columns, ROWS, w), expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    assert cuda.loss(columns, ROWS, w) == pytest.approx(expected[0], rel=1e-13)


@pytest.mark.parametrize('loss', ['squared', 'logistic'])
def test_the_hessian_sums_are_the_python_backends_indexed_arranged_and_by_chunks(loss):
    python, _, layout, w, text = kernels(loss)
    same_hessian_sums(python, cuda_of(python), layout, w, text, ratings(ROWS, loss, seed=1))


def test_conjugate_gradients_run_in_numpy_over_the_cuda_kernels_products():
    """A group of 17 values or more is solved by conjugate gradients: no compiled step on cuda (jit/cg.py is the
    llvm backend's), each Hessian-vector product one pass of the CUDA kernel, its direction read from the other
    array, and the numpy step over them the python backend's."""
    python, _, layout, w, text = kernels(rank=17)
    cuda = cuda_of(python)
    columns = ratings(300, seed=6)
    table = SimpleNamespace(columns=list(columns), rows=300)
    rng = np.random.default_rng(5)
    for slow, fast in list(zip(groups_of(python, layout, text), groups_of(cuda, layout, text)))[1:]:
        assert fast.products_program is not None and fast.solver(cuda, indexed=True) is None
        v = np.ascontiguousarray(rng.normal(size=(slow.count, slow.m)))
        np.testing.assert_allclose(fast.products(cuda, table, w, v, CLOCK), slow.products(python, table, w, v, CLOCK),
                                   rtol=1e-11, atol=1e-9)
        np.testing.assert_allclose(fast.gradients(cuda, table, w, CLOCK), slow.gradients(python, table, w, CLOCK),
                                   rtol=1e-11, atol=1e-9)


@pytest.mark.parametrize('bad', [0.0, USERS + 1.0, np.nan, np.inf, -3.0, 1e300, -0.5])
def test_a_key_out_of_range_skips_its_row(bad):
    python, _, layout, w, text = kernels()
    cuda = cuda_of(python)
    y, u, i = ratings(200, seed=3)
    u[::7] = bad
    good = np.isfinite(u) & (u >= 1) & (u <= USERS)
    expected = python([y[good], u[good], i[good]], int(good.sum()), w)
    np.testing.assert_allclose(cuda([y, u, i], 200, w), expected, rtol=1e-12, atol=1e-12)
    group = groups_of(cuda, layout, text)[2]  # the items' blocks, each row reading its user's values
    g, _ = group.sums(cuda, SimpleNamespace(columns=[y, u, i], rows=200), w, CLOCK)
    kept = SimpleNamespace(columns=[y[good], u[good], i[good]], rows=int(good.sum()))
    np.testing.assert_allclose(g, groups_of(python, layout, text)[2].sums(python, kept, w, CLOCK)[0], rtol=1e-12,
                               atol=1e-12)


def test_arrays_too_small_for_the_places_a_key_reaches_are_refused_before_it_runs():
    python, _, layout, w, _ = kernels()
    cuda = cuda_of(python)
    columns = ratings(100)
    compiled = cuda.compiled(cuda.prog.graph, cuda.prog.outputs, cuda.places())
    with pytest.raises(ValueError, match='outside its array'):
        compiled(columns, 100, w[:-1], np.zeros(1 + layout.size), cuda.keys)
    with pytest.raises(ValueError, match='outside its array'):
        compiled(columns, 100, w, np.zeros(1 + layout.size), {c: k + 1 for c, k in cuda.keys.items()})
    with pytest.raises(ValueError, match='fewer than'):
        compiled(columns, 101, w, np.zeros(1 + layout.size), cuda.keys)


def test_the_kernel_source_names_nothing_of_the_users():
    """The generated source holds generated identifiers only: no weight or column name reaches it."""
    from pgad.gpu import scatter as on_gpu
    python, _, _, _, _ = kernels()
    cuda = cuda_of(python)
    compiled = cuda.compiled(cuda.prog.graph, cuda.prog.outputs, cuda.places())
    source, _ = on_gpu.kernel_source(cuda.prog.graph, cuda.prog.outputs, compiled.reads, compiled.targets,
                                     [str(c) for c in cuda.columns], False, 4)
    for name in ('mu', 'bu', 'bi', 'p[', 'q['):
        assert name not in source.replace('cuda.', '')
    assert program.DIRECTION not in source


def test_the_kernels_compile_for_sm_80_and_sm_90_with_float64_atomics():
    """The gradient's kernel (its keyed outputs added by atomic adds, the loss summed over a block) and an indexed
    Hessian pass of the items' blocks, compiled to PTX by numba's NVVM and ptxas for real targets, with no GPU
    (tests/ptx_report.py, in a process of its own): each compiles, and adds float64 atomically."""
    from pgad.gpu import scatter as on_gpu
    python, _, layout, _, text = kernels()
    cuda = cuda_of(python)
    made = [cuda.compiled(cuda.prog.graph, cuda.prog.outputs, cuda.places())]
    group = groups_of(cuda, layout, text)[2]
    width = len(group.prog.outputs) - 1
    code = cuda.columns.index(group.column)
    made.append(cuda.compiled(group.prog.graph, group.prog.outputs[1:], [(code, k, width) for k in range(width)],
                              indexed=True))
    jobs = []
    for compiled, indexed in zip(made, (False, True)):
        graph = cuda.prog.graph if not indexed else group.prog.graph
        outputs = cuda.prog.outputs if not indexed else group.prog.outputs[1:]
        source, constants = on_gpu.kernel_source(graph, outputs, compiled.reads, compiled.targets,
                                                 [str(c) for c in cuda.columns], indexed, 256)
        jobs += [dict(source=source, constants=constants, cc=cc,
                      types=f'({", ".join(on_gpu.arguments(len(cuda.columns)))})') for cc in ((8, 0), (9, 0))]
    script = os.path.join(os.path.dirname(__file__), 'ptx_report.py')
    result = subprocess.run([sys.executable, script], input=json.dumps(jobs), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for r in json.loads(result.stdout):
        assert r['target'] == f'sm_{r["cc"][0]}{r["cc"][1]}' and r['ptxas'] == 0, r['ptxas_errors']
        assert r['f64_atomics'] > 0


MODEL = 'λ(d, w) w.mu + w.bu[d.u] + w.bi[d.i] + dot(w.p[d.u], w.q[d.i])'
START = json.dumps({'mu': 0, 'bu': {}, 'bi': {}, 'p': {'shape': [2], 'seed': 1}, 'q': {'shape': [2], 'seed': 2}})


def test_a_keyed_training_on_cuda_reaches_the_llvm_fit(cluster, dbname):
    """pgad.train of a factorisation with backend 'cuda' (block Newton over the CUDA kernel's passes): the llvm
    backend's weights and objective, to 1e-8."""
    y, u, i = ratings(300, seed=7)
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE small_ratings (u int, i int, y float8)')
        with db.cursor().copy('COPY small_ratings FROM STDIN') as copy:
            for row in zip(u.astype(int) % 25 + 1, i.astype(int) % 12 + 1, y):
                copy.write_row(tuple(map(lambda v: v.item(), row)))
        fits = {}
        for backend in ('llvm', 'cuda'):
            db.execute("SELECT * FROM pgad.train(%s, %s, 'squared', 'small_ratings', %s, label => 'y', l2 => 0.5, "
                       "iterations => 4, backend => %s)", [f'mf_{backend}', MODEL, START, backend])
            fits[backend] = db.execute("SELECT final_loss, options->>'backend' FROM pgad.models WHERE name = %s",
                                       [f'mf_{backend}']).fetchone()
            values = db.execute(f'SELECT key, value FROM pgad_models."mf_{backend}@1.p" ORDER BY key').fetchall()
            fits[backend] += (np.array([v for _, v in values]),)
    assert fits['cuda'][1] == 'cuda'
    assert fits['cuda'][0] == pytest.approx(fits['llvm'][0], rel=1e-8)
    np.testing.assert_allclose(fits['cuda'][2], fits['llvm'][2], rtol=1e-7, atol=1e-9)
    assert ITEMS > 12 and USERS > 25  # the test's keys are a subset of the generated ones
