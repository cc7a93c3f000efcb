"""pgad.recommend and pgad.embeddings: a keyed model's best items for a user, and its vectors for pgvector (issue 48).

A keyed model whose scoring function takes two keys (weight_tables.py), the first the user's and the second the
item's — λ(d, w) w.mu + w.bu[d.user] + w.bi[d.item] + dot(w.p[d.user], w.q[d.item]) — scores every item for a user
at once: its prediction, the local lambda (keyed.localised), is evaluated over the items as rows, the user's values
and the global weights as numbers and each item weight as the items' values (the python backend's plan: numpy over
whole arrays), then the k highest are kept (np.argpartition), ties by the items' order, leaving out the items the
seen query gives for the user. The weights are read from the version's tables as the caller, under their policy.
A user the model never saw scores with 0 for its values, as its scoring function does.
"""
import json

import numpy as np

from .. import keyed, loader, program, python_backend, server
from ..errors import PgadError
from ..lang import printer, vectors
from . import catalog, weight_tables

MOST_K = 10_000


def _version(name, version):
    """(the version's row, its keyed weights' entries, the model parsed, [user column, item column])."""
    if name is None:
        raise PgadError('22004', 'argument "name" must not be NULL')  # of pgad.recommend or pgad.embeddings
    row = catalog.rows(name, version)[0]
    weights = json.loads(row['weights'])
    described = weight_tables.described(weights)
    if not described:
        raise PgadError('0A000', f'model "{name}" has no keyed weight',
                        detail='pgad.recommend and pgad.embeddings read the weights a model keeps per key in tables.',
                        hint='Train a model with a vector per key: {"p": {"shape": [8]}} read as w.p[d.user].')
    model = program.parsed(row['model'])
    columns = list(dict.fromkeys(str(c) for c in model.columns if c in {e['keyed_by'] for e in described.values()}))
    return row, weights, described, model, columns


def recommend(name, keys, k=10, seen=None, version=None):
    """Rows (user_key, item, score, rank): the k items of highest score for each of keys (a list of the users' keys
    as text), leaving out those the seen query pairs with the user (its first column the user's key, its second the
    item's)."""
    if keys is None or k is None:
        raise PgadError('22004', f'argument "{"key" if keys is None else "k"}" of pgad.recommend must not be NULL')
    if not 0 < k <= MOST_K:
        raise PgadError('22023', f'k must be from 1 to {MOST_K}, not {k}')
    row, weights, described, model, columns = _version(name, version)
    if len(columns) != 2:
        raise PgadError('0A000', f'model "{name}" is keyed by {len(columns)} column{"s" * (len(columns) != 1)}, '
                                 'not two',
                        detail='pgad.recommend scores a user (the first key column) against every item (the second).',
                        hint='Score the keys with the model\'s scoring function.')
    user, item = columns
    others = [str(c) for c in model.columns if str(c) not in columns]
    if others:
        raise PgadError('0A000', f'model "{name}" reads column "{others[0]}" beside its keys',
                        hint='pgad.recommend scores a user against the items from the weights alone; score rows '
                             'with the model\'s scoring function.')
    tables = dict((w, t) for t, w in weight_tables.tables_of(row))
    by = {w: e['keyed_by'] for w, e in described.items()}
    items = None
    values = {}
    for w in [w for w in by if by[w] == item]:
        found = server.query(f'SELECT t.key::pg_catalog.text AS key, t.value FROM {tables[w]} AS t ORDER BY t.key')
        if items is None:  # the items: the first item weight's keys; every other's table holds the same keys
            items = [r['key'] for r in found]
            at = {key: n for n, key in enumerate(items)}
        table = np.zeros((len(items), int(np.prod(described[w]['shape'], dtype=np.int64)) or 1))
        for r in found:
            if r['key'] in at:
                table[at[r['key']]] = r['value']
        values[w] = table
        server.check_interrupts()
    users = {}
    for w in [w for w in by if by[w] == user]:  # each given key's value, found by the key type's equality
        kind, eq = weight_tables.key_type(tables[w])
        found = server.query(f'SELECT g AS key, t.value FROM pg_catalog.unnest($1::pg_catalog.text[]) AS g '
                             f'JOIN {tables[w]} AS t ON t.key {eq} g::{kind}', [list(keys)], ['pg_catalog.text[]'])
        users[w] = {r['key']: np.atleast_1d(np.asarray(r['value'], dtype=np.float64)) for r in found}
    local = keyed.localised(model, by)
    shapes = vectors.Shapes(tuple((n, tuple(e['shape'])) for n, e in described.items() if e['shape']) +
                            tuple((n, np.shape(v)) for n, v in weights.items() if n not in described and np.ndim(v)))
    lam, prediction = vectors.unrolled_value(local, shapes)
    root = np.ravel(prediction)[0].id
    plan = python_backend.named_plan(lam.graph, [root])
    feed = {e: float(x) for n, v in weights.items() if n not in described
            for e, x in zip(vectors.elements(n, np.shape(v)), np.ravel(v))}
    for w in values:
        for j, e in enumerate(vectors.elements(w, tuple(described[w]['shape']))):
            feed[e] = values[w][:, j]
    first = {b: next(w for w in by if by[w] == b) for b in (user, item)}
    hidden = _seen(seen, keys, tables[first[user]], tables[first[item]]) if seen is not None else {}
    position = {key: n for n, key in enumerate(items or [])}
    out = []
    for key in keys:
        if key is None:
            continue
        for w in users:
            value = users[w].get(key, np.zeros(max(1, int(np.prod(described[w]['shape'], dtype=np.int64)))))
            for j, e in enumerate(vectors.elements(w, tuple(described[w]['shape']))):
                feed[e] = float(value[j])
        scores = np.array(python_backend.as_rows(python_backend.evaluate(plan, {}, feed)[root], len(items)))
        for i in hidden.get(key, ()):
            if i in position:
                scores[position[i]] = -np.inf
        best = _top(scores, k)
        out += [dict(user_key=key, item=items[i], score=float(scores[i]), rank=r + 1) for r, i in enumerate(best)]
        server.check_interrupts()
    return out


def _top(scores, k):
    """The positions of the k highest finite scores, highest first, ties by position."""
    keep = np.flatnonzero(np.isfinite(scores))
    if len(keep) > k:
        part = np.argpartition(-scores[keep], k - 1)[:k]
        edge = scores[keep][part].min()
        keep = keep[scores[keep] >= edge]
    order = np.lexsort((keep, -scores[keep]))
    return keep[order][:k]


def _seen(query, keys, users, items):
    """{given user key: the items the seen query pairs with it, as the items' table holds them}, each key matched
    by its type's equality (users, items: a user weight's table and an item weight's, whose key types these are)."""
    query = loader.as_query(query)
    names, _ = loader.check_columns(query, [])
    if len(names) < 2:
        raise PgadError('42601', 'seen must give two columns, the user\'s key and the item\'s',
                        detail=f'It gives {len(names)}.', hint="seen => 'SELECT user_id, item_id FROM ratings'")
    u, i = (printer.quote_ident(n) for n in names[:2])
    (user_kind, user_eq), (item_kind, item_eq) = weight_tables.key_type(users), weight_tables.key_type(items)
    found = {}
    for r in server.query(f'SELECT g AS u, t.key::pg_catalog.text AS i FROM ({query}\n) AS s '
                          f'JOIN pg_catalog.unnest($1::pg_catalog.text[]) AS g ON s.{u}::{user_kind} {user_eq} '
                          f'g::{user_kind} JOIN {items} AS t ON t.key {item_eq} s.{i}::{item_kind}', [list(keys)],
                          ['pg_catalog.text[]']):
        found.setdefault(r['u'], set()).add(r['i'])
    return found


def embeddings(name, weight, version=None):
    """Rows (key, vector): a keyed weight's values as pgvector's text form, '[0.1,0.2]'."""
    if weight is None:
        raise PgadError('22004', 'argument "weight" of pgad.embeddings must not be NULL')
    row, _, described, _, _ = _version(name, version)
    if weight not in described:
        raise PgadError('42704', f'model "{name}" has no keyed weight "{weight}"',
                        hint='Its keyed weights: ' + ', '.join(f'"{w}"' for w in described) + '.')
    table = dict((w, t) for t, w in weight_tables.tables_of(row))[weight]
    return server.query(f"SELECT t.key::pg_catalog.text AS key, '[' OPERATOR(pg_catalog.||) "
                        f"pg_catalog.array_to_string(ARRAY[t.value]::pg_catalog.float8[], ',') "
                        f"OPERATOR(pg_catalog.||) ']' AS vector FROM {table} AS t ORDER BY t.key")
