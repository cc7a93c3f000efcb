"""No input crashes a backend: the loop kernels' buffers on the heap, the kernel's stack frame checked at compile
time (jit/frames.py), and the crash fuzzer of vector lambdas (tests/vector_fuzzing.py) on a sample — in forked
children, and through SQL on the server, whose log must show no backend "terminated by signal".

`make fuzz` (bench/fuzz.py --vectors) runs the same fuzzer over a hundred thousand inputs.
"""
import ctypes
import json
import os
import platform
import time

import numpy as np
import psycopg
import pytest

import vector_fuzzing
from conftest import error_of
from pgad import backends, lang, program
from pgad.errors import PgadError
from pgad.jit import compiler, codegen, frames, loops
from pgad.lang import vectors

SEED = 20261125
IN_PROCESS = 150   # vector inputs in forked children (about 20 s on a 2-core VM)
THROUGH_SQL = 20   # of them (the first whose weights have at most SQL_ELEMENTS elements), through SQL
SQL_ELEMENTS = 2000
ISSUE = 'λ(d, w) sum(outer(d.x, d.u) * w.a)'


def server_log(cluster):
    """The path of the cluster's server log (testing.postgresql sends the server's stderr there), or None."""
    path = os.path.join(getattr(cluster, 'base_dir', ''), 'postgresql.log')
    return path if os.path.exists(path) else None


@pytest.fixture
def watched(cluster, db):
    """Asserts, after the test, that no backend was killed by a signal and the postmaster did not restart."""
    log = server_log(cluster)
    offset = os.path.getsize(log) if log else 0
    started = db.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
    yield
    with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as conn:
        assert conn.execute('SELECT pg_postmaster_start_time()').fetchone()[0] == started
    assert vector_fuzzing.crashes_in_log(log, offset) == []


def issue_program(m, n, tape, mode='reverse'):
    return program.build(ISSUE, ('a',), mode, True, shapes=vectors.Shapes((('a', (m, n)),), (('x', m), ('u', n))),
                         tape=tape)


# --- the issue's class: outer products of long array columns, every tape, both modes ---------------------------------

@pytest.mark.parametrize('m, n', [(110, 110), (60, 200), (150, 150)])
def test_outer_products_of_long_columns_run_on_every_tape_through_sql(db, watched, m, n):
    """The tape of a 'store' kernel for 110 × 110 took a 9 MB stack frame (8 MB stack: SIGSEGV, every session
    restarted); now every tape runs, in reverse mode, and forward mode refuses with a SQLSTATE."""
    rng = np.random.default_rng(m * n)
    rows = 33  # tiles of 2 rows (their tape within loops.TAPE_BYTES) and a short one
    x, u, a = rng.uniform(-1, 1, (rows, m)), rng.uniform(-1, 1, (rows, n)), rng.uniform(-1, 1, (m, n))
    db.execute('CREATE TEMP TABLE IF NOT EXISTS issue (x float8[], u float8[])')
    db.execute('TRUNCATE issue')
    with db.cursor() as cur:
        cur.executemany('INSERT INTO issue VALUES (%s, %s)', [(x[k].tolist(), u[k].tolist()) for k in range(rows)])
    expected = np.einsum('ri,rj->ij', x, u) / rows  # ∂ mean Σ (x uᵀ ⊙ A) / ∂A
    weights = json.dumps({'a': a.tolist()})
    for tape in ('auto', 'store', 'recompute', 'reversible'):
        grad = db.execute("SELECT pgad.gradient(%s, 'SELECT x, u FROM issue', %s, 'reverse', 'llvm', tape => %s)",
                          (ISSUE, weights, tape)).fetchone()[0]
        np.testing.assert_allclose(np.array(grad['a']), expected, rtol=1e-12, atol=1e-14, err_msg=tape)
    for tape in ('auto', 'store'):  # forward mode: a tangent per weight element (54001), or no loop kernel (22023)
        diag = error_of(db, "SELECT pgad.gradient(%s, 'SELECT x, u FROM issue', %s, 'forward', 'llvm', tape => %s)",
                        (ISSUE, weights, tape))
        assert diag.sqlstate in ('54001', '22023'), (tape, diag.message_primary)


@pytest.mark.parametrize('m, n', [(110, 110), (60, 200)])
@pytest.mark.parametrize('tape', ['store', 'recompute', 'reversible'])
def test_a_loop_kernel_keeps_its_buffers_off_the_stack(m, n, tape):
    """What the optimised IR allocates on the stack: a few scalars, however large the shapes (the scratch buffer
    holds the rest: loops.scratch_doubles, megabytes here)."""
    prog = issue_program(m, n, tape)
    module = compiler.optimise(loops.kernel_ir(prog, 'pgad_frame', tape))
    assert frames.frame_bytes(str(module)) <= loops.STACK_BYTES
    assert loops.buffer_bytes(prog, tape) > m * n * 8  # the tape is there, on the heap


def test_the_frame_check_refuses_a_kernel_past_its_bound(monkeypatch):
    """A loop kernel whose buffers are allocas again (the old code) is refused before any machine code exists."""
    heap = loops._Kernel.heap

    def on_the_stack(kn, count):
        heap(kn, count)  # the scratch buffer's account, which build() checks
        with kn.b.goto_block(kn.entry):
            return kn.b.alloca(codegen.DOUBLE, size=codegen.ir.Constant(codegen.I64, count))
    monkeypatch.setattr(loops._Kernel, 'heap', on_the_stack)
    with pytest.raises(PgadError) as caught:
        compiler.compile(issue_program(110, 110, 'store'))
    e = caught.value
    assert e.sqlstate == '54001'
    assert e.message.startswith("kernel's stack frame is too large: ")
    size = int(e.message.split(': ')[1].split(' ')[0])
    assert size > frames.MAX_FRAME and e.message.endswith(f'at most {frames.MAX_FRAME} bytes')


def test_the_frame_check_counts_every_alloca_and_refuses_a_dynamic_one():
    ir_text = ('define void @k(i64 %n) {\n  %a = alloca [4 x double], align 8\n  %b = alloca <8 x double>, align 64\n'
               '  %c = alloca double, i64 3, align 8\n  ret void\n}')
    assert frames.frame_bytes(ir_text) == 32 + 64 + 24
    frames.check(ir_text)
    with pytest.raises(PgadError) as caught:
        frames.check(ir_text, limit=100)
    assert (caught.value.sqlstate, caught.value.message) == (
        '54001', "kernel's stack frame is too large: 120 bytes, at most 100 bytes")
    dynamic = ir_text.replace('alloca double, i64 3', 'alloca double, i64 %n')
    assert frames.frame_bytes(dynamic) is None
    with pytest.raises(PgadError, match='a size known only at run time'):
        frames.check(dynamic)


@pytest.mark.skipif(platform.machine() != 'x86_64', reason='emitted_frame reads x86-64 assembly')
@pytest.mark.parametrize('family, k', [('poly', 2660), ('linear', 2660), ('expsum', 1330)])
def test_the_largest_unrolled_kernel_spills_within_the_bound(family, k):
    """The spills the IR does not show: the largest kernel of the O0 tier (8,000 nodes), whose fast register
    allocator spills the most, measured in its machine code — within frames.MAX_FRAME (127 KB measured for poly)."""
    terms = {'poly': lambda i: f'w.a{i}*d.x^{i % 9 + 1}', 'linear': lambda i: f'w.a{i}*d.x{i % 8}',
             'expsum': lambda i: f'exp(w.a{i}*d.x{i % 4} - d.y)'}[family]
    lam = lang.parse('λ(d, w) ' + ' + '.join(terms(i) for i in range(k)))
    grad = lang.gradient(lam, tuple(lam.weights), 'reverse')
    prog = program.Program(lam, (lam.root, *grad.values()), tuple(lam.weights))
    tier = compiler.tier_of(prog)
    assert tier is compiler.TIERS[-1]
    module = compiler.optimise(codegen.kernel_ir(prog, 'pgad_spills'), tier)
    frame = frames.emitted_frame(compiler.target_machine(tier.codegen_level).emit_assembly(module))
    assert 0 < frame < frames.MAX_FRAME


# --- the fuzzer -------------------------------------------------------------------------------------------------

def test_the_forked_runner_names_the_input_that_crashed():
    """A child killed by a signal names its input, and the batch goes on after it."""
    def runner(inp):
        if inp.i == 3:
            ctypes.string_at(0)  # SIGSEGV
        return vector_fuzzing.Outcome(ran=1)
    outcomes, crashes = vector_fuzzing.fuzz(SEED, 6, batch=6, runner=runner)
    assert crashes == [(3, 'SIGSEGV')] and sorted(outcomes) == [0, 1, 2, 4, 5]


# Inputs the fuzzer found: (seed, index), each run in a forked child.
REGRESSIONS = [
    # LLVM's SLP vectoriser fails an assertion on this 'recompute' loop kernel and aborts its process (SIGABRT): the
    # compiler process dies, not the backend, and the kernel is compiled again without the vectorisers
    (1, 2518),
    # the same assertion on an unrolled forward-mode kernel of a small lambda, which used to compile in the backend:
    # through SQL, pgad.gradient('λ(d, w) -softmax((sum(w.m3x6) * w.m1x5[1]))[2]', …, 'forward', 'llvm') killed it
    # (tests/test_compile_worker.py::test_a_kernel_llvm_crashes_on_is_compiled_again_without_its_vectorisers)
    (1, 9878),
]


@pytest.mark.parametrize('seed, i', REGRESSIONS)
def test_an_input_the_fuzzer_found_crashes_nothing(seed, i):
    outcomes, crash, _ = vector_fuzzing.run_forked(seed, [i])
    assert crash is None, (crash, vector_fuzzing.generate(seed, i).text)


def test_the_generator_is_reproducible_and_covers_every_kernel():
    inputs = [vector_fuzzing.generate(SEED, i) for i in range(300)]
    assert [i.text for i in inputs[:50]] == [vector_fuzzing.generate(SEED, i).text for i in range(50)]
    assert {(i.mode, i.backend, i.tape) for i in inputs} == set(vector_fuzzing.COMBOS)
    assert any(max(max(s, default=0) for s in i.weights.values()) > 64 for i in inputs)
    assert any(i.columns for i in inputs)


def test_a_sample_of_vector_lambdas_crashes_nothing(cluster, db, watched):
    """IN_PROCESS inputs in forked children (a crash is a child killed by a signal), THROUGH_SQL of them through
    pgad's SQL functions on the server."""
    started = time.perf_counter()
    outcomes, crashes = vector_fuzzing.fuzz(SEED, IN_PROCESS, batch=50)
    print(f'{IN_PROCESS} vector inputs in process: {time.perf_counter() - started:.1f} s')
    assert crashes == [], [(i, how, vector_fuzzing.generate(SEED, i).text) for i, how in crashes]
    exceptions = {i: o['exception'] for i, o in outcomes.items() if o['exception']}
    assert not exceptions, exceptions
    ran = sum(1 for o in outcomes.values() if o['ran'])
    assert ran > IN_PROCESS / 2  # the sample is worth something: most inputs compile and run
    started = time.perf_counter()
    db.execute(vector_fuzzing.SETUP_SQL)
    db.execute("SET statement_timeout = '60s'")
    inputs = (vector_fuzzing.generate(SEED, i) for i in range(IN_PROCESS))
    small = [inp for inp in inputs if sum(np.prod(s, dtype=int) for s in inp.weights.values()) <= SQL_ELEMENTS]
    for inp in small[:THROUGH_SQL]:
        states = vector_fuzzing.through_sql(db, inp)
        i = inp.i
        assert 'connection lost' not in states and 'XX000' not in states and '38000' not in states, (i, states)
    print(f'{THROUGH_SQL} through SQL: {time.perf_counter() - started:.1f} s')
