"""Categorical features: a weight indexed by a text, varchar, enum, boolean or integer column, w.region[d.region].

A weight whose starting value is a JSON object ({} or {"north": 0.5, …}) is categorical: one entry per category.
expand() meets the call's weights with the data: the categories are the column's distinct values in the data
(NULL aside), in the column type's order, decided once per call, then the values the object lists that the data does
not have; a value the data has that the object does not list starts at 0. The weight becomes a vector of K entries
(vectors.Shapes), and each row's category its code, 1 … K: w.region[d.region] is then an ordinary index of a vector
by a column, which the unrolled program writes as masks and the loop kernel as a gather forward and a scatter-add over
the categories backwards (jit/loops/structure.py's index: Futhark's histogram rule). A NULL category skips the row,
as any NULL does. named() gives the fitted vector back as an object by category, and program.categorical_names names
its entries region[north].

The categories are found in the load's own pass (preload): the native load reads the column as text and codes it by
a hash in C, in the order the rows show the values; type_order then puts them in the type's order by one query over
the values, and coded renumbers the codes. A label of classes (models/classes.py) is found alike, and with group_by
the groups too (grouped). Where the load is not native, the categories are read first by a query a column (LEVELS)
and the loader codes each row by them (loader.category_code).
"""
import math
from dataclasses import dataclass, field

import numpy as np

from . import loader, program, server
from .errors import PgadError
from .lang import vectors
from .lang.printer import quote_ident, quote_literal
from .lang.rules import OPERATIONS

INTEGERS = {20, 21, 23}  # bigint, smallint, integer
KINDS = ('S', 'E', 'B')  # string, enum, boolean: typcategory of the other types a category may have
TOO_MANY = '54000'
NODES_PER_CATEGORY = 10  # a categorical weight takes at most pgad.max_lambda_nodes / this many categories
# The type of a column (a domain followed down to its base type): its schema-qualified name and typcategory.
BASE = ("WITH RECURSIVE up AS (SELECT t.oid AS id, t.typbasetype AS base, 0 AS depth FROM pg_catalog.pg_type AS t "
        "WHERE t.oid OPERATOR(pg_catalog.=) $1 "
        "UNION ALL SELECT t.oid, t.typbasetype, up.depth OPERATOR(pg_catalog.+) 1 "
        "FROM up JOIN pg_catalog.pg_type AS t ON t.oid OPERATOR(pg_catalog.=) up.base) "
        "SELECT t.oid AS oid, pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) "
        "pg_catalog.quote_ident(t.typname) AS name, t.typcategory AS category FROM up JOIN pg_catalog.pg_type AS t "
        "ON t.oid OPERATOR(pg_catalog.=) up.id JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) "
        "t.typnamespace WHERE up.base OPERATOR(pg_catalog.=) 0 ORDER BY up.depth DESC LIMIT 1")
LEVELS = loader.LEVELS  # a column's distinct values but NULL, in its type's order, as text


# Keys found by a load (extension/keys.c), coded in the order the rows show them, made the codes of the keys in order.
KEY_INTEGERS = ('pg_catalog.int2', 'pg_catalog.int4', 'pg_catalog.int8')  # key types sorted as numbers
# The types whose values are equal exactly where their texts are: the keys as the load found them (by their text's
# bytes) are the type's distinct values. Another (citext, whose 'Ann' is 'ann'; an enum, a domain's base) has its keys
# grouped by the type's own equality, one query over the keys, not the data (equal_keys).
AS_TEXT = KEY_INTEGERS + ('pg_catalog.text', 'pg_catalog.varchar', 'pg_catalog.bpchar', 'pg_catalog.name',
                          'pg_catalog.bool', 'pg_catalog."char"')
# The keys (texts, $1) grouped by the type's equality: each group's places in the keys, 1-based
EQUAL = ('SELECT pg_catalog.array_agg(k) AS places FROM pg_catalog.generate_subscripts($1::pg_catalog.text[], 1) AS k '
         'GROUP BY ($1::pg_catalog.text[])[k]::{kind} HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 1')
# The places (1-based) of the keys (texts, $1) in the order of their type (kind): what ORDER BY the column gives
IN_ORDER = ('SELECT pg_catalog.array_agg(u.n ORDER BY u.k::{kind}, u.n) AS places '
            'FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS u(k, n)')


def equal_keys(keys, kind):
    """For each of keys (texts of a column of type kind), the place of the key it stands for: itself, or where the
    type holds keys of different texts equal (citext), the one of them first in text order; None where every key
    stands for itself (a type in AS_TEXT, or no two equal)."""
    if kind in AS_TEXT or len(keys) < 2:
        return None
    groups = [row['places'] for row in server.query(EQUAL.format(kind=kind), [keys], ['pg_catalog.text[]'])]
    if not groups:
        return None
    same = np.arange(len(keys))
    for places in groups:
        first = min((p - 1 for p in places), key=keys.__getitem__)
        same[[p - 1 for p in places]] = first
    return same


def key_order(keys, kind):
    """The places in keys (texts of a column of type kind) in sorted order: an integer type's as numbers, any other's
    as Python orders text (by code point). A keyed weight's millions of keys are sorted so."""
    if kind in KEY_INTEGERS:
        return np.argsort(np.fromiter(map(int, keys), np.int64, len(keys)), kind='stable')
    return np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def type_order(keys, kind):
    """The places in keys (texts of a column of type kind) in the type's own order (an enum's, a text's collation):
    the order LEVELS gives a categorical weight's categories, by one query over the keys, not the data; an integer
    type's as key_order's."""
    if kind in KEY_INTEGERS or len(keys) < 2:
        return key_order(keys, kind)
    places = server.query(IN_ORDER.format(kind=kind), [list(keys)], ['pg_catalog.text[]'])[0]['places']
    return np.array(places, dtype=np.int64) - 1


def coded(codes, keys, kind, same=None, order=key_order):
    """(the codes, 1 … K by keys in the order the load found them, as the ordered keys' codes; the ordered keys): one
    lookup array, indexed by the codes, vectorised; order (key_order, type_order) gives the keys' order. same
    (equal_keys'): each key's place of the key it stands for, whose code it takes; the keys that stand for others are
    the keys."""
    kept = np.arange(len(keys)) if same is None else np.flatnonzero(same == np.arange(len(keys)))
    order = kept[order([keys[k] for k in kept], kind)]
    if same is None and np.array_equal(order, kept):  # found in order already (the data sorted by key)
        return codes, list(keys)
    lookup = np.zeros(len(keys) + 1)
    lookup[order + 1] = np.arange(1, len(order) + 1)
    if same is not None:
        lookup[1:] = lookup[same + 1]
    return lookup[codes.astype(np.intp)], [keys[k] for k in order]


@dataclass
class Categories:
    """The categorical weights of one call."""
    keys: dict = field(default_factory=dict)     # weight → its categories, as the column's text ('north', '3')
    column: dict = field(default_factory=dict)   # weight → the column that indexes it
    types: dict = field(default_factory=dict)    # column → its (base) type's schema-qualified name
    labels: dict = field(default_factory=dict)   # a label of classes → its classes (models/classes.py), coded alike

    @property
    def codes(self):
        """{column: its categories}: what the loader codes the column by (loader.category_code); a label of
        classes too."""
        return {**{self.column[w]: keys for w, keys in self.keys.items()}, **self.labels}

    def __bool__(self):
        return bool(self.keys)


def indexed(w, lam):
    """{categorical weight: the column that indexes it} of the weights w (a dict; a categorical weight's value is a
    dict) in lam: the error where a categorical weight is read other than as w.x[d.c], or its column other than so."""
    names = {n for n, v in w.items() if isinstance(v, dict)}
    if not names:
        return {}
    nodes, found, columns = lam.graph.nodes, {}, set()
    for i in lam.graph.ancestors([lam.root]):
        node = nodes[i]
        if node.op != 'index' or nodes[node.args[0]].op != 'weight' or nodes[node.args[0]].value not in names:
            continue
        at = nodes[node.args[1]]
        weight = nodes[node.args[0]].value
        if at.op != 'column':
            raise _misread(f'weight "{weight}" is categorical and must be indexed by a column')
        if found.get(weight, at.value) != at.value:
            raise _misread(f'weight "{weight}" is categorical and indexed by two columns, "{found[weight]}" and '
                           f'"{at.value}"')
        found[weight] = at.value
        columns.add(at.value)
    for i in lam.graph.ancestors([lam.root]):  # every other use of the weights or columns
        node = nodes[i]
        for k, a in enumerate(node.args):
            leaf = nodes[a]
            if leaf.op == 'weight' and leaf.value in names and not (node.op == 'index' and k == 0):
                raise _misread(f'weight "{leaf.value}" is categorical and must be indexed by a column')
            if leaf.op == 'column' and leaf.value in columns and not (
                    node.op == 'index' and k == 1 and nodes[node.args[0]].op == 'weight'
                    and nodes[node.args[0]].value in names):
                raise _misread(f'column "{leaf.value}" indexes a categorical weight and cannot be read as a number')
    for name in names & set(lam.weights) - set(found):
        raise _misread(f'weight "{name}" is categorical and must be indexed by a column')
    return found


def only(lam, cats):
    """Is every vector operation of lam an index of a categorical weight (cats), so that it is a model of numbers
    otherwise (one that group_by takes)?"""
    nodes = lam.graph.nodes
    return all(node.op != 'index' and node.op not in OPERATIONS or node.op == 'index' and
               nodes[node.args[0]].op == 'weight' and nodes[node.args[0]].value in cats.keys
               for node in (nodes[i] for i in lam.graph.ancestors([lam.root])))


def refuse_aggregate(lam, names, types):
    """The aggregates' error for a lambda that indexes a weight by a column (names, types: the row's columns and
    their type names) that is not a number: the aggregates pack numbers only, so they take no categorical weight."""
    nodes = lam.graph.nodes
    for node in nodes:
        if node.op == 'index' and nodes[node.args[0]].op == 'weight' and nodes[node.args[1]].op == 'column':
            column = nodes[node.args[1]].value
            if column in names and types[names.index(column)] not in loader.NUMERIC_TYPES.values():
                raise _aggregate(f'Column "{column}" is of type {types[names.index(column)]}; the lambda indexes '
                                 f'weight "{nodes[node.args[0]].value}" by it.')


def _aggregate(detail):
    return PgadError('0A000', 'the aggregates take no categorical weight', detail=detail,
                     hint='Use pgad.gradient, pgad.gradient_descent, pgad.loss or pgad.train (with group_by for a '
                          'model per group), whose data is a query; or code the categories as numbers in the data.')


def _misread(message):
    return PgadError('0A000', message, hint='A categorical weight (a JSON object of numbers, {} to start every '
                                            'category at 0) is read as w.region[d.region]; its column only so.')


def preload(data, lam, found, lengths, config, missing=(), label=None, group_by=()):
    """The Table of the columns lam reads (lengths: its array columns', as loader.lengths gives them) of the data,
    loaded once with each categorical weight's column (found: {weight: column}) and the label of classes (label, or
    None) coded by the load itself as it finds their keys (extension/keys.c; the Table's keys, in the order the rows
    show them, which expand and classes.find put in the type's order): no query of their own over the data before
    the load. The Table's names are its columns' (calls.loading reorders them to a Program's). With group_by, the
    group columns are key columns too, NULL among their keys (loader.NULLABLE_KEY), for grouped to split the rows by,
    and the Table's groups their (type, base type) names. None where the load is not native (outside the server, or with
    pgad.load_chunk_rows set), a key column is imputed (missing), or a group column is one the lambda reads: then
    expand and classes.find read the keys first, one query a column (LEVELS), as the loader does, and
    loader.load_groups loads the groups."""
    keys = list(dict.fromkeys([*found.values(), *([label] if label is not None else [])]))
    if not keys or config.chunk_rows or loader.native_loader() is None or set(keys) & set(map(str, missing)) or \
            set(group_by) & ({*map(str, lam.columns), *keys}):
        return None
    query = loader.as_query(data)
    names, types = loader.check_columns(query, [c for c in lam.columns if c not in keys], arrays=set(lam.columns),
                                        categorical=set(keys))
    group_types = loader.group_column_types(group_by, names, types)
    for column in found.values():  # each one's type, before the load reads it as text
        if column not in names:
            raise loader.missing(column, names)
        base_type(column, types[names.index(column)])
    arrays = dict(lengths)
    elements = {e: (c, k + 1) for c, n in arrays.items() for k, e in enumerate(vectors.elements(c, (n,)))}
    columns = [e for c in lam.columns
               for e in ([e for e, (a, _) in elements.items() if a == c] if c in arrays else [c])]
    table = loader.load(data, [*columns, *group_by], 0, config.memory_limit, elements, missing=missing,
                        keys=[*keys, *group_by], nullable=group_by, quiet=bool(group_by))
    table.names = [str(c) for c in [*columns, *group_by]]
    table.groups = [(kind, server.query(BASE, [types[names.index(g)]], ['pg_catalog.oid'])[0]['name'])
                    for g, kind in zip(group_by, group_types)]
    return table


# Each group's key, {"region": "north"} as jsonb text, and each group column's value as to_jsonb writes it, of the
# groups' values as text ($n+1 …: one array a group column, NULL for NULL; $1 … $n the columns' names)
GROUPS = ('SELECT {key} AS pgad_key, {values} FROM ROWS FROM ({arrays}) WITH ORDINALITY AS u({names}, pgad_n) '
          'ORDER BY u.pgad_n')
# Each group's rows and non-NULL values in the columns read, a group by the text of its values (GROUP BY would pick
# one of numeric's equal 1.0 and 1.00 to show, which no key of the load's need be): a row of the groups whose every
# row was skipped is the only one keyed by its own
NULLS = ('SELECT {texts}, {key} AS pgad_key, pg_catalog.count(*) AS pgad_rows, {counts} FROM ({query}\n) AS pgad_data '
         'GROUP BY {by}')


def grouped(table, group_by, query, columns):
    """(the group columns' type names, one loader.Group per distinct value of the group_by columns, in ORDER BY's
    order, NULL last) of a preload's table, which loaded the group columns as nullable keys: each group's rows (in
    the data's order) copied out of the table once, its columns those the table's names give but the group columns;
    each group's key and values as loader.load_groups gives them, by one query over the groups, not the data. Where
    a row was skipped for a NULL in columns, one more query counts each group's (as load_groups does), and NOTICEs
    say so by group; a group whose every row was skipped comes last, with an empty table."""
    n, bases = len(group_by), [base for _, base in table.groups]
    codes, values, lookups = [], [], []
    for g, base in zip(group_by, bases):
        code, found, lookup = group_codes(table.columns[table.names.index(g)], table.keys[g], base)
        codes.append(code)
        values.append(found)
        lookups.append(lookup)
    combos, order, counts = group_rows(codes, [len(v) for v in values])
    texts = [[values[j][int(c) - 1] for c in combos[:, j]] for j in range(n)]
    found = server.query(GROUPS.format(
        key=loader.group_key([f'u.g{k}::{bases[k]}' for k in range(n)]),
        values=', '.join(f'pg_catalog.to_jsonb(u.g{k}::{bases[k]})::pg_catalog.text AS g{k}' for k in range(n)),
        arrays=', '.join(f'pg_catalog.unnest(${n + k + 1}::pg_catalog.text[])' for k in range(n)),
        names=', '.join(f'g{k}' for k in range(n))), [*group_by, *texts], ['pg_catalog.text'] * n +
        ['pg_catalog.text[]'] * n) if len(combos) else []
    at_combo = {tuple(int(c) for c in combo): k for k, combo in enumerate(combos)}
    totals, nulls, lost = counts.copy(), [[0] * len(columns) for _ in combos], []
    if table.skipped:  # each group's NULLs, by one more query, as load_groups gives them
        text_of = [f'pgad_data.{quote_ident(g)}::pg_catalog.text' for g in group_by]
        for row in server.query(NULLS.format(
                texts=', '.join(f'{t} AS t{k}' for k, t in enumerate(text_of)), query=query,
                key=loader.group_key([f'({t})::{bases[k]}' for k, t in enumerate(text_of)]),
                counts=', '.join(f'pg_catalog.count({loader.value(c, {})}) AS n{k}' for k, c in enumerate(columns)),
                by=', '.join(text_of)), list(group_by), ['pg_catalog.text'] * n):
            combo = tuple(lookups[k].get('' if row[f't{k}'] is None else 'v' + row[f't{k}'], 0) for k in range(n))
            missed = [row['pgad_rows'] - row[f'n{k}'] for k in range(len(columns))]
            if combo in at_combo:
                totals[at_combo[combo]] += row['pgad_rows']
                nulls[at_combo[combo]] = [a + b for a, b in zip(nulls[at_combo[combo]], missed)]
            else:
                lost.append((row['pgad_key'], row['pgad_rows'], missed))
        totals -= counts  # each loaded group's rows, skipped ones too, counted twice above: its total
    kept = [k for k, name in enumerate(table.names) if name not in group_by]
    names = [table.names[k] for k in kept]

    def group(key, values, columns_of, rows, total, missed):
        part = loader.Table(columns_of, rows, total - rows, table.keys, names)
        return loader.Group(key, values, loader.skipping(part, columns, group=key, nulls=[
            (c, m) for c, m in zip(columns, missed) if m]))
    groups, at = [], 0
    for k, (row, count) in enumerate(zip(found, counts)):
        rows = order[at:at + count]
        at += count
        groups.append(group(row['pgad_key'], [row[f'g{j}'] for j in range(n)],
                            [np.ascontiguousarray(table.columns[c][rows]) for c in kept], int(count),
                            int(totals[k]), nulls[k]))
    for key, total, missed in lost:  # every row of the group skipped
        groups.append(group(key, None, [np.empty(0) for _ in kept], 0, int(total), missed))
    return [kind for kind, _ in table.groups], groups


def group_rows(codes, sizes):
    """(the distinct rows of codes, one array a group column whose codes are 1 … its size, in order, as a G × n
    array; the rows in their groups' order, each group's in the data's; each group's count): one stable sort of each
    row's group number, the codes in mixed radix (numpy's unique of the code rows where that passes 2⁶²)."""
    rows = len(codes[0]) if codes else 0
    if math.prod(sizes) < 1 << 62:
        number = np.zeros(rows, dtype=np.int64)
        for code, size in zip(codes, sizes):
            number = number * size + (code.astype(np.int64) - 1)
        order = np.argsort(number, kind='stable')
        ordered = number[order]
        first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if rows else np.zeros(0, dtype=np.intp)
        counts = np.diff(np.r_[first, rows])
        combos = np.stack([c[order[first]] for c in codes], axis=1) if rows else np.zeros((0, len(codes)))
        return combos, order, counts
    combos, inverse = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    return combos, np.argsort(inverse, kind='stable'), np.bincount(inverse, minlength=len(combos))


def group_codes(codes, keys, kind):
    """(codes, of a group column's keys as NULLABLE_KEY wrote them, 'v' and the text or '' for NULL, as the codes of
    their values in ORDER BY's order, NULL last; the values' texts, None for NULL; {key: its code}): equal values of
    the type (numeric's 1.0 and 1.00) one code, as GROUP BY makes them one group."""
    texts = [k[1:] for k in keys if k]
    shift = np.zeros(len(keys) + 1)  # each key's place among texts (1-based), NULL's 0
    shift[1 + np.flatnonzero([bool(k) for k in keys])] = np.arange(1, len(texts) + 1)
    new, ordered_texts = coded(np.arange(len(texts) + 1, dtype=np.float64), texts, kind, equal_keys(texts, kind),
                               type_order)  # each text's code, by its place (NULL's place 0: code 0)
    new = np.array(new)
    if '' in keys:
        new[0] = len(ordered_texts) + 1
        ordered_texts = [*ordered_texts, None]
    lookup = new[shift.astype(np.intp)]  # each key's code, by the load's code
    return lookup[codes.astype(np.intp)], ordered_texts, {key: int(lookup[1 + k]) for k, key in enumerate(keys)}


def ordered(table, column, kind):
    """The keys of column in table (a preload's), in the type's order (type_order; equal keys of a type such as
    citext as one), its codes renumbered to match: once per column."""
    if column not in table.ordered:
        at = table.names.index(column)
        found = table.keys[column]
        table.columns[at], table.keys[column] = coded(table.columns[at], found, kind, equal_keys(found, kind),
                                                      type_order)
        table.ordered.add(column)
    return table.keys[column]


def preloaded_keys(table, column, kind, most, too_many):
    """The categories of column as a preload (table) found them, in the type's order: too_many() where they are more
    than most (checked before they are ordered)."""
    if len(table.keys[column]) > most:
        raise too_many()
    return ordered(table, column, kind)


# A row of the data whose value in a column is not NULL (asked only where the load found no key: were they all NULL?)
ANY_VALUE = 'SELECT 1 AS found FROM ({query}\n) AS pgad_data WHERE pgad_data.{c} IS NOT NULL LIMIT 1'


def expand(w, lam, data, limits, memory_limit=None, table=None):
    """(the weights w with each categorical weight a vector of its categories' values, Categories) for a call on
    the data (a query or relation name; None for an aggregate, which refuses categories): the categories as the
    load found them where it was a preload (table), else read first, one query a column (LEVELS)."""
    found = indexed(w, lam)
    cats = Categories()
    if not found:
        return w, cats
    if data is None:
        raise _aggregate(f'Weight "{next(iter(found))}" is a JSON object, a categorical weight.')
    query = loader.as_query(data)
    names, types = loader.check_columns(query, [c for c in lam.columns if c not in found.values()],
                                        arrays=set(lam.columns), categorical=set(found.values()))
    most = max(1, limits.lambda_nodes // NODES_PER_CATEGORY)
    out = dict(w)
    for weight, column in found.items():
        if column not in names:
            raise loader.missing(column, names)
        cats.types[column] = base = base_type(column, types[names.index(column)])

        def too_many(column=column):
            return PgadError(TOO_MANY, f'column "{column}" has more than {most} categories, the most a categorical '
                                       'weight takes',
                             detail=f'The limit is pgad.max_lambda_nodes / {NODES_PER_CATEGORY}.',
                             hint='Group rare values into one category in the data query, or have a superuser raise '
                                  'pgad.max_lambda_nodes.')
        seen = preloaded_keys(table, column, base, most, too_many) if table is not None else \
            [r['v'] for r in server.query(LEVELS.format(c=quote_ident(column), query=query, limit=most + 1))]
        given, known = w[weight], set(seen)
        keys = seen + [k for k in given if k not in known]
        if len(keys) > most:
            raise too_many()
        if memory_limit is not None and len(keys) * 1024 > memory_limit:
            raise PgadError(loader.OUT_OF_MEMORY, f'the categories of column "{column}" need '
                                                  f'{loader.megabytes(len(keys) * 1024)}, more than pgad.memory_limit '
                                                  f'({loader.megabytes(memory_limit)})',
                            hint='Group rare values into one category in the data query, or have a superuser raise '
                                 'pgad.memory_limit.')
        if not keys and table is not None and server.query(ANY_VALUE.format(c=quote_ident(column), query=query)):
            raise loader.no_rows(table)  # the rows that have one are skipped for a NULL in another column
        if not keys:
            raise PgadError('22000', f'every row of the data has NULL in column "{column}", which the lambda reads',
                            hint='data must have at least one row to average the loss over.')
        extra = keys[len(seen):]
        if extra:  # a listed value must be one of the column's type: PostgreSQL's own error otherwise
            server.query(f'SELECT $1::{base}[] AS listed', [extra], ['pg_catalog.text[]'])
        out[weight] = _entries(given, keys)
        cats.keys[weight], cats.column[weight] = keys, column
    return out, cats


def base_type(column, oid):
    """The schema-qualified name of the base type of column (its type's oid), which must be one a category may
    have: 42804 otherwise."""
    base = server.query(BASE, [oid], ['pg_catalog.oid'])[0]
    if base['oid'] not in INTEGERS and base['category'] not in KINDS:
        raise PgadError('42804', f'column "{column}" is of type {base["name"]}, which cannot index a categorical '
                                 'weight',
                        hint='A category is text, varchar, an enum, boolean or an integer: cast the column in the '
                             f'data query ({quote_ident(column)}::text AS {quote_ident(column)}).')
    return base['name']


def listed(w, lam):
    """(w with each categorical weight a vector of the categories it lists, Categories) where there is no data to
    read them from (pgad.derivatives and pgad.explain without data)."""
    found, cats, out = indexed(w, lam), Categories(), dict(w)
    for weight, column in found.items():
        if not w[weight]:
            raise PgadError('22023', f'weight "{weight}" is categorical and lists no category',
                            hint=f'Give data to read its categories from, or list them: {{"{weight}": {{"north": 0, '
                                 '"south": 0}}.')
        out[weight] = np.array([float(v) for v in w[weight].values()])
        cats.keys[weight], cats.column[weight] = list(w[weight]), column
    return out, cats


def stored(weights, lam):
    """(the stored weights jsonb's values {name: value} with each categorical weight a vector of its stored
    categories, Categories) of a trained model (lam, its lambda): what scoring it on new data loads the column by,
    with loader.category_code(…, unseen=True)."""
    return listed(weights, lam)


def as_vectors(w, cats):
    """w ({name: value}) with each categorical weight of cats, an object by category (a group's stored weights),
    the vector of cats' categories in their order, 0 for a category the object lacks."""
    return {n: _entries(v, cats.keys[n]) if n in cats.keys else v for n, v in w.items()}


def _entries(value, keys):
    """The vector of a categorical weight's value (an object by category) at keys, 0 where it has no entry."""
    return np.array([float(value.get(k, 0.0)) for k in keys])


def element_names(prog, cats, lam=None):
    """The names of the elements of prog's weight vector (a Program's), each categorical weight's entries by category,
    region[north] (program.categorical_names); the others as vectors.labels names them, m[1,2], or m[1,x2] where the
    weight multiplies columns (w.m @ [d.x1, d.x2]) in lam, the lambda as parsed (prog's own has its vectors unrolled,
    where it has them)."""
    columns = vectors.multiplied_columns(lam or prog.lam)
    return [e for name, shape in prog.shapes for e in (program.categorical_names(name, cats.keys[name])
                                                       if name in cats.keys else
                                                       vectors.labels(name, shape, columns.get(name)))]


def scoring_code(argument, keys, kind):
    """The SQL of the code a scoring function reads for its argument (`$2`) of type kind: 1 … K by keys compared as
    that type, 0 for a value training never saw (its weight contributes 0), NULL for NULL."""
    arms = ' '.join(f'WHEN {argument} OPERATOR(pg_catalog.=) {quote_literal(k)}::{kind} THEN '
                    f'{n + 1}::pg_catalog.float8' for n, k in enumerate(keys))
    return f'CASE WHEN {argument} IS NULL THEN NULL::pg_catalog.float8 {arms} ELSE 0::pg_catalog.float8 END'


def named(nested, cats):
    """nested ({weight: value}, as Program.nest gives) with each categorical weight an object by category."""
    if not cats:
        return nested
    return {n: dict(zip(cats.keys[n], v)) if n in cats.keys else v for n, v in nested.items()}
