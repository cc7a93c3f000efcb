"""A sequence model's generated forecast function (docs/sql.md, "Forecasts"): pgad_models.<name>_forecast, a set-
returning SQL function usable in views, whose rows are pgad.forecast's in the data's own columns:

    <each group column, its type> <the order column, its type> step int4, forecast float8, lower float8,
    upper float8, level float8

It takes pgad.forecast's arguments but the name — (horizon int4, data text DEFAULT NULL, level float8 DEFAULT 0.95,
simulations int4 DEFAULT 1000, seed int8 DEFAULT 0, levels float8[] DEFAULT NULL) — and calls it with the model's
name: it forecasts with the
deployed version, whichever that is, as the caller (who must be able to read the model, as for pgad.forecast).

It is made (made) as a version of a sequence model is deployed, by the role that trained it, like the model's other
deployed functions (catalog._point): replaced where its columns stay, dropped and made again where they change
(refused with 2BP01 while a view uses it), dropped where a version that is no sequence model is deployed and with
the model. A function of its name and arguments that another role owns is refused (42501), never replaced. A model
whose name leaves no room for the suffix, or whose columns would repeat a name, gets none, and a NOTICE says why.
"""
import json

from .. import server
from ..errors import PgadError
from ..lang import printer
from . import catalog

SUFFIX = 'forecast'
ARGUMENTS = ('pg_catalog.int4', 'pg_catalog.text', 'pg_catalog.float8', 'pg_catalog.int4', 'pg_catalog.int8',
             'pg_catalog.float8[]')
SIGNATURE = ('horizon pg_catalog.int4, data pg_catalog.text DEFAULT NULL, level pg_catalog.float8 DEFAULT 0.95, '
             'simulations pg_catalog.int4 DEFAULT 1000, seed pg_catalog.int8 DEFAULT 0, '
             'levels pg_catalog.float8[] DEFAULT NULL')
RESULTS = (('step', 'pg_catalog.int4'), ('forecast', 'pg_catalog.float8'), ('lower', 'pg_catalog.float8'),
           ('upper', 'pg_catalog.float8'), ('level', 'pg_catalog.float8'))
ORDER_CASTS = {'date': 'pg_catalog.date', 'timestamp without time zone': 'pg_catalog.timestamp',
               'timestamp with time zone': 'pg_catalog.timestamptz', 'smallint': 'pg_catalog.int2',
               'integer': 'pg_catalog.int4', 'bigint': 'pg_catalog.int8', 'real': 'pg_catalog.float4',
               'double precision': 'pg_catalog.float8', 'numeric': 'pg_catalog.numeric'}
# The columns a function returns, as format_type writes them: what CREATE OR REPLACE cannot change.
COLUMNS = ("SELECT pg_catalog.array_agg(a.n OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) "
           "pg_catalog.format_type(a.t, NULL) ORDER BY a.k) AS shown FROM pg_catalog.pg_proc AS p, "
           "ROWS FROM (pg_catalog.unnest(p.proargnames), pg_catalog.unnest(p.proallargtypes), "
           "pg_catalog.unnest(p.proargmodes)) WITH ORDINALITY AS a(n, t, m, k) WHERE p.oid OPERATOR(pg_catalog.=) $1 "
           "AND a.m OPERATOR(pg_catalog.=) 't'")


def name_of(name):
    return f'{name}_{SUFFIX}'


def identity(name):
    return f'{catalog.function_name(name_of(name))}({", ".join(ARGUMENTS)})'


def columns(name, options, group_types):
    """[(column, type)] of model `name`'s forecast function, from its deployed version's options; None (and the
    reason) where it gets none."""
    kind = ORDER_CASTS.get(options.get('order_type'))
    if kind is None:
        return None, f'its order column is of type {options.get("order_type")}'
    out = [*zip(options.get('group_by') or [], group_types), (options['order_by'], kind), *RESULTS]
    names = [c for c, _ in out]
    repeated = next((c for c in names if names.count(c) > 1), None)
    if repeated is not None:
        return None, f'its column "{repeated}" would repeat a name of the forecast\'s columns (step, forecast, ' \
                     'lower, upper, level)'
    return out, None


def body(name, options, out):
    """The SQL of the function's body: pgad.forecast's rows, each group value cast from group_key to its type, at
    to the order column's."""
    keys = [f'((f.group_key OPERATOR(pg_catalog.->>) {printer.quote_literal(c)}))::{t}'
            for c, t in out[:len(options.get('group_by') or [])]]
    order = f'(f.at)::{out[len(keys)][1]}'
    return (f'SELECT {", ".join([*keys, order])}, f.step, f.value, f.lower, f.upper, f.level '
            f'FROM pgad.forecast({printer.quote_literal(name)}, $1, $2, $3, $4, $5, $6) AS f')


def made(name, row):
    """Make (or keep, replace, drop) model `name`'s forecast function for its version just deployed, whose first
    row is row: called by catalog._deploy as the role that trained it."""
    options = json.loads(row['options']) if isinstance(row['options'], str) else row['options']
    found = catalog.function(identity(name))
    if found and not found[0]['mine']:
        raise PgadError('42501', f'function {found[0]["identity"]} exists and belongs to role "{found[0]["owner"]}"',
                        detail=f'pgad.train did not create it for model "{name}", and would replace its body but not '
                               'its owner.', hint='Train the model under another name, or ask that role (or a '
                                                  'superuser) to drop the function.')
    out, why = (None, 'the version deployed is no sequence model') if 'order_by' not in options else \
        (None, f'"{name_of(name)}" is longer than {catalog.NAMEDATALEN - 1} bytes') \
        if len(name_of(name).encode()) >= catalog.NAMEDATALEN else \
        columns(name, options, catalog.group_types(options.get('group_by') or [], options.get('group_types') or []))
    if found and (out is None or _shown(found[0]) != [f'{c} {t}' for c, t in _formatted(out)]):
        _drop(name, found[0], why or 'its columns change')
    if out is None:
        if 'order_by' in options:
            server.notice(f'model "{name}" gets no forecast function: {why}')
        return
    server.query(f'CREATE OR REPLACE FUNCTION {catalog.function_name(name_of(name))}({SIGNATURE}) RETURNS TABLE '
                 f'({", ".join(f"{printer.quote_ident(c)} {t}" for c, t in out)}) LANGUAGE sql STABLE AS '
                 f'{printer.quote_literal(body(name, options, out))}')
    created = catalog.function(identity(name))[0]
    for other in server.query(catalog.FOREIGN, [created['oid']], ['pg_catalog.oid']):
        raise PgadError('42501', f'the forecast function of model "{name}" would use {other["what"]}, which role '
                                 f'"{other["owner"] or "?"}" owns',
                        hint='Cast the column to a built-in type in the data query.')
    server.query(f'COMMENT ON FUNCTION {identity(name)} IS '
                 f'{printer.quote_literal(f"the forecast of sequence model {name} in its columns: see pgad.forecast")}')


# Each (column, type) with its type as format_type writes it.
FORMATTED = ("SELECT u.c, pg_catalog.format_type(pg_catalog.to_regtype(u.t), NULL) AS t FROM ROWS FROM "
             "(pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) WITH ORDINALITY "
             "AS u(c, t, k) ORDER BY u.k")


def _formatted(out):
    return [(r['c'], r['t']) for r in server.query(FORMATTED, [[c for c, _ in out], [t for _, t in out]],
                                                   ['pg_catalog.text[]', 'pg_catalog.text[]'])]


def _shown(found):
    """['column type'] of the columns the function found returns."""
    return list(server.query(COLUMNS, [found['oid']], ['pg_catalog.oid'])[0]['shown'] or [])


def _drop(name, found, why):
    """Drop the forecast function found (catalog.FUNCTION's row); 2BP01 naming what uses it."""
    if found['users']:
        raise PgadError('2BP01', f'cannot replace the forecast function of model "{name}": {why}, and other objects '
                                 'depend on it', detail=f'It is used by: {found["users"]}.',
                        hint='Drop or change those objects, then train (or deploy) again.')
    server.query(f'DROP FUNCTION {found["identity"]}')


def dropped(name, owner):
    """Drop model `name`'s forecast function, which role owner made, with the model (pgad.drop_model)."""
    for found in catalog.function(identity(name)):
        if found['owner'] == owner:
            try:
                server.query(f'DROP FUNCTION {found["identity"]}')
            except server.SPIError as e:
                raise catalog.dependents(e, name) from None


def check_names(name, sequence):
    """The error where model `name`'s functions and a forecast function would share a name: a model named like
    another's forecast function ("m_forecast" beside sequence model m), or a sequence model (sequence true) whose
    forecast function would take a model's name."""
    if name.endswith('_' + SUFFIX) and catalog.function(identity(name[:-len(SUFFIX) - 1])):
        base = name[:-len(SUFFIX) - 1]
        raise PgadError('42710', f'model "{base}" has a forecast function named "{name}"',
                        detail=f'A sequence model also gets {catalog.function_name(name)}.',
                        hint='Train the model under another name.')
    if sequence and catalog.owners(name_of(name)):
        raise PgadError('42710', f'model "{name_of(name)}" exists, and the forecast function of model "{name}" would '
                                 'take its name', detail=f'A sequence model also gets '
                                                         f'{catalog.function_name(name_of(name))}.',
                        hint=f'Train model "{name}" under another name, or drop model "{name_of(name)}".')
