"""The LLVM backend against the python reference backend, on every test lambda, in both modes (in process)."""
import re

import numpy as np
import pytest

from pgad import backends, program
from pgad.errors import PgadError
from pgad.jit import codegen, compiler, tiers
from pgad.jit.cache import DiskCache
from pgad.lang import rules
from test_rules import CASES, DATA, NESTED_UNTAKEN, TIES, W, WEIGHTS

MODES = ('forward', 'reverse')


def both(text, mode, w=W, data=DATA, weights=WEIGHTS):
    prog = program.build(text, weights, mode)
    columns = [np.asarray(data[c], dtype=np.float64) for c in prog.columns]
    rows = len(next(iter(data.values())))
    return [backends.compile(prog, b)(columns, rows, np.asarray(w, dtype=np.float64)) for b in ('python', 'llvm')]


def test_every_primitive_has_an_llvm_rule():
    assert set(codegen.EMIT) == set(rules.PRIMITIVES)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('text, fn', CASES)
def test_llvm_matches_python(text, fn, mode):
    python, llvm = both(text, mode)
    np.testing.assert_allclose(llvm, python, rtol=1e-12, atol=1e-13)  # sums reordered by vectorisation: ~1e-15


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('text', NESTED_UNTAKEN)
def test_llvm_matches_python_through_untaken_branches(text, mode):
    data = {'x': np.array([-1.0, 0.0, 0.5, 2.0])}
    python, llvm = both(text, mode, w=[0.7, 0.3], data=data)
    assert np.all(np.isfinite(llvm))
    np.testing.assert_allclose(llvm, python, rtol=1e-12)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('body, w, expected', TIES)
def test_llvm_ties_follow_the_first_argument(body, w, expected, mode):
    python, llvm = both('λ(d, w) ' + body, mode, w=w, data={'x': np.zeros(3)}, weights=('a', 'b', 'c'))
    np.testing.assert_allclose(llvm, python, rtol=1e-12)


def test_rows_zero_and_one():
    prog = program.build('λ(d, w) (w.a*d.x - d.y)^2', ('a',), 'reverse')
    kernel = backends.compile(prog, 'llvm')
    assert kernel([np.empty(0), np.empty(0)], 0, np.array([1.0])).tolist() == [0.0, 0.0]
    assert kernel([np.array([2.0]), np.array([1.0])], 1, np.array([1.0])).tolist() == [1.0, 4.0]


def test_the_disk_cache_serves_a_second_compile(tmp_path):
    prog = program.build('λ(d, w) sin(w.a*d.x) + w.b', ('a', 'b'), 'forward')
    cache = DiskCache(str(tmp_path / 'cache'), 1 << 20)
    first = compiler.compile(prog, cache)
    again = compiler.compile(prog, cache)
    assert not first.cached and again.cached and again.optimized_ir == ''
    x = np.linspace(0, 1, 1001)
    assert first.kernel([x], 1001, np.array([0.3, 0.1])).tolist() == again.kernel([x], 1001,
                                                                                 np.array([0.3, 0.1])).tolist()


def test_optimised_linear_regression_is_vectorised():
    """The loop vectoriser sums several rows at once (a vector accumulator reduced after the loop), which the sums'
    reassoc flags allow; without them LLVM only packs the two sums of one row into a vector (SLP)."""
    prog = program.build('λ(d, w) (w.a*d.x + w.b - d.y)^2', ('a', 'b'), 'reverse')
    optimised = compiler.compile(prog).optimized_ir
    assert re.search(r'call [^@]*@llvm\.vector\.reduce\.fadd\.v\d+f64\(', optimised)


def test_a_kernel_past_the_vectorised_tier_is_compiled_without_vectorisation():
    """42 outputs is past the first tier's 40: compile optimises at that kernel's tier, O3 without loop and SLP
    vectorisation (vectorising many accumulators is what takes LLVM seconds, docs/security.md), so its optimised IR
    computes on no vectors (the libmvec declarations aside)."""
    names = tuple(f'a{i}' for i in range(41))
    text = 'λ(d, w) ' + ' + '.join(f'w.{n}*sin(d.x + {i})' for i, n in enumerate(names))
    prog = program.build(text, names, 'reverse')
    assert compiler.tier_of(prog).name == 'O3'
    optimised = compiler.compile(prog).optimized_ir.splitlines()
    assert [line for line in optimised if re.search(r'<\d+ x double>', line) and not line.startswith('declare')] == []

@pytest.mark.skipif(not codegen.link_math() or not codegen.vector_widths(), reason='no libmvec variant this CPU runs')
def test_libm_calls_are_vectorised_with_libmvec():
    """exp under its private name (docs/design.md): the loop vectoriser calls libmvec's variant on several rows.
    A call, not the declaration: the variants are declared (and kept) whether or not the vectoriser uses them. (A
    kernel that calls cos calls libm's exp too; one without other calls computes exp inline: codegen.inline.)"""
    prog = program.build('λ(d, w) exp(w.a*d.x) * cos(w.a)', ('a',), 'reverse')
    optimised = compiler.compile(prog).optimized_ir
    assert re.search(r'call [^@]*@"?pgad_libm_exp"?\(', optimised)  # the loop's remainder, row by row
    assert any(re.search(rf'call [^@]*@_ZGV{isa}N{width}v_exp\(', optimised) for isa, width in codegen.vector_widths())


@pytest.mark.parametrize('features, widths', [
    ({}, []),
    ({'sse4.2': True}, [('b', 2)]),
    ({'sse4.2': True, 'avx2': True}, [('b', 2)]),  # libmvec's AVX2 variants use FMA too
    ({'sse4.2': True, 'fma': True}, [('b', 2)]),
    ({'sse4.2': True, 'avx2': True, 'fma': True}, [('b', 2), ('d', 4)]),
    ({'avx2': True, 'fma': True}, [('d', 4)]),
    ({'sse4.2': True, 'avx2': True, 'fma': True, 'avx512f': True}, [('b', 2), ('d', 4), ('e', 8)]),
    ({'sse4.2': False, 'avx2': False, 'fma': False, 'avx512f': False}, []),
])
def test_vector_widths_are_the_libmvec_variants_the_cpu_runs(features, widths):
    """glibc's x86-64 vector ABI: ISA letter b (SSE4, 2 doubles), d (AVX2 with FMA, 4), e (AVX-512, 8)."""
    assert codegen.vector_widths(frozenset(f for f, on in features.items() if on)) == widths


CALL = 'define void @k(double %x) {\n  %r = call double @"pgad_libm_exp"(double %x)\n  ret void\n}\n'


@pytest.mark.skipif(not {'_ZGVbN2v_exp', '_ZGVdN4v_exp'} <= codegen.link_math(), reason='no libmvec')
def test_vectorised_names_every_variant_the_cpu_runs_and_libmvec_has():
    """The call is tagged with an attribute group listing each variant; a width libmvec lacks is skipped, not the
    rest; each variant is declared and kept alive until the vectoriser has run."""
    text = codegen.vectorised(CALL, [('z', 16), ('b', 2), ('d', 4)])
    group = text.split('call double @"pgad_libm_exp"(double %x) #')[1].split('\n')[0]
    assert f'attributes #{group} = {{ "vector-function-abi-variant"="_ZGV_LLVM_N2v_pgad_libm_exp(_ZGVbN2v_exp),' \
           f'_ZGV_LLVM_N4v_pgad_libm_exp(_ZGVdN4v_exp)" memory(none) nounwind }}' in text
    assert 'declare <2 x double> @_ZGVbN2v_exp(<2 x double>)' in text
    assert 'declare <4 x double> @_ZGVdN4v_exp(<4 x double>)' in text
    assert '@llvm.compiler.used = appending global [2 x ptr] [ptr @_ZGVbN2v_exp, ptr @_ZGVdN4v_exp]' in text
    assert '_ZGVz' not in text


def test_vectorised_without_variants_marks_the_call_pure_only():
    text = codegen.vectorised(CALL, [])
    group = text.split('call double @"pgad_libm_exp"(double %x) #')[1].split('\n')[0]
    assert f'attributes #{group} = {{ memory(none) nounwind }}' in text
    assert 'vector-function-abi-variant' not in text and 'declare' not in text and 'compiler.used' not in text


def test_auto_runs_on_llvm_what_llvm_compiles_and_the_rest_on_python(monkeypatch):
    prog = program.build('λ(d, w) (w.a*d.x - d.y)^2', ('a',), 'reverse')
    assert backends.choose(prog, 'auto') == 'llvm'
    monkeypatch.setattr(tiers, 'TIERS', ())  # no tier compiles it: as a lambda past every tier's bound
    assert backends.choose(prog, 'auto') == 'python'


def test_a_tier_takes_kernels_up_to_its_limits_inclusive(monkeypatch):
    """tier_of compares with <=: a kernel of exactly a tier's nodes, outputs and product is that tier's; one more
    of any is not, and then required_tier says 54001 with the kernel's size."""
    import dataclasses
    prog = program.build('λ(d, w) (w.a*d.x + w.b - d.y)^2', ('a', 'b'), 'reverse')
    nodes, outputs = len(prog.graph.ancestors(prog.outputs)), len(prog.outputs)
    exact = compiler.Tier('exact', 3, True, 3, nodes, outputs, nodes * outputs)
    monkeypatch.setattr(tiers, 'TIERS', (exact,))
    assert compiler.tier_of(prog) is exact
    for smaller in ({'max_nodes': nodes - 1}, {'max_outputs': outputs - 1}, {'max_product': nodes * outputs - 1}):
        monkeypatch.setattr(tiers, 'TIERS', (dataclasses.replace(exact, **smaller),))
        assert compiler.tier_of(prog) is None, smaller
        with pytest.raises(PgadError) as caught:
            compiler.required_tier(prog)
        assert (caught.value.sqlstate, caught.value.message, caught.value.detail, caught.value.hint) == (
            '54001', f'lambda is too large for the llvm backend: {nodes} nodes with its derivatives',
            f'The llvm backend compiles at most {tiers.TIERS[-1].max_nodes}: LLVM\'s time and memory grow faster '
            'than the kernel, past what one call may take.',
            "Use backend => 'python', or 'auto', which picks it for lambdas this large.")
