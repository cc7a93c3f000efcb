"""Program → LLVM IR: one kernel that loops over the rows and sums the loss and its gradient.

    void kernel(i64 rows, double *weights, double *sums, double *noalias column0, double *noalias column1, …)

Each iteration of the loop reads one row, evaluates every node of the program once (the loss and, fused in the same
iteration, all partial derivatives: forward mode's tangents or reverse mode's adjoints, as the DAG holds them), and
adds each output to an accumulator kept in a register. No tape crosses rows: the rows are a map and the sums a
reduce. The accumulators' additions may be reassociated, so LLVM can vectorise the loop.

EMIT is the LLVM side of the rules table: one line per primitive.
"""
import ctypes
import ctypes.util
import functools
import re

import llvmlite.binding as llvm
from llvmlite import ir

from . import targets
from .. import limits
from ..lang.rules import PRIMITIVES
from .tiers import tier_of

DOUBLE, BOOL, I64 = ir.DoubleType(), ir.IntType(1), ir.IntType(64)
# libm functions with vector variants in glibc's libmvec (2.35+), by their number of arguments. The kernel calls
# them as pgad_libm_exp, pgad_libm_log, … (compiler.py resolves those names to libm): under their own names LLVM would turn the
# calls into its intrinsics, whose vector forms it scalarises again, and forget the libmvec variants.
LIBMVEC = {'exp': 1, 'log': 1, 'log10': 1, 'log1p': 1, 'sin': 1, 'cos': 1, 'tan': 1, 'asin': 1, 'acos': 1,
           'atan': 1, 'sinh': 1, 'cosh': 1, 'tanh': 1, 'cbrt': 1, 'atan2': 2}
PRIVATE = 'pgad_libm_'

REDUCE = ('reassoc', 'nsz')  # the sums over rows may be reordered; nothing else is

# What an unrolled kernel computes inline, as the polynomials below, where `inline` says (docs/design.md, "exp and
# log1p in the kernels"): exp (the primitive's, and sigmoid's and softplus's exp(−|x|)) and softplus's log1p.
# Measured faster than libmvec's vector variants where no call stays in the loop, and slower beside one that does
# (bench/logistic_math.py)
POLYNOMIAL = frozenset({'exp', 'log1p'})
# The most exps (of exp's argument, or sigmoid's and softplus's shared exp(−|x|)) a kernel computes inline: each
# adds about 40 instructions for LLVM's vectoriser (8 softplus terms and their sigmoids took 0.06 s to compile, with
# libm 0.03 s; 60 took 0.49 s, with libm 0.09 s)
INLINE_EXPS = 8
# The primitives whose EMIT line calls libm, but for exp and log1p (pow where its exponent is not a constant)
CALLS_LIBM = frozenset({'ln', 'log10', 'sin', 'cos', 'tan', 'asin', 'acos', 'atan', 'atan2', 'sinh', 'cosh', 'tanh',
                        'cbrt'})
# exp(r) = 1 + r + r²·q(r) on |r| ≤ ln2/2, q of degree 10 (highest first): mpmath.chebyfit of (exp(r) − 1 − r)/r², a
# near-minimax fit whose error, 1.4e-18 in q, is 0.002 ulp of exp; tools/fit_math.py fits it again
EXP_Q = (2.0914686968086876e-09, 2.5105217004720745e-08, 2.75572736431103e-07, 2.7557255400206422e-06,
         2.4801587325547743e-05, 0.00019841269874820627, 0.0013888888888883748, 0.008333333333326136,
         0.04166666666666667, 0.1666666666666667, 0.5)
# log(1 + f) = f − f²/2 + s·(f²/2 + z·R(z)), s = f/(2 + f), z = s², as fdlibm's log does it, for f in [−1/4, 1/2),
# z ≤ 0.04: R of degree 7 (highest first), mpmath.chebyfit of (2·atanh(s)/s − 2)/z; its error, 2.5e-17 in R, is
# 0.005 ulp of the log
LOG_R = (0.13604216246696962, 0.1321033443219967, 0.15388835999460426, 0.18181738421712204, 0.2222222303822691,
         0.28571428567336676, 0.40000000000007807, 0.6666666666666666)
LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10  # ln 2 = LN2_HI + LN2_LO; n·LN2_HI exact


def _const(value):
    return ir.Constant(DOUBLE, value)


class _Emitter:
    """An IRBuilder with the math the rules need: LLVM intrinsics for what the CPU does in one instruction (sqrt,
    fabs), libm for the rest — whose calls vectorise where glibc's libmvec has a vector variant (see vectorised) —
    but exp and softplus's log1p inline where `polynomial` names them (exp_polynomial, log1p_polynomial).
    exp(−|x|) and 1 + exp(−|x|) are made once per x and block: softplus(x) and its derivative sigmoid(x) share them."""

    def __init__(self, builder, module, polynomial=frozenset()):
        self.b, self.module, self.polynomial, self.memo = builder, module, polynomial, {}

    def call(self, name, *args):
        name = PRIVATE + name if name in LIBMVEC else name
        fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(DOUBLE, [DOUBLE] * len(args)),
                                                          name)
        return self.b.call(fn, list(args))

    def select(self, c, a, b):
        return self.b.select(c, a, b)

    def once(self, key, make):
        """make()'s value, made once per key in the block being built (a value made in another block need not
        dominate this one)."""
        key = (self.b.block, *key)
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    def fma(self, a, b, c):  # a·b + c, fused where the CPU has FMA
        return self.call('llvm.fmuladd.f64', a, b, c)

    def horner(self, x, coefficients):
        value = _const(coefficients[0])
        for c in coefficients[1:]:
            value = self.fma(value, x, _const(c))
        return value

    def exp(self, x):
        return self.exp_polynomial(x) if 'exp' in self.polynomial else self.call('exp', x)

    def exp_polynomial(self, x, negative=False):
        """exp(x) for every double, inline: n = round(x/ln2), r = x − n·ln2 (|r| ≤ ln2/2, Cody and Waite's two
        steps), exp(r) by EXP_Q, times 2^n as two powers of two (each a normal number, so that results down to the
        subnormals round once). x is clamped to [−746, 710] first (to −746 only where it is `negative`, ≤ 0), where exp
        is 0 and ∞; NaN stays NaN."""
        b = self.b
        x = self.select(b.fcmp_ordered('<', x, _const(-746.0)), _const(-746.0), x)
        if not negative:
            x = self.select(b.fcmp_ordered('>', x, _const(710.0)), _const(710.0), x)
        shift = 6755399441055744.0  # 1.5·2^52: adding it rounds to an integer, kept in the low bits
        t = self.fma(x, _const(1.4426950408889634), _const(shift))
        n = b.fsub(t, _const(shift))
        r = self.fma(n, _const(-LN2_HI), x)
        r = self.fma(n, _const(-LN2_LO), r)
        p = self.fma(self.fma(self.horner(r, EXP_Q), r, _const(1.0)), r, _const(1.0))
        k = b.sub(b.bitcast(t, I64), b.bitcast(_const(shift), I64))  # n, an integer in [−1077, 1025]
        half = b.sub(b.lshr(b.add(k, ir.Constant(I64, 2048)), ir.Constant(I64, 1)), ir.Constant(I64, 1024))
        scale = [b.bitcast(b.shl(b.add(h, ir.Constant(I64, 1023)), ir.Constant(I64, 52)), DOUBLE)
                 for h in (half, b.sub(k, half))]
        return b.fmul(b.fmul(p, scale[0]), scale[1])

    def log1p_polynomial(self, y):
        """log1p(y) for y in [0, 1] (and NaN), inline: 1 + y = 2^k·(1 + f) with k = 0, f = y below 1/2 and k = 1,
        f = (y − 1)/2 from 1/2 (both exact), then fdlibm's log(1 + f) with LOG_R."""
        b = self.b
        upper = b.fcmp_ordered('>=', y, _const(0.5))
        f = self.select(upper, b.fmul(b.fsub(y, _const(1.0)), _const(0.5)), y)
        k = self.select(upper, _const(1.0), _const(0.0))
        s = b.fdiv(f, b.fadd(_const(2.0), f))
        z = b.fmul(s, s)
        half_square = b.fmul(b.fmul(_const(0.5), f), f)
        r = b.fmul(z, self.horner(z, LOG_R))
        tail = self.fma(s, b.fadd(half_square, r), b.fmul(k, _const(LN2_LO)))
        return self.fma(k, _const(LN2_HI), b.fsub(f, b.fsub(half_square, tail)))

    def exp_minus_abs(self, x):  # exp(−|x|), ≤ 1: no overflow either side
        def make():
            minus_abs = self.b.fneg(self.call('llvm.fabs.f64', x))
            return self.exp_polynomial(minus_abs, True) if 'exp' in self.polynomial else self.call('exp', minus_abs)
        return self.once(('exp(-|x|)', x), make)

    def sigmoid(self, x):  # as numpy does it in python_backend: 1/(1 + e) or e/(1 + e), e = exp(−|x|)
        e = self.exp_minus_abs(x)
        one_plus = self.once(('1 + ', e), lambda: self.b.fadd(_const(1.0), e))
        return self.select(self.b.fcmp_ordered('>=', x, _const(0.0)), self.b.fdiv(_const(1.0), one_plus),
                           self.b.fdiv(e, one_plus))

    def softplus(self, x):  # max(x, 0) + log1p(exp(−|x|))
        e = self.exp_minus_abs(x)
        positive = self.select(self.b.fcmp_ordered('>', x, _const(0.0)), x, _const(0.0))
        return self.b.fadd(positive, self.log1p_polynomial(e) if 'log1p' in self.polynomial else self.call('log1p', e))

    def sign(self, x):
        return self.select(self.b.fcmp_ordered('>', x, _const(0.0)), _const(1.0),
                           self.select(self.b.fcmp_ordered('<', x, _const(0.0)), _const(-1.0), x))


EMIT = {
    'add': lambda e, x, y: e.b.fadd(x, y),
    'sub': lambda e, x, y: e.b.fsub(x, y),
    'mul': lambda e, x, y: e.b.fmul(x, y),
    'div': lambda e, x, y: e.b.fdiv(x, y),
    'neg': lambda e, x: e.b.fneg(x),
    'mod': lambda e, x, y: e.b.frem(x, y),  # frem is C's fmod: the sign of x
    'pow': lambda e, x, y: e.call('llvm.pow.f64', x, y),  # an intrinsic: LLVM turns x^2 into x*x
    'exp': lambda e, x: e.exp(x),
    'ln': lambda e, x: e.call('log', x),
    'log10': lambda e, x: e.call('log10', x),
    'sqrt': lambda e, x: e.call('llvm.sqrt.f64', x),
    'cbrt': lambda e, x: e.call('cbrt', x),
    'abs': lambda e, x: e.call('llvm.fabs.f64', x),
    'sign': lambda e, x: e.sign(x),
    'greatest': lambda e, x, y: e.select(e.b.fcmp_unordered('>=', x, y), x, y),
    'least': lambda e, x, y: e.select(e.b.fcmp_unordered('<=', x, y), x, y),
    'sin': lambda e, x: e.call('sin', x),
    'cos': lambda e, x: e.call('cos', x),
    'tan': lambda e, x: e.call('tan', x),
    'asin': lambda e, x: e.call('asin', x),
    'acos': lambda e, x: e.call('acos', x),
    'atan': lambda e, x: e.call('atan', x),
    'atan2': lambda e, y, x: e.call('atan2', y, x),
    'sinh': lambda e, x: e.call('sinh', x),
    'cosh': lambda e, x: e.call('cosh', x),
    'tanh': lambda e, x: e.call('tanh', x),
    'sigmoid': lambda e, x: e.sigmoid(x),
    'relu': lambda e, x: e.select(e.b.fcmp_unordered('>', x, _const(0.0)), x, _const(0.0)),
    'softplus': lambda e, x: e.softplus(x),
    'case': lambda e, c, a, b: e.select(c, a, b),
    'lt': lambda e, x, y: e.b.fcmp_ordered('<', x, y),
    'le': lambda e, x, y: e.b.fcmp_ordered('<=', x, y),
    'gt': lambda e, x, y: e.b.fcmp_ordered('>', x, y),
    'ge': lambda e, x, y: e.b.fcmp_ordered('>=', x, y),
    'eq': lambda e, x, y: e.b.fcmp_ordered('==', x, y),
    'ne': lambda e, x, y: e.b.fcmp_unordered('!=', x, y),
    'iff': lambda e, x, y: e.b.icmp_unsigned('==', x, y),
    'xor': lambda e, x, y: e.b.xor(x, y),
    'and': lambda e, x, y: e.b.and_(x, y),
    'or': lambda e, x, y: e.b.or_(x, y),
    'not': lambda e, x: e.b.not_(x),
    'truth': lambda e, x: e.b.fcmp_unordered('!=', x, _const(0.0)),
}
assert set(EMIT) == set(PRIMITIVES), set(PRIMITIVES) ^ set(EMIT)

NAME = 'pgad_kernel'


def kernel_ir(program, name=NAME, polynomial=None):
    """The LLVM IR module (text) of program's kernel, a function called name; it computes inline what polynomial
    names of exp and log1p (_Emitter), by default POLYNOMIAL where it calls no other libm function (inline)."""
    module = ir.Module(name='pgad')
    module.triple = llvm.get_process_triple()
    columns = len(program.columns)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, DOUBLE.as_pointer(), DOUBLE.as_pointer()] +
                                             [DOUBLE.as_pointer()] * columns), name)
    rows, weights_ptr, sums_ptr, *column_ptrs = fn.args
    for arg in column_ptrs:
        arg.add_attribute('noalias')  # a column is read only through its own pointer
    entry, loop, done = fn.append_basic_block('entry'), fn.append_basic_block('row'), fn.append_basic_block('done')

    b = ir.IRBuilder(entry)
    weight_at = {name: k for k, name in enumerate(program.weights)}
    column_at = {name: k for k, name in enumerate(program.columns)}
    weight_values = [b.load(b.gep(weights_ptr, [ir.Constant(I64, k)])) for k in range(len(program.weights))]
    b.cbranch(b.icmp_signed('>', rows, ir.Constant(I64, 0)), loop, done)

    b.position_at_end(loop)
    i = b.phi(I64, 'i')
    sums = [b.phi(DOUBLE, f'sum{k}') for k in range(len(program.outputs))]
    emitter = _Emitter(b, module, inline(program) if polynomial is None else polynomial)
    values = emit_nodes(emitter, program.graph, program.outputs,
                        lambda node: b.load(b.gep(column_ptrs[column_at[node.value]], [i])) if node.op == 'column'
                        else weight_values[weight_at[node.value]])
    new_sums = [b.fadd(s, values[o], flags=REDUCE) for s, o in zip(sums, program.outputs)]
    totals = close_rows(b, i, sums, new_sums, rows, entry, loop, loop, done)
    for k, total in enumerate(totals):
        b.store(total, b.gep(sums_ptr, [ir.Constant(I64, k)]))
    b.ret_void()
    return vectorised(str(module), vector_widths())


def close_rows(b, i, sums, new_sums, rows, entry, latch, head, done):
    """Close a loop over rows 0 … rows − 1 at the builder's block, latch: i + 1 goes back to head while below rows,
    else to done; the row phi i and each accumulator's phi (sums) start at 0 from entry and take i + 1 and their
    new_sums from latch. Returns each accumulator's total, a phi at the start of done (0 where no row ran), the
    builder positioned there."""
    next_i = b.add(i, ir.Constant(I64, 1))
    b.cbranch(b.icmp_signed('<', next_i, rows), head, done)
    i.add_incoming(ir.Constant(I64, 0), entry)
    i.add_incoming(next_i, latch)
    for s, new in zip(sums, new_sums):
        s.add_incoming(_const(0.0), entry)
        s.add_incoming(new, latch)
    b.position_at_end(done)
    totals = [b.phi(DOUBLE, f'total{k}') for k in range(len(new_sums))]
    for total, new in zip(totals, new_sums):
        total.add_incoming(_const(0.0), entry)
        total.add_incoming(new, latch)
    return totals


def emit_nodes(emitter, graph, roots, leaf):
    """{node: its LLVM value} for roots and their ancestors in graph, in order, at the emitter's builder: a constant
    as itself, a column or weight node as leaf(node) gives it, every other node by its EMIT row."""
    values = {}
    for n in graph.ancestors(roots):
        limits.tick()
        node = graph.nodes[n]
        if node.op == 'const':
            values[n] = ir.Constant(BOOL, int(node.value)) if isinstance(node.value, bool) else _const(node.value)
        elif node.op in ('column', 'weight'):
            values[n] = leaf(node)
        else:
            values[n] = EMIT[node.op](emitter, *[values[a] for a in node.args])
    return values


def inline(program):
    """What program's kernel computes inline: POLYNOMIAL where it compiles vectorised (the compiler's first tier: only
    the vector loop gains), computes at most INLINE_EXPS exps, and no other primitive of it calls libm; else
    nothing."""
    nodes = program.graph.nodes
    ops = [nodes[n] for n in program.graph.ancestors(program.outputs)]
    calls = any(n.op in CALLS_LIBM or n.op == 'pow' and nodes[n.args[1]].op != 'const' for n in ops)
    exps = {(n.op == 'exp', n.args[0]) for n in ops if n.op in ('exp', 'sigmoid', 'softplus')}  # exp(x), exp(−|x|)
    return POLYNOMIAL if tier_of(program).vectorise and len(exps) <= INLINE_EXPS and not calls else frozenset()


@functools.lru_cache(maxsize=None)
def link_math():
    """Make the math the kernels call resolvable in this process: libm's functions under the names the kernels use
    (pgad_libm_exp, …), and glibc's libmvec. The names of the vector variants libmvec has."""
    libm = ctypes.CDLL(_library('m'))
    llvm.load_library_permanently(_library('m'))
    for fn in LIBMVEC:
        llvm.add_symbol(PRIVATE + fn, ctypes.cast(getattr(libm, fn), ctypes.c_void_p).value)
    if not _library('mvec'):
        return frozenset()
    llvm.load_library_permanently(_library('mvec'))
    names = {f'_ZGV{isa}N{width}{"v" * arity}_{fn}' for isa, width in (('b', 2), ('d', 4), ('e', 8))
             for fn, arity in LIBMVEC.items()}
    return frozenset(name for name in names if llvm.address_of_symbol(name))


@functools.lru_cache(maxsize=None)
def _library(name):
    """ctypes.util.find_library(name), once a process: each call runs `ldconfig -p` in a process of its own."""
    return ctypes.util.find_library(name)


def vector_widths(features=None):
    """libmvec's variants a CPU with these features (by default the target's: targets.py) runs, as (ISA letter,
    doubles per call): SSE 2, AVX2 4, AVX-512 8."""
    has = targets.current().has if features is None else features
    widths = [('b', 2)] if 'sse4.2' in has else []
    widths += [('d', 4)] if {'avx2', 'fma'} <= has else []
    return widths + ([('e', 8)] if 'avx512f' in has else [])


def vectorised(ir_text, widths):
    """ir_text with each libm call marked as having libmvec's vector variants (the `vector-function-abi-variant`
    attribute), so LLVM's loop vectoriser can call e.g. _ZGVdN4v_exp on 4 rows at once, at whichever width its
    cost model picks; also pure, so LLVM may hoist and share the calls."""
    groups, declarations = [], []
    for k, (fn, arity) in enumerate(sorted(LIBMVEC.items())):
        call = f'call double @"{PRIVATE}{fn}"('
        if call not in ir_text:
            continue
        group = 1000 + k
        ir_text = re.sub(re.escape(call) + r'([^)]*)\)', lambda m: m.group(0) + f' #{group}', ir_text)
        variants = []
        for isa, width in widths:
            vector, vtype = f'_ZGV{isa}N{width}{"v" * arity}_{fn}', f'<{width} x double>'
            if vector not in link_math():
                continue
            if f'@"{vector}"(' not in ir_text:  # not declared already by a kernel that calls it itself
                declarations.append(f'declare {vtype} @{vector}({", ".join([vtype] * arity)})')
            variants.append(f'_ZGV_LLVM_N{width}{"v" * arity}_{PRIVATE}{fn}({vector})')
        variant = f'"vector-function-abi-variant"="{",".join(variants)}" ' if variants else ''
        groups.append(f'attributes #{group} = {{ {variant}memory(none) nounwind }}')
    used = [d.split('@')[1].split('(')[0] for d in declarations]  # kept alive until the vectoriser has run
    if used:
        declarations.append(f'@llvm.compiler.used = appending global [{len(used)} x ptr] '
                            f'[{", ".join("ptr @" + u for u in used)}], section "llvm.metadata"')
    return '\n'.join([ir_text, *declarations, *groups, ''])
