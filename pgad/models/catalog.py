"""Trained models in the database: the rows of pgad.model_versions and the scoring functions in schema pgad_models.

pgad.train stores one row per version of a model (per group, with group_by) and creates the model's scoring function,
    pgad_models."<name>"(<group columns>, <the columns the model reads, as float8 or boolean>) RETURNS float8,
an IMMUTABLE, PARALLEL SAFE LANGUAGE sql function whose body is the model's DAG written as SQL with the fitted
weights as constants (lang/sql.py): the planner inlines it, so scoring runs at the speed of the same expression
written by hand. Its arguments are the group columns, in group_by's order, then the columns the model reads, in
order of first appearance in the model lambda; a group column the model also reads is taken once, as a group column.
With groups, the body is a CASE over the group columns' values; a group the training did not see gives NULL.

Anyone may call a scoring function, superusers included, so it runs no code and depends on no object that another
role owns (another than a superuser and the role that trained): a group column of a domain is taken and compared as
the domain's base type (group_types: a domain's CHECK is its owner's code, run as whoever scores), a group column
of a type another role owns is refused, and what the created function depends on is checked (FOREIGN).

Each training of a name stores its next version (pgad.model_versions: its rows, numbered 1, 2, … per name) with
functions of its own, pgad_models."<name>@3" and the others beside it, or other names where those are taken
(own_names: no role's function blocks a training; recorded in the version's rows, functions), and, deployed, makes
the model's functions pgad_models."<name>" … calls of the version's (RETURN pgad_models."<name>@3"($1, …), inlined
twice by the planner): pgad.deploy points them at another version the same way (_deploy, _wrappers), in the caller's
transaction. The view pgad.models is the deployed versions. With the same arguments and result, CREATE OR REPLACE
keeps a deployed function (views and other functions that call it follow); with other arguments, or other argument
names or another result (a number, then a vector), which CREATE OR REPLACE cannot change (42P13), the old function
is dropped and the new one created, which is refused while a view depends on it (2BP01, naming it). Only the
functions the model's rows record (scoring_function, owned by the role that trained them) are ever dropped or
replaced. Every change of a function happens under the catalog writer's lock (write), so two transactions deploying
a model take turns. A model's name belongs to the role that trained it first; a superuser may replace or drop
anyone's. pgad.model_versions is written only through pgad._write_models (write, below), and read under a policy
(the extension's script): a role reads a model's rows only where it may read every relation the training read,
which store records (relations_read), or trained it; rows names no model the caller may not read (hidden). Every
SQL text here is schema-qualified (docs/security.md); the model's name is always quoted, its group values are
literals quoted as PostgreSQL's quote_literal quotes them, and nothing else of the user's text reaches SQL.

Beside the scoring function, a 'logistic' model gets "<name>_probability" and "<name>_class", a 'hinge' model
"<name>_class", a 'poisson' or 'gamma' model "<name>_mean" and a 'softmax' model, whose scoring function returns the
logits, "<name>_probability" (float8[]) and "<name>_class" (EXTRAS), with the same arguments, inlined alike; a
model of classes (models/classes.py) returns its class in the label's type (chosen). They are not recorded in
pgad.models: they are found from the recorded scoring_function and loss (extras), and follow its rules (only those pgad created for the model,
owned by the role that trained it, are replaced or dropped; another role's function of that name is refused). Their
names belong to the model: a model named like another model's function is refused whichever comes first
(check_names). A scoring function that takes an array checks its length (Scoring.checked), raising 2202E through
the extension's IMMUTABLE pgad._wrong_length, which keeps the function inlinable.

Every model, whatever its loss, also gets "<name>_explain" (EXPLAIN; its body from models/attribution.py: each
column's contribution to the prediction, as jsonb), under the same rules, unless its text passes the printer's budget
or its name NAMEDATALEN: then none, with a NOTICE (Scoring.explained; suffixes).
"""
import contextlib
import ctypes
import json
import re

import numpy as np

from .. import categorical, limits, server
from . import attribution, publish, weight_tables
from ..errors import PgadError
from ..lang import printer, sql, vectors

SCHEMA = 'pgad_models'
EQ, NE, CONCAT = 'OPERATOR(pg_catalog.=)', 'OPERATOR(pg_catalog.<>)', 'OPERATOR(pg_catalog.||)'
INSERT = ('INSERT INTO pgad.model_versions (name, group_key, model, loss, weights, final_loss, loss_history, '
          'iterations, options, data, rows, training_time, validation_history, converged, gradient_norm, metrics, '
          'scoring_function, trained_by, read_from, version, functions, deployed) VALUES ($1, $2, $3, $4, $5, $6, '
          '$7, $8, $9, $10, $11, pg_catalog.make_interval(0, 0, 0, 0, 0, 0, $12), $13, $14, $15, $16, $17, $18, '
          '$19::pg_catalog.regclass[], $20, $21, false) RETURNING model_versions.*')
INSERT_TYPES = ['pg_catalog.text', 'pg_catalog.jsonb', 'pg_catalog.text', 'pg_catalog.text', 'pg_catalog.jsonb',
                'pg_catalog.float8', 'pg_catalog.float8[]', 'pg_catalog.int4', 'pg_catalog.jsonb', 'pg_catalog.text',
                'pg_catalog.int8', 'pg_catalog.float8', 'pg_catalog.float8[]', 'pg_catalog.bool', 'pg_catalog.float8',
                'pg_catalog.jsonb', 'pg_catalog.text', 'pg_catalog.name', 'pg_catalog.oid[]', 'pg_catalog.int4',
                'pg_catalog.jsonb']
STORED = ('name', 'group_key', 'model', 'loss', 'weights', 'final_loss', 'loss_history', 'iterations', 'options',
          'data', 'rows', 'training_time', 'validation_history', 'converged', 'gradient_norm', 'metrics')
# The roles that trained model $1's rows, and its loss where it gives functions (EXTRAS): from every row, whichever the
# caller may read (pgad._model_owners; a model's name and owner are public, in pg_proc, and its rows are not).
OWNERS = 'SELECT o.owner, o.loss FROM pgad._model_owners($1) AS o'
# The deployed functions pgad created for a model: the signatures its rows record of the versions ever deployed,
# and the roles that trained them (a version's own functions are those its rows record: functions, own_names).
RECORDED = ('SELECT DISTINCT m.scoring_function AS signature, m.trained_by::pg_catalog.text AS owner, m.loss '
            f'FROM pgad.model_versions AS m WHERE m.name {EQ} $1 AND m.deployed_at IS NOT NULL')
NAMEDATALEN = 64
# The name of a version's own function (pgad._version_function_name, the extension's): free when it is chosen, in the
# writer, and recorded in the version's rows (functions).
OWN_NAME = 'SELECT pgad._version_function_name($1, $2, $3) AS name'
# The functions pgad creates for a model beside its scoring function, by its loss: (suffix of the name, what it
# returns, its body from the score x's SQL, its comment). The probability is 1/2 + tanh(x/2)/2, σ(x) written with x
# once and strict (NULL gives NULL; no overflow or underflow for any finite x); the class is 1 (or 0, or −1) from the
# sign of x, 1 where x = 0 (probability 1/2), x written once.
HALF = "'0.5'::pg_catalog.float8"
PROBABILITY = ('probability', 'pg_catalog.float8',
               lambda x: f'({HALF} OPERATOR(pg_catalog.+) ({HALF} OPERATOR(pg_catalog.*) '
                         f'pg_catalog.tanh(({HALF} OPERATOR(pg_catalog.*) {x}))))',
               'the probability of class 1 by a logistic model pgad.train made: see pgad.models')
# The mean of a log-link model, exp(x): past float64's range PostgreSQL's exp raises 22003, as a scoring function does.
MEAN = ('mean', 'pg_catalog.float8', lambda x: f'pg_catalog.exp({x})',
        'the mean, exp of the prediction, of a poisson or gamma model pgad.train made: see pgad.models')
UP = "pg_catalog.ceil(((pg_catalog.sign({}) OPERATOR(pg_catalog.+) '1'::pg_catalog.float8) OPERATOR(pg_catalog./) " \
     "'2'::pg_catalog.float8))"  # 1 where x >= 0, else 0
EXTRAS = {
    'logistic': (PROBABILITY, ('class', 'pg_catalog.int4', lambda x: f'({UP.format(x)})::pg_catalog.int4',
                               'the class, 1 or 0, of a logistic model pgad.train made: see pgad.models')),
    'hinge': (('class', 'pg_catalog.int4',
               lambda x: f"(('2'::pg_catalog.float8 OPERATOR(pg_catalog.*) {UP.format(x)}) OPERATOR(pg_catalog.-) "
                         f"'1'::pg_catalog.float8)::pg_catalog.int4",
               'the class, 1 or -1, of a hinge model pgad.train made: see pgad.models'),),
    'poisson': (MEAN,),
    'gamma': (MEAN,),
    # of the logits x, a float8[] in class order: the extension's pgad._softmax and pgad._argmax (IMMUTABLE PARALLEL
    # SAFE STRICT; a SQL function with a subquery would not be inlined); the class as the label's type (chosen)
    'softmax': (('probability', 'pg_catalog.float8[]', lambda x: f'pgad._softmax({x})',
                 'the probabilities of the classes, in the order of options.classes, by a softmax model pgad.train '
                 'made: see pgad.models'),
                ('class', None, None, 'the class of the greatest probability by a softmax model pgad.train made: see '
                                      'pgad.models')),
}
VECTOR_EXTRAS = ('softmax',)  # the losses whose model predicts a vector and has functions beside its scoring one


def chosen(x, found, logits):
    """The SQL of the class a model of classes (found: models/classes.py's Classes) predicts from x, as the label's
    type: of a 'softmax' model's logits x (float8[], logits true), the class of the greatest (the first in order on
    a tie); of a two-class 'logistic' model's score (float8), the second class where x >= 0 (probability 1/2 or
    more). The classes are literals quoted as quote_literal quotes them, x is written once."""
    classes = 'ARRAY[' + ', '.join(f'{printer.quote_literal(k)}::{found.type}' for k in found.keys) + \
        f']::{found.type}[]'
    if not logits:
        return f'({classes})[({UP.format(x)})::pg_catalog.int4 OPERATOR(pg_catalog.+) 1]'
    return f'({classes})[pgad._argmax({x})]'
SCORING_COMMENT = 'the prediction of a model pgad.train made: see pgad.models'
# Every model's function beside its scoring function, whatever its loss: each feature's contribution to the
# prediction, as jsonb (models/attribution.py). Its body is no function of the score, so it has no `of`.
EXPLAIN = ('explain', 'pg_catalog.jsonb', None, 'the contribution of each column to a prediction of a model pgad.train '
           'made, by integrated gradients from the training means: see pgad.models')


def suffixes(loss, name):
    """The suffixes of the functions pgad creates beside model `name`'s scoring function under loss: the explain
    function's only where its name fits NAMEDATALEN (a longer name is not refused: the model gets none, and a
    NOTICE says why; PostgreSQL would truncate the name, and find another function by it)."""
    explain = [EXPLAIN[0]] if len(f'{name}_{EXPLAIN[0]}'.encode()) < NAMEDATALEN else []
    return [suffix for suffix, *_ in EXTRAS.get(loss, ())] + explain
SUPERUSER = f'SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname {EQ} $1'
ME = 'SELECT CURRENT_USER::pg_catalog.text AS me'
LOCK = 'LOCK TABLE pgad.model_versions IN SHARE ROW EXCLUSIVE MODE'
CAN_CREATE = f"SELECT pg_catalog.has_schema_privilege('{SCHEMA}', 'CREATE') AS can"
# The function of pgad_models that a signature names (none when there is none): its identity written with every type
# schema-qualified (what DROP FUNCTION takes, whatever the search_path), its owner, whether the caller owns it, and
# what depends on it (views, functions); its result type (oid and as format_type writes it) and its arguments'
# names, which CREATE OR REPLACE cannot change (42P13).
FUNCTION = (f"SELECT p.oid, pg_catalog.pg_get_userbyid(p.proowner)::pg_catalog.text AS owner, "
            f"p.proowner {EQ} (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname {EQ} CURRENT_USER) AS mine, "
            f"'{SCHEMA}.' {CONCAT} pg_catalog.quote_ident(p.proname) {CONCAT} '(' {CONCAT} pg_catalog.array_to_string("
            f"ARRAY(SELECT pg_catalog.quote_ident(n.nspname) {CONCAT} '.' {CONCAT} pg_catalog.quote_ident(t.typname) "
            f"FROM pg_catalog.generate_subscripts(p.proargtypes, 1) AS k JOIN pg_catalog.pg_type AS t "
            f"ON t.oid {EQ} p.proargtypes[k] JOIN pg_catalog.pg_namespace AS n ON n.oid {EQ} t.typnamespace "
            f"ORDER BY k), ', ') {CONCAT} ')' AS identity, "
            f"p.prorettype AS returns, pg_catalog.format_type(p.prorettype, NULL) AS result, "
            f"p.provolatile AS volatility, "
            f"(SELECT pg_catalog.quote_ident(n.nspname) {CONCAT} '.' {CONCAT} pg_catalog.quote_ident(t.typname) "
            f" FROM pg_catalog.pg_type AS t JOIN pg_catalog.pg_namespace AS n ON n.oid {EQ} t.typnamespace "
            f" WHERE t.oid {EQ} p.prorettype) AS qualified_result, "
            f"ARRAY(SELECT pg_catalog.quote_ident(n.nspname) {CONCAT} '.' {CONCAT} pg_catalog.quote_ident(t.typname) "
            f" FROM pg_catalog.generate_subscripts(p.proargtypes, 1) AS k JOIN pg_catalog.pg_type AS t "
            f" ON t.oid {EQ} p.proargtypes[k] JOIN pg_catalog.pg_namespace AS n ON n.oid {EQ} t.typnamespace "
            f" ORDER BY k) AS types, "
            f"coalesce(p.proargnames, '{{}}'::pg_catalog.text[]) AS names, "
            f"(SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ', ') "
            f" FROM pg_catalog.pg_depend AS d WHERE d.refclassid {EQ} 'pg_catalog.pg_proc'::pg_catalog.regclass "
            f" AND d.refobjid {EQ} p.oid AND d.deptype {EQ} 'n') AS users "
            f"FROM pg_catalog.pg_proc AS p WHERE p.oid {EQ} pg_catalog.to_regprocedure($1) "
            f"AND p.pronamespace {EQ} '{SCHEMA}'::pg_catalog.regnamespace")
# The functions of pgad_models that make a call of function $1 ambiguous (PostgreSQL's 42725, `is not unique`): of its
# name, taking its arguments and more, those with DEFAULT values, so that a call with its arguments matches both.
AMBIGUOUS = (f"SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text AS identity, "
             f"pg_catalog.pg_get_userbyid(p.proowner)::pg_catalog.text AS owner "
             f"FROM pg_catalog.pg_proc AS f JOIN pg_catalog.pg_proc AS p ON p.pronamespace {EQ} f.pronamespace "
             f"AND p.proname {EQ} f.proname AND p.oid {NE} f.oid WHERE f.oid {EQ} $1 "
             f"AND p.pronargdefaults OPERATOR(pg_catalog.>) 0 AND p.pronargs OPERATOR(pg_catalog.>) f.pronargs "
             f"AND p.pronargs OPERATOR(pg_catalog.-) p.pronargdefaults OPERATOR(pg_catalog.<=) f.pronargs "
             f"AND ARRAY(SELECT p.proargtypes[k] FROM pg_catalog.generate_series(0, f.pronargs "
             f"OPERATOR(pg_catalog.-) 1) AS k) {EQ} ARRAY(SELECT f.proargtypes[k] "
             f"FROM pg_catalog.generate_series(0, f.pronargs OPERATOR(pg_catalog.-) 1) AS k) ORDER BY 1")
# A group column's type, a domain followed down to its base type: that type's schema-qualified name, its owner, and
# whether the caller may build on it (a superuser's type, or the caller's own).
BASE_TYPE = (f"WITH RECURSIVE up AS (SELECT t.oid AS id, t.typbasetype AS base, 0 AS depth "
             f"FROM pg_catalog.pg_type AS t WHERE t.oid {EQ} pg_catalog.to_regtype($1) "
             f"UNION ALL SELECT t.oid, t.typbasetype, up.depth "
             f"OPERATOR(pg_catalog.+) 1 FROM up JOIN pg_catalog.pg_type AS t ON t.oid {EQ} up.base) "
             f"SELECT pg_catalog.quote_ident(n.nspname) {CONCAT} '.' {CONCAT} pg_catalog.quote_ident(t.typname) "
             f"AS name, "
             f"pg_catalog.pg_get_userbyid(t.typowner)::pg_catalog.text AS owner, "
             f"r.rolsuper OR r.rolname {EQ} CURRENT_USER AS trusted "
             f"FROM up JOIN pg_catalog.pg_type AS t ON t.oid {EQ} up.id JOIN pg_catalog.pg_namespace AS n "
             f"ON n.oid {EQ} t.typnamespace JOIN pg_catalog.pg_roles AS r ON r.oid {EQ} t.typowner "
             f"WHERE up.base {EQ} 0 ORDER BY up.depth DESC LIMIT 1")
# What a new scoring function depends on that is not the caller's or a superuser's: a function or operator (or an
# operator's function), a type, any domain (its CHECK constraints are code; pgad never writes one), a table (a keyed
# model's weights: weight_tables.py), or an object of
# any other kind than these, its own schema and a collation (owner 10, the bootstrap superuser, for those two).
FOREIGN = (f"SELECT pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0) AS what, "
           f"pg_catalog.pg_get_userbyid(o.owner)::pg_catalog.text AS owner FROM pg_catalog.pg_depend AS d "
           f"LEFT JOIN (SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass AS class, p.oid AS id, p.proowner AS owner "
           f"      FROM pg_catalog.pg_proc AS p "
           f"      UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid, o.oprowner "
           f"      FROM pg_catalog.pg_operator AS o "
           f"      UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid, p.proowner "
           f"      FROM pg_catalog.pg_operator AS o JOIN pg_catalog.pg_proc AS p ON p.oid {EQ} o.oprcode "
           f"      UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid, "
           f"      CASE WHEN t.typtype {EQ} 'd' THEN 0::pg_catalog.oid ELSE t.typowner END "
           f"      FROM pg_catalog.pg_type AS t "
           f"      UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid, c.relowner "
           f"      FROM pg_catalog.pg_class AS c "
           f"      UNION ALL SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, "
           f"      '{SCHEMA}'::pg_catalog.regnamespace::pg_catalog.oid, 10::pg_catalog.oid "
           f"      UNION ALL SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, c.oid, 10::pg_catalog.oid "
           f"      FROM pg_catalog.pg_collation AS c) AS o ON o.class {EQ} d.refclassid AND o.id {EQ} d.refobjid "
           f"WHERE d.classid {EQ} 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid {EQ} $1 "
           f"AND d.deptype {EQ} 'n' AND NOT coalesce((SELECT r.rolsuper OR r.rolname {EQ} CURRENT_USER "
           f"FROM pg_catalog.pg_roles AS r WHERE r.oid {EQ} o.owner), false)")
# A type's oid and how format_type writes it (none for a text that names no type).
TYPE = ('SELECT t::pg_catalog.oid AS oid, pg_catalog.format_type(t, NULL) AS shown '
        'FROM pg_catalog.to_regtype($1) AS t')
DELETE = f"DELETE FROM pgad.model_versions AS m WHERE m.name {EQ} $1 RETURNING m.*"
DELETE_VERSION = f"DELETE FROM pgad.model_versions AS m WHERE m.name {EQ} $1 AND m.version {EQ} $2 RETURNING m.*"
# The next version of a name, counted in pgad.model_names (a version's number is never given twice, while the name
# has a version).
NEXT = (f'UPDATE pgad.model_names AS n SET versions = n.versions OPERATOR(pg_catalog.+) 1 WHERE n.name {EQ} $1 '
        'RETURNING n.versions AS version')
# Each version of a model, once: deployed or not, when last deployed, and its validation loss (NULL unless every
# group has one): each group's metrics.validation_loss (at the weights it kept) weighted by its validation rows, as
# pgad.tune weighs them, or for a version without metrics the mean of each group's last validation_history.
LOSS = "(m.metrics OPERATOR(pg_catalog.->>) 'validation_loss')"
HELD = "(m.metrics OPERATOR(pg_catalog.->>) 'validation_rows')"
VERSIONS = ("SELECT m.version, pg_catalog.bool_or(m.deployed) AS deployed, pg_catalog.max(m.deployed_at) AS "
            "deployed_at, CASE WHEN pg_catalog.count(m.validation_history) OPERATOR(pg_catalog.=) pg_catalog.count(*) "
            f"THEN coalesce(pg_catalog.sum({LOSS}::pg_catalog.float8 OPERATOR(pg_catalog.*) {HELD}::pg_catalog.float8) "
            f"OPERATOR(pg_catalog./) NULLIF(pg_catalog.sum({HELD}::pg_catalog.float8), 0), "
            "pg_catalog.avg(m.validation_history[pg_catalog.array_upper(m.validation_history, 1)])) END "
            f"AS validation, pg_catalog.date_part('epoch', pg_catalog.max(m.deployed_at)) AS deployed_epoch "
            f"FROM pgad.model_versions AS m WHERE m.name {EQ} $1 GROUP BY m.version ORDER BY m.version")
UNDEPLOY = (f'UPDATE pgad.model_versions AS m SET deployed = false WHERE m.name {EQ} $1 AND m.deployed '
            f'AND m.version {NE} $2')
DEPLOY = (f'UPDATE pgad.model_versions AS m SET (deployed, deployed_at) = ROW(true, pg_catalog.clock_timestamp()) '
          f'WHERE m.name {EQ} $1 AND m.version {EQ} $2 RETURNING m.*')
VERSION_ROWS = (f'SELECT m.* FROM pgad.model_versions AS m WHERE m.name {EQ} $1 AND m.version {EQ} $2 '
                'ORDER BY m.group_key')
STRATEGIES = ('best_validation', 'most_recent', 'previous')
KEEP = "SELECT pg_catalog.current_setting('pgad.keep_versions')::pg_catalog.int4 AS keep"
# The name's row of pgad.model_names: claimed before a model is written, under the writer's lock. Under repeatable
# read or serializable, a name another transaction claimed and committed after this one's snapshot is a 40001 here
# (ON CONFLICT with a row the snapshot does not see), rather than two first trainings both committing.
CLAIM = 'INSERT INTO pgad.model_names (name) VALUES ($1) ON CONFLICT DO NOTHING'
UNCLAIM = f'DELETE FROM pgad.model_names AS n WHERE n.name {EQ} $1'
# The relations a training read, which its model's rows record (read_from), of the oids pgad.so noted while it ran
# (extension/reads.c: each relation whose SELECT the executor checked as the current user; a view, and not
# the relations it reads as its owner): those that still exist but the catalogs (pg_catalog, pg_toast: pgad's own
# queries read pg_authid through pg_roles) and pgad's own tables.
RELATIONS = (f"SELECT c.oid FROM pg_catalog.pg_class AS c WHERE c.oid {EQ} ANY ($1) "
             f"AND c.relnamespace {NE} ALL (ARRAY['pg_catalog'::pg_catalog.regnamespace, "
             f"'pg_toast'::pg_catalog.regnamespace, 'pgad'::pg_catalog.regnamespace]::pg_catalog.oid[]) "
             "ORDER BY c.oid")
# Without pgad.so's notes (a superuser calling pgad._train, before anything loaded pgad.so): more, never fewer, every
# relation the transaction holds a lock on but an AccessExclusiveLock alone (a rename or a drop), and every one
# whose scans the backend counted and has not yet reported (pg_stat_xact_all_tables: a subtransaction rolled back
# keeps its counts, not its locks; so may the transactions just before this one on the connection).
RELATIONS_LOCKED = (
    f"SELECT c.oid FROM pg_catalog.pg_class AS c "
    f"WHERE c.relkind {EQ} ANY ('{{r,p,v,m,f,S}}'::pg_catalog.\"char\"[]) "
    f"AND c.relnamespace {NE} ALL (ARRAY['pg_catalog'::pg_catalog.regnamespace, 'pg_toast'::pg_catalog.regnamespace, "
    f"'pgad'::pg_catalog.regnamespace]::pg_catalog.oid[]) "
    f"AND (c.oid {EQ} ANY (SELECT l.relation FROM pg_catalog.pg_locks AS l WHERE l.locktype {EQ} 'relation' "
    f"AND l.mode {NE} 'AccessExclusiveLock' AND l.pid {EQ} pg_catalog.pg_backend_pid() "
    f"AND l.database {EQ} (SELECT d.oid FROM pg_catalog.pg_database AS d "
    f"WHERE d.datname {EQ} pg_catalog.current_database())) "
    f"OR c.oid {EQ} ANY (SELECT s.relid FROM pg_catalog.pg_stat_xact_all_tables AS s "
    f"WHERE s.seq_scan OPERATOR(pg_catalog.+) s.seq_tup_read OPERATOR(pg_catalog.+) COALESCE(s.idx_scan, 0) "
    f"OPERATOR(pg_catalog.+) COALESCE(s.idx_tup_fetch, 0) OPERATOR(pg_catalog.>) 0)) ORDER BY c.oid")


def function_name(name):
    return f'{SCHEMA}.{printer.quote_ident(name)}'


def check_can_store(name, loss=None):
    """The caller may store model `name`: CREATE on pgad_models, and no other role's model of that name (the writer,
    pgad._write_models, checks that again as it writes)."""
    if not server.query(CAN_CREATE)[0]['can']:
        raise PgadError('42501', f'permission denied for schema {SCHEMA}',
                        detail=f'pgad.train creates the model\'s scoring function {function_name(name)}.',
                        hint=f'A superuser or the schema\'s owner can GRANT CREATE ON SCHEMA {SCHEMA} TO the role.')
    check_new(name)
    check_owner(name, owners(name), current_user())
    if loss is not None:
        check_names(name, loss)


def check_new(name):
    """The error for a new model whose name holds '@', which every name of a version's own function holds (own_names):
    a model "m@2" would take a name that model m's version 2 takes, or block it. A model that has its name already
    (trained before 0.18.0) keeps it."""
    if '@' in name and not owners(name):
        raise PgadError('42602', f'invalid model name "{name}": it holds "@"',
                        detail='A version\'s own functions are named with "@" and its number (pgad_models."m@2"): '
                               'a model of a name that holds "@" could take or block them.',
                        hint='Train the model under a name without "@".')


def check_names(name, loss):
    """The error unless the functions pgad would create for model `name` under loss take names of their own: a model
    named like one of them ("a_probability" of a logistic model "a"), or a model whose functions would take this
    model's name, is refused whichever came first; so is a function name past PostgreSQL's NAMEDATALEN; and a model
    named like a sequence model's forecast function (check_forecast_names)."""
    check_forecast_names(name, False)
    for suffix in suffixes(loss, name):
        extra = f'{name}_{suffix}'
        if len(extra.encode()) >= NAMEDATALEN:
            raise PgadError('42622', f'the {suffix} function of model "{name}" would be named "{extra}", longer '
                                     f'than {NAMEDATALEN - 1} bytes',
                            detail=f'A model trained with loss \'{loss}\' also gets {function_name(extra)}.',
                            hint='Train the model under a shorter name.')
        if owners(extra):
            raise PgadError('42710', f'model "{extra}" exists, and the {suffix} function of model "{name}" would '
                                     'take its name',
                            detail=f'A model trained with loss \'{loss}\' also gets {function_name(extra)}.',
                            hint=f'Train model "{name}" under another name, or drop model "{extra}".')
    for kind, extras in [*EXTRAS.items(), (None, (EXPLAIN,))]:
        for suffix, *_ in extras:
            base = name[:-len(suffix) - 1]
            if name.endswith('_' + suffix) and base and any(
                    kind is None or r['loss'] == kind for r in server.query(OWNERS, [base], ['pg_catalog.text'])):
                article = 'an' if suffix[0] in 'aeiou' else 'a'
                raise PgadError('42710', f'model "{base}" has {article} {suffix} function named "{name}"',
                                detail=f'A model trained with loss \'{kind}\' also gets {function_name(name)}.'
                                if kind else f'Every model also gets {function_name(name)}.',
                                hint='Train the model under another name.')


def extras(name, loss, signature):
    """(suffix, signature) of each function pgad created beside model `name`'s scoring function, recorded as
    signature, for its loss: the same arguments under the names <name>_<suffix> (none for a signature that is not
    in the form store records)."""
    arguments = _arguments(name, signature)
    if arguments is None:
        return []
    return [(suffix, f'{function_name(deployed_name(name, suffix))}{arguments}') for suffix in suffixes(loss, name)]


def _arguments(name, signature):
    """The argument types of a recorded signature of model `name`, '(pg_catalog.float8, …)'; None for a signature
    that is not in the form store records."""
    prefix = f'{SCHEMA}.{quote_ident(name)}('
    return signature[len(prefix) - 1:] if (signature or '').startswith(prefix) else None


def quote_ident(name):
    """PostgreSQL's quote_ident, as the recorded scoring_function writes the model's name."""
    return server.query('SELECT pg_catalog.quote_ident($1) AS name', [name], ['pg_catalog.text'])[0]['name']


def check_owner(name, found, caller, dropping=False):
    """The error unless `caller` may replace (or drop) model `name`, whose rows `found` roles trained: a name belongs
    to the role that trained it first; a superuser may replace or drop anyone's."""
    if not found or found == [caller] or server.query(SUPERUSER, [caller], ['pg_catalog.text'])[0]['rolsuper']:
        return
    owner = next(role for role in found if role != caller)
    raise PgadError('42501', f'model "{name}" belongs to role "{owner}"',
                    detail=f'A model belongs to the role that trained it first: only it, or a superuser, may '
                           f'{"drop" if dropping else "replace"} it.',
                    hint=None if dropping else 'Train it under another name, or ask that role (or a superuser) to '
                                               'drop it.')


def owners(name):
    """The roles that trained the rows of model `name` (none when there is no such model)."""
    return list(dict.fromkeys(r['owner'] for r in server.query(OWNERS, [name], ['pg_catalog.text'])))


def current_user():
    return server.query(ME)[0]['me']


def group_types(group_by, types, what='group_by'):
    """The types a scoring function takes its group columns as (group_by's columns, types: their schema-qualified
    type names): a domain's base type, followed down through domains over domains, so that neither the function's
    arguments nor its comparisons run a domain's CHECK constraints, which are its owner's code. A type that neither
    a superuser nor the caller owns (an enum, a range) is refused: the function would depend on it."""
    bases = []
    for column, kind in zip(group_by, types):
        base = server.query(BASE_TYPE, [kind], ['pg_catalog.text'])[0]
        if not base['trusted']:
            shown = printer.identifier(column)
            raise PgadError('0A000', f'column "{column}" of {what} is of type {base["name"]}, which role '
                                     f'"{base["owner"]}" owns',
                            detail='A scoring function compares the group column as its type, and anyone may call '
                                   'it: it uses only the types of superusers and of the role that trains.',
                            hint=f'Cast the column to a built-in type in the data query ({shown}::text AS {shown}).')
        bases.append(base['name'])
    return bases


def _argument(column, k, grouped):
    """The SQL of a column the model reads, its argument $k: as float8, a boolean one (parser.Column.boolean) as the 1
    or 0 the loader packed it as."""
    if column.boolean:
        return f'(${k})::pg_catalog.int4::pg_catalog.float8'
    return f'(${k})::pg_catalog.float8' if grouped else f'${k}'


def _imputed(argument, stored, kind='pg_catalog.float8'):
    """The SQL of an argument whose NULL is imputed (stored: options.impute's {"value": …} of its column, or None):
    coalesce(argument, value), the value a literal of kind (a float8 written as Python's repr writes it, which
    PostgreSQL reads back to the same bits; a category quoted as quote_literal quotes it)."""
    if stored is None:
        return argument
    value = stored['value']
    literal = repr(float(value)) if kind == 'pg_catalog.float8' else str(value)
    return f'COALESCE({argument}, {printer.quote_literal(literal)}::{kind})'  # a keyword, not a function


class Scoring:
    """The scoring function of a model: its arguments, and its body from the model DAG and each group's weights."""

    def __init__(self, name, model, group_by=(), group_types=(), max_chars=None, unrolled=None, categories=None,
                 classes=None, explanation=None, imputed=None):
        """unrolled: for a model with vectors, (its unrolled Lambda, its prediction as an array of that Lambda's
        nodes, {array column: length}): the function takes a float8[] for an array column and returns a float8[]
        for a vector prediction. categories: {column indexing a categorical weight: (its base type, its categories)},
        each taken as its type and coded by a CASE (categorical.scoring_code). classes: a model of classes'
        (models/classes.py's Classes, or None): its class function returns the label's type. explanation: (the
        model's attribution.Explainer, each fit's options.baseline in fits' order, options.classes or None), or
        (None, why) for a model that gets no <name>_explain. imputed: {column: {"value": …}} (options.impute,
        models/preprocess.py), each such column read as coalesce($k, value): a NULL there is scored as training
        imputed it."""
        self.categories = categories = categories or {}
        self.imputed = imputed or {}
        self.classes = classes
        self.explanation = explanation
        self.name, self.model, self.group_by, self.max_chars = name, model, list(group_by), max_chars
        lam, self.outputs, lengths = unrolled or (model, np.array(model.graph.expr(model.root), dtype=object), {})
        self.lam = lam
        if self.outputs.ndim > 1:
            raise PgadError('0A000', 'pgad.train takes a model whose prediction is a number or a vector, not a '
                                     f'{"×".join(map(str, self.outputs.shape))} matrix',
                            hint='Predict a vector (its scoring function returns a float8[]), or a number.')
        params = [(g, t) for g, t in zip(group_by, group_types)]
        params += [(c, 'pg_catalog.float8[]' if c in lengths else categories[c][0] if c in categories else
                    'pg_catalog.bool' if c.boolean else 'pg_catalog.float8') for c in model.columns
                   if c not in self.group_by]
        self.params = params
        at = {p: k + 1 for k, (p, _) in enumerate(params)}
        self.columns = {c: _imputed(_argument(c, at[c], c in self.group_by), self.imputed.get(c)) if c not in
                        categories else categorical.scoring_code(
                            _imputed(f'${at[c]}', self.imputed.get(c), categories[c][0]), categories[c][1],
                            categories[c][0])
                        for c in model.columns if c not in lengths}
        self.columns.update({vectors.element(c, (k + 1,)): f'(${at[c]})[{k + 1}]' for c, n in lengths.items()
                             for k in range(n)})
        self.returns = 'pg_catalog.float8[]' if self.outputs.ndim else 'pg_catalog.float8'
        self.group_types = list(group_types)
        self.lengths = [(c, at[c], n) for c, n in lengths.items()]

    @property
    def identity(self):
        """The function's name and argument types: what names it in DROP FUNCTION and COMMENT ON FUNCTION."""
        return self.identity_of(self.name)

    def identity_of(self, name):
        return f'{function_name(name)}({", ".join(t for _, t in self.params)})'

    @property
    def signature(self):
        return self.signature_of(self.name)

    def signature_of(self, name):
        return f'{function_name(name)}({", ".join(printer.quote_ident(p) + " " + t for p, t in self.params)})'

    def functions(self, loss, fits):
        """{suffix ('' for the scoring function): (identity, signature, what it returns, body, comment)} of each
        function pgad creates for the model under loss (EXTRAS: a model predicting a vector gets none)."""
        made = {'': (self.identity, self.signature, self.returns, self.body(fits), SCORING_COMMENT)}
        for suffix, returns, of, comment in EXTRAS.get(loss, ()) if not self.outputs.ndim or loss in VECTOR_EXTRAS \
                else ():
            if suffix == 'class' and self.classes is not None:  # the label's own type
                returns, of = self.classes.type, lambda x: chosen(x, self.classes, bool(self.outputs.ndim))
            extra = f'{self.name}_{suffix}'
            made[suffix] = (self.identity_of(extra), self.signature_of(extra), returns,
                            self.body(fits, of, returns), comment)
        explained = self.explained(fits)
        if explained is not None:
            extra = f'{self.name}_{EXPLAIN[0]}'
            made[EXPLAIN[0]] = (self.identity_of(extra), self.signature_of(extra), EXPLAIN[1], explained, EXPLAIN[3])
        return made

    def explained(self, fits):
        """The body of <name>_explain (attribution.explanation_sql per group), or None with a NOTICE saying why the
        model gets none: its explainer could not be built, or its text passes the printer's budget (54001)."""
        if self.explanation is None:
            return None
        explainer, baselines, *classes = self.explanation
        why = baselines if explainer is None else None
        if EXPLAIN[0] not in suffixes(None, self.name):
            explainer, why = None, f'its name would be longer than {NAMEDATALEN - 1} bytes'
        if explainer is not None:
            try:
                left = [self.max_chars or printer.budget(limits.DEFAULT)]  # the budget of all the groups' text

                def value(weights, shown):
                    text = attribution.explanation_sql(explainer, self.columns, weights, shown,
                                                       classes[0] if classes else None, max(left[0], 1))
                    left[0] -= len(text)
                    return text
                if not self.group_by:
                    (_, weights), = fits
                    text = value(weights, baselines[0])
                else:
                    text = 'CASE ' + ' '.join(f'WHEN {self.matches(values)} THEN {value(weights, shown)}'
                                              for (values, weights), shown in zip(fits, baselines)) + ' END'
                return self.checked(text, EXPLAIN[1])
            except PgadError as e:
                if e.sqlstate != '54001':
                    raise
                why = f'its explanation is too long to write as SQL ({e.message})'
        server.notice(f'model "{self.name}" gets no {function_name(self.name + "_" + EXPLAIN[0])} function: {why}')
        return None

    def body(self, fits, of=None, returns=None):
        """The SQL expression the function returns: fits is [(the group's values as to_jsonb writes them, or None
        without groups, its weights)]; of(x) writes what the function returns of the score x (the score itself when
        None), returns its type. An array argument of another length than the model's raises 2202E."""
        def value(weights):
            if not self.outputs.ndim:
                x = sql.expression(self.lam, self.outputs[()].id, self.columns, weights, self.max_chars)
                return of(x) if of else x
            x = 'ARRAY[' + ', '.join(sql.expression(self.lam, e.id, self.columns, weights, self.max_chars)
                                     for e in self.outputs) + ']::pg_catalog.float8[]'
            return of(x) if of else x
        if not self.group_by:
            (_, weights), = fits
            return self.checked(value(weights), returns or self.returns)
        arms = [f'WHEN {self.matches(values)} THEN {value(weights)}' for values, weights in fits]
        return self.checked('CASE ' + ' '.join(arms) + ' END', returns or self.returns)

    def checked(self, text, returns):
        """text, for arguments that training would have taken: NULL where a column the model reads (and does not
        impute) is NULL, or an array argument is or holds one (training skips such a row; GREATEST, LEAST and CASE in
        text would give a number); pgad._wrong_length's error (2202E) where an array is not one-dimensional from
        index 1 with the model's length (training refuses it; PostgreSQL's v[k] would read NULL or another element),
        the argument named with its dimensions where only its shape is wrong. The CASE and pgad._wrong_length
        (IMMUTABLE) keep the function inlinable."""
        at = {p: k + 1 for k, (p, _) in enumerate(self.params)}
        arms = []
        for column, k, n in self.lengths:
            name = printer.quote_literal(str(column)) + '::pg_catalog.text'
            shown = f'CASE WHEN pg_catalog.cardinality(${k}) OPERATOR(pg_catalog.=) {n} THEN ' \
                f'{name} OPERATOR(pg_catalog.||) pg_catalog.array_dims(${k}) ELSE {name} END'
            wrong = f"pg_catalog.cardinality(${k}) OPERATOR(pg_catalog.<>) {n} OR " \
                f"pg_catalog.array_dims(${k}) OPERATOR(pg_catalog.<>) '[1:{n}]'::pg_catalog.text"
            arms.append(f'WHEN ({wrong}) THEN pgad._wrong_length({shown}, {n}, pg_catalog.cardinality(${k}), '
                        f'NULL::{returns})')
        nulls = [f'${at[c]} IS NULL' for c in self.model.columns if c not in self.imputed]
        nulls += [f'pg_catalog.array_position(${k}, NULL::pg_catalog.float8) IS NOT NULL' for _, k, _ in self.lengths]
        if nulls:
            arms.append(f'WHEN {" OR ".join(nulls)} THEN NULL::{returns}')
        if not arms:
            return text
        return f'CASE {" ".join(arms)} ELSE {text} END'

    def matches(self, values):
        tests = []
        for k, (text, kind) in enumerate(zip(values, self.group_types)):
            if text is None:  # to_jsonb(NULL) is NULL: the group of the rows whose value is NULL
                tests.append(f'${k + 1} IS NULL')
                continue
            literal = json.loads(text) if text.startswith('"') else text
            tests.append(f'${k + 1} OPERATOR(pg_catalog.=) {printer.quote_literal(literal)}::{kind}')
        return '(' + ' AND '.join(tests) + ')'


def deployed_name(name, suffix):
    """The name of model `name`'s deployed function of suffix ('' for its scoring function)."""
    return f'{name}_{suffix}' if suffix else name


def own_names(name, suffixes, version):
    """{suffix: name} of version `version`'s own functions of model `name`, which the deployed ones call while it is
    deployed: each free when chosen (pgad._version_function_name: "<name>@3", "<name>_explain@3", or another where
    that is taken or too long), recorded in the version's rows (functions). Called by the writer, under its lock."""
    names = {}
    for suffix in suffixes:
        names[suffix] = server.query(OWN_NAME, [deployed_name(name, suffix), version, list(names.values())],
                                     ['pg_catalog.text', 'pg_catalog.int4', 'pg_catalog.text[]'])[0]['name']
    return names


def own_functions_of(name, row):
    """{suffix: (its name, FUNCTION's row)} of the own functions of the version whose row is given: those its row
    records (functions), with the arguments its signature records, owned by the role that trained it."""
    arguments = _arguments(name, row['scoring_function'])
    if arguments is None:
        return {}
    return {suffix: (own, f) for suffix, own in json.loads(row['functions']).items()
            for f in function(f'{function_name(own)}{arguments}') if f['owner'] == row['trained_by']}


def store(scoring, rows, fits, deploy=True):
    """Store rows (dicts of pgad.model_versions' columns) as the next version of model scoring.name, create that
    version's own functions (own_names: the model's scoring function and the others, its weights written in) and,
    as deploy says (True, False or 'if_better': if its validation loss is lower than the deployed version's),
    deploy it: the version's stored rows as PostgreSQL returns them.

    The functions are created as the caller, who owns them, after the writer's lock (write) is taken: two
    transactions storing or deploying a model take turns. A version's functions take names that no function has
    (own_names), so no role's function of a name blocks it; a function of a deployed name that pgad did not create
    (another role's, or the caller's own of another shape) is refused, never replaced (_create). Before anything is
    stored, publish.check says what pgad.publish_data_values says of the values of the data that their bodies hold (a
    WARNING, or 42501)."""
    name, me, read = scoring.name, current_user(), relations_read()
    check_new(name)
    check_owner(name, owners(name), me)
    loss = rows[0]['loss']
    check_names(name, loss)
    made = scoring.functions(loss, fits)
    publish.check(scoring, made, read)  # pgad.publish_data_values: before anything is stored
    shown = f'{SCHEMA}.{quote_ident(name)}({", ".join(t for _, t in scoring.params)})'  # as psql would write it
    stored = _write(dict(op='store', name=name, caller=me, function=shown, read_from=read, suffixes=list(made),
                         rows=[[row.get(c) for c in STORED] for row in rows]))
    version, own = stored[0]['version'], json.loads(stored[0]['functions'])
    stable = hasattr(scoring, 'stored')
    if stable:  # a keyed model's weights: its tables, named after the version's functions, then the bodies
        made = scoring.stored(stored, own[''], fits, loss)
    _create(name, {suffix: (scoring.identity_of(own[suffix]), scoring.signature_of(own[suffix]), returns, body,
                            f'{comment}; version {version}')
                   for suffix, (_, _, returns, body, comment) in made.items()}, [str(p) for p, _ in scoring.params],
            stable)
    if deploy:
        stored = _deploy(name, me, version, if_better=deploy == 'if_better') or stored
    _prune(name, me)
    return stored


def deploy(name, version=None, strategy=None):
    """pgad.deploy: make version `version` of model `name`, or the one strategy picks (STRATEGIES), the deployed
    one; its rows."""
    if name is None:
        raise PgadError('22004', 'argument "name" of pgad.deploy must not be NULL')
    if (version is None) == (strategy is None):
        raise PgadError('22023', 'pgad.deploy takes a version or a strategy, one of them',
                        hint="Give version => 3, or strategy => 'best_validation', 'most_recent' or 'previous'.")
    strategy = 'previous' if strategy == 'rollback' else strategy  # PostgresML's word for it
    if strategy is not None and strategy not in STRATEGIES:
        raise PgadError('22023', f'unknown deployment strategy "{strategy}"',
                        hint="The strategies are 'best_validation', 'most_recent' and 'previous' (or 'rollback').")
    me = current_user()
    found = owners(name)
    if not found:
        raise missing(name)
    check_owner(name, found, me)
    return _deploy(name, me, version, strategy)


def _deploy(name, me, version=None, strategy=None, if_better=False):
    """Deploy a version of model `name` (the writer picks it, under its lock: write, chosen) and point the deployed
    functions at its own: its rows, or none where if_better found it no better."""
    _write(dict(op='lock', name=name, caller=me))
    ours = _deployed_functions(name)  # before the deployment: the functions pgad made for a version deployed before
    rows = _write(dict(op='deploy', name=name, caller=me, version=version, strategy=strategy, if_better=if_better))
    if rows:
        row = rows[0]
        made, names = _wrappers(name, row)
        stable = any(f['volatility'] != 'i' for _, f in own_functions_of(name, row).values())
        with _as(row['trained_by'], me):
            _point(name, row['loss'], made, names, row['trained_by'], ours, stable)
            forecast_made(name, row)
    return rows


@contextlib.contextmanager
def _as(owner, me):
    """The deployed functions made as the role that trained the version (owner), who owns its functions: a
    superuser deploying another role's version (write checked that only such a one may) makes them as that role, so
    that they call nothing of another role's (FOREIGN) and stay the model's owner's. SET LOCAL ROLE, then the
    caller's role setting again."""
    if owner == me:
        yield
        return
    was = server.query("SELECT pg_catalog.current_setting('role') AS role")[0]['role']
    server.query("SELECT pg_catalog.set_config('role', $1, true)", [owner], ['pg_catalog.text'])
    try:
        yield
    finally:
        server.query("SELECT pg_catalog.set_config('role', $1, true)", [was], ['pg_catalog.text'])


def _deployed_functions(name):
    """{(suffix, oid): FUNCTION's row} of the deployed functions pgad created for model `name` (RECORDED), owned by
    the role that trained the version that recorded them."""
    return {(suffix, f['oid']): f for r in server.query(RECORDED, [name], ['pg_catalog.text'])
            for suffix, signature in [('', r['signature']), *extras(name, r['loss'], r['signature'])]
            for f in function(signature) if f['owner'] == r['owner']}


def _wrappers(name, row):
    """({suffix: (identity, signature, returns, body, comment)}, the arguments' names) of the deployed functions of
    model `name` that call the own functions (own_functions_of) of the version whose row is given. A version without
    them cannot be deployed; nor one whose call another role's function would make ambiguous (check_unambiguous)."""
    own, version, loss = own_functions_of(name, row), row['version'], row['loss']
    if '' not in own:
        recorded = json.loads(row['functions']).get('')
        raise PgadError('55000', f'version {version} of model "{name}" has no scoring function of its own',
                        detail=f'{function_name(recorded)} does not exist, or another role than '
                               f'"{row["trained_by"]}" owns it.' if recorded else
                        'Its rows record no function of its own.',
                        hint='Train the model again, and deploy that version.')
    comments = {'': SCORING_COMMENT, EXPLAIN[0]: EXPLAIN[3], **{e[0]: e[3] for e in EXTRAS.get(loss, ())}}
    names = list(own[''][1]['names'])
    made = {}
    for suffix, (called, f) in own.items():
        check_unambiguous(name, f)
        deployed = function_name(deployed_name(name, suffix))
        arguments = ', '.join(printer.quote_ident(n) + ' ' + t for n, t in zip(f['names'], f['types']))
        made[suffix] = (f'{deployed}({", ".join(f["types"])})', f'{deployed}({arguments})', f['qualified_result'],
                        f'{function_name(called)}({", ".join(f"${k + 1}" for k in range(len(f["types"])))})',
                        f'{comments[suffix]}; version {version}')
    return made, names


def _point(name, loss, made, names, me, ours, stable=False):
    """Make model `name`'s deployed functions made's ({suffix: (identity, signature, returns, body, comment)}),
    their arguments named names: of the functions in pgad_models, only those the model's rows record (a version's
    scoring_function, and the functions beside it) are dropped or replaced, never another of that name: another
    role's overload stays, and so does a function of the new signature that pgad did not create for this model
    (refused, unless the caller owns it); ours: _deployed_functions before the deployment; stable: the version's
    functions read tables (a keyed model's weights: weight_tables.py), and so do these."""
    for (suffix, _), found in ours.items():
        what = f'{suffix} function' if suffix else 'scoring function'
        target = function(made[suffix][0]) if suffix in made else []
        same = bool(target) and found['oid'] == target[0]['oid']
        reshaped = same and reshaping(found, made[suffix][2], names)
        if same and found['mine'] and not reshaped:
            continue  # CREATE OR REPLACE keeps it, and what uses it
        change = ('the model gets none this time' if suffix == EXPLAIN[0] else
                  f'the model\'s loss \'{loss}\' has none') if suffix not in made else \
            'its arguments change' if not same else reshaped or \
            f'it belongs to role "{found["owner"]}", and would be replaced by one of role "{me}"'
        now = f'{made[suffix][0]} RETURNS {made[suffix][2]}' if suffix in made else 'none'
        if found['users']:
            raise _in_use(name, what, change, found, now, found['users'])
        if not suffix and suffix in made and not same:  # a caller's query of the old arguments fails from now on
            server.notice(f'model "{name}": its scoring function takes other arguments now: {made[suffix][0]}, '
                          f'was {found["identity"]}')
        try:
            server.query(f'DROP FUNCTION {found["identity"]}')
        except server.SPIError as e:  # an object made to use it since ours was read: said as the check says it
            if getattr(e, 'sqlstate', None) != '2BP01':
                raise
            users = (function(found['identity']) or [found])[0]['users'] or 'another object'
            raise _in_use(name, what, change, found, now, users) from None
    _create(name, made, names, stable)


def _in_use(name, what, change, found, now, users):
    """The error of a deployed function (found: FUNCTION's row) that _point would drop or replace (change: why, now:
    what replaces it) while other objects (users) depend on it."""
    return PgadError('2BP01', f'cannot replace the {what} of model "{name}": {change}, and other objects depend on it',
                     detail=f'The function was {found["identity"]} RETURNS {found["result"]}, now {now}. '
                            f'It is used by: {users}.',
                     hint='Drop or change those objects, then train (or deploy) again.')


def _create(name, made, names, stable=False):
    """CREATE OR REPLACE each of made's functions ({suffix: (identity, signature, returns, body, comment)}, their
    arguments named names) as the caller, refusing one of that name that is another role's, or the caller's own of
    another shape; then what it depends on is checked (FOREIGN). stable: they read tables (a keyed model's weights),
    STABLE then, not IMMUTABLE."""
    for suffix, (identity, signature, returns, body, comment) in made.items():
        what = f'{suffix} function' if suffix else 'scoring function'
        target = function(identity)
        if target and not target[0]['mine']:
            raise PgadError('42501', f'function {target[0]["identity"]} exists and belongs to role '
                                     f'"{target[0]["owner"]}"',
                            detail=f'pgad.train did not create it for model "{name}", and would replace its body but '
                                   'not its owner.',
                            hint='Train the model under another name, or ask that role (or a superuser) to drop the '
                                 'function.')
        reshaped = target and reshaping(target[0], returns, names)
        if reshaped:  # the caller's own function, which pgad did not create for the model: never dropped here
            raise PgadError('42P13', f'function {target[0]["identity"]} exists, and pgad.train did not create it '
                                     f'for model "{name}"',
                            detail=f'The {what} would replace it, but {reshaped}, which CREATE OR REPLACE cannot '
                                   'change; pgad.train drops only the functions it created.',
                            hint=f'Drop the function (DROP FUNCTION {target[0]["identity"]}), or train the model '
                                 'under another name.')
        server.query(f'CREATE OR REPLACE FUNCTION {signature} RETURNS {returns} LANGUAGE sql '
                     f'{"STABLE" if stable else "IMMUTABLE"} PARALLEL SAFE RETURN {body}')
        created = function(identity)[0]
        check_unambiguous(name, created)
        for found in server.query(FOREIGN, [created['oid']], ['pg_catalog.oid']):
            raise PgadError('42501', f'the {what} of model "{name}" would use {found["what"]}, which '
                                     f'role "{found["owner"] or "?"}" owns',
                            detail='Anyone may call a scoring function: it uses only the objects of superusers and of '
                                   'the role that trains.',
                            hint='Cast the column to a built-in type in the data query.')
        server.query(f"COMMENT ON FUNCTION {identity} IS {printer.quote_literal(comment)}")


def _prune(name, me):
    """Drop the versions of model `name` past the newest pgad.keep_versions that are not deployed, oldest first; a
    version whose functions other objects use is kept, with a NOTICE: one found so before, or one whose DROP meets an
    object made since (a late 2BP01, its drop rolled back)."""
    keep = server.query(KEEP)[0]['keep']
    old = [v['version'] for v in server.query(VERSIONS, [name], ['pg_catalog.text']) if not v['deployed']]
    for version in old[:max(len(old) - keep, 0)]:
        rows = server.query(VERSION_ROWS, [name, version], ['pg_catalog.text', 'pg_catalog.int4'])
        used = [f['identity'] for f in _own_functions(name, rows) if f['users']]
        if not used:
            try:
                with server.subtransaction():
                    _drop_functions(name, _write(dict(op='drop_version', name=name, caller=me, version=version)),
                                    public=False)
                continue
            except PgadError as e:
                if e.sqlstate != '2BP01':
                    raise
                used = [f['identity'] for f in _own_functions(name, rows)]
        server.notice(f'model "{name}": version {version} is kept past pgad.keep_versions, since other objects use '
                      f'its functions ({", ".join(used)})')


def _own_functions(name, rows):
    """The functions of the versions whose rows are given (own_functions_of), owned by the role that trained each."""
    return list({f['oid']: f for r in rows for _, f in own_functions_of(name, r).values()}.values())


def _drop_functions(name, rows, public):
    """Drop the functions of the versions whose rows were deleted: the deployed ones first (public: they call a
    version's own), then each version's own; objects that depend on one are named (dependents)."""
    try:
        if public:
            for signature, owner, loss in {(r['scoring_function'], r['trained_by'], r['loss']) for r in rows}:
                for _, each in [*extras(name, loss, signature), ('', signature)]:
                    for found in function(each):
                        if found['owner'] == owner:
                            server.query(f'DROP FUNCTION {found["identity"]}')
        for found in _own_functions(name, rows):
            server.query(f'DROP FUNCTION {found["identity"]}')
        weight_tables.drop(rows)
    except server.SPIError as e:
        raise dependents(e, name) from None


@contextlib.contextmanager
def reading():
    """While a training runs: pgad.so notes the relations it reads (RELATIONS), which relations_read gives."""
    library = server.native()
    if library is None:
        yield
        return
    library.pgad_reads_begin()
    try:
        yield
    finally:
        library.pgad_reads_end()


def relations_read():
    """The oids of the relations the training read (RELATIONS): every one its data, validation and category queries
    read, as the executor checked them, and nothing the transaction read before; without pgad.so's notes, more
    (RELATIONS_LOCKED)."""
    library = server.native()
    count = -1 if library is None else library.pgad_reads(None, 0)
    if count < 0:
        return [r['oid'] for r in server.query(RELATIONS_LOCKED)]
    oids = (ctypes.c_uint32 * max(count, 1))()
    count = library.pgad_reads(oids, count)
    return [r['oid'] for r in server.query(RELATIONS, [list(oids[:count])], ['pg_catalog.oid[]'])]


def reshaping(found, returns, names):
    """What a new function returning `returns` (a type's name) with arguments named `names` changes of the function
    found (FUNCTION's row) of the same name and argument types, that CREATE OR REPLACE refuses to change (42P13): its
    result type or its arguments' names, in words; None when CREATE OR REPLACE can replace it."""
    new = server.query(TYPE, [returns], ['pg_catalog.text'])[0]
    if found['returns'] != new['oid']:
        return f'its result changes from {found["result"]} to {new["shown"]}'
    if list(found['names']) != names:
        return f'its arguments are renamed from {", ".join(map(printer.quote_ident, found["names"]))} to ' \
            f'{", ".join(map(printer.quote_ident, names))}'
    return None


def check_unambiguous(name, found):
    """The error unless a call of the function found (FUNCTION's row), one of model `name`'s, means it alone: another
    function of its name taking its arguments and more, with defaults (AMBIGUOUS), would make every call of it
    PostgreSQL's 42725; pgad's error names that function and its owner. A version's own functions take names no
    function has (own_names): this stops a deployment, or a deployed function, that another role's made ambiguous."""
    for other in server.query(AMBIGUOUS, [found['oid']], ['pg_catalog.oid']):
        raise PgadError('42501', f'function {other["identity"]} of role "{other["owner"]}" makes calls of '
                                 f'{found["identity"]} ambiguous',
                        detail=f'It takes the arguments of model "{name}"\'s function and more, with defaults: '
                               'PostgreSQL could not tell which of the two a call means.',
                        hint=f'Ask role "{other["owner"]}" (or a superuser) to drop it (DROP FUNCTION '
                             f'{other["identity"]}), or train the model under another name.')


def function(signature):
    """The function of pgad_models that signature names, as [FUNCTION's row], or [] when there is none (or the text
    names no function: a row written by hand before 0.10.0)."""
    try:
        return server.query(FUNCTION, [signature], ['pg_catalog.text'])
    except server.SPIError as e:  # to_regprocedure's syntax errors (42601, 42602, 22P02): no function
        if not (e.sqlstate or '').startswith(('42', '22')):
            raise
        return []


# A model's rows as pgad.evaluate and pgad.summary read them, its groups in order: the deployed version's, or
# version $2's.
ROWS = (f'SELECT m.group_key::pg_catalog.text AS group_key, m.model, m.loss, m.weights::pg_catalog.text AS weights, '
        f'm.options::pg_catalog.text AS options, m.data, m.trained_by::pg_catalog.text AS trained_by, m.converged, '
        f'm.version, m.scoring_function, m.functions::pg_catalog.text AS functions '
        f'FROM pgad.model_versions AS m WHERE m.name {EQ} $1 AND (m.version {EQ} $2 OR $2 IS NULL AND m.deployed) '
        'ORDER BY m.group_key')
READABLE = f'SELECT pg_catalog.count(*) AS n FROM pgad.model_versions AS m WHERE m.name {EQ} $1'


def rows(name, version=None):
    """The rows of model `name`'s deployed version in pgad.models, or of version `version` (ROWS); the error when
    there is none, or none the caller may read."""
    found = server.query(ROWS, [name, version], ['pg_catalog.text', 'pg_catalog.int4'])
    if not found:
        if not owners(name):
            raise missing(name)
        if not server.query(READABLE, [name], ['pg_catalog.text'])[0]['n']:
            raise hidden(name)
        if version is not None:
            raise PgadError('42704', f'version {version} of model "{name}" does not exist',
                            hint='The versions of a model are listed in pgad.model_versions.')
        raise PgadError('55000', f'model "{name}" has no deployed version',
                        hint='Deploy one (pgad.deploy), or name a version.')
    return found


def missing(name):
    versioned = re.fullmatch(r'(.+)@(\d+)', name)
    return PgadError('42704', f'model "{name}" does not exist',
                     hint=f"A version is named by the version argument: '{versioned.group(1)}', version => "
                          f"{versioned.group(2)} (pgad.evaluate, pgad.predict)." if versioned else
                     'The models are listed in pgad.models.')


def hidden(name):
    """The error of a model whose rows the caller may not read: its name and owner are public (its scoring function
    is in pg_proc), its rows are not (pgad.models' policy, docs/security.md)."""
    return PgadError('42501', f'permission denied for model "{name}"',
                     detail='A model\'s rows are read by the role that trained it, the roles with its privileges, and '
                            'the roles that may read every relation its training read (pgad.models.read_from).',
                     hint='Ask for SELECT on the relations the model was trained on, or train a model of your own.')


def drop(name, version=None):
    """Drop model `name`: every version's rows in pgad.model_versions and the functions pgad created for them; or,
    with a version, that version's alone, which must not be the deployed one."""
    me = current_user()
    found = owners(name)
    if not found:
        raise missing(name)
    check_owner(name, found, me, dropping=True)
    if version is not None:
        _drop_functions(name, _write(dict(op='drop_version', name=name, caller=me, version=version)), public=False)
        return
    rows = _write(dict(op='drop', name=name, caller=me))
    _drop_functions(name, rows, public=True)
    for owner in {r['trained_by'] for r in rows}:
        forecast_dropped(name, owner)


def dependents(error, name):
    """error, or for objects that depend on the scoring function (2BP01), the error that names them and says to drop
    them first: pgad.drop_model has no CASCADE."""
    if getattr(error, 'sqlstate', None) != '2BP01':
        return error
    detail = (getattr(error, 'spidata', None) or (None, None))[1] or ''
    objects = re.findall(r'^((?:materialized )?view|function|rule|constraint|default value|trigger) (.+?) depends on ',
                         detail, re.MULTILINE)
    drops = '; '.join(f'DROP {kind.upper()} {what}' for kind, what in objects
                      if kind in ('view', 'materialized view', 'function'))
    return PgadError('2BP01', f'cannot drop model "{name}" because other objects depend on its scoring function',
                     detail=detail or None,
                     hint=(f'Drop them first ({drops}), then the model' if drops else 'Drop them first, then the model')
                     + ': pgad.drop_model drops no other object.')


# pgad.models is written by pgad._write_models alone (extension/sql), a SECURITY DEFINER function of the extension's
# owner: no other role may INSERT, UPDATE or DELETE. It takes no argument: store and drop leave what to write here,
# with the caller they read as the caller, and call it at once; it takes that and writes it. Only Python code in this
# backend can leave a write, which is pgad's own (PL/Python is untrusted: only a superuser creates functions in it),
# and nothing runs between the leaving and the writing that another role wrote (no trigger on pgad.models; event
# triggers are a superuser's): called any other way, nothing is waiting, and it refuses.
_waiting = []
RAISED = 'plpy.Error: '  # how PL/Python words an error pgad raised, met in a query
# how PL/Python words a server error that pgad._write_models passed on (a cancel while it waits for LOCK, a deadlock)
PASSED = re.compile(r'spiexceptions\.\w+: ')


# The rows pgad._write_models returns, read_from as oids: pgad.train and pgad.deploy return them as the caller, who
# may not USE the schema of a relation the training read (a view's, a SECURITY DEFINER function's), and a relation's
# name is looked up in its schema as the caller, an oid is not.
WRITE = 'SELECT w.*, w.read_from::pg_catalog.oid[] AS read_oids FROM pgad._write_models() AS w'


def _by_oid(row):
    row['read_from'] = row.pop('read_oids')
    return row


def _write(job):
    """What pgad._write_models returns for job; its refusal is raised here as pgad's own error, and a server error it
    passed on (a cancel, a statement_timeout) as the server's own, in the server's words."""
    _waiting[:] = [job]
    try:
        return [_by_oid(row) for row in server.query(WRITE)]
    except server.SPIError as e:
        message = str(e.args[0]) if e.args else ''
        spidata = getattr(e, 'spidata', None) or ()
        detail = spidata[1] if len(spidata) > 1 else None
        passed = PASSED.match(message)
        if passed and spidata:
            raise server.spi_error(spidata[0], message[passed.end():], detail, server.hint_of(e)) from None
        if not message.startswith(RAISED):
            raise
        raise PgadError(e.sqlstate, message[len(RAISED):], detail=detail, hint=server.hint_of(e)) from None
    finally:
        _waiting.clear()


@server.entry
def write():
    """pgad._write_models(): the write that store, deploy or drop left, checked again under a lock that orders every
    writer of the catalog (a name belongs to the role that trained it first; a superuser may replace or drop
    anyone's), the name claimed in pgad.model_names (CLAIM: 40001 under a snapshot older than another training of
    it). The rows written (a new version's, or a deployed version's), or for a drop the rows deleted."""
    if not _waiting:
        raise PgadError('42501', 'permission denied for function pgad._write_models',
                        detail='It writes pgad.model_versions for pgad.train, pgad.deploy and pgad.drop_model, and '
                               'for nothing else.',
                        hint='Call pgad.train, pgad.deploy or pgad.drop_model.')
    job = _waiting.pop()
    server.query(LOCK)
    name, caller, op = job['name'], job['caller'], job['op']
    found = owners(name)
    if op in ('drop', 'drop_version', 'deploy', 'lock') and not found:
        raise missing(name)
    check_owner(name, found, caller, dropping=op.startswith('drop'))
    if op == 'lock':  # the lock alone, taken before what deploy reads
        return []
    if op == 'drop':
        deleted = _serialized(DELETE, name)
        server.query(UNCLAIM, [name], ['pg_catalog.text'])
        return deleted
    if op == 'store':
        _serialized(CLAIM, name)
        version = _serialized(NEXT, name)[0]['version']
        own = json.dumps(own_names(name, job['suffixes'], version))
        return [stored for row in job['rows'] for stored in
                server.query(INSERT, row + [job['function'], caller, job['read_from'], version, own], INSERT_TYPES)]
    versions = server.query(VERSIONS, [name], ['pg_catalog.text'])
    if op == 'drop_version':
        version = _existing(name, versions, job['version'])
        if version['deployed']:
            raise PgadError('55006', f'version {version["version"]} of model "{name}" is deployed',
                            detail='pgad_models."' + name + '" scores by it.',
                            hint='Deploy another version first (pgad.deploy), or drop the whole model.')
        return _serialized(DELETE_VERSION, name, version['version'])
    version = picked(name, versions, job['version'], job['strategy'], job['if_better'])
    if version is None:
        return []
    _serialized(UNDEPLOY, name, version)
    return _serialized(DEPLOY, name, version)


def _existing(name, versions, number):
    """The row of VERSIONS of version `number`; the error when model `name` has no such version."""
    for version in versions:
        if version['version'] == number:
            return version
    raise PgadError('42704', f'version {number} of model "{name}" does not exist',
                    hint='The versions of a model are listed in pgad.model_versions.')


def picked(name, versions, number, strategy, if_better):
    """The version of model `name` to deploy, from its VERSIONS rows: `number` (with if_better, None where its
    validation loss is not lower than the deployed version's), or the one strategy picks: 'most_recent' the
    newest; 'best_validation' the lowest validation loss (the newest of equals); 'previous' the version deployed
    last before the deployed one."""
    current = next((v for v in versions if v['deployed']), None)
    if number is not None:
        new = _existing(name, versions, number)
        if if_better and current is not None and current['validation'] is None:
            server.notice(f'model "{name}": version {number} is deployed: the deployed version '
                          f'{current["version"]} has no validation loss to compare with')
        if if_better and current is not None and current['validation'] is not None and not (
                new['validation'] is not None and new['validation'] < current['validation']):
            server.notice(f'model "{name}": version {number} is not deployed: its validation loss '
                          f'{new["validation"]:.6g} is not lower than version {current["version"]}\'s, '
                          f'{current["validation"]:.6g}')
            return None
        return number
    if strategy == 'most_recent':
        return versions[-1]['version']
    if strategy == 'best_validation':
        scored = [v for v in versions if v['validation'] is not None]
        if not scored:
            raise PgadError('55000', f'no version of model "{name}" has a validation loss',
                            hint='Train with validation => 0.2 (or a query) to compare versions.')
        return min(scored, key=lambda v: (v['validation'], -v['version']))['version']
    earlier = [v for v in versions if v['deployed_at'] is not None and v is not current]
    if current is None or not earlier:
        raise PgadError('55000', f'model "{name}" has no version deployed before '
                                 f'{"its deployed one" if current else "now"}',
                        hint='Deploy a version by its number: pgad.deploy(name, version => 3).')
    return max(earlier, key=lambda v: v['deployed_epoch'])['version']


def _serialized(sql, name, version=None):
    """server.query(sql, [name] or [name, version]), whose serialization failure (40001: a transaction that
    committed after this one's snapshot wrote model `name`, under repeatable read or serializable) is said in pgad's
    words."""
    try:
        if version is None:
            return server.query(sql, [name], ['pg_catalog.text'])
        return server.query(sql, [name, version], ['pg_catalog.text', 'pg_catalog.int4'])
    except server.SPIError as e:
        if getattr(e, 'sqlstate', None) != '40001':
            raise
        raise PgadError('40001', f'model "{name}" was written by another transaction since this one began',
                        detail='Under repeatable read or serializable, a transaction sees pgad.models as it was when '
                               'the transaction began, and another transaction has trained or dropped the model since.',
                        hint='Run the transaction again.') from None


# --- a sequence model's forecast function (docs/sql.md, "Forecasts") ------------------------------------------------
# pgad_models.<name>_forecast: a set-returning SQL function usable in views, whose rows are pgad.forecast's in the
# data's own columns (each group column and the order column, with their types; then step int4, forecast, lower,
# upper and level float8). It takes pgad.forecast's arguments but the name, and calls it with the model's: it
# forecasts with the deployed version, whichever that is, as the caller (who must be able to read the model, as for
# pgad.forecast). It is made (forecast_made) as a version of a sequence model is deployed, by the role that trained
# it, like the model's other deployed functions (_point): kept where its columns stay, dropped and made again where
# they change (2BP01 while a view uses it), dropped where a version that is no sequence model is deployed, and with
# the model. A function of its name and arguments that another role owns is refused (42501), never replaced. A model
# whose name leaves no room for the suffix, or whose columns would repeat a name, gets none, and a NOTICE says why.
FORECAST_SUFFIX = 'forecast'
FORECAST_ARGUMENTS = ('pg_catalog.int4', 'pg_catalog.text', 'pg_catalog.float8', 'pg_catalog.int4', 'pg_catalog.int8',
                      'pg_catalog.float8[]')
FORECAST_SIGNATURE = ('horizon pg_catalog.int4, data pg_catalog.text DEFAULT NULL, '
                      'level pg_catalog.float8 DEFAULT 0.95, simulations pg_catalog.int4 DEFAULT 1000, '
                      'seed pg_catalog.int8 DEFAULT 0, levels pg_catalog.float8[] DEFAULT NULL')
FORECAST_RESULTS = (('step', 'pg_catalog.int4'), ('forecast', 'pg_catalog.float8'), ('lower', 'pg_catalog.float8'),
                    ('upper', 'pg_catalog.float8'), ('level', 'pg_catalog.float8'))
# The order column's type as the forecast function returns it, and as periods.ahead steps it: each type of
# sequence.ORDER_TYPES.
ORDER_CASTS = {'date': 'pg_catalog.date', 'timestamp without time zone': 'pg_catalog.timestamp',
               'timestamp with time zone': 'pg_catalog.timestamptz', 'smallint': 'pg_catalog.int2',
               'integer': 'pg_catalog.int4', 'bigint': 'pg_catalog.int8', 'real': 'pg_catalog.float4',
               'double precision': 'pg_catalog.float8', 'numeric': 'pg_catalog.numeric'}
# The columns a function returns, as format_type writes them: what CREATE OR REPLACE cannot change.
FORECAST_COLUMNS = ("SELECT pg_catalog.array_agg(a.n OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) "
                    "pg_catalog.format_type(a.t, NULL) ORDER BY a.k) AS shown FROM pg_catalog.pg_proc AS p, "
                    "ROWS FROM (pg_catalog.unnest(p.proargnames), pg_catalog.unnest(p.proallargtypes), "
                    "pg_catalog.unnest(p.proargmodes)) WITH ORDINALITY AS a(n, t, m, k) "
                    "WHERE p.oid OPERATOR(pg_catalog.=) $1 AND a.m OPERATOR(pg_catalog.=) 't'")


def forecast_name(name):
    return f'{name}_{FORECAST_SUFFIX}'


def forecast_identity(name):
    return f'{function_name(forecast_name(name))}({", ".join(FORECAST_ARGUMENTS)})'


def forecast_columns(name, options, group_types):
    """[(column, type)] of model `name`'s forecast function, from its deployed version's options; None (and the
    reason) where it gets none."""
    kind = ORDER_CASTS.get(options.get('order_type'))
    if kind is None:
        return None, f'its order column is of type {options.get("order_type")}'
    out = [*zip(options.get('group_by') or [], group_types), (options['order_by'], kind), *FORECAST_RESULTS]
    names = [c for c, _ in out]
    repeated = next((c for c in names if names.count(c) > 1), None)
    if repeated is not None:
        return None, f'its column "{repeated}" would repeat a name of the forecast\'s columns (step, forecast, ' \
                     'lower, upper, level)'
    return out, None


def forecast_body(name, options, out):
    """The SQL of the function's body: pgad.forecast's rows, each group value cast from group_key to its type, at
    to the order column's."""
    keys = [f'((f.group_key OPERATOR(pg_catalog.->>) {printer.quote_literal(c)}))::{t}'
            for c, t in out[:len(options.get('group_by') or [])]]
    order = f'(f.at)::{out[len(keys)][1]}'
    return (f'SELECT {", ".join([*keys, order])}, f.step, f.value, f.lower, f.upper, f.level '
            f'FROM pgad.forecast({printer.quote_literal(name)}, $1, $2, $3, $4, $5, $6) AS f')


def forecast_made(name, row):
    """Make (or keep, replace, drop) model `name`'s forecast function for its version just deployed, whose first
    row is row: called by _deploy as the role that trained it."""
    options = json.loads(row['options']) if isinstance(row['options'], str) else row['options']
    found = function(forecast_identity(name))
    if found and not found[0]['mine']:
        raise PgadError('42501', f'function {found[0]["identity"]} exists and belongs to role "{found[0]["owner"]}"',
                        detail=f'pgad.train did not create it for model "{name}", and would replace its body but not '
                               'its owner.', hint='Train the model under another name, or ask that role (or a '
                                                  'superuser) to drop the function.')
    out, why = (None, 'the version deployed is no sequence model') if 'order_by' not in options else \
        (None, f'"{forecast_name(name)}" is longer than {NAMEDATALEN - 1} bytes') \
        if len(forecast_name(name).encode()) >= NAMEDATALEN else \
        forecast_columns(name, options, group_types(options.get('group_by') or [], options.get('group_types') or []))
    if found and (out is None or _forecast_shown(found[0]) != [f'{c} {t}' for c, t in _forecast_formatted(out)]):
        _forecast_drop(name, found[0], why or 'its columns change')
    if out is None:
        if 'order_by' in options:
            server.notice(f'model "{name}" gets no forecast function: {why}')
        return
    server.query(f'CREATE OR REPLACE FUNCTION {function_name(forecast_name(name))}({FORECAST_SIGNATURE}) RETURNS TABLE '
                 f'({", ".join(f"{printer.quote_ident(c)} {t}" for c, t in out)}) LANGUAGE sql STABLE AS '
                 f'{printer.quote_literal(forecast_body(name, options, out))}')
    created = function(forecast_identity(name))[0]
    for other in server.query(FOREIGN, [created['oid']], ['pg_catalog.oid']):
        raise PgadError('42501', f'the forecast function of model "{name}" would use {other["what"]}, which role '
                                 f'"{other["owner"] or "?"}" owns',
                        hint='Cast the column to a built-in type in the data query.')
    server.query(f'COMMENT ON FUNCTION {forecast_identity(name)} IS '
                 f'{printer.quote_literal(f"the forecast of sequence model {name} in its columns: see pgad.forecast")}')


# Each (column, type) with its type as format_type writes it.
FORECAST_FORMATTED = ("SELECT u.c, pg_catalog.format_type(pg_catalog.to_regtype(u.t), NULL) AS t FROM ROWS FROM "
                      "(pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[])) "
                      "WITH ORDINALITY AS u(c, t, k) ORDER BY u.k")


def _forecast_formatted(out):
    return [(r['c'], r['t']) for r in server.query(FORECAST_FORMATTED, [[c for c, _ in out], [t for _, t in out]],
                                                   ['pg_catalog.text[]', 'pg_catalog.text[]'])]


def _forecast_shown(found):
    """['column type'] of the columns the function found returns."""
    return list(server.query(FORECAST_COLUMNS, [found['oid']], ['pg_catalog.oid'])[0]['shown'] or [])


def _forecast_drop(name, found, why):
    """Drop the forecast function found (FUNCTION's row); 2BP01 naming what uses it."""
    if found['users']:
        raise PgadError('2BP01', f'cannot replace the forecast function of model "{name}": {why}, and other objects '
                                 'depend on it', detail=f'It is used by: {found["users"]}.',
                        hint='Drop or change those objects, then train (or deploy) again.')
    server.query(f'DROP FUNCTION {found["identity"]}')


def forecast_dropped(name, owner):
    """Drop model `name`'s forecast function, which role owner made, with the model (pgad.drop_model)."""
    for found in function(forecast_identity(name)):
        if found['owner'] == owner:
            try:
                server.query(f'DROP FUNCTION {found["identity"]}')
            except server.SPIError as e:
                raise dependents(e, name) from None


def check_forecast_names(name, sequence):
    """The error where model `name`'s functions and a forecast function would share a name: a model named like
    another's forecast function ("m_forecast" beside sequence model m), or a sequence model (sequence true) whose
    forecast function would take a model's name."""
    if name.endswith('_' + FORECAST_SUFFIX) and function(forecast_identity(name[:-len(FORECAST_SUFFIX) - 1])):
        base = name[:-len(FORECAST_SUFFIX) - 1]
        raise PgadError('42710', f'model "{base}" has a forecast function named "{name}"',
                        detail=f'A sequence model also gets {function_name(name)}.',
                        hint='Train the model under another name.')
    if sequence and owners(forecast_name(name)):
        raise PgadError('42710', f'model "{forecast_name(name)}" exists, and the forecast function of model "{name}" '
                                 'would take its name',
                        detail=f'A sequence model also gets {function_name(forecast_name(name))}.',
                        hint=f'Train model "{name}" under another name, or drop model "{forecast_name(name)}".')
