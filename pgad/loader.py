"""Data → numpy: the columns a lambda reads, loaded once per call with no per-row Python.

The data argument is a query (SELECT, VALUES, WITH, TABLE; a trailing semicolon is dropped) or the name of a table
or view; it runs with the caller's privileges, snapshot and search_path (it is the caller's text). One aggregate
query packs the rows with pgad's native aggregate (extension/pgad.c),
    SELECT pgad.pack(c0, c1) FROM (SELECT x::float8 AS c0, y::float8 AS c1 FROM (<data>) AS pgad_data) AS pgad_rows
(every name in it schema-qualified, as in all SQL pgad builds: docs/security.md), which skips and counts the rows
with a NULL and gives a bytea: a header, then each column's values as native float8, which numpy reads in place.
PostgreSQL may run it in parallel workers. That one aggregate is the fast path; when its result would pass
PostgreSQL's 1 GB limit on a value (SQLSTATE 54000), the rows are numbered and packed a chunk at a time instead,
each chunk 256 MB, or pgad.load_chunk_rows rows when that setting is set (tests set it to force tiny chunks; a
DEBUG2 message says how many parts the load took). A function takes at most 100 arguments, so a lambda reading
more than 99 columns packs them in several aggregates over the rows with no NULL. Rows with NULL in a column the
lambda reads are skipped, and a NOTICE says how many.

pgad.memory_limit bounds what a call holds: its rows times its columns times 8 bytes, COPIES times over (measured:
docs/security.md). pgad.pack stops the query at the row that passes it (SQLSTATE 53200, extension/pgad.c), before
its state grows; the loader then counts the rows the data has, with no NULL in the columns read, and reports how
much the whole data would need. A lambda reading more than 99 columns, whose several aggregates each see only their
own columns, counts the rows first.
"""
import re
import string
import struct
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
OUT_OF_MEMORY = '53200'  # pgad.pack past pgad.memory_limit
COPIES = 4          # how many times over a call holds its packed rows at most: extension/pgad.c's PACK_COPIES
PACK_COLUMNS = 99   # a function's arguments (100) less the aggregate's state
# pgad.pack's bytea: magic "PGPK", columns, rows packed, rows skipped for a NULL; then the columns, native float8.
HEADER = struct.Struct('=IIqq')
MAGIC = 0x4b504750
ROWS = 'SELECT {} FROM ({}\n) AS pgad_data'
VALUE = 'pgad_data.{}::pg_catalog.float8 AS c{}'
NUMBERED = ('SELECT *, (pg_catalog.row_number() OVER () OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog./) {} '
            'AS pgad_chunk FROM ({}) AS pgad_rows')


@dataclass
class Table:
    columns: list   # one contiguous float64 array per column, in the order asked for
    rows: int       # rows loaded (rows with NULL in a read column are not)
    skipped: int    # rows skipped for NULL


def load(data, columns, chunk_rows=0, memory_limit=None):
    """Load `columns` (names, exactly as the data spells them) of the data into a Table; chunk_rows, when not 0,
    loads it that many rows at a time (pgad.load_chunk_rows); memory_limit (bytes, pgad.memory_limit) bounds it."""
    query = as_query(data)
    check_columns(query, columns)
    if not columns:
        rows = server.query(f'SELECT pg_catalog.count(*) AS rows FROM ({query}\n) AS pgad_data')[0]['rows']
        return Table([], rows, 0)
    if len(columns) > PACK_COLUMNS:
        check_memory(memory_limit, query, columns)
    rows_sql = ROWS.format(', '.join(VALUE.format(quote_ident(c), k) for k, c in enumerate(columns)), query)
    packs = aggregate(len(columns))
    try:
        parts = None if chunk_rows else server.rows_unless(f'SELECT {packs} FROM ({rows_sql}) AS pgad_rows',
                                                           TOO_LONG)
        if parts is None:  # a chunk at a time, each one bytea well under 1 GB
            chunk = chunk_rows or CHUNK_BYTES // (8 * len(columns))
            parts = list(server.cursor(f'SELECT {packs} FROM ({NUMBERED.format(chunk, rows_sql)}) AS pgad_rows '
                                       'GROUP BY pgad_rows.pgad_chunk'))
    except server.SPIError as e:
        if e.sqlstate == OUT_OF_MEMORY:
            check_memory(memory_limit, query, columns)
        raise  # not pgad.pack's limit, or the data fits after all (it changed since): the error as it is
    loaded = [unpack(part, len(columns)) for part in parts]
    rows, skipped = sum(part[1] for part in loaded), sum(part[2] for part in loaded)
    server.debug(f'pgad: loaded {rows} rows of {len(columns)} columns in {len(parts)} part{"s" * (len(parts) != 1)}')
    if len(loaded) == 1:
        return skipping(Table(loaded[0][0], rows, skipped), columns)
    return skipping(Table([np.concatenate([np.empty(0)] + [part[0][k] for part in loaded])
                           for k in range(len(columns))], rows, skipped), columns)


@dataclass
class Group:
    key: str        # the group's key as a jsonb text, {"region": "north"}: what pgad.models stores
    values: list    # each group column's value as to_jsonb writes it ('"north"', '2020'), None for NULL
    table: Table


GROUPED = ('SELECT {keys} AS pgad_key, {values}, {packs} FROM (SELECT {groups}, {columns} FROM ({query}\n) AS pgad_data) '
           'AS pgad_rows GROUP BY {by} ORDER BY {by}')
# The schema-qualified name of a type, and its category (A: array, C: composite, P: pseudo-type).
TYPE = ('SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) \'.\' OPERATOR(pg_catalog.||) '
        'pg_catalog.quote_ident(t.typname) AS name, t.typcategory AS category FROM pg_catalog.pg_type AS t '
        'JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace '
        'WHERE t.oid OPERATOR(pg_catalog.=) $1')


def load_groups(data, columns, group_by, memory_limit=None):
    """(the group columns' type names, one Group per distinct value of the group_by columns, in their order): the
    data loaded once, by one GROUP BY query whose every group packs its own rows with pgad.pack; memory_limit
    (bytes) bounds all the groups together."""
    query = as_query(data)
    names, types = check_columns(query, columns)
    if len(columns) > PACK_COLUMNS:
        check_memory(memory_limit, query, columns)
    group_types = []
    for name in group_by:
        if name not in names:
            raise PgadError('42703', f'column "{name}" of group_by does not exist in the data',
                            detail='The data has columns: ' + ', '.join(quote_ident(n) for n in names) + '.')
        found = server.query(TYPE, [types[names.index(name)]], ['pg_catalog.oid'])[0]
        if found['category'] in ('A', 'C', 'P'):
            raise PgadError('0A000', f'column "{name}" of group_by is of type {found["name"]}: pgad groups by '
                                     'scalar columns only', hint='Group by a column of a scalar type (text, an integer, '
                                                                 'a date, …), or cast it in the data query.')
        group_types.append(found['name'])
    sql = GROUPED.format(
        keys='pg_catalog.jsonb_build_object(' + ', '.join(f'${k + 1}::pg_catalog.text, pgad_rows.g{k}'
                                                         for k in range(len(group_by))) + ')::pg_catalog.text',
        values=', '.join(f'pg_catalog.to_jsonb(pgad_rows.g{k})::pg_catalog.text AS g{k}' for k in range(len(group_by))),
        packs=aggregate(len(columns)) if columns else 'pg_catalog.count(*) AS total', query=query,
        groups=', '.join(f'pgad_data.{quote_ident(g)} AS g{k}' for k, g in enumerate(group_by)),
        columns=', '.join([VALUE.format(quote_ident(c), k) for k, c in enumerate(columns)] or ['0 AS pgad_none']),
        by=', '.join(f'pgad_rows.g{k}' for k in range(len(group_by))))
    try:
        parts = server.query(sql, list(group_by), ['pg_catalog.text'] * len(group_by))
    except server.SPIError as e:
        if e.sqlstate == OUT_OF_MEMORY:
            check_memory(memory_limit, query, columns)
        if e.sqlstate != TOO_LONG:
            raise
        raise PgadError(TOO_LONG, 'a group of the data is too large to load: its columns pass 1 GB packed',
                        hint='Group by more columns, or train on fewer rows.') from None
    groups = []
    for part in parts:
        if columns:
            values, rows, skipped = unpack(part, len(columns))
        else:
            values, rows, skipped = [], part['total'], 0
        groups.append(Group(part['pgad_key'], [part[f'g{k}'] for k in range(len(group_by))],
                            skipping(Table(values, rows, skipped), columns)))
    return group_types, groups


COMPLETE = 'SELECT pg_catalog.count(*) AS rows FROM ({}\n) AS pgad_data WHERE ROW({}) IS NOT NULL'


def count(query, columns):
    """The rows of the data that have no NULL in the columns: those a load packs."""
    names = ', '.join(f'pgad_data.{quote_ident(c)}' for c in columns)
    return server.query(COMPLETE.format(query, names))[0]['rows']


def megabytes(size):
    """'2.5 MB', '640 MB': a size in bytes as the memory limit's messages give it (as extension/pgad.c does)."""
    mb = size / (1 << 20)
    return f'{mb:.1f} MB' if mb < 10 else f'{mb:.0f} MB'


def check_memory(memory_limit, query, columns):
    """The error if the data's rows (count) of `columns` need more than memory_limit bytes, COPIES times over;
    nothing when memory_limit is None (no limit)."""
    if memory_limit is None:
        return
    rows = count(query, columns)
    needed = rows * len(columns) * 8 * COPIES
    if needed > memory_limit:
        raise PgadError(OUT_OF_MEMORY, f'the data needs {megabytes(needed)}, more than pgad.memory_limit '
                                       f'({megabytes(memory_limit)})',
                        detail=f'{rows} rows of {len(columns)} columns, 8 bytes a value, held up to {COPIES} times '
                               'over while the call loads and trains.',
                        hint='Train on a sample of the data (TABLESAMPLE, WHERE or LIMIT in its query), or have a '
                             'superuser raise pgad.memory_limit.')


def skipping(table, columns):
    """The table, after a NOTICE of the rows it skipped for a NULL in the columns (if any)."""
    if table.skipped:
        server.notice(f'skipped {table.skipped} of {table.rows + table.skipped} rows with NULL in ' +
                      ', '.join(quote_ident(c) for c in columns))
    return table


def aggregate(count):
    """The select list that packs columns c0 … c{count - 1}: pgad.pack of them all; past PACK_COLUMNS, one
    pgad.pack per PACK_COLUMNS over the rows with no NULL, and the count of all rows."""
    names = [f'pgad_rows.c{k}' for k in range(count)]
    if count <= PACK_COLUMNS:
        return f'pgad.pack({", ".join(names)}) AS p0'
    complete = f' FILTER (WHERE ROW({", ".join(names)}) IS NOT NULL)'
    return ', '.join([f'pgad.pack({", ".join(names[k:k + PACK_COLUMNS])}){complete} AS p{k // PACK_COLUMNS}'
                      for k in range(0, count, PACK_COLUMNS)] + ['pg_catalog.count(*) AS total'])


def unpack(part, count):
    """(count columns, rows, rows skipped) of one row of the aggregate: numpy views of pgad.pack's bytes."""
    columns, rows, skipped = [], None, 0
    for k in range(0, count, PACK_COLUMNS):
        values, n, skipped = read(part[f'p{k // PACK_COLUMNS}'], min(PACK_COLUMNS, count - k))
        if rows not in (None, n):
            raise PgadError('XX000', 'pgad.pack returned a malformed result',
                            detail=f'{n} rows in one part and {rows} in another.')
        columns, rows = columns + values, n
    if 'total' in part:
        skipped = part['total'] - rows
    return columns, rows, skipped


def read(packed, width):
    """(width columns, rows, rows skipped) of one pgad.pack bytea, or of None (no row at all)."""
    if packed is None:
        return [np.empty(0)] * width, 0, 0
    magic, stored, n, skipped = HEADER.unpack_from(packed)
    if magic != MAGIC or stored != width or len(packed) != HEADER.size + 8 * width * n:
        raise PgadError('XX000', 'pgad.pack returned a malformed result',
                        detail=f'{len(packed)} bytes, header {(magic, stored, n, skipped)}, for {width} columns.')
    flat = np.frombuffer(packed, dtype=np.float64, count=width * n, offset=HEADER.size)
    return [flat[j * n:(j + 1) * n] for j in range(width)], n, skipped


# The schema-qualified name of the relation a name (resolved on the caller's search_path) stands for.
RELATION = ('SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) \'.\' OPERATOR(pg_catalog.||) '
            'pg_catalog.quote_ident(c.relname) AS relation FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace '
            'AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace '
            'WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)')


def as_query(data):
    """The data argument as a query: itself if it is one, else SELECT * FROM the named table or view."""
    if QUERY_START.match(data):
        return data.rstrip(TRAILING)
    return f'SELECT * FROM {relation(data)}'


def relation(data):
    """The schema-qualified, quoted name of the table or view a data argument that is no query names."""
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
    return found[0]['relation']


def check_columns(query, columns):
    """The data's (column names, type oids); every column the lambda reads must be in it, and numeric."""
    try:
        names, types = server.describe(f'SELECT * FROM ({query}\n) AS pgad_data')
    except server.SPIError as e:  # the data query's own error, with the query shown
        if server.interrupted(e):
            raise
        raise PgadError(e.sqlstate or '42601', e.args[0] if e.args else str(e), detail=f'The data query: {query}',
                        hint=server.hint_of(e)) from None
    used = {names.index(c) for c in columns if c in names}  # only these need a type name looked up
    positions(columns, names, [NUMERIC_TYPES.get(oid) or (type_name(oid) if k in used else '')
                               for k, oid in enumerate(types)])
    return names, types


def type_name(oid):
    return server.query('SELECT pg_catalog.format_type($1, NULL::pg_catalog.int4) AS t', [oid],
                        ['pg_catalog.oid'])[0]['t']


def positions(columns, names, types):
    """The position in names of each column the lambda reads (names and types: the data's columns, and the names
    of their types), or the error for the first that is not there or not a number."""
    found = []
    for name in columns:
        if name not in names:
            raise PgadError('42703', f'column "{name}" does not exist in the data',
                            detail='The data has columns: ' + ', '.join(quote_ident(n) for n in names) + '.',
                            hint='Column names fold to lower case; write d."Name" for a mixed-case column.'
                            if name.lower() in [n.lower() for n in names] else None)
        found.append(names.index(name))
        if types[found[-1]] not in NUMERIC_TYPES.values():
            raise PgadError('42804', f'column "{name}" is of type {types[found[-1]]}, not a number',
                            hint=f'Cast it in the data query, for example SELECT {quote_ident(name)}::float8 AS '
                                 f'{quote_ident(name)} …, or use a numeric column (smallint to float8, numeric).')
    return found


def packed(data, names, columns):
    """A Table of `columns` from the bytes an aggregate packed (pgad.pack's form) of the data's columns `names`."""
    rows, skipped = HEADER.unpack_from(data)[2:]
    if rows == 0:  # no row packed; with no row read at all, no column either
        return skipping(Table([np.empty(0) for _ in columns], 0, skipped), columns)
    values, rows, skipped = read(data, len(names))
    return skipping(Table([values[names.index(c)] for c in columns], rows, skipped), columns)
