"""The kernels' inline exp and log1p (jit/codegen.py's _Emitter.exp_polynomial and .log1p_polynomial) against
libm in float64, in process: random and edge arguments, each compiled as the kernels are (O3, vectorised, so the vector loop and its
scalar tail both run). The error bound (docs/design.md, "exp and log1p in the kernels"): under 1 ulp of the exact
value, taken from long double (64-bit significand: its own error is 2^-11 ulp of a double), so at most 1 ulp from
libm's (itself within 0.5 ulp)."""
import ctypes
import ctypes.util
import math
import re

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from pgad import program
from pgad.jit import codegen, compiler
from pgad.jit.codegen import DOUBLE, I64
from pgad.lang import rules

LIBM = ctypes.CDLL(ctypes.util.find_library('m'))
LIBM.exp.restype = LIBM.log1p.restype = ctypes.c_double
LIBM.exp.argtypes = LIBM.log1p.argtypes = [ctypes.c_double]
TINY = 5e-324  # the least subnormal


def elementwise(method, polynomial=codegen.POLYNOMIAL):
    """out[i] = _Emitter.method(x[i]) over n doubles, as a Python function of an array, compiled as a kernel is."""
    name = f'pgad_test_{method}_{"_".join(sorted(polynomial))}'
    module = ir.Module(name='test')
    module.triple = llvm.get_process_triple()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, DOUBLE.as_pointer(), DOUBLE.as_pointer()]), name)
    n, src, dst = fn.args
    src.add_attribute('noalias')
    dst.add_attribute('noalias')
    entry, loop, done = fn.append_basic_block('entry'), fn.append_basic_block('loop'), fn.append_basic_block('done')
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed('>', n, ir.Constant(I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    emitter = codegen._Emitter(b, module, polynomial)
    b.store(getattr(emitter, method)(b.load(b.gep(src, [i]))), b.gep(dst, [i]))
    next_i = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(ir.Constant(I64, 0), entry)
    i.add_incoming(next_i, loop)
    b.cbranch(b.icmp_signed('<', next_i, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    optimised = compiler.optimise(codegen.vectorised(str(module), codegen.vector_widths()))
    assert '<' in str(optimised).split(f'@{name}(', 1)[1], 'the loop was not vectorised'
    compiler.engine().add_object_file(llvm.ObjectFileRef.from_data(compiler.target_machine().emit_object(optimised)))
    compiler.engine().finalize_object()
    function = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(
        compiler.engine().get_function_address(name))

    def run(x):
        x = np.ascontiguousarray(x, dtype=np.float64)
        out = np.empty_like(x)
        function(len(x), x.ctypes.data, out.ctypes.data)
        return out
    return run


@pytest.fixture(scope='module')
def exp():
    return elementwise('exp_polynomial')


@pytest.fixture(scope='module')
def log1p():
    return elementwise('log1p_polynomial')


def ulps(got, exact):
    """|got − exact| in units in the last place of exact rounded to a double (subnormals: 2^-1074)."""
    nearest = exact.astype(np.float64)
    with np.errstate(invalid='ignore', over='ignore'):
        return np.abs(got.astype(np.longdouble) - exact) / np.spacing(np.abs(nearest)).astype(np.longdouble)


def check(got, x, libm, exact, bound=1.0):
    """got against libm (at most 1 ulp apart) and the exact value (under bound ulps) where libm is finite; the same
    value (0, ±∞, NaN) elsewhere."""
    want = np.array([libm(v) for v in x])
    finite = np.isfinite(want) & (want != 0)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    apart = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]))
    assert apart.max() <= 1, x[finite][np.argmax(apart)]
    error = ulps(got[finite], exact(x[finite].astype(np.longdouble)))
    assert error.max() < bound, (x[finite][np.argmax(error)], float(error.max()))
    return float(error.max())


EXP_EDGES = [0.0, -0.0, TINY, -TINY, 1e-300, -1e-300, 2.2e-308, -2.2e-308, 1e-17, -1e-17, 1.0, -1.0, 0.5, -0.5,
             math.log(2) / 2, -math.log(2) / 2, math.log(2), -math.log(2), -708.0, -708.3964185322641,
             -708.3964185322642, -708.4, -709.0, -744.4400719213812, -745.0, -745.1332191019411, -745.1332191019412,
             -745.2, -746.0, -746.1, -800.0, -1e308, -np.inf, 709.0, 709.782712893384, 709.7827128933841, 710.0,
             800.0, 1e308, np.inf, np.nan, -np.nan]


def test_exp_edges(exp):
    x = np.array(EXP_EDGES * 3)  # thrice: some in the vector loop, some in its scalar tail
    check(exp(x), x, LIBM.exp, np.exp)
    assert np.isnan(exp(np.array([np.nan, -np.nan] * 10))).all()
    assert exp(np.array([-745.2] * 17)).max() == 0.0 and exp(np.array([-745.0] * 17)).min() == TINY


def test_exp_random(exp):
    rng = np.random.default_rng(29)
    x = np.concatenate([rng.uniform(-1, 1, 200_000) * math.log(2),  # the polynomial's own range
                        rng.uniform(-746, 710, 400_000),
                        -np.exp(rng.uniform(-745, np.log(746), 200_000)),  # −|x| of every scale, as softplus has
                        rng.uniform(-745.2, -708, 200_000)])  # the subnormal results
    assert check(exp(x), x, LIBM.exp, np.exp) < 1.0


def test_exp_every_bit_pattern(exp):
    """Random doubles of every exponent: huge, tiny, subnormal, ±∞ and NaN among them."""
    x = np.random.default_rng(30).integers(0, 2**64, 200_000, dtype=np.uint64).view(np.float64)
    check(exp(x), x, LIBM.exp, np.exp)


LOG1P_EDGES = [0.0, TINY, 2 * TINY, 1e-310, 2.2250738585072014e-308, 1e-300, 1e-200, 1e-20, 1.1102230246251565e-16,
               1.1102230246251568e-16, 2.220446049250313e-16, 3e-16, 1e-15, 1e-8, 0.25, 0.41421356237309503,
               0.41421356237309515, np.nextafter(0.5, 0), 0.5, np.nextafter(0.5, 1), 0.75, np.nextafter(1, 0), 1.0,
               np.nan]


def test_log1p_edges(log1p):
    x = np.array(LOG1P_EDGES * 3)
    check(log1p(x), x, LIBM.log1p, np.log1p)


def test_log1p_random(log1p):
    """softplus's log1p(e), e = exp(−|x|) in (0, 1]: uniform, and of every scale."""
    rng = np.random.default_rng(31)
    x = np.concatenate([rng.random(400_000), np.exp(rng.uniform(-745, 0, 400_000)),
                        rng.uniform(0.4, 0.6, 100_000), rng.uniform(0.99, 1.0, 100_000)])
    assert check(log1p(x), x, LIBM.log1p, np.log1p) < 1.0


@pytest.mark.parametrize('method, reference', [
    ('softplus', lambda x: np.logaddexp(0.0, x)),  # rules' own
    ('sigmoid', rules._sigmoid)])
def test_softplus_and_sigmoid_as_numpy(method, reference):
    """Inline and through libm, the emitter's softplus and sigmoid agree with numpy's (python_backend's) to a few
    ulps (1e-15; of the least subnormal below 2^-1022): numpy's exp is not libm's either."""
    rng = np.random.default_rng(32)
    x = np.concatenate([rng.normal(0, 3, 100_000), rng.uniform(-800, 800, 100_000),
                        [0.0, -0.0, 1e-300, -1e-300, 36.0, -36.0, 709.0, -709.0, 745.0, -745.0, 746.0, -746.0,
                         1e308, -1e308, np.inf, -np.inf, np.nan]])
    with np.errstate(invalid='ignore'):
        want = reference(x)
    for polynomial in (codegen.POLYNOMIAL, frozenset()):
        got = elementwise(method, polynomial)(x)
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=4 * TINY, err_msg=f'{method} {sorted(polynomial)}')


LOGISTIC = 'λ(d, w) softplus(w.a*d.x + w.b) - d.y*(w.a*d.x + w.b)'


@pytest.mark.parametrize('mode', ['forward', 'reverse'])
def test_logistic_kernel_computes_exp_once_a_row(mode, monkeypatch):
    """softplus(z) and its derivative sigmoid(z) share exp(−|z|) (and 1 + exp(−|z|)): one exp a row, inline (no
    call left in the optimised kernel) or through libm (one call a row, and one a lane in the vectorised loop)."""
    prog = program.build(LOGISTIC, ('a', 'b'), mode)
    assert codegen.inline(prog) == codegen.POLYNOMIAL
    made = []
    monkeypatch.setattr(codegen._Emitter, 'exp_polynomial',  # libm's exp instead, to be counted
                        lambda self, x, negative=False: made.append(x) or self.call('exp', x))
    text = codegen.kernel_ir(prog)
    assert len(made) == 1 and text.count('call double @"pgad_libm_exp"(') == 1
    monkeypatch.undo()
    optimised = str(compiler.optimise(codegen.kernel_ir(prog)))
    assert not re.search(r'call [^@]*@"?(pgad_libm_|_ZGV)', optimised)
    text = codegen.kernel_ir(prog, polynomial=frozenset())
    assert text.count('call double @"pgad_libm_exp"(') == 1 and text.count('call double @"pgad_libm_log1p"(') == 1
    optimised = str(compiler.optimise(text))
    call = r'call [^@]*@"?(?:_ZGV[bde]N(\d+)v_|pgad_libm_){}\b'
    lanes = {name: sum(int(width or 1) for width in re.findall(call.format(name), optimised)) for name in ('exp', 'log1p')}
    assert lanes['exp'] == lanes['log1p'] > 0, lanes


@pytest.mark.parametrize('body, inline', [
    ('softplus(w.a*d.x) + sigmoid(w.b*d.x) + exp(w.a)', True),
    ('exp(w.a*d.x) * d.x^2 + w.b^0.5', True),  # pow of a constant: LLVM multiplies, or takes sqrt
    ('softplus(w.a*d.x) + sin(w.b*d.x)', False),  # sin stays libmvec's call: exp and log1p do too
    ('exp(w.a*d.x) + ln(d.x + w.b)', False),
    ('exp(w.a*d.x) + d.x^w.b', False),  # pow of a weight: a call to pow
    (' + '.join(f'softplus(w.a*d.x + {k}) + exp(w.b*d.x + {k})' for k in range(4)), True),  # 8 exps
    (' + '.join(f'softplus(w.a*d.x + {k}) + exp(w.b*d.x + {k})' for k in range(4)) + ' + exp(d.x)', False),  # 9
    (' + '.join(f'w.c{k}*d.x^{k % 9 + 1}' for k in range(45)) + ' + softplus(w.b*d.x)', False),  # 47 outputs: O3
])
def test_inline_where_no_other_libm_call_stays(body, inline):
    """Inline where the kernel is vectorised and calls libm only for at most codegen.INLINE_EXPS exps."""
    prog = program.build(f'λ(d, w) {body}', ('a', 'b', *(f'c{k}' for k in range(45) if f'w.c{k}*' in body)), 'reverse')
    assert codegen.inline(prog) == (codegen.POLYNOMIAL if inline else frozenset())
