"""Everything that talks to the PostgreSQL backend through PL/Python's plpy, in one place.

Queries, cursors, NOTICEs and WARNINGs, interrupt checks, pgad's settings, and the `entry` decorator that turns a
PgadError into a PostgreSQL ERROR with its SQLSTATE, DETAIL and HINT, and the lambda and the place it points to as
its internal query and position. plpy exists only inside the server, so it is imported when first used: the rest of
pgad imports and tests without a server.

Every SQL text here and in the stages that call these functions names what it uses schema-qualified
(pg_catalog.count, OPERATOR(pg_catalog.||), pg_catalog.text), so that nothing on the caller's search_path can stand
in for it: pgad runs as whoever calls it, superusers included (docs/security.md).
"""
import ctypes
import functools
import os
import warnings

from . import limits
from .errors import Caret, Interrupted, PgadError
from .jit import targets, threads

INTERRUPTED = '57'  # operator intervention: a cancel, a statement_timeout, a shutdown; never reported as another
# numpy's floating-point RuntimeWarnings ('overflow encountered in multiply'): the NaN or infinity they warn of is
# pgad's to report, as an ERROR that names the expression or a value it handles; never a WARNING in numpy's words
NUMPY_FLOATING = r'(overflow|underflow|invalid value|divide by zero) encountered'


def plpy():
    import plpy
    return plpy


def __getattr__(name):
    """server.SPIError is plpy.SPIError, the error of a query the server ran (PEP 562: looked up when used)."""
    if name == 'SPIError':
        return plpy().SPIError
    raise AttributeError(name)


def entry(function):
    """A function the SQL shims call: a PgadError leaves it as a PostgreSQL ERROR, and nothing has changed; Python
    warnings raised on the way (warnings.warn) are PostgreSQL WARNINGs, but numpy's floating-point ones
    (NUMPY_FLOATING); limits.tick() checks for interrupts.

    An error of the server's (from_server: the data query's own, a cancel) leaves with its own SQLSTATE. Any
    other Python exception is a bug in pgad: it leaves as `internal error in pgad` (XX000, PostgreSQL's
    internal_error) with the exception in DETAIL, so that the user sees no Python exception name as the message and
    has something to report; running out of memory is PostgreSQL's `out of memory` (53200)."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        outer = limits.on_interrupts(check_interrupts)  # a pgad call inside another's data query gives it back
        outer_count = threads.on_count(thread_count, debug)
        outer_target = targets.on_name(llvm_target)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            warnings.filterwarnings('ignore', NUMPY_FLOATING, RuntimeWarning)
            try:
                return function(*args, **kwargs)
            except (PgadError, Interrupted) as e:
                error = e
            except Exception as e:  # noqa: BLE001 (every other exception: reported, never as its Python name)
                if from_server(e):
                    raise
                error = unexpected(e, function.__name__)
            finally:
                limits.on_interrupts(outer)
                threads.on_count(*outer_count)
                targets.on_name(outer_target)
                for warning in caught:
                    plpy().warning(str(warning.message))
        detail = error.detail
        if error.query is not None and error_query(error.query, error.position) and isinstance(detail, Caret):
            detail = None  # the client draws the line and the caret from the internal query
        fields = {k: v for k, v in (('detail', detail), ('hint', error.hint)) if v}
        message, sqlstate = error.message, error.sqlstate
        # the error's traceback holds this frame, which holds the error: a cycle, which would keep every frame under
        # it — the call's loaded columns among their locals — until Python's cycle collector ran; broken here, they
        # are freed as the error leaves
        del error
        plpy().error(message, sqlstate=sqlstate, **fields)
    return call


def error_query(text, position):
    """Leave text and position (1-based, in characters) for the ERROR raised next, as its internal query and position
    (pgad.so's pgad_error_query; plpy.error cannot set them): True when they will go with it, False outside the
    server, where the DETAIL keeps the line and its caret."""
    library = native()
    return library is not None and library.pgad_error_query(text.encode(), position) == 1


def from_server(exception):
    """Is this the server's own error, raised through PL/Python: a query's (plpy.SPIError), or one that a plpy call
    such as plpy.notice met (plpy.Error: a cancel that lands while a NOTICE is sent)? It keeps its SQLSTATE."""
    p = plpy()
    return isinstance(exception, (p.SPIError, p.Error, getattr(p, 'Fatal', p.Error)))


def unexpected(exception, where):
    """The PgadError that a Python exception other than a PgadError becomes when it leaves pgad.<where>."""
    detail = f'{type(exception).__name__} in pgad.{where}: {exception}'[:MESSAGE_BYTES]
    if isinstance(exception, MemoryError):
        return PgadError('53200', 'out of memory', detail=detail,
                         hint='Train on fewer rows or a smaller lambda, or lower pgad.memory_limit so that pgad '
                              'refuses such data before loading it.')
    return PgadError('XX000', 'internal error in pgad', detail=detail,
                     hint='This is a bug in pgad: please report it with the call that raised it.')


def warning(message, hint=None, detail=None):
    """A WARNING, with its HINT and DETAIL, sent at once (a Python warning, warnings.warn, reaches the client as the
    call ends, without a HINT)."""
    plpy().warning(message, **({'hint': hint} if hint else {}), **({'detail': detail} if detail else {}))


def hint_of(error):
    """The HINT of a server error that PL/Python raised: plpy.SPIError keeps it in .spidata, (sqlerrcode, detail,
    hint, query, position, …)."""
    spidata = getattr(error, 'spidata', None) or ()
    return spidata[2] if len(spidata) > 2 else None


def position_of(error):
    """The place (1-based, in characters) in its query of a server error that PL/Python raised, or None: a syntax
    error's, which a query run by SPI gives as its internal position (.spidata[4])."""
    spidata = getattr(error, 'spidata', None) or ()
    return spidata[4] if len(spidata) > 4 and spidata[4] else None


def spi_error(sqlerrcode, message, detail=None, hint=None):
    """The exception plpy.execute raises for a server error (sqlerrcode: PostgreSQL's packed SQLSTATE), for an error
    that pgad.so caught running a query itself (the native load): plpy.spiexceptions' class of its SQLSTATE, with
    .sqlstate, and DETAIL and HINT in .spidata, which PL/Python re-raises with them."""
    p = plpy()
    sqlstate = ''.join(chr(((sqlerrcode >> 6 * k) & 0x3F) + ord('0')) for k in range(5))
    if not _spi_classes:
        _spi_classes.update({getattr(c, 'sqlstate', None): c for c in vars(p.spiexceptions).values()
                             if isinstance(c, type) and issubclass(c, p.SPIError)})
    error = _spi_classes.get(sqlstate, p.SPIError)(message)
    error.sqlstate = sqlstate
    error.spidata = (sqlerrcode, detail, hint, None, 0, None, None, None, None, None)
    return error


_spi_classes = {}


def interrupted(error):
    """Is this server error a cancel, a timeout or a shutdown, to be passed on as it is?"""
    return (getattr(error, 'sqlstate', None) or '').startswith(INTERRUPTED)


SETTINGS = ('max_lambda_bytes', 'max_lambda_nodes', 'cache_directory', 'cache_size', 'load_chunk_rows', 'memory_limit',
            'threads', 'max_threads', 'llvm_target')
MEMORY_UNITS = {'': 1, 'B': 1, 'kB': 1 << 10, 'MB': 1 << 20, 'GB': 1 << 30, 'TB': 1 << 40}


def settings():
    """pgad's settings (extension/module.c defines them), by name without 'pgad.', as SHOW shows them."""
    library = native()
    if library is not None:
        return {name: library.pgad_setting(f'pgad.{name}'.encode()).decode() for name in SETTINGS}
    row = query('SELECT ' + ', '.join(f"pg_catalog.current_setting('pgad.{name}') AS {name}" for name in SETTINGS))
    return dict(row[0])


def llvm_target():
    """The target the llvm backend compiles for (jit/targets.py): pgad.llvm_target as the call sees it."""
    return settings()['llvm_target']


def thread_count():
    """The threads a kernel call may use: pgad.threads, or where it is 0 (automatic) max_parallel_workers_per_gather + 1
    capped by the cores this process may run on; never more than pgad.max_threads."""
    s = settings()
    wanted = int(s['threads'])
    if wanted == 0:
        library = native()
        workers = (library.pgad_setting(b'max_parallel_workers_per_gather').decode() if library is not None else
                   query("SELECT pg_catalog.current_setting('max_parallel_workers_per_gather') AS v")[0]['v'])
        wanted = min(int(workers) + 1, len(os.sched_getaffinity(0)))
    return max(1, min(wanted, int(s['max_threads'])))


_native = []


def native():
    """pgad.so's functions for Python (extension/module.c, call.c and reads.c), found among the backend's global
    symbols; None outside the server (the in-process tests), where queries stand in for them, and in a backend that
    has not loaded pgad.so yet (a superuser calling an implementation directly): not remembered, so a later call
    finds it."""
    if not _native:
        library = ctypes.PyDLL(None)
        try:
            library.pgad_setting.restype, library.pgad_setting.argtypes = ctypes.c_char_p, [ctypes.c_char_p]
            library.pgad_check_interrupts.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
            library.pgad_error_query.argtypes = [ctypes.c_char_p, ctypes.c_int]
            library.pgad_reads.argtypes = [ctypes.POINTER(ctypes.c_uint32), ctypes.c_int]
        except AttributeError:
            return None
        _native.append(library)
    return _native[0]


def in_bytes(setting):
    """A memory setting as SHOW shows it ('1MB', '512kB', '100B') in bytes."""
    number = setting.rstrip('kMGTB')
    return int(number) * MEMORY_UNITS[setting[len(number):]]


def query(sql, args=(), types=()):
    p = plpy()
    return p.execute(p.prepare(sql, list(types)), list(args)) if types else p.execute(sql)


_kept = {}
KEPT_PLANS = 64


def repeated(sql, args, types):
    """query for a statement run many times a call (a sharded training's rounds): its plan is prepared once per
    session and kept (PostgreSQL replans it if what it names changes, or the search_path)."""
    p = plpy()
    key = (sql, tuple(types))
    if key not in _kept:
        if len(_kept) >= KEPT_PLANS:
            _kept.clear()
        _kept[key] = p.prepare(sql, list(types))
    return p.execute(_kept[key], list(args))


def cursor(sql, batch=1):
    """The rows of sql, fetched `batch` at a time (a single SELECT only: a cursor refuses anything else)."""
    rows = plpy().cursor(sql)
    while True:
        part = rows.fetch(batch)
        if not part:
            return
        yield from part


def rows_unless(sql, sqlstate):
    """The rows of sql, or None if it fails with sqlstate (in a subtransaction, so the failure leaves no trace).
    Not through a cursor: PostgreSQL plans a cursor's query without parallel workers."""
    p = plpy()
    try:
        with p.subtransaction():
            return list(p.execute(sql))
    except p.SPIError as e:
        if e.sqlstate == sqlstate:
            return None
        raise


def subtransaction():
    """A subtransaction (a context manager): an exception that leaves it rolls back what was done in it."""
    return plpy().subtransaction()


def describe(sql):
    """(column names, column type oids) of a single SELECT, which runs with LIMIT 0: no rows are read."""
    p = plpy()
    p.cursor(sql + ' LIMIT 0').close()  # a cursor opens for one SELECT only: a second statement stops here
    result = p.execute(sql + ' LIMIT 0')
    return result.colnames(), result.coltypes()


_check = None
MESSAGE_BYTES = 1000


def check_interrupts():
    """Let the server act on statement_timeout and pg_cancel_backend: its error, if one is pending, is raised as
    Interrupted (through pgad.so, which needs no query and so works in parallel mode; outside the server any SPI
    call checks)."""
    global _check
    library = native()
    if library is not None:
        sqlstate, message = ctypes.create_string_buffer(6), ctypes.create_string_buffer(MESSAGE_BYTES)
        if library.pgad_check_interrupts(sqlstate, message, MESSAGE_BYTES):
            raise Interrupted(sqlstate.value.decode(), message.value.decode(errors='replace'))
        return
    p = plpy()
    if _check is None:
        _check = p.prepare('SELECT')
    p.execute(_check)


def notice(message):
    plpy().notice(message)


def debug(message):
    plpy().debug(message)

