"""pgad.predict(name, data, version): every row of the data scored by a version of the model, its columns read by
name, as BigQuery ML's ML.PREDICT reads a table (issue 47). The query is written here and run by pgad.predict
(plpgsql, RETURN QUERY EXECUTE): it calls the version's own scoring functions (catalog.py: "<name>@3" and those
beside it), which the planner inlines, so a row costs what the scoring functions cost by hand. Each row gives

  key            the data row's other columns (the label, an id), a jsonb object
  prediction     in the label's units: the scoring function's value; a logistic model's probability of its class 1;
                 a poisson or gamma model's mean; NULL for a model of many classes
  class          the class of a logistic, hinge or softmax model, as text
  probabilities  a logistic or softmax model's probabilities keyed by class, {"barolo": 0.93, …}

A NULL in a column the model reads gives NULLs, as its scoring functions do (an imputed column gets its value).
Names are quoted and qualified; the data query is the caller's, run as the caller, as every pgad data query is.
"""
import json

from .. import loader
from ..errors import PgadError
from ..lang.printer import quote_ident, quote_literal
from . import catalog

FLOAT8 = 'pg_catalog.float8'


def query(name, data, version=None):
    """The SQL pgad.predict runs for model `name` (its deployed version, or version `version`) on the data."""
    if name is None or data is None:
        raise PgadError('22004', f'argument "{"name" if name is None else "data"}" of pgad.predict must not be NULL')
    row = catalog.rows(name, version)[0]  # or the model's errors: none, hidden, no such version, none deployed
    options = json.loads(row['options'])
    if options.get('order_by'):
        raise PgadError('0A000', f'pgad.predict scores rows one by one, and model "{name}" is a sequence model',
                        hint=f"Use pgad.forecast('{name}', horizon) for its next values, or pgad.anomalies for its "
                             'one-step predictions along the data.')
    own = catalog.own_functions_of(name, row)
    if '' not in own:
        raise PgadError('55000', f'version {row["version"]} of model "{name}" has no scoring function of its own',
                        hint='Train the model again.')
    reads = list(own[''][1]['names'])
    text = loader.as_query(data)
    names, _ = loader.check_columns(text, [])
    for column in reads:
        if column not in names:
            error = loader.missing(column, names)
            raise PgadError('42703', f'model "{name}" reads column "{column}", which the data does not have',
                            detail=error.detail,
                            hint=error.hint or f'Name the data\'s columns as the model\'s (SELECT x AS "{column}", …).')
    arguments = ', '.join(f'pgad_data.{quote_ident(c)}' for c in reads)

    def call(suffix):
        return f'{catalog.function_name(own[suffix][0])}({arguments})' if suffix in own else None

    loss = row['loss']
    base = loss.split('(')[0]
    scored = own[''][1]['qualified_result']
    classes = options.get('classes')
    prediction = class_ = probabilities = 'NULL'
    lateral = ''  # what a row computes once, beside the data: the probability, or the logits and their softmax
    if base == 'logistic':
        lateral = f', LATERAL (SELECT {call("probability")} AS p OFFSET 0) AS pgad_p'
        prediction = 'pgad_p.p'
        class_ = f'({call("class")})::pg_catalog.text'  # 1 or 0, or the label's class (its own type)
        shown = classes or ['0', '1']
        probabilities = (f'pg_catalog.jsonb_build_object({quote_literal(shown[0])}::pg_catalog.text, '
                         f"'1'::{FLOAT8} OPERATOR(pg_catalog.-) pgad_p.p, {quote_literal(shown[1])}::pg_catalog.text, "
                         'pgad_p.p)')
    elif base == 'softmax':
        lateral, class_, probabilities = _softmax(call(''), classes)
    elif base in ('poisson', 'gamma'):
        prediction = call('mean')
    elif scored == 'pg_catalog.float8':
        prediction = call('')
        if base == 'hinge':
            class_ = f'({call("class")})::pg_catalog.text'
    else:
        raise PgadError('0A000', f'pgad.predict gives a number a row, and model "{name}" predicts {scored}',
                        hint=f'Call its scoring function, pgad_models.{quote_ident(name)}(…), for its vector.')
    key = _object([(c, f'pgad_data.{quote_ident(c)}') for c in names if c not in reads])
    return (f'SELECT {key}, ({prediction})::{FLOAT8}, ({class_})::pg_catalog.text, '
            f'({probabilities})::pg_catalog.jsonb FROM ({text}\n) AS pgad_data{lateral}')


def _softmax(logits, classes):
    """(the LATERAL subqueries, the class, the probabilities keyed by class) of a softmax model whose logits the SQL
    logits computes: the logits once a row, their greatest m and each exp(z − m) once, then the class of the greatest
    (the first of equals, as _argmax) and z's softmax as pgad._softmax computes it (the same sum, in the same order),
    as SQL the executor evaluates without a function call a class (OFFSET 0 keeps each subquery from being pulled
    up, and so its expressions from being computed once per use)."""
    k = range(1, len(classes) + 1)
    z = [f'pgad_z.z[{i}]' for i in k]
    lateral = (f', LATERAL (SELECT pgad_s.z, GREATEST({", ".join(f"pgad_s.z[{i}]" for i in k)}) AS m FROM '
               f'(SELECT {logits} AS z OFFSET 0) AS pgad_s OFFSET 0) AS pgad_z'
               ', LATERAL (SELECT ' + ', '.join(f'pg_catalog.exp({v} OPERATOR(pg_catalog.-) pgad_z.m) AS e{i}'
                                                for i, v in zip(k, z)) + ' OFFSET 0) AS pgad_e')
    total = '(' + ' OPERATOR(pg_catalog.+) '.join(f'pgad_e.e{i}' for i in k) + ')'
    class_ = ('CASE WHEN pgad_z.m IS NULL THEN NULL ' +
              ' '.join(f'WHEN {v} OPERATOR(pg_catalog.=) pgad_z.m THEN {quote_literal(c)}'
                       for v, c in zip(z, classes)) + ' END')
    probabilities = _object([(c, f'pgad_e.e{i} OPERATOR(pg_catalog./) {total}') for i, c in zip(k, classes)])
    return lateral, class_, f'CASE WHEN pgad_z.m IS NULL THEN NULL ELSE {probabilities} END'


def _object(pairs):
    """jsonb_build_object of (key, SQL) pairs, 50 a call (its 100 arguments at most), the calls joined by ||; '{}'
    for none."""
    if not pairs:
        return "'{}'::pg_catalog.jsonb"
    calls = ['pg_catalog.jsonb_build_object(' +
             ', '.join(f'{quote_literal(c)}::pg_catalog.text, {v}' for c, v in pairs[at:at + 50]) + ')'
             for at in range(0, len(pairs), 50)]
    return ' OPERATOR(pg_catalog.||) '.join(calls)
