"""Program → the Python source of a CUDA kernel, for numba-cuda: the loss and its gradient summed over the rows.

    def pgad_kernel(rows, io, c0, c1, …)    io = [weights…, sums…]: the weights in, the sums out

Every thread walks the rows in a grid-stride loop (row i, i + the grid's threads, …) and, as the llvm kernel does,
evaluates every node of the program once per row and adds each output to an accumulator in a register; no tape
crosses rows. Then the block adds up its threads' accumulators in shared memory (a tree: half the threads add the
other half's, then a quarter, …), and thread 0 adds the block's sums to io with one double-precision atomic add per
output ('atomic'), or writes them to its row of a partials array that a second, one-block kernel adds up in a fixed
order ('partials'). docs/performance.md says which is faster, and why.

The source holds generated identifiers only — v<node>, c<column>, w<weight>, a<output>, k<constant> — and the names
of the math below: no column or weight name and no number of the user's reaches it (a constant is a global of the
kernel, bound by name). EMIT is the CUDA side of the rules table: one expression per primitive, over the argument
names {0}, {1}, {2}. The math names resolve to numba-cuda's libdevice functions on a GPU, and to numpy's on the
simulator (compiler.py), whose numpy scalars give NaN and infinity where Python's math would raise.
"""
from .. import limits
from ..lang.rules import PRIMITIVES

# Each a single expression, so a rule is one line; zero and one are constants of the kernel's precision.
EMIT = {
    'add': '{0} + {1}',
    'sub': '{0} - {1}',
    'mul': '{0} * {1}',
    'div': '{0} / {1}',
    'neg': '-{0}',
    'mod': 'fmod({0}, {1})',
    'pow': '{0} ** {1}',
    'exp': 'exp({0})',
    'ln': 'log({0})',
    'log10': 'log10({0})',
    'sqrt': 'sqrt({0})',
    'cbrt': 'cbrt({0})',
    'abs': 'fabs({0})',
    'sign': 'one if {0} > zero else -one if {0} < zero else {0}',
    'greatest': '{0} if not {0} < {1} else {1}',  # as the llvm kernel's unordered >=: a NaN picks the first
    'least': '{0} if not {0} > {1} else {1}',
    'sin': 'sin({0})',
    'cos': 'cos({0})',
    'tan': 'tan({0})',
    'asin': 'asin({0})',
    'acos': 'acos({0})',
    'atan': 'atan({0})',
    'atan2': 'atan2({0}, {1})',
    'sinh': 'sinh({0})',
    'cosh': 'cosh({0})',
    'tanh': 'tanh({0})',
    'sigmoid': 'one / (one + exp(-fabs({0}))) if {0} >= zero else exp(-fabs({0})) / (one + exp(-fabs({0})))',
    'relu': '{0} if not {0} <= zero else zero',
    'softplus': '({0} if {0} > zero else zero) + log1p(exp(-fabs({0})))',
    'case': '{1} if {0} else {2}',
    'lt': '{0} < {1}',
    'le': '{0} <= {1}',
    'gt': '{0} > {1}',
    'ge': '{0} >= {1}',
    'eq': '{0} == {1}',
    'ne': '{0} != {1}',
    'iff': '{0} == {1}',
    'xor': '{0} != {1}',
    'and': '{0} and {1}',
    'or': '{0} or {1}',
    'not': 'not {0}',
    'truth': '{0} != zero',
}
assert set(EMIT) == set(PRIMITIVES), set(PRIMITIVES) ^ set(EMIT)

# The names the source may use besides its generated ones: compiler.py binds each (and the k<n> constants).
MATH = ('exp', 'log', 'log10', 'log1p', 'sqrt', 'cbrt', 'fabs', 'fmod', 'sin', 'cos', 'tan', 'asin', 'acos', 'atan',
        'atan2',
        'sinh', 'cosh', 'tanh')
NAMES = MATH + ('cuda', 'real', 'zero', 'one', 'zero64', 'float64')
KERNEL, COMBINE = 'pgad_kernel', 'pgad_combine'
COMBINES = ('atomic', 'partials')


def kernel_source(program, threads, combine='atomic'):
    """(source, constants): the kernel's Python source for blocks of `threads` threads (a power of 2), and the value
    of each constant k<n> it names. Its io holds the weights then the sums; with combine 'partials' it writes each
    block's sums to partials[block, output] instead, and the source also defines COMBINE, which adds them up."""
    assert threads & (threads - 1) == 0 and combine in COMBINES
    outputs = program.outputs
    weights, columns = len(program.weights), len(program.columns)
    column_at = {name: k for k, name in enumerate(program.columns)}
    weight_at = {name: k for k, name in enumerate(program.weights)}
    constants, names, before, body = node_lines(program.graph, outputs, lambda name: f'w{weight_at[name]}',
                                                lambda name: f'c{column_at[name]}[i]',
                                                program.graph.depends_on_data())
    parameters = ['rows', 'io', *(f'c{k}' for k in range(columns))] + (['partials'] if combine == 'partials' else [])
    lines = [f'def {KERNEL}({", ".join(parameters)}):',
             *(f'    w{k} = real(io[{k}])' for k in range(weights)),
             *(f'    {line}' for line in before),
             *(f'    a{k} = zero64' for k in range(len(outputs))),
             '    i = cuda.grid(1)',
             '    stride = cuda.gridsize(1)',
             '    while i < rows:',
             *(f'        {line}' for line in body),
             *(f'        a{k} += {names[o]}' for k, o in enumerate(outputs)),
             '        i += stride',
             *_block_sum(len(outputs), weights, threads, combine)]
    if combine == 'partials':
        lines += _combine(len(outputs), weights)
    return '\n'.join(lines) + '\n', constants


def node_lines(graph, outputs, weight, column, per_row=None):
    """(constants, names, before, body) of the nodes outputs need, in order: each constant a k<n> of the kernel
    (constants: its value), each weight leaf named weight(its name), each other node a line v<n> = its EMIT
    expression (a column leaf's column(its name)), in before where per_row (graph.depends_on_data()) says it
    reads no row, else in body (every one where per_row is None); names: each node's identifier."""
    nodes = graph.nodes
    constants, names, before, body = {}, {}, [], []
    for n in graph.ancestors(outputs):
        limits.tick()
        node = nodes[n]
        if node.op == 'const':
            names[n] = f'k{n}'
            constants[names[n]] = node.value
        elif node.op == 'weight':
            names[n] = weight(node.value)
        else:
            names[n] = f'v{n}'
            value = column(node.value) if node.op == 'column' else EMIT[node.op].format(*[names[a] for a in node.args])
            (body if per_row is None or per_row[n] else before).append(f'{names[n]} = {value}')
    return constants, names, before, body


GROUP = 16  # outputs summed in shared memory at once: 16 × 256 threads × 8 bytes = 32 KB of the 48 KB a block has


def _block_sum(outputs, weights, threads, combine, at=None):
    """The block's tree sum of a0, a1, … in shared memory, GROUP outputs at a time, and thread 0's write of it: an
    atomic add at io[weights + k], or at io[at(k)] where at is given (gpu/scatter.py's summed outputs)."""
    at = at or (lambda k: weights + k)
    group = min(GROUP, outputs)
    lines = ['    t = cuda.threadIdx.x',
             f'    shared = cuda.shared.array(shape=({group}, {threads}), dtype=float64)']
    for first in range(0, outputs, group):
        part = range(first, min(first + group, outputs))
        lines += [*(f'    shared[{k - first}, t] = a{k}' for k in part),
                  '    cuda.syncthreads()',
                  f'    half = {threads // 2}',
                  '    while half > 0:',
                  '        if t < half:',
                  *(f'            shared[{k - first}, t] += shared[{k - first}, t + half]' for k in part),
                  '        cuda.syncthreads()',
                  '        half //= 2',
                  '    if t == 0:',
                  *(f'        cuda.atomic.add(io, {at(k)}, shared[{k - first}, 0])' if combine == 'atomic' else
                    f'        partials[cuda.blockIdx.x, {k}] = shared[{k - first}, 0]' for k in part),
                  '    cuda.syncthreads()']
    return lines


def _combine(outputs, weights):
    """COMBINE(partials, io): one block; thread k adds output k's partials (and k + the block's threads', …) of every
    block, in block order: the same sums for the same rows, whatever the order the blocks ran in."""
    return [f'def {COMBINE}(partials, io):',
            '    k = cuda.threadIdx.x',
            f'    while k < {outputs}:',
            '        total = zero64',
            '        for b in range(partials.shape[0]):',
            '            total += partials[b, k]',
            f'        io[{weights} + k] = total',
            '        k += cuda.blockDim.x']
