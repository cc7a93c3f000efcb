"""Weights by key (issue 48): a number or a vector per key, for millions of keys, read as w.p[d.user].

A keyed weight is a categorical weight (categorical.py) whose start is a spec, {"shape": [8], "init": "normal(0,
0.1)", "seed": 1}: each of the key column's values (its keys, found in the data) holds a value of that shape, drawn
from init. Beside one, every categorical weight of the model ({} or {"north": 0.5}) is keyed too, a number a key.
The model is not unrolled over the keys: each row reads one key's value of each keyed weight, so the row's
objective is a small lambda, the *local* one (localised), in which w.p[d.user] is a weight p of the key's shape.
program.build differentiates it once; the python backend's plan evaluates it over the rows with each keyed weight
fed as the rows' gathered values (a gather: Futhark's index), and the derivative of the objective by a key's value
is the sum of the local derivative over that key's rows (a scatter-add at the row's key: np.bincount). The same
local lambda's Hessian (program.build_hessian) gives, per key, the block of the objective's Hessian in that key's
values: block Newton (blocks.py's solve) solves each key's block exactly in turn, which for the bilinear squared
loss is alternating least squares.

The weight vector the optimizers see (Layout) is the global weights' elements, then each keyed weight as a K×size
table, row-major: a key's value is one row. Kernel is descent.fit's kernel over it, so every dense optimizer runs on
a keyed model unchanged; sparse.py's mini-batch optimizers touch only a batch's keys.

The keys are found in the load's own pass (load): pgad.so's native load reads each key column as text and codes it by
a hash of its keys in C (extension/keys.c), in the order the rows first show them; then each column's keys are sorted
(as Python orders text; an integer column's numerically) and its codes renumbered through a lookup array, so that the
codes, and every value drawn per key, are the same whatever order the rows came in (a type that holds keys of
different texts equal, citext, has them grouped by one query over the keys: categorical.equal_keys). One query reads
the data. Where the load is not native (outside the server), the keys are read first, one query a column (read_keys),
in the type's order.
"""
import math
import re
from dataclasses import dataclass, field

import numpy as np

from . import categorical, loader, program, python_backend, server
from .errors import PgadError
from .lang import printer, vectors
from .lang.parser import Lambda

INITS = {  # name → (its parameters' count, the draw of n values from a numpy Generator)
    'zeros': (0, lambda rng, n: np.zeros(n)),
    'normal': (2, lambda rng, n, mean, sd: rng.normal(mean, sd, n)),
    'uniform': (2, lambda rng, n, low, high: rng.uniform(low, high, n)),
}
NUMBER = r'\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*'
INIT = re.compile(rf'(\w+)\s*(?:\(((?:{NUMBER},)*{NUMBER})\))?\s*$', re.ASCII)
DEFAULT_INIT = 'normal(0, 0.1)'  # a vector's: at 0 a bilinear form's gradient is 0 (a saddle), so none starts there
MOST_DIMENSIONS = 4096           # the most numbers one key's value may hold
KEY_BYTES = 64                   # what one key costs beside its values: its text, its code, its place in the hash
COPIES = 6  # the values' copies a fit holds at once: the weights, the gradient or a step, a trial, a sweep's start, two
#            moments (L-BFGS's pairs are counted apart: keyed_training.POLISH_COPIES)
SPEC = ('shape', 'init', 'seed')
EXAMPLE = '{"p": {"shape": [8], "init": "normal(0, 0.1)", "seed": 1}}'


@dataclass(frozen=True)
class Spec:
    """How a keyed weight starts: the shape of a key's value, the distribution it is drawn from, the seed."""
    shape: tuple = ()
    init: str = 'zeros'
    seed: int = 0
    listed: dict = None  # {key: value} that start where the data has them (a categorical weight's object)

    @property
    def size(self):
        return math.prod(self.shape)


@dataclass
class Keyed:
    """The keyed weights of one model: each one's spec, its column, and (once the data is read) its keys."""
    specs: dict                                 # weight → Spec
    column: dict                                # weight → the column that indexes it
    keys: dict = field(default_factory=dict)    # column → its keys as text, sorted (categorical.key_order; 1 … K)
    types: dict = field(default_factory=dict)   # column → its (base) type's schema-qualified name

    def count(self, weight):
        return len(self.keys[self.column[weight]])


def is_spec(value):
    """Is a weight's start a keyed weight's spec (an object with "shape", an array), not an object by category?"""
    return isinstance(value, dict) and isinstance(value.get('shape'), list)


def wanted(w):
    """Does the model take the keyed path: is one of the weights' starts a spec?"""
    return isinstance(w, dict) and any(is_spec(v) for v in w.values())


def spec(name, value, seed=None):
    """The Spec of weight name's start (a spec, or a categorical weight's object: a number a key)."""
    if not is_spec(value):
        return Spec((), 'zeros', 0, {k: _number(f'{name}[{k}]', v) for k, v in value.items()})
    odd = [k for k in value if k not in SPEC]
    if odd:
        raise PgadError('22023', f'weight "{name}" has an unknown field "{odd[0]}"',
                        detail='A keyed weight is {"shape": [...], "init": "...", "seed": n}.', hint=EXAMPLE)
    shape = value['shape']
    if len(shape) > 1 or not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MOST_DIMENSIONS
                                 for n in shape):
        raise PgadError('22023', f'weight "{name}" has shape {shape}, which is not [] or [n] for n from 1 to '
                                 f'{MOST_DIMENSIONS}',
                        hint='A key holds a number (shape []) or a vector (shape [8]).', detail=None)
    init = value.get('init', DEFAULT_INIT if shape else 'zeros')
    found = INIT.match(init) if isinstance(init, str) else None
    if found is None or found.group(1) not in INITS or \
            len(re.findall(NUMBER, found.group(2) or '')) != INITS[found.group(1)][0]:
        raise PgadError('22023', f'weight "{name}" has init {init!r}, which is not zeros, normal(mean, sd) or '
                                 'uniform(low, high)', hint=EXAMPLE)
    parameters = [float(v) for v in re.findall(NUMBER, found.group(2) or '')]
    if not all(math.isfinite(v) for v in parameters) or found.group(1) == 'normal' and parameters[1] < 0 or \
            found.group(1) == 'uniform' and parameters[0] > parameters[1]:
        raise PgadError('22023', f'weight "{name}" has init {init!r}, whose parameters are out of range',
                        hint='normal(mean, sd) takes sd ≥ 0, uniform(low, high) low ≤ high, both finite.')
    given = value.get('seed', seed if seed is not None else 0)
    if isinstance(given, bool) or not isinstance(given, int) or given < 0:
        raise PgadError('22023', f'weight "{name}" has seed {given!r}, which is not a non-negative integer',
                        hint=EXAMPLE)
    canonical = found.group(1) + (f'({", ".join(repr(v) for v in parameters)})' if parameters else '')
    return Spec(tuple(shape), canonical, given)


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PgadError('22023', f'weight "{name}" must be a number, not {value!r}',
                        hint=f'A keyed weight starts as {EXAMPLE}; an object by key lists numbers.')
    return float(value)


def found(w, lam, seed=None):
    """The Keyed of the weights w (a dict, starts as given) of lam: its categorical weights, each read as
    w.p[d.c] only (categorical.indexed)."""
    columns = categorical.indexed(w, lam)
    return Keyed({n: spec(n, w[n], seed) for n in columns}, columns)


def start(keyed, weight):
    """The K×size starting table of a keyed weight: drawn from its init (its seed's stream, key after key in code
    order), or its listed value where the spec lists the key."""
    s, n = keyed.specs[weight], keyed.count(weight)
    kind, parameters = INIT.match(s.init).group(1), [float(v) for v in re.findall(NUMBER, s.init.partition('(')[2])]
    table = INITS[kind][1](np.random.default_rng(s.seed), n * s.size, *parameters).reshape(n, s.size)
    for k, key in enumerate(keyed.keys[keyed.column[weight]]) if s.listed else ():
        if key in s.listed:
            table[k] = s.listed[key]
    return table


def cost(keyed, counts):
    """The bytes the keyed weights take at counts ({column: keys}) while a fit runs: COPIES of every value, and
    KEY_BYTES a key."""
    return sum(COPIES * 8 * counts[c] * keyed.specs[w].size for w, c in keyed.column.items()) + \
        KEY_BYTES * sum(counts.values())


def check(keyed, query):
    """Each key column in the data, of a type a key may have (its base type in keyed.types): before the load."""
    names, types = loader.check_columns(query, [], categorical=set(keyed.column.values()))
    for column in dict.fromkeys(keyed.column.values()):
        if column not in names:
            raise loader.missing(column, names)
        keyed.types[column] = categorical.base_type(column, types[names.index(column)])
    return keyed


def load(keyed, data, columns, memory_limit):
    """The Table of columns of the data, each key column among them its keys' codes 1 … K by keyed.keys, which this
    fills: one native load, which finds the keys as it reads the rows (keys.c), their codes then made the sorted keys'
    (coded); outside the server, the keys read first (read_keys), then the load. The keys' values must fit
    pgad.memory_limit (too_many_keys), checked before any is drawn; a key column whose every row is NULL is the
    error it was."""
    query = loader.as_query(data)
    if not all(c in keyed.types for c in keyed.column.values()):
        check(keyed, query)
    key_columns = list(dict.fromkeys(keyed.column.values()))
    if loader.native_loader() is None:
        read_keys(keyed, query, memory_limit)
        return loader.load(data, columns, memory_limit=memory_limit, categories=dict(keyed.keys))
    table = loader.load(data, columns, memory_limit=memory_limit, keys=key_columns)
    for column in key_columns:
        at, found, kind = columns.index(column), table.keys[column], keyed.types[column]
        same = categorical.equal_keys(found, kind)
        table.columns[at], keyed.keys[column] = categorical.coded(table.columns[at], found, kind, same)
    table.keys = dict(keyed.keys)
    counts = {c: len(keyed.keys[c]) for c in key_columns}
    too_many_keys(keyed, counts, memory_limit)
    for column in key_columns:
        if not counts[column] and not server.query(ANY_KEY.format(c=printer.quote_ident(column), query=query)):
            raise all_null(column)
    return table


# A row of the data whose key is not NULL (asked only where the load found no key: were they all NULL?)
ANY_KEY = 'SELECT 1 AS found FROM ({query}\n) AS pgad_data WHERE pgad_data.{c} IS NOT NULL LIMIT 1'


def too_many_keys(keyed, counts, memory_limit):
    """The error where the keyed weights' values at counts ({column: keys}) need more than memory_limit."""
    need = cost(keyed, counts)
    if memory_limit is not None and need > memory_limit:
        raise PgadError(loader.OUT_OF_MEMORY, f'the keyed weights need {loader.megabytes(need)}, more than '
                                              f'pgad.memory_limit ({loader.megabytes(memory_limit)})',
                        detail='Keys: ' + ', '.join(f'{c} {n}' for c, n in counts.items()) +
                               f'; {COPIES} copies of every value while the fit runs.',
                        hint='Use a smaller shape, group rare keys into one in the data query, or have a superuser '
                             'raise pgad.memory_limit.')


def all_null(column):
    return PgadError('22000', f'every row of the data has NULL in column "{column}", which the lambda reads',
                     hint='data must have at least one row to average the loss over.')


def read_keys(keyed, query, memory_limit):
    """Find each keyed column's keys in the data (its distinct values but NULL, in the type's order), one query a
    column, refusing past pgad.memory_limit: a column's keys are read only up to the most that the limit leaves
    room for (with every other column at one key), and one more says there are too many. Where the load is not
    native (load), after check."""
    columns = list(dict.fromkeys(keyed.column.values()))
    counts, rooms = {}, {}
    for column in columns:
        room = None
        if memory_limit is not None:
            alone = {c: 1 for c in columns}
            per_key = cost(keyed, {**alone, column: 2}) - cost(keyed, alone)
            room = max(1, (memory_limit - cost(keyed, alone)) // per_key + 1)
        keyed.keys[column] = [r['v'] for r in server.cursor(categorical.LEVELS.format(
            c=printer.quote_ident(column), query=query, limit='ALL' if room is None else room + 1), FETCH)]
        counts[column], rooms[column] = len(keyed.keys[column]), room
    need = cost(keyed, counts)
    if memory_limit is not None and need > memory_limit:
        raise PgadError(loader.OUT_OF_MEMORY, f'the keyed weights need {loader.megabytes(need)}, more than '
                                              f'pgad.memory_limit ({loader.megabytes(memory_limit)})',
                        detail='Keys: ' + ', '.join(f'{c} more than {rooms[c]}' if rooms[c] is not None and
                                                    n > rooms[c] else f'{c} {n}' for c, n in counts.items()) +
                               f'; {COPIES} copies of every value while the fit runs.',
                        hint='Use a smaller shape, group rare keys into one in the data query, or have a superuser '
                             'raise pgad.memory_limit.')
    for column in counts:
        if not keyed.keys[column]:
            raise all_null(column)
    return keyed


FETCH = 10_000  # keys fetched at once


def localised(lam, columns, as_columns=None):
    """lam with each read of a keyed weight, w.p[d.c] (columns: {weight: column}), made a weight p of the key's
    shape (the local lambda whose derivatives a row's key takes); as_columns (a prefix): made a column named the
    prefix and p, the key's value as a scoring function reads it. The keyed columns themselves are no longer read."""
    old = lam.graph.nodes

    def keyed_read(node, graph):
        if node.op != 'index' or old[node.args[0]].op != 'weight' or old[node.args[0]].value not in columns:
            return None
        name = old[node.args[0]].value
        return graph.weight(name) if as_columns is None else graph.column(as_columns + name)
    graph, values = lam.graph.rebuilt([lam.root], keyed_read)
    root = values[lam.root].id
    reads = graph.ancestors([root])
    given = {str(c): c for c in lam.columns}  # a boolean column stays one (parser.Column)
    return Lambda(lam.text, graph, root, lam.row, lam.params,
                  [given.get(c, c) for c in dict.fromkeys(graph.nodes[i].value for i in reads
                                                          if graph.nodes[i].op == 'column')],
                  [w for w in dict.fromkeys(graph.nodes[i].value for i in reads if graph.nodes[i].op == 'weight')])


def text_of(lam, max_chars):
    """The lambda text of a local lambda, as program.build takes it."""
    head = f'λ({printer.parameter(lam.row)}, {printer.parameter(lam.params)}) '
    return head + printer.to_lambda(lam, lam.root, max_chars)


@dataclass(frozen=True)
class Layout:
    """Where each weight sits in the vector the optimizers see: the global weights' elements (the local program's
    own order), then each keyed weight's K×size table, row-major."""
    names: tuple        # the local program's weights, in order: ('mu', 'p', 'q', …)
    shapes: dict        # name → a global weight's shape, or a keyed one's per-key shape
    keyed: dict         # keyed weight → (its column, K)
    spans: dict         # name → its slice of the vector

    @classmethod
    def of(cls, names, shapes, keyed_counts):
        spans, at = {}, 0
        for name in [n for n in names if n not in keyed_counts] + [n for n in names if n in keyed_counts]:
            size = math.prod(shapes[name]) * (keyed_counts[name][1] if name in keyed_counts else 1)
            spans[name] = slice(at, at + size)
            at += size
        return cls(tuple(names), dict(shapes), dict(keyed_counts), spans)

    @property
    def size(self):
        return max((s.stop for s in self.spans.values()), default=0)

    def table(self, w, name):
        """A keyed weight's K×size view of w."""
        return w[self.spans[name]].reshape(self.keyed[name][1], math.prod(self.shapes[name]))

    def name(self, k, keys=None):
        """The name of element k of the vector, as messages give it: 'mu', 'p[1]', 'p[u42][3]' (keys: {column: its
        keys}, else the key's code)."""
        for n, s in self.spans.items():
            if s.start <= k < s.stop:
                shape, at = self.shapes[n], k - s.start
                size = math.prod(shape)
                if n in self.keyed:
                    column = self.keyed[n][0]
                    key = keys[column][at // size] if keys else str(at // size + 1)
                    return f'{n}[{key}]' + (f'[{at % size + 1}]' if shape else '')
                return vectors.elements(n, shape)[at] if shape else n
        raise IndexError(k)

    def element_names(self, keys=None):
        """The elements' names, made one at a time where a message asks (a list of millions would be a copy of
        the weights many times over)."""
        return Named(self, keys)

    def nest(self, w):
        """{global weight: number or list} of w."""
        return {n: float(w[s][0]) if not self.shapes[n] else w[s].reshape(self.shapes[n]).tolist()
                for n, s in self.spans.items() if n not in self.keyed}


@dataclass(frozen=True)
class Ridge:
    """l2·Σ w² over the weights it names, by weight rather than by element (a mask the size of millions of keys'
    values would be one more copy of them): what sparse.py and blocks.py take for descent.Penalty."""
    l2: float
    scale: dict   # weight → 1.0 where the penalty takes it, 0.0 where not
    spans: dict   # weight → its slice of the vector (Layout.spans)
    l1 = 0.0

    def value(self, w):
        return float(self.l2 * sum(self.scale[n] * (w[s] @ w[s]) for n, s in self.spans.items())) if self.l2 else 0.0

    def add_gradient(self, g, w):
        """g plus 2·l2·w over the weights the penalty takes, in place."""
        for n, s in self.spans.items():
            if self.l2 and self.scale[n]:
                for at in range(s.start, s.stop, CHUNK):  # a chunk's temporary, not a weight's
                    end = min(at + CHUNK, s.stop)
                    g[at:end] += (2 * self.l2) * w[at:end]
        return g

    def dense(self, size):
        """The descent.Penalty of the dense optimizers, its mask a vector (for them, which keep more copies)."""
        from .models import descent
        mask = np.zeros(size)
        for n, s in self.spans.items():
            mask[s] = self.scale[n]
        return descent.Penalty(0.0, self.l2, mask)


CHUNK = 1 << 20  # the elements Ridge.add_gradient adds at once


class Named:
    """A sequence of a Layout's element names, each made when indexed."""

    def __init__(self, layout, keys):
        self.layout, self.keys = layout, keys

    def __len__(self):
        return self.layout.size

    def __getitem__(self, k):
        return self.layout.name(int(k), self.keys)


BLOCK_ROWS = 1 << 16  # rows evaluated at once: the local program's arrays alive stay small


class Kernel:
    """descent.fit's kernel over a keyed model: kernel(columns, rows, w) → [Σ loss, Σ ∂loss/∂w for each element
    of the Layout's vector]; columns are the local program's, then each keyed column's codes 1 … K. On the llvm
    backend each pass is a compiled gather-and-scatter kernel (jit/scatter.py: compiled), on the python backend the
    local program's plan over BLOCK_ROWS rows at a time, each derivative added at its keys by np.bincount."""

    def __init__(self, prog, layout, columns, backend='python', cache=None):
        """backend: 'python', 'llvm' (54001 where a pass is too large for it), 'cuda' (each pass a CUDA kernel:
        gpu/scatter.py; 54001 past its bound, 58000 without a GPU) or 'auto' (llvm where a pass compiles, python
        where not)."""
        self.prog, self.layout, self.columns = prog, layout, list(columns)
        self.plan = python_backend.named_plan(prog.graph, prog.outputs)
        self.targets = _targets(prog.weights, layout)
        self.backend, self.cache, self.kernels = backend, cache, {}
        self.loss_plan = None  # the python backend's plan of the loss alone, made at its first use
        self.code = {n: self.columns.index(c) for n, (c, _) in layout.keyed.items()}  # the loader's codes: the first
        self.keys = {self.code[n]: k for n, (_, k) in layout.keyed.items()}  # code column → its K

    def compiled(self, graph, outputs, targets, indexed=False, reads=()):
        """The llvm (jit/scatter.Scatter) or cuda (gpu/scatter.Scatter) backend's kernel of graph's outputs added at
        targets ((column, base, stride) each: scatter.Place), compiled once a Kernel; None on the python backend, and
        on 'auto' where no tier compiles it. reads: ((a leaf read from the other array, (column, base, stride)), …)."""
        key = (id(graph), tuple(outputs), tuple(targets), indexed, tuple(reads))

        def make(cache):
            from .jit import scatter
            places = [scatter.Place(c, b, s if c is not None else 0) for c, b, s in targets]
            leaves = {**self.reads(), **{e: scatter.Place(c, b, s, True) for e, (c, b, s) in reads}}
            if self.backend == 'cuda':  # the same loop as a CUDA kernel (gpu/scatter.py)
                from .gpu import scatter as on_gpu
                return on_gpu.compile(graph, outputs, leaves, places, [str(c) for c in self.columns], indexed)
            return scatter.compile(graph, outputs, leaves, places, [str(c) for c in self.columns], indexed, cache)
        return self._made(key, graph, outputs, make)

    def solver(self, graph, gradient, product, direction, own, indexed=False):
        """The llvm backend's compiled Newton step of a keyed group (jit/cg.Solver): graph's gradient and product
        outputs (its Hessian times the direction, whose leaves are named direction), own the group's code column;
        None on the python and cuda backends (blocks.py's conjugate gradients then run in numpy over the cuda
        kernel's passes), and on 'auto' where no tier compiles it."""
        if self.backend == 'cuda':
            return None

        def make(cache):
            from .jit import cg
            return cg.compile(graph, gradient, product, direction, self.reads(), own, [str(c) for c in self.columns],
                              indexed, cache)
        key = ('cg', id(graph), tuple(gradient), tuple(product), tuple(direction), own, indexed)
        return self._made(key, graph, product, make)

    def _made(self, key, graph, outputs, make):
        """The kernel make(disk cache) compiles, once a Kernel (kept by key), or None: on the python backend, and on
        'auto' where make gives None; 'llvm' raises 54001 there."""
        if self.backend == 'python':
            return None
        if key not in self.kernels:
            from .jit.cache import NONE
            made = make(self.cache or NONE)
            if made is None and self.backend == 'llvm':
                raise too_large_for_llvm(graph, outputs)
            self.kernels[key] = graph, made  # the graph kept alive: its id is in the key
        return self.kernels[key][1]

    def reads(self):
        """{weight element: its scatter.Place}: a global weight's element at its place, a keyed one's at its place
        in the key's row."""
        from .jit.scatter import Place
        places = {}
        for name in self.layout.names:
            size, span = math.prod(self.layout.shapes[name]), self.layout.spans[name]
            for j, e in enumerate(vectors.elements(name, self.layout.shapes[name])):
                column = self.code.get(name)
                places[e] = Place(column, span.start + j, size if column is not None else 0)
        return places

    def __call__(self, columns, rows, w):
        compiled = self.compiled(self.prog.graph, self.prog.outputs, self.places())
        if compiled is not None:
            return compiled(columns, rows, w, np.zeros(1 + self.layout.size), self.keys)
        out = np.zeros(1 + self.layout.size)
        for start in range(0, rows, BLOCK_ROWS):
            block = [c[start:start + BLOCK_ROWS] for c in columns]
            n = min(BLOCK_ROWS, rows - start)
            values, codes = self.values(block, n, w)
            out[0] += np.sum(python_backend.as_rows(values[self.prog.outputs[0]], n))
            for o, (name, j) in zip(self.prog.outputs[1:], self.targets):
                v = python_backend.as_rows(values[o], n)
                span = self.layout.spans[name]
                if name in self.layout.keyed:
                    size, count = math.prod(self.layout.shapes[name]) or 1, self.layout.keyed[name][1]
                    out[1 + span.start + j:1 + span.stop:size] += np.bincount(codes[name], weights=v,
                                                                              minlength=count)
                else:
                    out[1 + span.start + j] += np.sum(v)
        return out

    def places(self):
        """(column, base, stride) where the llvm kernel adds each output: the loss at 0, each derivative at 1 + its
        element's place."""
        return [(None, 0, 0)] + [(self.code.get(name), 1 + self.layout.spans[name].start + j,
                                  math.prod(self.layout.shapes[name])) for name, j in self.targets]

    def loss(self, columns, rows, w, poll=lambda: None):
        """Σ loss over the rows (no derivative), poll() called between blocks of rows."""
        compiled = self.compiled(self.prog.graph, self.prog.outputs[:1], [(None, 0, 0)])
        if compiled is not None:
            return float(compiled(columns, rows, w, np.zeros(1), self.keys)[0])
        if self.loss_plan is None:
            self.loss_plan = python_backend.named_plan(self.prog.graph, [self.prog.outputs[0]])
        plan = self.loss_plan
        total = 0.0
        for at in range(0, rows, BLOCK_ROWS):
            n = min(BLOCK_ROWS, rows - at)
            values, _ = self.values([c[at:at + n] for c in columns], n, w, plan)
            total += float(np.sum(python_backend.as_rows(values[self.prog.outputs[0]], n)))
            poll()
        return total

    def values(self, block, rows, w, plan=None, feed=None):
        """(the plan's values over these rows, {keyed weight: each row's 0-based key}): the global weights fed as
        numbers, each keyed one as its rows' keys' values, and what feed(the rows' keys) gives ({leaf: values})."""
        cols = dict(zip(self.columns, block))
        more, feed, codes = feed, {}, {}
        for name in self.layout.names:
            shape = self.layout.shapes[name]
            if name in self.layout.keyed:
                codes[name] = code = cols[self.layout.keyed[name][0]].astype(np.int64) - 1
                gathered = self.layout.table(w, name)[code]
                for j, e in enumerate(vectors.elements(name, shape)):
                    feed[e] = gathered[:, j]
            else:
                for j, e in enumerate(vectors.elements(name, shape)):
                    feed[e] = w[self.layout.spans[name].start + j]
        if more is not None:
            feed.update(more(codes))
        return python_backend.evaluate(plan or self.plan, cols, feed), codes


def too_large_for_llvm(graph, outputs):
    nodes = len(graph.ancestors(outputs))
    return PgadError('54001', f'keyed model is too large for the llvm backend: {nodes} nodes with its derivatives',
                     detail='A keyed model\'s kernel compiles without vectorisation, at most '
                            f'{max(t.max_nodes for t in _tiers())} nodes.',
                     hint="Use backend => 'python', or 'auto', which picks it for models this large.")


def _tiers():
    from .jit.tiers import TIERS
    return TIERS


def _targets(elements, layout):
    """(weight, element index within its per-key value) of each element the local program differentiates by."""
    where = {e: (name, j) for name in layout.names
             for j, e in enumerate(vectors.elements(name, layout.shapes[name]))}
    return [where[e] for e in elements]


def build(lam, keyed, shapes, limits, mode='reverse'):
    """(the local program, its Layout, the local lambda's text) of an objective lambda lam: shapes {global weight:
    its shape}. The keys must be known (keyed.keys); local_program builds the program without them."""
    prog, text, names = local_program(lam, keyed, shapes, limits, mode)
    return prog, layout(names, keyed, shapes), text


def local_program(lam, keyed, shapes, limits, mode='reverse'):
    """(the local program, the local lambda's text, its weights' names) of an objective lambda lam, which need not
    know the keys: the columns to load are the program's and the key columns."""
    local = localised(lam, keyed.column)
    names = tuple(local.weights)
    every = _shapes(names, keyed, shapes)
    dims = vectors.Shapes(tuple((n, every[n]) for n in names if every[n]))
    text = text_of(local, printer.budget(limits))
    return program.build(text, names, mode, True, limits, dims), text, names


def layout(names, keyed, shapes):
    """The Layout of the local program's weights (names: local_program's) once the keys are known."""
    counts = {n: (keyed.column[n], keyed.count(n)) for n in keyed.specs if n in names}
    return Layout.of(names, _shapes(names, keyed, shapes), counts)


def _shapes(names, keyed, shapes):
    """{weight: its shape, a keyed one's per key} of the local lambda's weights (names)."""
    return {**{n: shapes.get(n, ()) for n in names if n not in keyed.specs},
            **{n: s.shape for n, s in keyed.specs.items()}}
