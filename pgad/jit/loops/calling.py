"""A loop kernel's calling convention: codegen.kernel_ir's — void kernel(i64 rows, double *weights, double *sums,
…) — but for its columns: a pointer to each number column, then one to each array column's row-major block, then the
scratch buffer (kernel.scratch_doubles). column_arguments() says which, widths() the doubles of a row in each, and
blocks() turns the columns every backend is given into those arguments.
"""
import weakref

import numpy as np

def column_arguments(program):
    """(the indexes in program.columns of the number columns, the names of the array columns it reads): a loop kernel
    takes a pointer to each number column, then one to each array column's row-major block (blocks() makes them). An
    array column the lambda names but never reads (in a branch never taken) has no elements in program.columns, and
    no argument: the loader loads program.columns alone."""
    elements = dict(program.columns_of)
    return ([k for k, c in enumerate(program.columns) if c not in elements],
            list(dict.fromkeys(elements[c][0] for c in program.columns if c in elements)))


def _members(program, arrays):
    """{array column: the indexes in program.columns of its elements}, for each of arrays."""
    elements = dict(program.columns_of)
    return {name: [k for k, c in enumerate(program.columns) if c in elements and elements[c][0] == name]
            for name in arrays}


def widths(program):
    """The doubles of a row in each of a loop kernel's column arguments: 1 for a number column, an array column's
    length for its block."""
    scalars, arrays = column_arguments(program)
    members = _members(program, arrays)
    return [1] * len(scalars) + [len(members[name]) for name in arrays]


def blocks(program):
    """A function from the kernel's columns (program.columns' arrays, as every backend is given them) to a loop
    kernel's arguments: the number columns as they are, each array column's elements as one row-major block. The
    blocks of the last columns seen are kept: the descent gives the same arrays at every step."""
    scalars, arrays = column_arguments(program)
    members = _members(program, arrays)
    kept = {}  # 'of': weak references to the column arrays the blocks copy; 'blocks'

    def arguments(columns):
        if not arrays:
            return list(columns)
        of = kept.get('of')
        # the very arrays (an identity test, a few µs: their addresses took 75 µs, a tenth of a digits step)
        if of is None or len(of) != len(columns) or any(r() is not a for r, a in zip(of, columns)):
            kept.clear()
            kept.update(of=[weakref.ref(a) for a in columns],
                        blocks=[np.ascontiguousarray(np.stack([columns[k] for k in members[name]], axis=1),
                                                     dtype=np.float64).ravel() for name in arrays])
            # dropped with the columns they copy (the call's table), not kept by the cached kernel past the call
            weakref.finalize(columns[members[arrays[0]][0]], kept.clear)
        return [columns[k] for k in scalars] + kept['blocks']
    arguments.kept = kept
    return arguments
