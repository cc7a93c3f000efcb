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

from .. import limits
from ..lang.rules import PRIMITIVES

DOUBLE, BOOL, I64 = ir.DoubleType(), ir.IntType(1), ir.IntType(64)
# libm functions with vector variants in glibc's libmvec (2.35+), by their number of arguments. The kernel calls
# them as pgad_libm_exp, pgad_libm_log, … (compiler.py resolves those names to libm): under their own names LLVM would turn the
# calls into its intrinsics, whose vector forms it scalarises again, and forget the libmvec variants.
LIBMVEC = {'exp': 1, 'log': 1, 'log10': 1, 'log1p': 1, 'sin': 1, 'cos': 1, 'tan': 1, 'asin': 1, 'acos': 1,
           'atan': 1, 'sinh': 1, 'cosh': 1, 'tanh': 1, 'cbrt': 1, 'atan2': 2}
PRIVATE = 'pgad_libm_'

REDUCE = ('reassoc', 'nsz')  # the sums over rows may be reordered; nothing else is


def _const(value):
    return ir.Constant(DOUBLE, value)


class _Emitter:
    """An IRBuilder with the math the rules need: LLVM intrinsics for what the CPU does in one instruction (sqrt,
    fabs), libm for the rest — whose calls vectorise where glibc's libmvec has a vector variant (see vectorised)."""

    def __init__(self, builder, module):
        self.b, self.module = builder, module

    def call(self, name, *args):
        name = PRIVATE + name if name in LIBMVEC else name
        fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(DOUBLE, [DOUBLE] * len(args)),
                                                          name)
        return self.b.call(fn, list(args))

    def select(self, c, a, b):
        return self.b.select(c, a, b)

    def sigmoid(self, x):  # as numpy does it in python_backend: e = exp(-|x|), no overflow either side
        e = self.call('exp', self.b.fneg(self.call('llvm.fabs.f64', x)))
        one_plus = self.b.fadd(_const(1.0), e)
        return self.select(self.b.fcmp_ordered('>=', x, _const(0.0)), self.b.fdiv(_const(1.0), one_plus),
                           self.b.fdiv(e, one_plus))

    def softplus(self, x):  # max(x, 0) + log1p(exp(-|x|))
        e = self.call('exp', self.b.fneg(self.call('llvm.fabs.f64', x)))
        positive = self.select(self.b.fcmp_ordered('>', x, _const(0.0)), x, _const(0.0))
        return self.b.fadd(positive, self.call('log1p', e))

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
    'exp': lambda e, x: e.call('exp', x),
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


def kernel_ir(program, name=NAME):
    """The LLVM IR module (text) of program's kernel, a function called name."""
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
    nodes = program.graph.nodes
    weight_at = {name: k for k, name in enumerate(program.weights)}
    column_at = {name: k for k, name in enumerate(program.columns)}
    weight_values = [b.load(b.gep(weights_ptr, [ir.Constant(I64, k)])) for k in range(len(program.weights))]
    b.cbranch(b.icmp_signed('>', rows, ir.Constant(I64, 0)), loop, done)

    b.position_at_end(loop)
    i = b.phi(I64, 'i')
    sums = [b.phi(DOUBLE, f'sum{k}') for k in range(len(program.outputs))]
    emitter, values = _Emitter(b, module), {}
    for n in program.graph.ancestors(program.outputs):
        limits.tick()
        node = nodes[n]
        if node.op == 'const':
            values[n] = ir.Constant(BOOL, int(node.value)) if isinstance(node.value, bool) else _const(node.value)
        elif node.op == 'column':
            values[n] = b.load(b.gep(column_ptrs[column_at[node.value]], [i]))
        elif node.op == 'weight':
            values[n] = weight_values[weight_at[node.value]]
        else:
            values[n] = EMIT[node.op](emitter, *[values[a] for a in node.args])
    new_sums = [b.fadd(s, values[o], flags=REDUCE) for s, o in zip(sums, program.outputs)]
    next_i = b.add(i, ir.Constant(I64, 1))
    b.cbranch(b.icmp_signed('<', next_i, rows), loop, done)
    i.add_incoming(ir.Constant(I64, 0), entry)
    i.add_incoming(next_i, loop)
    for s, new in zip(sums, new_sums):
        s.add_incoming(_const(0.0), entry)
        s.add_incoming(new, loop)

    b.position_at_end(done)
    totals = [b.phi(DOUBLE, f'total{k}') for k in range(len(new_sums))]
    for k, (total, new) in enumerate(zip(totals, new_sums)):
        total.add_incoming(_const(0.0), entry)
        total.add_incoming(new, loop)
        b.store(total, b.gep(sums_ptr, [ir.Constant(I64, k)]))
    b.ret_void()
    return vectorised(str(module), vector_widths())




@functools.lru_cache(maxsize=None)
def link_math():
    """Make the math the kernels call resolvable in this process: libm's functions under the names the kernels use
    (pgad_libm_exp, …), and glibc's libmvec. The names of the vector variants libmvec has."""
    libm = ctypes.CDLL(ctypes.util.find_library('m'))
    llvm.load_library_permanently(ctypes.util.find_library('m'))
    for fn in LIBMVEC:
        llvm.add_symbol(PRIVATE + fn, ctypes.cast(getattr(libm, fn), ctypes.c_void_p).value)
    if not ctypes.util.find_library('mvec'):
        return frozenset()
    llvm.load_library_permanently(ctypes.util.find_library('mvec'))
    names = {f'_ZGV{isa}N{width}{"v" * arity}_{fn}' for isa, width in (('b', 2), ('d', 4), ('e', 8))
             for fn, arity in LIBMVEC.items()}
    return frozenset(name for name in names if llvm.address_of_symbol(name))


def vector_widths():
    """libmvec's variants this CPU can run, as (ISA letter, doubles per call): SSE 2, AVX2 4, AVX-512 8."""
    features = llvm.get_host_cpu_features()
    widths = [('b', 2)] if features.get('sse4.2') else []
    widths += [('d', 4)] if features.get('avx2') and features.get('fma') else []
    return widths + ([('e', 8)] if features.get('avx512f') else [])


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
