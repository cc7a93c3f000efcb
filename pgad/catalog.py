"""Trained models in the database: the rows of pgad.models and the scoring functions in schema pgad_models.

pgad.train stores one row per model (per group, with group_by) and creates the model's scoring function,
    pgad_models."<name>"(<group columns>, <the columns the model reads, as float8 or boolean>) RETURNS float8,
an IMMUTABLE, PARALLEL SAFE LANGUAGE sql function whose body is the model's DAG written as SQL with the fitted
weights as constants (lang/sql.py): the planner inlines it, so scoring runs at the speed of the same expression
written by hand. Its arguments are the group columns, in group_by's order, then the columns the model reads, in
order of first appearance in the model lambda; a group column the model also reads is taken once, as a group column.
With groups, the body is a CASE over the group columns' values; a group the training did not see gives NULL.

Retraining under the same name replaces the rows and the function in the caller's transaction: with the same
arguments, CREATE OR REPLACE keeps the function (views and other functions that call it see the new weights); with
other arguments the old function is dropped, which is refused while a view depends on it. Every SQL text here is
schema-qualified (docs/security.md); the model's name is always quoted, its group values are literals quoted as
PostgreSQL's quote_literal quotes them, and nothing else of the user's text reaches SQL.
"""
import json

import numpy as np

from . import server
from .errors import PgadError
from .lang import printer, sql, vectors

SCHEMA = 'pgad_models'
INSERT = ('INSERT INTO pgad.models (name, group_key, model, loss, weights, final_loss, loss_history, iterations, '
          'options, data, rows, training_time, scoring_function) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, '
          'pg_catalog.make_interval(0, 0, 0, 0, 0, 0, $12), $13) RETURNING models.*')
INSERT_TYPES = ['pg_catalog.text', 'pg_catalog.jsonb', 'pg_catalog.text', 'pg_catalog.text', 'pg_catalog.jsonb',
                'pg_catalog.float8', 'pg_catalog.float8[]', 'pg_catalog.int4', 'pg_catalog.jsonb', 'pg_catalog.text',
                'pg_catalog.int8', 'pg_catalog.float8', 'pg_catalog.text']
OWNERS = ('SELECT DISTINCT m.trained_by::pg_catalog.text AS owner FROM pgad.models AS m '
          'WHERE m.name OPERATOR(pg_catalog.=) $1')
SUPERUSER = 'SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER'
CAN_CREATE = f"SELECT pg_catalog.has_schema_privilege('{SCHEMA}', 'CREATE') AS can"
# The functions of a name in pgad_models: their identity arguments, and what depends on them (views, functions).
FUNCTIONS = (f"SELECT p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure($2) AS same, "
             f"p.oid::pg_catalog.regprocedure::pg_catalog.text AS signature, "
             f"(SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ', ') "
             f" FROM pg_catalog.pg_depend AS d WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::"
             f"pg_catalog.regclass AND d.refobjid OPERATOR(pg_catalog.=) p.oid "
             f" AND d.deptype OPERATOR(pg_catalog.=) 'n') AS users "
             f"FROM pg_catalog.pg_proc AS p WHERE p.pronamespace OPERATOR(pg_catalog.=) "
             f"'{SCHEMA}'::pg_catalog.regnamespace AND p.proname OPERATOR(pg_catalog.=) $1")
DELETE = 'DELETE FROM pgad.models AS m WHERE m.name OPERATOR(pg_catalog.=) $1'


def function_name(name):
    return f'{SCHEMA}.{printer.quote_ident(name)}'


def quote_literal(text):
    """PostgreSQL's quote_literal: quotes doubled, and backslashes too behind E when there are any."""
    quoted = "'" + text.replace("'", "''").replace('\\', '\\\\') + "'"
    return 'E' + quoted if '\\' in text else quoted


def check_can_store(name):
    """The caller may store model `name`: CREATE on pgad_models, and no other role's model of that name."""
    if not server.query(CAN_CREATE)[0]['can']:
        raise PgadError('42501', f'permission denied for schema {SCHEMA}',
                        detail=f'pgad.train creates the model\'s scoring function {function_name(name)}.',
                        hint=f'A superuser or the schema\'s owner can GRANT CREATE ON SCHEMA {SCHEMA} TO the role.')
    others = owners(name)
    if others and not may_change(others):
        raise PgadError('42501', f'model "{name}" belongs to role "{others[0]}"',
                        hint='Train it under another name, or ask that role (or a superuser) to drop it.')


def owners(name):
    """The roles that trained the rows of model `name` (none when there is no such model)."""
    return [r['owner'] for r in server.query(OWNERS, [name], ['pg_catalog.text'])]


def may_change(owners):
    """May the caller replace or drop a model with these owners: it trained them all, or it is a superuser."""
    return owners == [current_user()] or server.query(SUPERUSER)[0]['rolsuper']


def current_user():
    return server.query('SELECT CURRENT_USER::pg_catalog.text AS me')[0]['me']


def _argument(column, k, grouped):
    """The SQL of a column the model reads, its argument $k: as float8, a boolean one (parser.Column.boolean) as the 1
    or 0 the loader packed it as."""
    if column.boolean:
        return f'(${k})::pg_catalog.int4::pg_catalog.float8'
    return f'(${k})::pg_catalog.float8' if grouped else f'${k}'


class Scoring:
    """The scoring function of a model: its arguments, and its body from the model DAG and each group's weights."""

    def __init__(self, name, model, group_by=(), group_types=(), max_chars=None, unrolled=None):
        """unrolled: for a model with vectors, (its unrolled Lambda, its prediction as an array of that Lambda's
        nodes, {array column: length}): the function takes a float8[] for an array column and returns a float8[]
        for a vector prediction."""
        self.name, self.model, self.group_by, self.max_chars = name, model, list(group_by), max_chars
        lam, self.outputs, lengths = unrolled or (model, np.array(model.graph.expr(model.root), dtype=object), {})
        self.lam = lam
        if self.outputs.ndim > 1:
            raise PgadError('0A000', 'pgad.train takes a model whose prediction is a number or a vector, not a '
                                     f'{"×".join(map(str, self.outputs.shape))} matrix',
                            hint='Predict a vector (its scoring function returns a float8[]), or a number.')
        params = [(g, t) for g, t in zip(group_by, group_types)]
        params += [(c, 'pg_catalog.float8[]' if c in lengths else 'pg_catalog.bool' if c.boolean else
                    'pg_catalog.float8') for c in model.columns if c not in self.group_by]
        self.params = params
        at = {p: k + 1 for k, (p, _) in enumerate(params)}
        self.columns = {c: _argument(c, at[c], c in self.group_by) for c in model.columns if c not in lengths}
        self.columns.update({vectors.element(c, (k + 1,)): f'(${at[c]})[{k + 1}]' for c, n in lengths.items()
                             for k in range(n)})
        self.returns = 'pg_catalog.float8[]' if self.outputs.ndim else 'pg_catalog.float8'
        self.group_types = list(group_types)

    @property
    def identity(self):
        """The function's name and argument types: what names it in DROP FUNCTION and COMMENT ON FUNCTION."""
        return f'{function_name(self.name)}({", ".join(t for _, t in self.params)})'

    @property
    def signature(self):
        return f'{function_name(self.name)}({", ".join(printer.quote_ident(p) + " " + t for p, t in self.params)})'

    def body(self, fits):
        """The SQL expression the function returns: fits is [(the group's values as to_jsonb writes them, or None
        without groups, its weights)]."""
        def value(weights):
            if not self.outputs.ndim:
                return sql.expression(self.lam, self.outputs[()].id, self.columns, weights, self.max_chars)
            return 'ARRAY[' + ', '.join(sql.expression(self.lam, e.id, self.columns, weights, self.max_chars)
                                        for e in self.outputs) + ']::pg_catalog.float8[]' 
        if not self.group_by:
            (_, weights), = fits
            return value(weights)
        arms = [f'WHEN {self.matches(values)} THEN {value(weights)}' for values, weights in fits]
        return 'CASE ' + ' '.join(arms) + ' END'

    def matches(self, values):
        tests = []
        for k, (text, kind) in enumerate(zip(values, self.group_types)):
            if text is None:  # to_jsonb(NULL) is NULL: the group of the rows whose value is NULL
                tests.append(f'${k + 1} IS NULL')
                continue
            literal = json.loads(text) if text.startswith('"') else text
            tests.append(f'${k + 1} OPERATOR(pg_catalog.=) {quote_literal(literal)}::{kind}')
        return '(' + ' AND '.join(tests) + ')'


def store(scoring, rows, fits):
    """Replace model scoring.name by rows (dicts of pgad.models' columns) and its scoring function: pgad.models'
    stored rows as PostgreSQL returns them."""
    for found in functions(scoring.name, scoring.identity):
        if found['same']:
            continue  # CREATE OR REPLACE keeps it, and what uses it
        if found['users']:
            raise PgadError('2BP01', f'cannot replace the scoring function of model "{scoring.name}": its arguments '
                                     f'change, and other objects depend on it',
                            detail=f'The function was {found["signature"]}, now {scoring.identity}. '
                                   f'It is used by: {found["users"]}.',
                            hint='Drop or change those objects, then train again.')
        server.query(f'DROP FUNCTION {found["signature"]}')
    server.query(DELETE, [scoring.name], ['pg_catalog.text'])
    server.query(f'CREATE OR REPLACE FUNCTION {scoring.signature} RETURNS {scoring.returns} LANGUAGE sql IMMUTABLE '
                 f'PARALLEL SAFE RETURN {scoring.body(fits)}')
    server.query(f"COMMENT ON FUNCTION {scoring.identity} IS "
                 f"'the prediction of a model pgad.train made: see pgad.models'")
    quoted = server.query('SELECT pg_catalog.quote_ident($1) AS name', [scoring.name], ['pg_catalog.text'])[0]['name']
    shown = f'{SCHEMA}.{quoted}({", ".join(t for _, t in scoring.params)})'  # as psql would write it
    stored = []
    for row in rows:
        stored += server.query(INSERT, [row[c] for c in ('name', 'group_key', 'model', 'loss', 'weights',
                                                         'final_loss', 'loss_history', 'iterations', 'options',
                                                         'data', 'rows', 'training_time')] +
                               [shown], INSERT_TYPES)
    return stored


def functions(name, identity=None):
    """The functions of that name in pgad_models: their signatures, whether each is `identity`, what uses it."""
    return server.query(FUNCTIONS, [name, identity], ['pg_catalog.text', 'pg_catalog.text'])


def drop(name):
    """Drop model `name`: its rows in pgad.models and its scoring function."""
    found = owners(name)
    if not found:
        raise PgadError('42704', f'model "{name}" does not exist', hint='The models are listed in pgad.models.')
    if not may_change(found):
        raise PgadError('42501', f'must be the role that trained model "{name}" to drop it',
                        detail=f'Model "{name}" belongs to role "{found[0]}".')
    for found in functions(name):
        server.query(f'DROP FUNCTION {found["signature"]}')
    server.query(DELETE, [name], ['pg_catalog.text'])
