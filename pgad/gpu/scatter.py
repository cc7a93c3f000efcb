"""The cuda backend's kernel of a keyed model (keyed.py): jit/scatter.py's loop over the rows, as a CUDA kernel.

    def pgad_kernel(rows, weights, other, io, index, bounds, c0, c1, …)

Each thread takes rows in a grid-stride loop (row i, i + the grid's threads, …), reading row index[i] of every column
where the kernel is indexed. As jit/scatter.py's kernel does, it reads each code column's key (1 … K, a double) and
skips the row unless every key is in 1 … K and every scattered one inside shift … shift + span − 1 (bounds: each code
column's K, then its shift, then its span), so that no read or write leaves the arrays; gathers the row's keyed values
(weights[base + key·stride], or other's), evaluates the local program (gpu/codegen.py's EMIT, one line a node), and
adds each output scattered at its key by an atomic add, io[base + (key − shift)·stride], and each summed one in a
register, added up over the block in shared memory and added to io[base] once a block (codegen._block_sum).

Two rows of one key add at one place in whatever order the threads reach it: the sums are jit/scatter.py's to
rounding, not bit for bit, nor the same bits from one run to the next (docs/sql.md says so of the cuda backend).
The columns are copied to the GPU once for as long as the arrays live (Scatter.placed); the weights, the other array,
the index and the bounds go each call, the sums come back. The source holds generated identifiers only, as
codegen.py's: no name or number of the user's reaches it. Scatter checks every place a key in range reaches against
the arrays' sizes before the kernel runs (jit/scatter.checked), as the llvm kernel's callers are checked.
"""
import weakref
from types import SimpleNamespace

import numpy as np

from . import codegen, compiler
from .. import limits
from ..jit import scatter as cpu_scatter


def kernel_source(graph, outputs, reads, targets, columns, indexed, threads):
    """(source, constants) of the kernel of graph's outputs added at targets (jit/scatter.Place each), its weight
    leaves read at reads ({element: Place}); columns: the column leaves' names in argument order (None: a code column
    the graph does not read)."""
    codes = sorted({p.column for p in [*reads.values(), *targets] if p.column is not None})
    scattered = {p.column for p in targets if p.column is not None}
    summed = [k for k, p in enumerate(targets) if p.column is None]
    column_at = {n: k for k, n in reversed(list(enumerate(columns))) if n is not None}
    leaf = {e: f'w{k}' for k, e in enumerate(reads)}
    array = {e: 'other' if p.other else 'weights' for e, p in reads.items()}
    # every node in the loop: a keyed weight's value is the row's
    constants, names, _, body = codegen.node_lines(graph, outputs, leaf.__getitem__,
                                                   lambda name: f'c{column_at[name]}[r]')
    count, j = len(codes), {c: j for j, c in enumerate(codes)}
    check = []
    for c in codes:
        check += [f'x{j[c]} = c{c}[r]',
                  f'ok = ok and x{j[c]} >= one and x{j[c]} <= bounds[{j[c]}]',  # NaN: False
                  f'key{j[c]} = int(x{j[c]}) - 1 if ok else 0']
        if c in scattered:
            check.append(f'ok = ok and key{j[c]} >= bounds[{count + j[c]}] and '
                         f'key{j[c]} - bounds[{count + j[c]}] < bounds[{2 * count + j[c]}]')
    gathered = [f'{leaf[e]} = {array[e]}[{p.base} + key{j[p.column]} * {p.stride}]'
                for e, p in reads.items() if p.column is not None]
    added = [f'a{summed.index(k)} += {names[o]}' if p.column is None else
             f'cuda.atomic.add(io, {p.base} + (key{j[p.column]} - bounds[{count + j[p.column]}]) * {p.stride}, '
             f'{names[o]})' for k, (o, p) in enumerate(zip(outputs, targets))]
    lines = [f'def {codegen.KERNEL}(rows, weights, other, io, index, bounds, '
             f'{", ".join(f"c{k}" for k in range(len(columns)))}):',
             *(f'    {leaf[e]} = {array[e]}[{p.base}]' for e, p in reads.items() if p.column is None),
             *(f'    a{k} = zero64' for k in range(len(summed))),
             '    i = cuda.grid(1)',
             '    stride = cuda.gridsize(1)',
             '    while i < rows:',
             f'        r = {"index[i]" if indexed else "i"}',
             '        ok = True',
             *(f'        {line}' for line in check),
             '        if ok:',
             *(f'            {line}' for line in [*gathered, *body, *added]),
             '        i += stride']
    if summed:
        lines += codegen._block_sum(len(summed), 0, threads, 'atomic', at=lambda k: targets[summed[k]].base)
    return '\n'.join(lines) + '\n', constants


def arguments(columns):
    """The kernel's argument types for numba: rows, weights, other, io, index, bounds, the columns."""
    return ['int64', 'float64[::1]', 'float64[::1]', 'float64[::1]', 'int64[::1]', 'int64[::1]'] + \
        ['float64[::1]'] * columns


def compile(graph, outputs, reads, targets, columns, indexed=False):
    """The Scatter of kernel_source's kernel for this GPU (or numba's simulator): 54001 past compiler.MAX_NODES or
    where a trial compile in the compiler process takes too long, 58000 where there is no GPU."""
    outputs, targets = list(outputs), list(targets)
    compiler.check_size(SimpleNamespace(graph=graph, outputs=outputs))
    module = compiler.device()
    simulated = compiler.simulated()
    threads = compiler.SIMULATED[0] if simulated else compiler.THREADS
    source, constants = kernel_source(graph, outputs, reads, targets, columns, indexed, threads)
    scope = compiler.functions(source, compiler.namespace(module, 'float64', constants))
    if simulated:
        compiler._simulator_shares_one_array_per_block()
        launch = module.jit(scope[codegen.KERNEL])
    else:
        types = arguments(len(columns))
        compiler.check_request_time(dict(job='ptx', source=source, constants=constants, precision='float64',
                                         cc=list(module.get_current_device().compute_capability),
                                         types=f'({", ".join(types)})'))
        launch = module.jit(f'void({", ".join(types)})')(scope[codegen.KERNEL])
    blocks = compiler.SIMULATED[1] if simulated else compiler._blocks(module)
    return Scatter(module, launch, reads, targets, len(columns), indexed, threads, blocks)


class Scatter:
    """A compiled kernel_source: scatter(columns, rows, weights, out, keys, …) adds the rows' outputs into out in
    place, as jit/scatter.Scatter does (its arguments alike; starts, a hint of the llvm kernel's threads, unused)."""

    def __init__(self, module, launch, reads, targets, columns, indexed, threads, blocks):
        self.module, self.launch, self.reads, self.targets = module, launch, reads, targets
        self.columns, self.indexed, self.threads, self.blocks = columns, indexed, threads, blocks
        self.codes = sorted({p.column for p in [*reads.values(), *targets] if p.column is not None})
        self.on_device = {}  # id(column) → (a weak reference to it, its copy on the GPU)

    def placed(self, array):
        """array's copy on the GPU: made once while array lives (53200 where it would not fit there)."""
        kept = self.on_device.get(id(array))
        if kept is not None and kept[0]() is array:
            return kept[1]
        free, _ = self.module.current_context().get_memory_info()
        if array.nbytes > 0.9 * free:
            from ..errors import PgadError
            raise PgadError('53200', f'the data needs {array.nbytes >> 20} MB more on the GPU, more than the '
                                     f'{int(free) >> 20} MB free there', hint="Use backend => 'llvm'.")
        copy = self.module.to_device(array)
        key = id(array)
        self.on_device[key] = (weakref.ref(array, lambda _, key=key: self.on_device.pop(key, None)), copy)
        return copy

    def __call__(self, columns, rows, weights, out, keys, spans=None, index=None, starts=None, other=None):
        weights, other, arrays, index, bounds = cpu_scatter.checked(self, columns, rows, weights, out, keys, spans,
                                                                    index, other)
        if rows == 0:
            return out
        device = [self.placed(a) for a in arrays]
        to = self.module.to_device
        sums = to(np.zeros(out.size))
        blocks = max(1, min(self.blocks, -(-rows // self.threads)))
        self.launch[blocks, self.threads](
            rows, to(weights.reshape(-1)), to(other.reshape(-1) if other.size else np.zeros(1)), sums,
            to(index if self.indexed else np.zeros(1, dtype=np.int64)),
            to(bounds if bounds.size else np.zeros(1, dtype=np.int64)), *device)
        out += sums.copy_to_host().reshape(out.shape)
        limits.check()
        return out
