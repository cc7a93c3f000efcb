"""Data → numpy: the columns a lambda reads, loaded once per call with no per-row Python.

The data argument is a query (SELECT, VALUES, WITH, TABLE; a trailing semicolon is dropped) or the name of a table
or view; it runs with the caller's privileges, snapshot and search_path (it is the caller's text). One aggregate
query turns the rows into bytes,
    string_agg(float8send(x::float8) || float8send(y::float8), ''::bytea)
(every name in it schema-qualified, as in all SQL pgad builds: docs/security.md), and np.frombuffer reads them as
big-endian float8, row after row. That one aggregate is the fast path (a row costs about three times what a plain
scan does); when its result would pass PostgreSQL's 1 GB limit on a value, the rows are numbered and aggregated a
chunk at a time instead, each chunk 256 MB, or pgad.load_chunk_rows rows when that setting is set (tests set it to
force tiny chunks; a DEBUG2 message says how many parts the load took). Rows with NULL in a column the lambda reads
are skipped, and a NOTICE says how many.
"""
import re
import string
from dataclasses import dataclass

import numpy as np

from . import server
from .errors import PgadError
from .lang.printer import quote_ident

NUMERIC_TYPES = {21: 'smallint', 23: 'integer', 20: 'bigint', 700: 'real', 701: 'double precision',
                 1700: 'numeric'}
QUERY_START = re.compile(r'\s*(\(|select\b|values\b|with\b|table\b)', re.IGNORECASE)
TRAILING = string.whitespace + ';'  # dropped from the end of a query (str.rstrip: linear, unlike a regex)
CHUNK_BYTES = 256 << 20
TOO_LONG = '54000'  # program_limit_exceeded: a bytea past 1 GB
# The rows loaded are the bytes over 8 per column: counting b as well would compute b twice (the planner pulls
# the subquery up and copies its expression into each aggregate).
AGGREGATE = ("SELECT pg_catalog.string_agg(b, ''::pg_catalog.bytea) AS bytes, pg_catalog.count(*) AS total "
             "FROM ({}) AS pgad_rows")
SEND = 'pg_catalog.float8send(pgad_data.{}::pg_catalog.float8)'
CONCAT = ' OPERATOR(pg_catalog.||) '
NUMBERED = ('SELECT b, (pg_catalog.row_number() OVER () OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog./) {} AS chunk '
            'FROM ({}) AS pgad_rows')


@dataclass
class Table:
    columns: list   # one contiguous float64 array per column, in the order asked for
    rows: int       # rows loaded (rows with NULL in a read column are not)
    skipped: int    # rows skipped for NULL


def load(data, columns, chunk_rows=0):
    """Load `columns` (names, exactly as the data spells them) of the data into a Table; chunk_rows, when not 0,
    loads it that many rows at a time (pgad.load_chunk_rows)."""
    query = as_query(data)
    check_columns(query, columns)
    if not columns:
        rows = server.query(f'SELECT pg_catalog.count(*) AS rows FROM ({query}\n) AS pgad_data')[0]['rows']
        return Table([], rows, 0)
    row_bytes = CONCAT.join(SEND.format(quote_ident(c)) for c in columns)
    rows_sql = f'SELECT {row_bytes} AS b FROM ({query}\n) AS pgad_data'
    parts = None if chunk_rows else server.rows_unless(AGGREGATE.format(rows_sql), TOO_LONG)
    if parts is None:  # a chunk at a time, each one bytea well under 1 GB
        chunk = chunk_rows or CHUNK_BYTES // (8 * len(columns))
        parts = list(server.cursor(AGGREGATE.format(NUMBERED.format(chunk, rows_sql)) + ' GROUP BY chunk'))
    arrays = [np.frombuffer(part['bytes'], dtype='>f8') for part in parts if part['bytes'] is not None]
    total = sum(part['total'] for part in parts)
    flat = arrays[0] if len(arrays) == 1 else np.concatenate(arrays) if arrays else np.empty(0, dtype='>f8')
    rows = len(flat) // len(columns)
    server.debug(f'pgad: loaded {rows} rows of {len(columns)} columns in {len(parts)} part{"s" * (len(parts) != 1)}')
    if total > rows:
        server.notice(f'skipped {total - rows} of {total} rows with NULL in ' +
                      ', '.join(quote_ident(c) for c in columns))
    matrix = flat.reshape(rows, len(columns))
    return Table([np.ascontiguousarray(matrix[:, k], dtype=np.float64) for k in range(len(columns))], rows,
                 total - rows)


# The schema-qualified name of the relation a name (resolved on the caller's search_path) stands for.
RELATION = ('SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) \'.\' OPERATOR(pg_catalog.||) '
            'pg_catalog.quote_ident(c.relname) AS relation FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace '
            'AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace '
            'WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)')


def as_query(data):
    """The data argument as a query: itself if it is one, else SELECT * FROM the named table or view."""
    if QUERY_START.match(data):
        return data.rstrip(TRAILING)
    hint = 'data is a query (SELECT, VALUES, WITH or TABLE) or the name of a table or view.'
    try:
        found = server.query(RELATION, [data], ['pg_catalog.text'])
    except server.SPIError as e:  # not even a name: "DELETE FROM t", "x y"
        if server.interrupted(e):
            raise
        raise PgadError('42601', 'data is neither a query nor the name of a table or view',
                        detail=f'The data: {data}', hint=hint) from None
    if not found:
        raise PgadError('42P01', f'relation "{data}" does not exist', hint=hint)
    return f'SELECT * FROM {found[0]["relation"]}'


def check_columns(query, columns):
    """Every column the lambda reads must be in the data, once, and numeric."""
    try:
        names, types = server.describe(f'SELECT * FROM ({query}\n) AS pgad_data')
    except server.SPIError as e:  # the data query's own error, with the query shown
        if server.interrupted(e):
            raise
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
            type_name = server.query('SELECT pg_catalog.format_type($1, NULL::pg_catalog.int4) AS t', [oid],
                                     ['pg_catalog.oid'])[0]['t']
            raise PgadError('42804', f'column "{name}" is of type {type_name}, not a number',
                            hint=f'Cast it in the data query, for example SELECT {quote_ident(name)}::float8 AS '
                                 f'{quote_ident(name)} …, or use a numeric column (smallint to float8, numeric).')
