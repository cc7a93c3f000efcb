"""Data → numpy: the columns a lambda reads, loaded once per call with no per-row Python.

The data argument is a query (SELECT, VALUES, WITH, TABLE) or the name of a table or view; it runs with the
caller's privileges and snapshot. One aggregate query turns the rows into bytes,
    string_agg(float8send(x::float8) || float8send(y::float8), ''::bytea)
and np.frombuffer reads them as big-endian float8, row after row. That one aggregate is the fast path (a row
costs about three times what a plain scan does); when its result would pass PostgreSQL's 1 GB limit on a value,
the rows are numbered and aggregated a chunk at a time instead, each chunk 256 MB, or pgad.load_chunk_rows rows
when that setting is set (tests set it to force tiny chunks).
Rows with NULL in a column the lambda reads are skipped, and a NOTICE says how many.
"""
import re
from dataclasses import dataclass

import numpy as np

from . import server
from .errors import PgadError
from .lang.printer import quote_ident

NUMERIC_TYPES = {21: 'smallint', 23: 'integer', 20: 'bigint', 700: 'real', 701: 'double precision',
                 1700: 'numeric'}
QUERY_START = re.compile(r'\s*(\(|select\b|values\b|with\b|table\b)', re.IGNORECASE)
CHUNK_BYTES = 256 << 20
TOO_LONG = '54000'  # program_limit_exceeded: a bytea past 1 GB
# The rows loaded are the bytes over 8 per column: counting b as well would compute b twice (the planner pulls
# the subquery up and copies its expression into each aggregate).
AGGREGATE = "SELECT string_agg(b, ''::bytea) AS bytes, count(*) AS total FROM ({}) AS pgad_rows"


@dataclass
class Table:
    columns: list   # one contiguous float64 array per column, in the order asked for
    rows: int       # rows loaded (rows with NULL in a read column are not)
    skipped: int    # rows skipped for NULL


def load(data, columns):
    """Load `columns` (names, exactly as the data spells them) of the data into a Table."""
    query = as_query(data)
    check_columns(query, columns)
    if not columns:
        rows = server.query(f'SELECT count(*) AS rows FROM ({query}\n) AS pgad_data')[0]['rows']
        return Table([], rows, 0)
    row_bytes = ' || '.join(f'float8send(pgad_data.{quote_ident(c)}::float8)' for c in columns)
    rows_sql = f'SELECT {row_bytes} AS b FROM ({query}\n) AS pgad_data'
    chunk = chunk_rows()
    parts = None if chunk else server.rows_unless(AGGREGATE.format(rows_sql), TOO_LONG)
    if parts is None:  # a chunk at a time, each one bytea well under 1 GB
        chunk = chunk or CHUNK_BYTES // (8 * len(columns))
        parts = list(server.cursor(AGGREGATE.format(f'SELECT b, (row_number() OVER () - 1) / {chunk} AS chunk '
                                                    f'FROM ({rows_sql}) AS pgad_rows') + ' GROUP BY chunk'))
    arrays = [np.frombuffer(part['bytes'], dtype='>f8') for part in parts if part['bytes'] is not None]
    total = sum(part['total'] for part in parts)
    flat = arrays[0] if len(arrays) == 1 else np.concatenate(arrays) if arrays else np.empty(0, dtype='>f8')
    rows = len(flat) // len(columns)
    if total > rows:
        server.notice(f'skipped {total - rows} of {total} rows with NULL in ' +
                      ', '.join(quote_ident(c) for c in columns))
    matrix = flat.reshape(rows, len(columns))
    return Table([np.ascontiguousarray(matrix[:, k], dtype=np.float64) for k in range(len(columns))], rows,
                 total - rows)


def as_query(data):
    """The data argument as a query: itself if it is one, else SELECT * FROM the named table or view."""
    if QUERY_START.match(data):
        return data
    hint = 'data is a query (SELECT, VALUES, WITH or TABLE) or the name of a table or view.'
    try:
        relation = server.query('SELECT to_regclass($1)::text AS relation', [data], ['text'])[0]['relation']
    except server.SPIError:  # not even a name: "DELETE FROM t", "x y"
        raise PgadError('42601', 'data is neither a query nor the name of a table or view',
                        detail=f'The data: {data}', hint=hint) from None
    if relation is None:
        raise PgadError('42P01', f'relation "{data}" does not exist', hint=hint)
    return f'SELECT * FROM {relation}'


def check_columns(query, columns):
    """Every column the lambda reads must be in the data, once, and numeric."""
    try:
        names, types = server.describe(f'SELECT * FROM ({query}\n) AS pgad_data')
    except server.SPIError as e:  # the data query's own error, with the query shown
        raise PgadError(e.sqlstate or '42601', e.args[0] if e.args else str(e), detail=f'The data query: {query}',
                        hint=getattr(e, 'hint', None)) from None
    for name in columns:
        if name not in names:
            raise PgadError('42703', f'column "{name}" does not exist in the data',
                            detail='The data has columns: ' + ', '.join(quote_ident(n) for n in names) + '.',
                            hint='Column names fold to lower case; write d."Name" for a mixed-case column.'
                            if name.lower() in [n.lower() for n in names] else None)
        oid = types[names.index(name)]
        if oid not in NUMERIC_TYPES:
            type_name = server.query('SELECT format_type($1, NULL) AS t', [oid], ['oid'])[0]['t']
            raise PgadError('42804', f'column "{name}" is of type {type_name}, not a number',
                            hint=f'Cast it in the data query, for example SELECT {quote_ident(name)}::float8 AS '
                                 f'{quote_ident(name)} …, or use a numeric column (smallint to float8, numeric).')


def chunk_rows():
    """pgad.load_chunk_rows, if set: load the data that many rows at a time."""
    setting = server.query("SELECT current_setting('pgad.load_chunk_rows', true) AS rows")[0]['rows']
    if not setting:
        return None
    try:
        value = int(setting)
    except ValueError:
        raise PgadError('22023', f'pgad.load_chunk_rows must be a whole number, not "{setting}"') from None
    if value < 1:
        raise PgadError('22023', f'pgad.load_chunk_rows must be 1 or more, not {value}')
    return value
