"""The llvm backend's target (pgad/jit/targets.py): pgad.llvm_target and PGAD_LLVM_TARGET, the vector width and
machine code each gives, a target this CPU cannot run refused before anything compiles, and the target in every
kernel's cache key."""
import os
import re

import numpy as np
import pytest

from conftest import LLVM_TARGET, error_of
from pgad import backends, program
from pgad.errors import PgadError
from pgad.jit import codegen, compiler, lanes, targets, worker

LINEAR = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
LEVELS = ('x86-64', 'x86-64-v2', 'x86-64-v3', 'x86-64-v4')
RUNNABLE = targets.runnable()


@pytest.fixture
def target(monkeypatch):
    """Set PGAD_LLVM_TARGET for the test (the in-process kernels' target)."""
    def use(name):
        monkeypatch.setenv(targets.VARIABLE, name)
        return targets.current()
    return use


@pytest.fixture
def lacking(monkeypatch):
    """This CPU as one without AVX-512 and FMA (the features LLVM reports), for the test."""
    has = targets.host_features() - {'avx512f', 'avx512bw', 'avx512cd', 'avx512dq', 'avx512vl', 'fma'}
    monkeypatch.setattr(targets, 'host_features', lambda: has)
    targets.named.cache_clear()
    yield
    targets.named.cache_clear()


@pytest.mark.parametrize('name, widths', [('x86-64', []), ('x86-64-v2', [('b', 2)]),
                                          ('x86-64-v3', [('b', 2), ('d', 4)]),
                                          ('x86-64-v4', [('b', 2), ('d', 4), ('e', 8)])])
def test_a_levels_features_are_its_own_not_the_hosts(target, name, widths):
    """The vector widths (libmvec's variants) and the lanes follow the level named, whatever this CPU has besides."""
    if name not in RUNNABLE:
        pytest.skip(f'this CPU cannot run {name}')
    chosen = target(name)
    assert (chosen.name, chosen.cpu) == (name, name) and chosen.has == targets.level_features(name)
    assert codegen.vector_widths() == widths
    assert lanes.width() == max([w for _, w in widths] or [2])


@pytest.mark.parametrize('name, registers', [('x86-64', 'xmm'), ('x86-64-v3', 'ymm'), ('x86-64-v4', 'zmm')])
def test_each_level_compiles_to_its_vector_registers(target, name, registers):
    """The vectorised sums of a linear regression use the level's widest registers and none wider: SSE2's xmm,
    AVX2's ymm, AVX-512's zmm (x86-64-v4 without LLVM's preference for 256 bits: targets.TUNING); and its kernel
    agrees with the python backend (1e-12 relative: sums reordered by the vector width)."""
    if name not in RUNNABLE:
        pytest.skip(f'this CPU cannot run {name}')
    target(name)
    prog = program.build(LINEAR, ('a', 'b'), 'reverse')
    assembly = compiler.target_machine().emit_assembly(compiler.optimise(compiler.compile(prog).ir))
    wider = {'xmm': ('ymm', 'zmm'), 'ymm': ('zmm',), 'zmm': ()}[registers]
    assert re.search(rf'%{registers}\d', assembly) and not any(f'%{r}' in assembly for r in wider)
    x = np.linspace(-1, 1, 1001)
    columns, w = [x, 2 * x + 1], np.array([0.3, 0.1])
    np.testing.assert_allclose(backends.compile(prog, 'llvm')(columns, 1001, w),
                               backends.compile(prog, 'python')(columns, 1001, w), rtol=1e-12)


def test_a_target_this_cpu_lacks_is_refused_before_anything_compiles(target, lacking, monkeypatch):
    """x86-64-v4 on a CPU without AVX-512: 22023 naming the missing features, and neither LLVM in this process nor
    the compiler process is asked for code (which would stop the backend with SIGILL)."""
    def compiled(*args, **kwargs):
        raise AssertionError('compiled a kernel for a target this CPU cannot run')
    monkeypatch.setattr(worker, 'optimise', compiled)
    monkeypatch.setattr(worker, 'run', compiled)
    prog = program.build('λ(d, w) (w.a*d.x - d.y)^2 + 0.125', ('a',), 'reverse')  # a kernel no other test compiles
    for name, missing in (('x86-64-v4', 'avx512bw, avx512cd, avx512dq, avx512f, avx512vl, fma'),
                          ('x86-64-v3', 'fma')):
        monkeypatch.setenv(targets.VARIABLE, name)
        with pytest.raises(PgadError) as caught:
            backends.compile(prog, 'llvm')
        assert caught.value.sqlstate == '22023'
        assert caught.value.message == f'llvm target "{name}" needs CPU features this CPU lacks: {missing}'
        assert caught.value.hint == 'This CPU runs the targets host, x86-64, x86-64-v2.'
    assert target('x86-64-v2').name == 'x86-64-v2'  # what it has is compiled for as before


def test_an_unknown_target_is_refused():
    with pytest.raises(PgadError) as caught:
        targets.named('skylake')
    assert (caught.value.sqlstate, caught.value.message) == ('22023', 'unknown llvm target "skylake"')
    assert caught.value.hint == 'The targets are host, x86-64, x86-64-v2, x86-64-v3, x86-64-v4.'


def test_the_target_is_part_of_every_kernels_cache_key(target):
    """Memory (backends' per-process cache, the execution engine's names) and disk (compiler.cache_key, scan's and
    the lanes', which add to it): a kernel compiled for one target is never run for another."""
    prog = program.build(LINEAR, ('a', 'b'), 'reverse')
    keys, kernels = set(), set()
    for name in ('host', 'x86-64'):
        target(name)
        keys.add(compiler.cache_key(prog))
        kernels.add(id(backends.compile(prog, 'llvm')))
    assert len(keys) == len(kernels) == 2


def test_the_setting_names_the_target_through_sql(db):
    """pgad.llvm_target, any role's, as pgad.explain shows it: the CPU it optimised for, and the registers of the
    machine code (x86-64: xmm alone; x86-64-v4: zmm). An unknown name is PostgreSQL's own 22023 and changes
    nothing."""
    explain = ("SELECT stage, detail FROM pgad.explain('λ(d, w) (w.a*d.x + w.b - d.y)^2 + 0.25', 'reverse', "
               "'llvm') WHERE stage IN ('optimisation', 'machine code')")
    db.execute("SELECT pgad.loss('λ(d, w) d.x', 'SELECT 1.0::float8 AS x', '{}')")  # pgad.so loaded: its settings
    shown = db.execute('SHOW pgad.llvm_target').fetchone()[0]
    assert shown == (LLVM_TARGET or 'host') or os.environ.get('PGAD_TEST_PORT')  # conftest's cluster: the tests' own
    try:
        for name in [n for n in ('x86-64', 'x86-64-v4') if n in RUNNABLE]:
            db.execute(f"SET pgad.llvm_target = '{name}'")
            stages = dict(db.execute(explain).fetchall())
            assert f' for {name}\n' in stages['optimisation']
            assert ('%zmm' in stages['machine code']) == (name == 'x86-64-v4')
            assert '%ymm' not in stages['machine code'] or name != 'x86-64'
        diag = error_of(db, "SET pgad.llvm_target = 'skylake'")
        assert diag.sqlstate == '22023' and 'pgad.llvm_target' in diag.message_primary
        assert db.execute('SHOW pgad.llvm_target').fetchone()[0] == ('x86-64-v4' if 'x86-64-v4' in RUNNABLE else
                                                                     'x86-64')
    finally:
        db.execute('RESET pgad.llvm_target')
