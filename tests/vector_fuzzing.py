"""A crash fuzzer for vector lambdas: random lambdas of vectors and matrices at random shapes, up to the limits, run
by every kernel — both modes, the llvm and python backends, every tape — on random rows. Errors are fine; a crash is
not: the kernels run on the caller's stack and in its process (a backend's, in the server), and one bad kernel kills
every session.

Used by tests/test_crash_fuzz.py (a sample in `make test`) and bench/fuzz.py --vectors (`make fuzz`). Input i of a
run is `generate(seed, i)` anywhere: a crash is printed with its seed and index.

The inputs. generate() writes a lambda from a typed grammar — each expression built for a shape, (), (n,) or
(m, n): weights w.v5 and w.m3x7 (their shape in their name), float8[] columns d.c5 (length 5), number columns d.x1
d.x2 d.i, literals [a, b, …], @, outer, transpose, dot, sum, logsumexp, softmax, v[i] (now and then an index from
the data, which may be out of range), elementwise functions and operators with broadcasting — whose sizes are
mostly small and now and then large (up to MAX_SIZE: tapes of megabytes, outer products of long columns); a
random mode, backend and tape (reverse mode's four tapes on llvm; forward mode and python on 'auto'); and data sets
of random rows (1, or around a tile of 32) whose numbers include 0, ±inf, NaN and ±1e308.

run_forked() runs a batch of inputs in a forked child, which reports each input before it starts it: a child that
dies by a signal names the input that killed it.
"""
import faulthandler
import json
import os
import random
import select
import signal
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

import pgad.lang  # noqa: F401  (binds pgad.lang)
from pgad import backends, program
from pgad.jit import compiler  # loaded once, before the children fork: a run tests one version of the code
from pgad.errors import PgadError
from pgad.lang import vectors

COMBOS = [('reverse', 'llvm', 'auto'), ('reverse', 'llvm', 'store'), ('reverse', 'llvm', 'recompute'),
          ('reverse', 'llvm', 'reversible'), ('forward', 'llvm', 'auto'), ('reverse', 'python', 'auto'),
          ('forward', 'python', 'auto')]
WEIGHTS = [2, 2, 2, 2, 1, 1, 1]  # how often each: the llvm kernels, which run on the caller's stack, the most
LARGE = 0.15          # the lambdas whose sizes are half of them large
MAX_SIZE = 320        # the longest vector or column, a matrix's largest side (the tape: 110 × 110)
MAX_ELEMENTS = 40_000  # the most elements of one matrix (pgad.max_lambda_nodes is 100,000 unrolled)
EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e308, 5e-324, 745.2, -745.2]
ROWS = [1, 2, 5, 31, 32, 33, 65]


@dataclass
class Input:
    text: str
    weights: dict            # name → shape
    columns: dict            # array column name → length
    mode: str
    backend: str
    tape: str
    seed: object = None
    i: int = 0


def _size(r):
    """A vector's length or a matrix's side: mostly small, now and then large (a lambda of the large profile: half
    of them large)."""
    pick = r.random()
    if getattr(r, 'large', False) and pick < 0.5:
        return r.randint(65, MAX_SIZE)
    if pick < 0.78:
        return r.randint(1, 6)
    if pick < 0.95:
        return r.randint(7, 64)
    return r.randint(65, MAX_SIZE)


class _Writer:
    """The typed grammar: expression(shape, depth) writes an expression of that shape."""

    def __init__(self, r):
        self.r, self.weights, self.columns = r, {}, {}

    def weight(self, shape):
        name = 'a' if not shape else f'v{shape[0]}' if len(shape) == 1 else f'm{shape[0]}x{shape[1]}'
        self.weights[name] = shape
        return f'w.{name}'

    def column(self, n):
        self.columns[f'c{n}'] = n
        return f'd.c{n}'

    def index(self, n):
        r = self.r
        pick = r.random()
        if pick < 0.7:
            return str(r.randint(1, n))
        if pick < 0.9:
            return 'd.i + 1'
        return r.choice(['0', str(n + 1), 'd.x1', '-1'])

    def expression(self, shape, depth):
        r = self.r
        if depth <= 0:
            return self.leaf(shape)
        kind = ['scalar', 'vector', 'matrix'][len(shape)]
        return getattr(self, kind)(shape, depth - 1)

    def leaf(self, shape):
        r = self.r
        if not shape:
            return r.choice(['w.a', 'd.x1', 'd.x2', '0.5', '2', '1e-3', self.weight(())])
        if len(shape) == 1 and r.random() < 0.5:
            return self.column(shape[0])
        return self.weight(shape)

    def elementwise(self, shape, depth):
        r = self.r
        pick = r.randrange(4)
        if pick == 0:
            return f'{r.choice(["tanh", "sigmoid", "exp", "ln", "sin", "relu", "softplus", "abs", "sqrt"])}(' \
                   f'{self.expression(shape, depth)})'
        if pick == 1:
            return f'({self.expression(shape, depth)} {r.choice("+-*/")} {self.expression(shape, depth)})'
        if pick == 2:  # broadcasting a number
            a, b = self.expression(shape, depth), self.expression((), depth)
            return f'({a} {r.choice("+-*")} {b})' if r.random() < 0.5 else f'({b} * {a})'
        return f'-{self.expression(shape, depth)}' if r.random() < 0.5 else f'({self.expression(shape, depth)})^2'

    def scalar(self, shape, depth):
        r = self.r
        pick = r.randrange(9)
        if pick == 0:
            n = _size(r)
            return f'sum({self.expression((n,), depth)})'
        if pick == 1:
            n = _size(r)
            return f'dot({self.expression((n,), depth)}, {self.expression((n,), depth)})'
        if pick == 2:
            n = _size(r)
            return f'logsumexp({self.expression((n,), depth)})'
        if pick == 3:
            n = _size(r)
            return f'{self.expression((n,), depth)}[{self.index(n)}]'
        if pick == 4:
            n = _size(r)
            return f'({self.expression((n,), depth)} @ {self.expression((n,), depth)})'
        if pick == 5:
            m, n = _size(r), _size(r)
            if m * n > MAX_ELEMENTS:
                return self.leaf(())
            return f'sum({self.expression((m, n), depth)})'
        if pick == 6:
            n = _size(r)
            return f'softmax({self.expression((n,), depth)})[{self.index(n)}]'
        return self.elementwise(shape, depth)

    def vector(self, shape, depth):
        r, n = self.r, shape[0]
        pick = r.randrange(8)
        if pick == 0 and n <= 8:
            return '[' + ', '.join(self.expression((), depth - 1) for _ in range(n)) + ']'
        if pick == 1:
            k = _size(r)
            if n * k <= MAX_ELEMENTS:
                return f'({self.expression((n, k), depth)} @ {self.expression((k,), depth)})'
        if pick == 2:
            k = _size(r)
            if n * k <= MAX_ELEMENTS:
                return f'({self.expression((k,), depth)} @ {self.expression((k, n), depth)})'
        if pick == 3:
            return f'softmax({self.expression((n,), depth)})'
        if pick == 4:
            k = _size(r)
            if n * k <= MAX_ELEMENTS:
                return f'{self.expression((k, n), depth)}[{self.index(k)}]'
        if pick in (5, 6, 7):
            return self.elementwise(shape, depth)
        return self.leaf(shape)

    def matrix(self, shape, depth):
        r, (m, n) = self.r, shape
        pick = r.randrange(6)
        if pick == 0:
            return f'outer({self.expression((m,), depth)}, {self.expression((n,), depth)})'
        if pick == 1:
            return f'transpose({self.expression((n, m), depth)})'
        if pick == 2:
            k = _size(r)
            if k * max(m, n) <= MAX_ELEMENTS:
                return f'({self.expression((m, k), depth)} @ {self.expression((k, n), depth)})'
        if pick == 3 and m <= 4:
            return '[' + ', '.join(self.expression((n,), depth - 1) for _ in range(m)) + ']'
        if pick in (4, 5):
            return self.elementwise(shape, depth)
        return self.leaf(shape)


def generate(seed, i):
    """Input i of seed's run: a random vector lambda (its loss a number), its weights' and columns' shapes, and a
    mode, a backend and a tape."""
    r = random.Random(f'vector:{seed}:{i}')
    r.large = r.random() < LARGE
    writer = _Writer(r)
    if r.large and r.random() < 0.6:  # a large matrix summed: the tapes of megabytes (the outer product)
        shape = (r.randint(40, 200), r.randint(40, 200))
        text = f'λ(d, w) sum({writer.expression(shape, r.randint(1, 3))})'
    else:
        text = 'λ(d, w) ' + writer.expression((), r.randint(1, 3 if r.large else 5))
    mode, backend, tape = r.choices(COMBOS, WEIGHTS)[0]
    return Input(text, dict(sorted(writer.weights.items())), dict(sorted(writer.columns.items())), mode, backend, tape,
                 seed, i)


def data(inp, draw):
    """One data set for inp: (rows, {column name: its values, an array column's rows × length}), and the weights'
    values, flat; draw is 0, 1, 2 — a plain one, one with edges, one around a tile."""
    r = np.random.default_rng(abs(hash((str(inp.seed), inp.i, draw))) % (1 << 32))
    rows = [int(r.integers(1, 8)), int(r.choice(ROWS)), int(r.choice([31, 32, 33, 64, 65]))][draw]

    def numbers(*shape):
        values = r.uniform(-2, 2, shape)
        if draw == 1:
            mask = r.random(shape) < 0.05
            values[mask] = r.choice(EDGES, mask.sum())
        return values
    columns = {'x1': numbers(rows), 'x2': numbers(rows),
               'i': r.integers(-1, 4, rows).astype(np.float64) + (0.5 * (r.random(rows) < 0.05))}
    columns.update({name: numbers(rows, n) for name, n in inp.columns.items()})
    weights = {name: numbers(*shape) for name, shape in inp.weights.items()}
    return rows, columns, weights


@dataclass
class Outcome:
    ran: int = 0                                   # data sets the kernel ran on
    state: str = ''                                # the SQLSTATE it was refused with, or '' where it ran
    exception: str = ''                            # another exception's name and message (a bug, not a crash)
    seconds: float = 0.0
    kind: str = ''                                 # the kernel the program got ('unrolled', 'store', …)


def run(inp, draws=3):
    """Build and compile inp's program, and run its kernel on `draws` data sets: the Outcome."""
    started, out = time.perf_counter(), Outcome()
    try:
        prog = program.build(inp.text, tuple(inp.weights), inp.mode, True, shapes=vectors.Shapes(
            tuple((k, s) for k, s in inp.weights.items() if s), tuple(inp.columns.items())), tape=inp.tape)
        if inp.backend == 'llvm':
            out.kind = compiler.form(prog)
        kernel = backends.compile(prog, inp.backend)
        elements = dict(prog.columns_of)
        for draw in range(draws):
            rows, columns, weights = data(inp, draw)
            arrays = [columns[elements[c][0]][:, elements[c][1] - 1] if c in elements else columns[c]
                      for c in prog.columns]
            with np.errstate(all='ignore'):
                kernel(arrays, rows, np.concatenate([np.ravel(weights[k]) for k in inp.weights] or [np.zeros(0)]))
            out.ran += 1
    except PgadError as e:
        out.state = e.sqlstate
    except Exception as e:  # noqa: BLE001 — reported, not raised: the fuzzer goes on
        out.exception = f'{type(e).__name__}: {e}'[:300] + '\n' + traceback.format_exc()[-600:]
    out.seconds = time.perf_counter() - started
    return out


def run_forked(seed, indices, timeout=120.0, runner=None):
    """Run inputs `indices` of seed's run in a forked child (runner(input) → Outcome: run): ({index: Outcome as a
    dict}, the crash — (index, signal name) of the input the child died on by a signal, or None — and the indices
    not run because of it)."""
    runner = runner or run
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one line a started input, one a finished one
        os.close(reader)
        faulthandler.disable()  # a crash is the parent's to report (pytest's faulthandler would print a traceback)
        status = 0
        try:
            with os.fdopen(writer, 'w', buffering=1) as out:
                for i in indices:
                    out.write(json.dumps({'start': i}) + '\n')
                    out.write(json.dumps({'done': i, **runner(generate(seed, i)).__dict__}) + '\n')
        except BaseException:  # noqa: BLE001
            status = 1
        os._exit(status)
    os.close(writer)
    outcomes, started, buffer, last, killed = {}, None, b'', time.monotonic(), False
    with os.fdopen(reader, 'rb', buffering=0) as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], 1.0)
            if ready:
                chunk = pipe.read(65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b'\n')
                for line in lines:
                    item = json.loads(line)
                    if 'start' in item:
                        started = item['start']
                    else:
                        i = item.pop('done')
                        outcomes[i] = item
                        started = None
                last = time.monotonic()
            elif time.monotonic() - last > timeout and not killed:  # an input that runs too long: a hang
                os.kill(pid, signal.SIGKILL)
                killed = True
    _, status = os.waitpid(pid, 0)
    crash = None
    if status != 0:  # the input it was on, else the first it did not finish
        at = started if started is not None else next((i for i in indices if i not in outcomes), None)
        how = ('timeout' if killed else signal.Signals(os.WTERMSIG(status)).name) if os.WIFSIGNALED(status) else \
            f'exit status {os.WEXITSTATUS(status)}'
        crash = None if at is None else (at, how)
    left = [i for i in indices if i not in outcomes and (crash is None or i != crash[0])]
    return outcomes, crash, left


def fuzz(seed, count, batch=100, start=0, progress=None, runner=None):
    """Inputs start … start+count-1 of seed's run, batch by batch in forked children (a batch cut short by a crash
    goes on in a new child after the input that crashed): (outcomes, crashes)."""
    outcomes, crashes = {}, []
    pending = list(range(start, start + count))
    while pending:
        chunk, pending = pending[:batch], pending[batch:]
        while chunk:
            done, crash, chunk = run_forked(seed, chunk, runner=runner)
            outcomes.update(done)
            if crash is not None:
                crashes.append(crash)
        if progress is not None:
            progress(outcomes, crashes)
    return outcomes, crashes


# --- through SQL ---------------------------------------------------------------------------------------------------

def sql_data(inp):
    """A data query for inp over table vfuzz (x1, x2, i, k: the row number): each array column of its length."""
    arrays = ''.join(f', ARRAY(SELECT pg_catalog.sin(f.x1 OPERATOR(pg_catalog.*) g) FROM pg_catalog.generate_series(1, '
                     f'{n}) AS g) AS {name}' for name, n in inp.columns.items())
    return f'SELECT f.x1, f.x2, f.i{arrays} FROM vfuzz AS f'


SETUP_SQL = ('CREATE TABLE IF NOT EXISTS vfuzz AS SELECT pg_catalog.sin(k::float8) AS x1, pg_catalog.cos(k::float8) '
             'AS x2, (k % 4 - 1)::float8 AS i FROM pg_catalog.generate_series(1, 33) AS k')


def sql_weights(inp):
    r = np.random.default_rng(inp.i)
    return json.dumps({name: r.uniform(-1, 1, shape).tolist() if shape else float(r.uniform(-1, 1))
                       for name, shape in inp.weights.items()})


def through_sql(conn, inp):
    """inp through pgad.gradient (its mode, backend and tape) and pgad.loss: the SQLSTATEs of the errors, and
    'connection lost' where the backend died."""
    import psycopg
    states = []
    # the rows made once, into a table: the arrays as stored values (a query's ARRAY(…) would run at each element)
    conn.execute('DROP TABLE IF EXISTS pg_temp.vfuzz_input')
    conn.execute(f'CREATE TEMP TABLE vfuzz_input AS {sql_data(inp)}')
    rows = 'SELECT * FROM pg_temp.vfuzz_input'
    for sql, params in [('SELECT pgad.gradient(%s, %s, %s::jsonb, %s, %s, tape => %s)',
                         (inp.text, rows, sql_weights(inp), inp.mode, inp.backend, inp.tape)),
                        ('SELECT pgad.loss(%s, %s, %s::jsonb)', (inp.text, rows, sql_weights(inp)))]:
        try:
            conn.execute(sql, params).fetchall()
        except psycopg.Error as e:
            if conn.broken or conn.closed:
                return states + ['connection lost']
            states.append(e.diag.sqlstate or 'no SQLSTATE')
    return states


def crashes_in_log(path, offset=0):
    """The lines of the server log at path, from byte offset on, that tell of a backend killed by a signal."""
    if not path or not os.path.exists(path):
        return []
    with open(path, 'rb') as f:
        f.seek(offset)
        text = f.read().decode('utf-8', 'replace')
    return [line for line in text.splitlines() if 'terminated by signal' in line or 'was terminated' in line]
