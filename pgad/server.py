"""Everything that talks to the PostgreSQL backend through PL/Python's plpy, in one place.

Queries, cursors, NOTICEs, interrupt checks, and the `entry` decorator that turns a PgadError into a
PostgreSQL ERROR with its SQLSTATE, DETAIL and HINT. plpy exists only inside the server, so it is imported
when first used: the rest of pgad imports and tests without a server.
"""
import functools

from .errors import PgadError


def plpy():
    import plpy
    return plpy


def __getattr__(name):
    """server.SPIError is plpy.SPIError, the error of a query the server ran (PEP 562: looked up when used)."""
    if name == 'SPIError':
        return plpy().SPIError
    raise AttributeError(name)


def entry(function):
    """A function the SQL shims call: a PgadError leaves it as a PostgreSQL ERROR, and nothing has changed."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except PgadError as e:
            error = e
        p = plpy()
        fields = {k: v for k, v in (('detail', error.detail), ('hint', error.hint)) if v}
        p.error(error.message, sqlstate=error.sqlstate, **fields)
    return call


def query(sql, args=(), types=()):
    p = plpy()
    return p.execute(p.prepare(sql, list(types)), list(args)) if types else p.execute(sql)


def cursor(sql, batch=1):
    """The rows of sql, fetched `batch` at a time (a single SELECT only: a cursor refuses anything else)."""
    rows = plpy().cursor(sql)
    while True:
        part = rows.fetch(batch)
        if not part:
            return
        yield from part


def rows_unless(sql, sqlstate):
    """The rows of sql, or None if it fails with sqlstate (in a subtransaction, so the failure leaves no trace)."""
    p = plpy()
    try:
        with p.subtransaction():
            return list(cursor(sql))
    except p.SPIError as e:
        if e.sqlstate == sqlstate:
            return None
        raise


def describe(sql):
    """(column names, column type oids) of a single SELECT, which runs with LIMIT 0: no rows are read."""
    p = plpy()
    p.cursor(sql + ' LIMIT 0').close()  # a cursor opens for one SELECT only: a second statement stops here
    result = p.execute(sql + ' LIMIT 0')
    return result.colnames(), result.coltypes()


_check = None


def check_interrupts():
    """Let the server act on statement_timeout and pg_cancel_backend: any SPI call checks for interrupts."""
    global _check
    p = plpy()
    if _check is None:
        _check = p.prepare('SELECT')
    p.execute(_check)


def notice(message):
    plpy().notice(message)
