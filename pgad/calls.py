"""One call's stages, shared by the SQL functions (api.py) and pgad.train (models/training.py): pgad's settings as
the call sees them, how its columns load (loading, unpacking), its compiled kernel, its weights as one vector and
back as jsonb, and the Call that holds them ready to run:
arguments → program (parse, differentiate) → backend kernel → loader → the optimizer or the sums.
"""
import json
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from . import arguments, backends, categorical, domain, loader, program, server, shards
from .jit.cache import DiskCache
from .lang import vectors
from .errors import PgadError
from .limits import Limits
from .models import descent


@dataclass(frozen=True)
class Settings:
    limits: Limits      # pgad.max_lambda_bytes, pgad.max_lambda_nodes
    cache: DiskCache    # pgad.cache_directory, pgad.cache_size
    chunk_rows: int     # pgad.load_chunk_rows
    memory_limit: int   # pgad.memory_limit, in bytes


def settings():
    """pgad's settings, as this call sees them."""
    s = server.settings()
    return Settings(Limits(server.in_bytes(s['max_lambda_bytes']), int(s['max_lambda_nodes'])),
                    DiskCache(s['cache_directory'], server.in_bytes(s['cache_size'])), int(s['load_chunk_rows']),
                    server.in_bytes(s['memory_limit']))



@dataclass(frozen=True)
class Call:
    """One call's stages, ready to run: the program, the loaded table, the compiled kernel, the weights."""
    prog: program.Program
    table: loader.Table
    kernel: object
    vector: np.ndarray  # the starting weights, in the order of prog.weights
    unread: dict        # the weights the lambda does not read, {name: value}: given back as they came
    categories: categorical.Categories = None  # the categorical weights' categories

    @property
    def names(self):
        """The weights' elements as messages name them: m[1,2], region[north] (categorical.element_names)."""
        return categorical.element_names(self.prog, self.categories or categorical.Categories())

    def why(self, w, output):
        """What explains a sum that is not finite at the starting weights: the operation and the row (domain.py)."""
        return domain.diagnose(self.prog, local_rows(self.kernel, self.table), w, output)


def local_rows(kernel, table):
    """The rows of table that are here: a sharded table's local partitions' (the shards' are not)."""
    return kernel.table if isinstance(kernel, shards.Sharded) else table


def loading(data, spread=True):
    """How a function loads its columns: the data query's, packed by pgad.pack (loader.py); or, where the data names
    a table sharded over postgres_fdw servers (shards.py, unless spread is False), the local partitions' rows and a
    kernel that adds the shards' sums to theirs, the shards' connections open until the call ends. No row is an
    error. load(prog, config, job, start) is a context manager giving (table, kernel); start, the starting weights,
    is where a sharded load's first round counts the rows. load.lengths(lam) gives the lengths of the array columns
    the lambda reads (loader.lengths). A lambda with vectors pulls a sharded table's rows."""
    @contextmanager
    def load(prog, config, job, start, categories=None, missing=(), once=False, table=None):
        if table is not None:  # loaded already, with the keys (categorical.preload)
            table = loader.some_rows(in_order(table, prog.columns))
            yield table, compiled(prog, job.backend, job.dtype, config, table.rows, once)
            return
        layout = shards.layout(data, prog.columns) if spread and not prog.shaped else None
        if layout is None:
            table = loader.some_rows(loader.load(data, list(prog.columns), config.chunk_rows, config.memory_limit,
                                                 dict(prog.columns_of), categories, missing=missing))
            yield table, compiled(prog, job.backend, job.dtype, config, table.rows, once)
            return
        with shards.Shards(layout, job) as remote:
            here = (loader.load(layout.local_query, list(prog.columns), config.chunk_rows, config.memory_limit)
                    if layout.local_query else loader.Table([np.empty(0) for _ in prog.columns], 0, 0))
            kernel = shards.Sharded(compiled(prog, job.backend, job.dtype, config, here.rows), here, remote,
                                    len(prog.outputs), server.check_interrupts)
            rows = int(kernel.round(start)[0])
            yield loader.some_rows(loader.Table(here.columns, rows, here.skipped)), kernel
    load.lengths = lambda lam, categorical=(): loader.lengths(data, lam.columns, categorical)
    load.data = data
    return load


def in_order(table, columns):
    """A preload's table (categorical.preload: its names) with the columns (a Program's) in their order."""
    at = {name: k for k, name in enumerate(table.names)}
    missing = [str(c) for c in columns if str(c) not in at]
    if missing:
        raise PgadError('XX000', f'pgad loaded no column "{missing[0]}", which the program reads',
                        detail='Loaded: ' + ', '.join(table.names) + '.')
    return loader.Table([table.columns[at[str(c)]] for c in columns], table.rows, table.skipped, table.keys)


def unpacking(packed, names):
    """How an aggregate loads its columns: from the rows its transition function packed. No row gives None."""
    @contextmanager
    def load(prog, config, job, start, categories=None, once=False, table=None):
        table = loader.packed(packed, names, list(prog.columns))
        yield (table, compiled(prog, job.backend, job.dtype, config, table.rows, once)) if table.rows else (None, None)
    load.lengths = lambda lam, categorical=(): ()  # the aggregates pack numbers: lambda_columns refuses an array column
    load.data = None  # categorical.expand refuses a categorical weight
    return load


@contextmanager
def prepared(loss, weights, load, mode='reverse', backend='auto', dtype='float64', gradient=True, tape='auto',
              once=False, **checked):
    """The Call for the lambda text loss at the weights jsonb, its data from load (loading, unpacking), for the
    length of a with block; None when load gives none. The arguments are checked in order (a function's first bad
    argument is the one reported), `checked` ones by arguments' function of their name. once: the kernel runs once
    (pgad.loss, pgad.gradient), where 'auto' runs a small table on python (backends.choose), chosen after the load
    and compiled only then."""
    config = settings()
    lam = program.parsed(loss, config.limits)
    w, unread = arguments.unread(arguments.weights(weights, lam, config.memory_limit), lam)
    for name, value in checked.items():
        getattr(arguments, name)(value)
    mode, backend = arguments.mode(mode), arguments.backend(backend)
    precision = arguments.dtype(dtype, backend)
    tape = arguments.tape(tape, mode, backend)
    w, cats, lengths, loaded = categorized(w, lam, load, config)
    prog = program.build(lam.text, tuple(w), mode, gradient, config.limits, shapes_of(w, lengths, cats), tape)
    once = once and backend == 'auto' and tape == 'auto'
    if not once:
        compiled(prog, backend, precision, config)  # a backend's errors (no GPU, too large) before the load
    vector = vector_of(w)
    with load(prog, config, shards.Job(lam.text, tuple(w), mode, backend, precision), vector, cats.codes,
              once=once, table=loaded) as (table, kernel):
        yield None if table is None else Call(prog, table, kernel, vector, unread, cats)


def categorized(w, lam, load, config):
    """(the weights w with each categorical weight a vector of its categories, Categories, the array columns'
    lengths, the Table loaded already or None) of a call on load's data: where a weight is categorical, its rows
    loaded first and the categories found in the same pass (categorical.preload), else found by a query of their
    own (outside the server) and the rows loaded once the program is built."""
    found = categorical.indexed(w, lam)
    lengths = load.lengths(lam, tuple(found.values()))
    loaded = categorical.preload(load.data, lam, found, lengths, config) if found and load.data is not None \
        else None
    w, cats = categorical.expand(w, lam, load.data, config.limits, config.memory_limit, loaded)
    return w, cats, lengths, loaded


def shapes_of(w, columns=(), cats=None):
    """The vectors.Shapes of the weights (a dict of numbers and arrays, as arguments.weights gives), of array
    columns ((name, length), … as loader.lengths gives) and the columns that index categorical weights (cats)."""
    return vectors.Shapes(tuple((name, v.shape) for name, v in w.items() if np.ndim(v)), tuple(columns),
                          tuple(cats.codes) if cats else ())


def weights_json(unread, nested):
    """The weights jsonb of nested ({weight: number or nested lists}, as Program.nest gives) and the weights the
    lambda does not read, {name: a number or an array}."""
    return json.dumps({**{n: v.tolist() if isinstance(v, np.ndarray) else v for n, v in unread.items()}, **nested})


def vector_of(w):
    """The weights as one vector, in the order of a Program's weights: each weight's elements row-major."""
    return np.concatenate([np.ravel(v) for v in w.values()]).astype(np.float64) if w else np.zeros(0)


def compiled(prog, backend, precision, config, rows=None, once=False):
    """prog's kernel on the backend asked for ('auto': chosen for steps over `rows` rows; None, not known yet; once:
    for a single evaluation, backends.choose)."""
    chosen = backends.choose(prog, backend, rows, once)
    return backends.compile(prog, chosen, config.cache, precision if chosen == 'cuda' else 'float64')



def second_sums(call):
    """The sums over the call's rows of a build_hessian program's outputs: [loss, gradient…, Hessian's upper half…]."""
    sums = descent.evaluate(call.kernel, call.table, call.vector, server.check_interrupts)
    descent.check_finite(sums, call.vector, 1, call.names, 0, call.why)
    return sums

