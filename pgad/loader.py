"""Data → numpy: the columns a lambda reads, loaded once per call with no per-row Python.

The data argument is a query (SELECT, VALUES, WITH, TABLE; a trailing semicolon is dropped, and one ending a first
statement before a second is an error of its own, check_columns) or the name of a table or view; it runs with the
caller's privileges, snapshot and search_path (it is the caller's text). One query reads the rows,
    SELECT x::pg_catalog.float8 AS c0, y::pg_catalog.float8 AS c1 FROM (<data>) AS pgad_data
(every name in it schema-qualified, as in all SQL pgad builds: docs/security.md), run by pgad.so's native load
(load_natively; extension/load.c): a DestReceiver appends each row's values as native float8 to one mapped
array per column, which numpy wraps without a copy; rows with NULL in a column the lambda reads are skipped, and a
NOTICE says how many. Its plan is serial (PARALLEL; measured: docs/design.md).

Without pgad.so (the in-process tests), with pgad.load_chunk_rows set, and for load_groups, the rows are packed by
pgad's native aggregate instead, SELECT pgad.pack(c0, c1) FROM (<the query above>) AS pgad_rows, which gives a
bytea: a header, then each column's values as native float8, which numpy reads in place. PostgreSQL may run it in
parallel workers. When its result would pass PostgreSQL's 1 GB limit on a value (SQLSTATE 54000), the rows are
numbered and packed a chunk at a time instead, each chunk 256 MB, or pgad.load_chunk_rows rows when that setting is
set (tests set it to force tiny chunks; a DEBUG2 message says how many parts the load took, 1 for a native load). A
function takes at most 100 arguments, so a lambda reading more than 99 columns packs them in several aggregates over
the rows with no NULL.

A column the lambda reads as a boolean (CASE WHEN d.flag …: parser.Column.boolean) must be boolean in the data, and
is loaded as 1 (true) or 0 (false), flag::int4::float8; a column the lambda reads as a number must be numeric, except
the label of loss 'logistic' (objective.Label), which may be boolean and is then loaded as one is. A named loss's
label that is no number (objective.NumberLabel) gets a label's error and hint, not a feature's.

A key column (keys: a keyed weight's, keyed.py) is read natively as pgad_data.user::pg_catalog.text, and pgad.so
looks each row's text up in a hash of the column's keys (extension/keys.c), a new key getting the next code 1, 2, …
in the order the rows show it: the keys are found in the load's own pass, and the Table's keys give each key column's
keys in code order (a key only in rows skipped for a NULL elsewhere is none). Where the load is not native, they are
read first, one query a column (LEVELS, in the type's order), and coded as a categorical column is.

A float8[] column (or an array of any numeric type) that the lambda reads is a vector: lengths() reads its length
from the data first (every row's must be the same, and a row that differs is an error that names it), and the
load reads its elements as columns of their own: the native load takes them from pgad_data.pixels::float8[] in C,
the aggregate by pgad._element(pgad_data.pixels, 1, 64, 'pixels') … (pgad_data.pixels, 64, 64, 'pixels'), element 1
… 64 of arrays of 64. A NULL array or a NULL element skips the row, as a NULL number does. The data query may give
other rows each time it runs (random(), a sequence), so both check every array they read against the length the
lambda was built for, in C (extension/element.c, load.c): a subscript, (pgad_data.pixels)[3], would read the
wrong element of an array that starts at index 0, cut a longer one short, and skip a row whose array is shorter,
2-D or empty, all silently.

pgad.memory_limit bounds what a call holds: its rows times its columns times 8 bytes, COPIES times over (measured:
docs/security.md). The native load and pgad.pack stop the query at the row that passes it (SQLSTATE 53200,
extension/pack.c), before anything grows; the loader then counts the rows the data has, with no NULL in the columns
read, and reports how much the whole data would need. A lambda reading more than 99 columns, whose several
aggregates each see only their own columns, counts the rows first on the aggregate's path.
"""
import ctypes
import json
import re
import string
import struct
import weakref
from dataclasses import dataclass, field

import numpy as np

from . import server
from .errors import Caret, PgadError
from .lang.parser import Column
from .lang.printer import identifier, quote_ident, quote_literal

NUMERIC_TYPES = {21: 'smallint', 23: 'integer', 20: 'bigint', 700: 'real', 701: 'double precision',
                 1700: 'numeric'}
BOOLEAN = 'boolean'
BOOLEAN_OID = 16
KNOWN_TYPES = {**NUMERIC_TYPES, BOOLEAN_OID: BOOLEAN}  # the type names positions() needs, without asking the server
ARRAY_TYPES = {1005: 'smallint[]', 1007: 'integer[]', 1016: 'bigint[]', 1021: 'real[]', 1022: 'double precision[]',
               1231: 'numeric[]'}
ARRAY_SUBSCRIPT_ERROR = '2202E'
# Per array column: its shortest and longest arrays, most dimensions, lowest and highest lower bound.
EXTENT = ('pg_catalog.min(pg_catalog.cardinality({c})) AS lo{k}, pg_catalog.max(pg_catalog.cardinality({c})) AS hi{k}, '
          'pg_catalog.max(pg_catalog.array_ndims({c})) AS nd{k}, pg_catalog.min(pg_catalog.array_lower({c}, 1)) AS lb{k}, '
          'pg_catalog.max(pg_catalog.array_lower({c}, 1)) AS ub{k}')
# The first row (in the data's order) whose array in the column is empty, or not one-dimensional from 1 of length $1
# (an empty array has no dimensions: its array_ndims and array_lower are NULL).
ODD_ROW = ('SELECT pgad_rows.n, pgad_rows.len, pgad_rows.nd, pgad_rows.lb FROM (SELECT pg_catalog.row_number() OVER () '
           'AS n, pg_catalog.cardinality({c}) AS len, pg_catalog.array_ndims({c}) AS nd, pg_catalog.array_lower({c}, 1) '
           'AS lb FROM ({query}\n) AS pgad_data) AS pgad_rows WHERE pgad_rows.len IS NOT NULL AND (pgad_rows.len '
           'OPERATOR(pg_catalog.=) 0 OR pgad_rows.len OPERATOR(pg_catalog.<>) $1 OR pgad_rows.nd '
           'OPERATOR(pg_catalog.<>) 1 OR pgad_rows.lb OPERATOR(pg_catalog.<>) 1) ORDER BY pgad_rows.n LIMIT 1')
QUERY_START = re.compile(r'\s*(\(|select\b|values\b|with\b|table\b)', re.IGNORECASE)
TRAILING = string.whitespace + ';'  # dropped from the end of a query (str.rstrip: linear, unlike a regex)
CHUNK_BYTES = 256 << 20
TOO_LONG = '54000'  # program_limit_exceeded: a bytea past 1 GB
OUT_OF_MEMORY = '53200'  # pgad.pack past pgad.memory_limit
COPIES = 4          # how many times over a call holds its packed rows at most: extension/pgad.h's PACK_COPIES
PACK_COLUMNS = 99   # a function's arguments (100) less the aggregate's state
# pgad.pack's bytea: magic "PGPK", columns, rows packed, rows skipped for a NULL; then the columns, native float8.
HEADER = struct.Struct('=IIqq')
MAGIC = 0x4b504750
ROWS = 'SELECT {} FROM ({}\n) AS pgad_data'
VALUE = '{}::pg_catalog.float8 AS c{}'
NUMBERED = ('SELECT *, (pg_catalog.row_number() OVER () OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog./) {} '
            'AS pgad_chunk FROM ({}) AS pgad_rows')


@dataclass
class Table:
    columns: list       # one contiguous float64 array per column, in the order asked for
    rows: int           # rows loaded (rows with NULL in a read column are not)
    skipped: int        # rows skipped for NULL
    keys: dict = None   # a load with keys: {key column: its keys (str), code k's at k - 1}
    names: list = None  # the columns' names, where a caller keeps them (categorical.preload)
    ordered: set = field(default_factory=set)  # the key columns whose codes are their keys' in order (categorical)
    groups: list = None  # a preload with group columns: each one's (type, base type) names (categorical.grouped)


def some_rows(table):
    """table, unless it has no row: then the error (none at all, or every one skipped for a NULL)."""
    if table.rows == 0:
        raise no_rows(table)
    return table


def no_rows(table):
    return PgadError('22000', 'the data has no rows' if not table.skipped else
                     f'every row of the data has NULL in a column the lambda reads ({table.skipped} rows)',
                     hint='data must have at least one row to average the loss over.')


def load(data, columns, chunk_rows=0, memory_limit=None, elements=None, categories=None, unseen=False, packed=False,
         missing=(), keys=(), nullable=(), quiet=False):
    """Load `columns` (names, exactly as the data spells them) of the data into a Table: natively where pgad.so is
    there (load_natively), else, or with packed (the tests compare the two), with pgad.pack; chunk_rows, when not
    0, packs it that many rows at a time (pgad.load_chunk_rows); memory_limit (bytes, pgad.memory_limit) bounds it.
    elements maps the name of an array column's element ('pixels[3]', a Program's columns_of) to (column, index);
    categories a categorical column to its categories, loaded as each row's code 1 … K (category_code; a value
    not among them skips the row, or with unseen, is code 0); a column in missing (imputed: models/preprocess.py)
    is loaded with −NaN (NaN with its sign bit set) for NULL, its rows not skipped; a NaN of the data's as NaN. keys
    names key columns among columns, of any type (the caller checks theirs, as it bounds their count where the load
    is not native): each loaded as its keys' codes, 1 … K, the keys in the Table's keys; a key column in nullable
    (natively only: a group column, categorical.grouped) has its rows' text as NULLABLE_KEY writes it, '' for NULL,
    and a NULL there skips no row. quiet: no NOTICE of the rows skipped for a NULL (the caller gives one a group)."""
    query = as_query(data)
    elements = elements or {}
    categories = categories or {}
    keys = list(dict.fromkeys(keys))
    for column in keys:
        if column not in columns or column in categories or column in elements or column in missing:
            raise ValueError(f'key column {column!r}: not a plain column of the load')
    if set(nullable) - set(keys):
        raise ValueError('a nullable key column is a key column')
    names, types = check_columns(query, _read(columns, elements), {c for c, _ in elements.values()},
                                 set(categories) | set(keys))
    columns = typed(columns, names, types)
    if not columns:
        rows = server.query(f'SELECT pg_catalog.count(*) AS rows FROM ({query}\n) AS pgad_data')[0]['rows']
        return Table([], rows, 0)
    library = None if chunk_rows or packed else native_loader()
    if library is None and nullable:
        raise ValueError('nullable key columns are read by the native load only')
    if library is None and keys:  # the keys first, by a query a column, then coded as categories are
        categories = {**categories, **{c: [r['v'] for r in server.cursor(LEVELS.format(
            c=quote_ident(c), query=query, limit='ALL'), KEYS_FETCHED)] for c in keys}}
    if library is not None:
        try:
            table = load_natively(library, query, columns, elements, categories, unseen, missing, keys, nullable)
        except server.SPIError as e:
            if e.sqlstate == OUT_OF_MEMORY and not str(e.args[0] if e.args else '').startswith(KEYS_OVER_LIMIT):
                check_memory(memory_limit, query, [c for c in columns if c not in nullable], elements)
            raise
        server.debug(f'pgad: loaded {table.rows} rows of {len(columns)} columns in 1 part')
        return table if quiet else skipping(table, [c for c in columns if c not in missing], query, elements)
    if len(columns) > PACK_COLUMNS:
        check_memory(memory_limit, query, columns, elements)
    widths = array_lengths(elements)
    rows_sql = ROWS.format(', '.join(VALUE.format(value(c, elements, categories, unseen, widths, missing), k)
                                     for k, c in enumerate(columns)),
                           query)
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
            check_memory(memory_limit, query, columns, elements)
        raise  # not pgad.pack's limit, or the data fits after all (it changed since): the error as it is
    loaded = [unpack(part, len(columns)) for part in parts]
    rows, skipped = sum(part[1] for part in loaded), sum(part[2] for part in loaded)
    server.debug(f'pgad: loaded {rows} rows of {len(columns)} columns in {len(parts)} part{"s" * (len(parts) != 1)}')
    kept = [c for c in columns if c not in missing]  # the columns whose NULL skips a row
    found = {c: categories[c] for c in keys} if keys else None
    if len(loaded) == 1:
        return skipping(Table(loaded[0][0], rows, skipped, found), kept, query, elements)
    return skipping(Table([np.concatenate([np.empty(0)] + [part[0][k] for part in loaded])
                           for k in range(len(columns))], rows, skipped, found), kept, query, elements)


PARALLEL = 0  # the native load's plan: serial, where parallel workers lose (measured: docs/design.md)
KEY = -1      # a key column's index in pgad_load's indexes (extension/pgad.h's PGAD_LOAD_KEY)
KEYS_OVER_LIMIT = 'the keys of column '  # how the native load's error for keys past pgad.memory_limit starts
KEYS_FETCHED = 10_000  # keys fetched at once where they are read by a query
KEY_TEXT = 'pgad_data.{c}::pg_catalog.text AS {c}'  # a key column as the native load reads it (NULL skips the row)
# A nullable key column (a group column): 'v' and its text, '' for NULL, which is then a key like any other
NULLABLE_KEY = ("CASE WHEN pgad_data.{c} IS NULL THEN ''::pg_catalog.text ELSE 'v'::pg_catalog.text "
                'OPERATOR(pg_catalog.||) pgad_data.{c}::pg_catalog.text END AS {c}')
# A column's distinct values but NULL, in its type's order, as text: its keys, where the load is not native
LEVELS = ('SELECT pgad_data.{c}::pg_catalog.text AS v FROM ({query}\n) AS pgad_data WHERE pgad_data.{c} IS NOT NULL '
          'GROUP BY pgad_data.{c} ORDER BY pgad_data.{c} LIMIT {limit}')


class KeysResult(ctypes.Structure):
    """A key column's keys in a load (extension/pgad.h's PgadKeys): count keys, their text UTF-8, each followed by a
    NUL, in code order, bytes long."""
    _fields_ = [('count', ctypes.c_int64), ('bytes', ctypes.c_int64), ('text', ctypes.c_void_p)]


class LoadResult(ctypes.Structure):
    """What pgad_load gives (extension/pgad.h's PgadLoad, its public fields): the rows loaded and skipped, or the
    error that stopped the load (sqlerrcode, PostgreSQL's packed SQLSTATE), each column's values, and each column's
    keys (NULL unless a column is a key column)."""
    _fields_ = [('rows', ctypes.c_int64), ('skipped', ctypes.c_int64), ('columns', ctypes.c_int32),
                ('sqlerrcode', ctypes.c_int32), ('message', ctypes.c_char_p),
                ('detail', ctypes.c_char_p), ('hint', ctypes.c_char_p), ('context', ctypes.c_char_p),
                ('values', ctypes.POINTER(ctypes.c_void_p)), ('keys', ctypes.POINTER(KeysResult))]


_loader = []


def native_loader():
    """pgad.so's functions for the native load (extension/load.c), or None outside the server (and where
    the library predates them)."""
    if not _loader:
        library = server.native()
        if library is None:
            return None
        try:
            library.pgad_load.restype = ctypes.POINTER(LoadResult)
            library.pgad_load.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                                          ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), ctypes.c_int]
            for name in ('pgad_load_claim', 'pgad_load_free_column', 'pgad_load_done'):
                getattr(library, name).restype = None
            library.pgad_load_claim.argtypes = [ctypes.POINTER(LoadResult)]
            library.pgad_load_free_column.argtypes = [ctypes.POINTER(LoadResult), ctypes.c_int]
            library.pgad_load_done.argtypes = [ctypes.POINTER(LoadResult), ctypes.c_int]
            library.pgad_load_unclaimed.argtypes = []
            library.pgad_load_take.restype = ctypes.POINTER(LoadResult)
            library.pgad_load_take.argtypes = [ctypes.c_uint64]
        except AttributeError:
            return None
        _loader.append(library)
    return _loader[0]


class Mapped:
    """One column of a native load as numpy reads it in place (__array_interface__, read-only): rows float8 in
    memory that pgad.so mapped, which it frees when the last array that views it goes (the finaliser)."""
    def __init__(self, library, load, column, rows, address):
        self.__array_interface__ = {'version': 3, 'shape': (rows,), 'typestr': np.dtype(np.float64).str,
                                    'data': (address, True)}
        weakref.finalize(self, library.pgad_load_free_column, load, column)


def load_natively(library, query, columns, elements, categories, unseen, missing=(), keys=(), nullable=()):
    """A Table of the columns (typed) of the data query, loaded by pgad.so's pgad_load: each column is one native
    float8 array that numpy wraps without a copy. An array column is read once, as pg_catalog.float8[] under its own
    name (which pgad.so's errors give), and its elements become columns in pgad.so, which checks every row's array
    against the length the lambda reads (the highest element in elements: a Program's columns_of names them all):
    the query may give other rows than lengths() measured. A key column (in keys) is read as pg_catalog.text under
    its own name, coded by pgad.so, its keys in the Table's keys. The server's error, if any, is raised as
    plpy.execute raises it (a server.SPIError)."""
    select, attributes, indexes, arrays = [], [], [], {}
    widths = array_lengths(elements)
    for c in columns:
        if c in keys:
            attributes.append(len(select))
            indexes.append(KEY)
            select.append((NULLABLE_KEY if c in nullable else KEY_TEXT).format(c=quote_ident(c)))
        elif c in elements and c not in categories:
            name, index = elements[c]
            if name not in arrays:
                arrays[name] = len(select)
                select.append(f'pgad_data.{quote_ident(name)}::pg_catalog.float8[] AS {quote_ident(name)}')
            attributes.append(arrays[name])
            indexes.append(int(index))
        else:
            attributes.append(len(select))
            indexes.append(0)
            select.append(VALUE.format(value(c, elements, categories, unseen, missing=missing), len(select)))
    lengths = [widths[elements[c][0]] if index > 0 else 0 for c, index in zip(columns, indexes)]
    n = len(columns)
    load = library.pgad_load(ROWS.format(', '.join(select), query).encode(), n, (ctypes.c_int * n)(*attributes),
                             (ctypes.c_int * n)(*indexes), (ctypes.c_int * n)(*lengths), PARALLEL)
    if not load:
        raise MemoryError('pgad_load')
    library.pgad_load_claim(load)

    def failed(result):
        text = [(f or b'').decode(errors='replace') or None for f in (result.message, result.detail, result.hint)]
        return server.spi_error(result.sqlerrcode, *text)
    table = wrapped(library, load, failed, [k for k, index in enumerate(indexes) if index == KEY])
    if table.keys:
        table.keys = {columns[k]: found for k, found in table.keys.items()}
    return table


def wrapped(library, load, failed, keyed=()):
    """A Table of a load that Python has claimed, each column wrapped by numpy in place, and the keys of its key
    columns (keyed: their places) read; the exception that failed(its LoadResult) gives when it holds an error. The
    load's columns not wrapped are freed on the way out, and its keys."""
    count = 0
    try:
        result = load.contents
        if result.sqlerrcode:
            raise failed(result)
        found = {k: keys_of(result, k) for k in keyed}
        values = []
        for k in range(result.columns):
            values.append(np.asarray(Mapped(library, load, k, result.rows, result.values[k])))
            count += 1
        return Table(values, result.rows, result.skipped, found or None)
    finally:
        library.pgad_load_done(load, count)


def keys_of(result, k):
    """Column k's keys in a load (a LoadResult), in code order: its text decoded once and split at the NULs."""
    found = result.keys[k] if result.keys else KeysResult()
    if found.count == 0:
        return []
    try:
        keys = ctypes.string_at(found.text, found.bytes).decode('utf-8').split('\0')
    except UnicodeDecodeError as e:  # a database in SQL_ASCII holding bytes that are not UTF-8
        raise PgadError('22021', 'a key is not valid UTF-8', detail=str(e)) from None
    if len(keys) != found.count + 1 or keys.pop() != '':
        raise PgadError('XX000', 'pgad_load returned malformed keys',
                        detail=f'{found.count} keys, {found.bytes} bytes, {len(keys)} parts.')
    return keys


def value(column, elements, categories=None, unseen=False, widths=None, missing=()):
    """The SQL of one column's value in a row of the data: pgad_data.x, or for an element, pgad._element(
    pgad_data.pixels, 3, 64, 'pixels'), which checks that the row's array is one-dimensional from 1 with the 64
    elements the lambda reads (widths: array_lengths(elements), where the caller has it), or a categorical column's
    code (categories: {column: its categories}); a column in missing (imputed), −NaN where the row's is NULL."""
    if column in missing:  # NULL as −NaN (its sign bit set), a NaN of the data's as PostgreSQL's own NaN (positive)
        read = f'({value(column, elements, categories, unseen, widths)})::pg_catalog.float8'
        return f"CASE WHEN {read} IS NULL THEN OPERATOR(pg_catalog.-) 'NaN'::pg_catalog.float8 " \
            f"WHEN {read} OPERATOR(pg_catalog.=) 'NaN'::pg_catalog.float8 THEN 'NaN'::pg_catalog.float8 " \
            f"ELSE {read} END"
    if categories and column in categories:
        return category_code(column, categories[column], unseen)
    if column in elements:
        name, index = elements[column]
        width = (widths or array_lengths(elements))[name]
        return f'pgad._element(pgad_data.{quote_ident(name)}, {int(index)}, {int(width)}, {quote_literal(name)})'
    if boolean(column):
        return f'pgad_data.{quote_ident(column)}::pg_catalog.int4'  # 1 or 0 (NULL stays NULL), then as float8
    return f'pgad_data.{quote_ident(column)}'


def array_lengths(elements):
    """{array column: the length the lambda reads its arrays at} of elements ({element: (column, index)}): its
    highest index, since a Program's columns_of names every element of every array column it reads."""
    widths = {}
    for name, index in elements.values():
        widths[name] = max(widths.get(name, 0), int(index))
    return widths


def category_code(column, keys, unseen=False):
    """The SQL of a row's code of column (1 … K by keys; NULL for NULL) in the loader's query. A value not in keys
    is NULL too (the row is skipped), or with unseen, 0: the code every kernel reads as a category whose weight is 0
    (vectors._index's chain, jit/loops/structure.py's index), as a scoring function does; for scoring stored weights
    on new data (the categories then the stored ones, not the data's)."""
    lookup = json.dumps({k: n + 1 for n, k in enumerate(keys)})
    value = f'pgad_data.{quote_ident(column)}'
    found = f'({quote_literal(lookup)}::pg_catalog.jsonb OPERATOR(pg_catalog.->>) {value}::pg_catalog.text)'
    if not unseen:
        return found
    return f'COALESCE({found}, CASE WHEN {value} IS NOT NULL THEN \'0\' END)'  # a keyword, not a function


def typed(columns, names, types):
    """columns, with a label (objective.Label) that is boolean in the data (names, type oids: check_columns') read as
    a boolean column is, 1 or 0."""
    return [Column(c, boolean=True) if hasattr(c, 'refusal') and c in names and types[names.index(c)] == BOOLEAN_OID
            else c for c in columns]


def boolean(column):
    """Does the lambda read this column (a name from Lambda.columns, a parser.Column) as a boolean?"""
    return getattr(column, 'boolean', False)


def _read(columns, elements):
    """The data's columns that columns read: an element's array column once, in order of first use."""
    return list(dict.fromkeys(elements[c][0] if c in elements else c for c in columns))


def lengths(data, columns, categorical=()):
    """((column, length), …) for each of columns (names the lambda reads) that is an array in the data: the
    length of its arrays, which must be the same in every row (a row whose array has another length, more than one
    dimension, or starts at another index than 1 is SQLSTATE 2202E, named by its place in the data)."""
    query = as_query(data)
    names, types = check_columns(query, [c for c in columns], arrays=set(columns), categorical=set(categorical))
    arrays = [c for c in columns if c not in categorical and types[names.index(c)] in ARRAY_TYPES]
    if not arrays:
        return ()
    extents = server.query(f'SELECT {", ".join(EXTENT.format(c=value(c, {}), k=k) for k, c in enumerate(arrays))} '
                           f'FROM ({query}\n) AS pgad_data')[0]
    found = []
    for k, name in enumerate(arrays):
        lo, hi, nd, lb, ub = (extents[f'{key}{k}'] for key in ('lo', 'hi', 'nd', 'lb', 'ub'))
        if lo is None:  # NULL in every row: no row to load
            raise PgadError('22000', f'every row of the data has NULL in column "{name}", which the lambda reads',
                            hint='data must have at least one row to average the loss over.')
        if lo != hi or nd != 1 or lb != 1 or ub != 1 or lo == 0:
            raise _odd_array(query, name)
        found.append((name, int(lo)))
    return tuple(found)


def _odd_array(query, name):
    """The error for the first row whose array in column name is not like the first row's."""
    c = value(name, {})
    hint = (f'Every row\'s {quote_ident(name)} must be a one-dimensional array of the same length: filter or pad the '
            'rows that differ in the data query.')
    found = server.query(f'SELECT pg_catalog.cardinality({c}) AS len FROM ({query}\n) AS pgad_data WHERE {c} IS NOT '
                         'NULL LIMIT 1')
    first = found[0]['len'] if found else None
    odd = server.query(ODD_ROW.format(c=c, query=query), [first], ['pg_catalog.int4']) if found else []
    if not odd and first != 0:  # the query gave other rows this time (a volatile one): no row to name
        return PgadError(ARRAY_SUBSCRIPT_ERROR, f'column "{name}" has arrays of different lengths',
                         detail='The data query gave other rows each time pgad ran it, so pgad cannot name the row.',
                         hint=hint)
    if not odd:  # every array is like the first, which is empty
        return PgadError(ARRAY_SUBSCRIPT_ERROR, f'column "{name}" holds empty arrays', hint=hint)
    row, length, dims, lower = (odd[0][k] for k in ('n', 'len', 'nd', 'lb'))
    if length == 0:
        return PgadError(ARRAY_SUBSCRIPT_ERROR, f'column "{name}" has an empty array in row {row} of the data',
                         hint=hint)
    if dims != 1:
        return PgadError(ARRAY_SUBSCRIPT_ERROR, f'column "{name}" has a {dims}-dimensional array in row {row} of the '
                                                'data', detail='pgad reads a one-dimensional array as a vector.', hint=hint)
    if lower != 1:
        return PgadError(ARRAY_SUBSCRIPT_ERROR, f'column "{name}" has an array that starts at index {lower} in row '
                                                f'{row} of the data', detail='pgad reads arrays indexed from 1.', hint=hint)
    return PgadError(ARRAY_SUBSCRIPT_ERROR, f'column "{name}" has arrays of different lengths',
                     detail=f'The first row\'s array has {first} elements; row {row}\'s has {length}.', hint=hint)


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


def group_column_types(group_by, names, types):
    """The schema-qualified type name of each group_by column of the data (names, type oids), or the error for one
    the data lacks (42703) or that is not a scalar (0A000)."""
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
    return group_types


def load_groups(data, columns, group_by, memory_limit=None, categories=None, unseen=False):
    """(the group columns' type names, one Group per distinct value of the group_by columns, in their order): the
    data loaded once, by one GROUP BY query whose every group packs its own rows with pgad.pack; memory_limit
    (bytes) bounds all the groups together; categories and unseen as load() takes them."""
    query = as_query(data)
    categories = categories or {}
    names, types = check_columns(query, columns, categorical=set(categories))
    columns = typed(columns, names, types)
    if len(columns) > PACK_COLUMNS:
        check_memory(memory_limit, query, columns)
    group_types = group_column_types(group_by, names, types)
    sql = GROUPED.format(
        keys=group_key([f'pgad_rows.g{k}' for k in range(len(group_by))]),
        values=', '.join(f'pg_catalog.to_jsonb(pgad_rows.g{k})::pg_catalog.text AS g{k}' for k in range(len(group_by))),
        packs=aggregate(len(columns)) if columns else 'pg_catalog.count(*) AS total', query=query,
        groups=', '.join(f'pgad_data.{quote_ident(g)} AS g{k}' for k, g in enumerate(group_by)),
        columns=', '.join([VALUE.format(value(c, {}, categories, unseen), k) for k, c in enumerate(columns)]
                          or ['0 AS pgad_none']),
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
    groups, loaded = [], [unpack(part, len(columns)) if columns else ([], part['total'], 0) for part in parts]
    nulls = null_counts(query, columns, {}, group_by) if any(skipped for _, _, skipped in loaded) else {}
    for part, (values, rows, skipped) in zip(parts, loaded):
        groups.append(Group(part['pgad_key'], [part[f'g{k}'] for k in range(len(group_by))],
                            skipping(Table(values, rows, skipped), columns, group=part['pgad_key'],
                                     nulls=nulls.get(part['pgad_key']))))
    return group_types, groups


COMPLETE = 'SELECT pg_catalog.count(*) AS rows FROM ({}\n) AS pgad_data WHERE ROW({}) IS NOT NULL'


def count(query, columns, elements=None):
    """The rows of the data that have no NULL in the columns: those a load packs."""
    elements = elements or {}
    widths = array_lengths(elements)
    names = ', '.join(value(c, elements, widths=widths) for c in columns)
    return server.query(COMPLETE.format(query, names))[0]['rows']


def megabytes(size):
    """'2.5 MB', '640 MB': a size in bytes as the memory limit's messages give it (as extension/pack.c does)."""
    mb = size / (1 << 20)
    return f'{mb:.1f} MB' if mb < 10 else f'{mb:.0f} MB'


def check_memory(memory_limit, query, columns, elements=None):
    """The error if the data's rows (count) of `columns` need more than memory_limit bytes, COPIES times over;
    nothing when memory_limit is None (no limit)."""
    if memory_limit is None:
        return
    rows = count(query, columns, elements)
    needed = rows * len(columns) * 8 * COPIES
    if needed > memory_limit:
        raise PgadError(OUT_OF_MEMORY, f'the data needs {megabytes(needed)}, more than pgad.memory_limit '
                                       f'({megabytes(memory_limit)})',
                        detail=f'{rows} rows of {len(columns)} columns, 8 bytes a value, held up to {COPIES} times '
                               'over while the call loads and trains.',
                        hint='Train on a sample of the data (TABLESAMPLE, WHERE or LIMIT in its query), or have a '
                             'superuser raise pgad.memory_limit.')


def skipping(table, columns, query=None, elements=None, group=None, nulls=None):
    """The table, after a NOTICE of the rows it skipped for a NULL (if any): in which of the columns, counted by
    one more query of the data (its rows are read again only then; nulls: those counts, already made), and in which
    group (its key, with group_by). The aggregates, which have no query, name every column they read."""
    if table.skipped:
        if nulls is None:
            nulls = [(c, None) for c in columns] if query is None else null_counts(query, columns, elements or {})[None]
        server.notice((f'group {group}: ' if group else '') +
                      f'skipped {table.skipped} of {table.rows + table.skipped} rows with NULL in ' +
                      ', '.join(quote_ident(c) + ('' if n is None else f' ({n} row{"s" * (n != 1)})')
                                for c, n in nulls))
    return table


def group_key(values):
    """The SQL of a group's key, {"region": "north", …} as jsonb text: the group_by columns' names are the query's
    parameters $1, $2, … and values the SQL of their values."""
    return ('pg_catalog.jsonb_build_object(' + ', '.join(f'${k + 1}::pg_catalog.text, {v}' for k, v in enumerate(values))
            + ')::pg_catalog.text')


def null_counts(query, columns, elements, group_by=()):
    """{group key (None without group_by): [(column, rows with NULL in it)] of the columns that have a NULL}, by one
    query of the data."""
    widths = array_lengths(elements)
    counts = ', '.join(['pg_catalog.count(*) AS pgad_rows'] + [f'pg_catalog.count({value(c, elements, widths=widths)}) '
                                                               f'AS n{k}' for k, c in enumerate(columns)])
    key = group_key([f'pgad_data.{quote_ident(g)}' for g in group_by]) if group_by else 'NULL::pg_catalog.text'
    sql = f'SELECT {key} AS pgad_key, {counts} FROM ({query}\n) AS pgad_data'
    if group_by:
        sql += ' GROUP BY ' + ', '.join(f'pgad_data.{quote_ident(g)}' for g in group_by)
    rows = server.query(sql, list(group_by), ['pg_catalog.text'] * len(group_by)) if group_by else server.query(sql)
    return {row['pgad_key']: [(c, row['pgad_rows'] - row[f'n{k}']) for k, c in enumerate(columns)
                              if row[f'n{k}'] < row['pgad_rows']] for row in rows}


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


def check_columns(query, columns, arrays=(), categorical=()):
    """The data's (column names, type oids); every column the lambda reads must be in it, and numeric (or, for the
    names in arrays, an array of numbers; for a column read as a boolean, boolean; the names in categorical, of any
    type: categorical.expand checks theirs)."""
    try:
        names, types = server.describe(f'{DESCRIBED}{query}\n) AS pgad_data')
    except server.SPIError as e:  # the data query's own error, with the query shown
        if server.interrupted(e):
            raise
        end = first_end(e, query)
        if end is not None:
            raise PgadError('42601', 'data must be one statement only: it goes on after a ";"',
                            detail=Caret(query, end),
                            hint='Give one query (SELECT, VALUES, WITH or TABLE) or the name of a table or view; '
                                 'nothing of this one ran.') from None
        raise PgadError(e.sqlstate or '42601', e.args[0] if e.args else str(e), detail=f'The data query: {query}',
                        hint=server.hint_of(e)) from None
    used = {names.index(c) for c in columns if c in names}  # only these need a type name looked up
    positions([c for c in columns if c not in categorical], names,
              [KNOWN_TYPES.get(oid) or (type_name(oid) if k in used else '') for k, oid in enumerate(types)], arrays)
    for name in categorical:
        if name in columns and name not in names:
            raise missing(name, names)
    return names, types


DESCRIBED = 'SELECT * FROM ('  # what check_columns writes before the data query


def first_end(error, query):
    """The place (0-based, in characters) of the ";" in the data query at which the server's syntax error stands:
    one ending a first statement, where a second follows (a trailing one as_query dropped); None for any other
    error. The lexer makes a ";" a token of its own only outside quotes and comments."""
    place = server.position_of(error)
    at = None if place is None else place - 1 - len(DESCRIBED)
    if getattr(error, 'sqlstate', None) == '42601' and at is not None and 0 <= at < len(query) and query[at] == ';':
        return at
    return None


def type_name(oid):
    return server.query('SELECT pg_catalog.format_type($1, NULL::pg_catalog.int4) AS t', [oid],
                        ['pg_catalog.oid'])[0]['t']


def missing(name, names):
    """The error of a column the lambda reads (name) that the data (its columns: names, kept on the error as
    .names, which objective.label_missing reads) lacks."""
    error = PgadError('42703', f'column "{name}" does not exist in the data',
                      detail='The data has columns: ' + ', '.join(quote_ident(n) for n in names) + '.',
                      hint='Column names fold to lower case; write d."Name" for a mixed-case column.'
                      if name.lower() in [n.lower() for n in names] else None)
    error.names = list(names)
    return error


def positions(columns, names, types, arrays=(), aggregate=False):
    """The position in names of each column the lambda reads (names and types: the data's columns, and the names
    of their types), or the error for the first that is not there or not a number (or an array of numbers, for
    the names in arrays); aggregate: for the aggregates, which take no arrays."""
    found = []
    for name in columns:
        if name not in names:
            raise missing(name, names)
        found.append(names.index(name))
        if types[found[-1]] == BOOLEAN and hasattr(name, 'refusal'):  # a named loss's label (objective.Label)
            if name.refusal() is not None:
                raise name.refusal()
            continue
        if boolean(name):
            if types[found[-1]] != BOOLEAN:
                raise PgadError('42804', f'column "{name}" is of type {types[found[-1]]}, not boolean',
                                hint='The lambda reads it where PostgreSQL takes a boolean (CASE WHEN d.flag …): '
                                     'compare it with a value there (d.x > 0), or use a boolean column.')
            continue
        if name in arrays and types[found[-1]] in ARRAY_TYPES.values():
            continue
        if types[found[-1]] == BOOLEAN:
            raise PgadError('42804', f'column "{name}" is of type boolean, not a number',
                            hint='Read it where PostgreSQL takes a boolean (CASE WHEN d.flag THEN 1 ELSE 0 END), '
                                 f'or cast it in the data query: SELECT {quote_ident(name)}::int AS '
                                 f'{quote_ident(name)} ….')
        if aggregate and types[found[-1]].endswith('[]'):
            raise PgadError('42804', f'column "{name}" is of type {types[found[-1]]}: the aggregates take numbers',
                            hint='pgad.loss_agg, gradient_agg and gradient_descent_agg read one number per column; '
                                 'a vector column is read by pgad.train, pgad.loss, pgad.gradient and '
                                 'pgad.gradient_descent, which take the data query, or pass its elements as columns '
                                 f'(SELECT {quote_ident(name)}[1] AS x1, …).')
        if types[found[-1]] not in NUMERIC_TYPES.values():
            if hasattr(name, 'not_a_number') and not types[found[-1]].endswith('[]'):  # objective.NumberLabel
                raise name.not_a_number(types[found[-1]])
            raise PgadError('42804', f'column "{name}" is of type {types[found[-1]]}, not a number',
                            hint=f'Cast it in the data query, for example SELECT {quote_ident(name)}::float8 AS '
                                 f'{quote_ident(name)} …, or use a numeric column (smallint to float8, numeric). '
                                 f'To read its values as categories, index a weight by it: w.{identifier(name)}'
                                 f'[d.{identifier(name)}] with {json.dumps(name)}: {{}} in the weights (a weight per '
                                 'category).')
    return found


def packed(data, names, columns):
    """A Table of `columns` from the bytes an aggregate packed (pgad.pack's form) of the data's columns `names`, or
    from the load they name (an aggregate's final function: its rows copied once, where numpy wraps them)."""
    magic, stored, rows, skipped = HEADER.unpack_from(data)
    if magic == LOADED:
        values = taken(data, len(names)).columns
    elif rows == 0:  # no row packed; with no row read at all, no column either
        return skipping(Table([np.empty(0) for _ in columns], 0, skipped), columns)
    else:
        values, rows, skipped = read(data, len(names))
    return skipping(Table([values[names.index(c)] for c in columns], rows, skipped), columns)


LOADED = 0x4c504750  # "PGPL": an aggregate's rows as a load (extension/load.c's LOAD_MAGIC), not pgad.pack's bytes
LOAD_ID = struct.Struct('=Q')


def taken(data, width):
    """The Table of the load that an aggregate's final function made of its rows, named by data (a PackHeader with
    LOADED, then the load's id): taken from pgad.so's loads not yet claimed, and wrapped in place."""
    library = native_loader()
    magic, stored, rows, skipped = HEADER.unpack_from(data)
    load = None
    if library is not None and len(data) == HEADER.size + LOAD_ID.size and stored == width:
        load = library.pgad_load_take(LOAD_ID.unpack_from(data, HEADER.size)[0])
    if not load:
        raise PgadError('XX000', 'pgad.pack returned a malformed result',
                        detail=f'{len(data)} bytes, header {(magic, stored, rows, skipped)}, for {width} columns: no '
                               'such load.')
    table = wrapped(library, load, lambda result: PgadError('XX000', 'pgad could not load an aggregate\'s rows'))
    server.debug(f'pgad: loaded {table.rows} rows of {width} columns in 1 part, from the aggregate\'s state')
    if (table.rows, table.skipped, len(table.columns)) != (rows, skipped, width):
        raise PgadError('XX000', 'pgad.pack returned a malformed result',
                        detail=f'header {(magic, stored, rows, skipped)}, load {(table.rows, table.skipped)}.')
    return table
