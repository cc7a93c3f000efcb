"""A keyed model's weights in tables (issue 48): one table per keyed weight and version, and the scoring function
that looks its keys up.

A version of a keyed model (keyed.py) stores its global weights in pgad.model_versions' weights jsonb, as every
model does, and each keyed weight there as what it is, {"keyed_by": "user", "keys": 20000, "shape": [8]}: its values
are in the table pgad_models."<the version's scoring function>.<weight>" (name), (key <the column's base type>
PRIMARY KEY, value float8 or float8[]), created by the role that trains, as the version's functions are, and named
after them, so that a version's tables follow its functions: pgad.train creates them between the catalog write and
the functions (catalog.store calls KeyedScoring.stored), and drop removes them with the functions (catalog's
_drop_functions: pgad.drop_model, a dropped version, keep_versions). The scoring function is LANGUAGE sql STABLE
with an SQL-standard body, so PostgreSQL records that it depends on the tables (pg_dump orders them, and a table
cannot be dropped from under it): RETURN (SELECT <the model> FROM (SELECT) LEFT JOIN <table> ON key = $1 …), one
index lookup per keyed weight, a key training never saw reading 0 (its weight contributes nothing, as a categorical
weight's unseen category does), and NULL for NULL.

Who reads a table is who reads the version's row: its policy (row-level security) calls pgad._weights_readable(name,
version), which finds the row under pgad.model_versions' own policy as the caller, and raises 42501 where the caller
may not read it, rather than let the scoring function score every key as unseen. SELECT is granted to PUBLIC under
that policy; its owner (the role that trained) reads it as its own.
"""
import hashlib
import json

from .. import server
from ..lang import printer

EQ = 'OPERATOR(pg_catalog.=)'
SCHEMA = 'pgad_models'  # SCHEMA
NAMEDATALEN = 64
CHUNK_KEYS = 10_000  # keys written by one INSERT


# The schema of the equality operator of a type (oid $1): its default btree operator class's, so that a key is
# looked up as the table's primary key tells keys apart (citext's 'ann' is 'ANN'). None for a type whose class is
# polymorphic (an enum's, anyenum's: pg_catalog's =, which is the enum's).
EQUALITY = (f"SELECT pg_catalog.quote_ident(n.nspname) AS schema FROM pg_catalog.pg_opclass AS c "
            f"JOIN pg_catalog.pg_am AS m ON m.oid {EQ} c.opcmethod AND m.amname {EQ} 'btree' "
            f"JOIN pg_catalog.pg_amop AS a ON a.amopfamily {EQ} c.opcfamily AND a.amoplefttype {EQ} c.opcintype "
            f"AND a.amoprighttype {EQ} c.opcintype AND a.amopstrategy {EQ} 3 "
            f"JOIN pg_catalog.pg_operator AS o ON o.oid {EQ} a.amopopr "
            f"JOIN pg_catalog.pg_namespace AS n ON n.oid {EQ} o.oprnamespace "
            f"WHERE c.opcdefault AND c.opcintype {EQ} $1")
# A table's key column's type: its schema-qualified name and oid
KEY_TYPE = ("SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) "
            f"pg_catalog.quote_ident(t.typname) AS kind, t.oid AS oid FROM pg_catalog.pg_attribute AS a "
            f"JOIN pg_catalog.pg_type AS t ON t.oid {EQ} a.atttypid "
            f"JOIN pg_catalog.pg_namespace AS n ON n.oid {EQ} t.typnamespace "
            f"WHERE a.attrelid {EQ} pg_catalog.to_regclass($1) AND a.attname {EQ} 'key'")


def equality(kind):
    """OPERATOR(schema.=), the equality of the type named kind (schema-qualified) that its btree index uses."""
    found = server.query(EQUALITY, [kind], ['pg_catalog.regtype'])
    return f'OPERATOR({found[0]["schema"]}.=)' if found else EQ


def key_type(table):
    """(the schema-qualified name of a weight table's key type, its equality: equality())."""
    kind = server.query(KEY_TYPE, [table], ['pg_catalog.text'])[0]['kind']
    return kind, equality(kind)


def name(own, weight):
    """The table of a keyed weight of the version whose scoring function is own: "<own>.<weight>", or, past 63
    bytes, cut and told apart by a hash of the whole."""
    whole = f'{own}.{weight}'
    if len(whole.encode()) < NAMEDATALEN:
        return whole
    tag = '#' + hashlib.sha256(whole.encode()).hexdigest()[:12]
    head = whole
    while len((head + tag).encode()) >= NAMEDATALEN:
        head = head[:-1]
    return head + tag


def qualified(own, weight):
    return f'{SCHEMA}.{printer.quote_ident(name(own, weight))}'


def described(weights):
    """{keyed weight: its entry} of a version's weights jsonb (a dict)."""
    return {n: v for n, v in weights.items() if isinstance(v, dict) and 'keyed_by' in v}


def tables_of(row):
    """[(qualified table, weight)] of a version's row (pgad.model_versions' columns as catalog.rows gives them)."""
    weights = row['weights'] if isinstance(row['weights'], dict) else json.loads(row['weights'])
    functions = row['functions'] if isinstance(row['functions'], dict) else json.loads(row['functions'])
    own = functions.get('')
    return [(qualified(own, w), w) for w in described(weights)] if own else []


OWNED = (f"SELECT c.oid FROM pg_catalog.pg_class AS c WHERE c.oid {EQ} pg_catalog.to_regclass($1) "
         f"AND c.relnamespace {EQ} '{SCHEMA}'::pg_catalog.regnamespace "
         f"AND pg_catalog.pg_get_userbyid(c.relowner) {EQ} $2 AND c.relkind {EQ} 'r'")


def drop(rows):
    """Drop the weight tables of the versions whose rows were deleted, those owned by the role that trained each
    (after their functions, which depend on them)."""
    for row in rows:
        for table, _ in tables_of(row):
            if server.query(OWNED, [table, row['trained_by']], ['pg_catalog.text', 'pg_catalog.text']):
                server.query(f'DROP TABLE {table}')


def create(model, version, table, kind, vector, keys, values):
    """CREATE TABLE of one keyed weight and its rows: keys (as text, cast to kind), values (K×size)."""
    value = 'pg_catalog.float8[]' if vector else 'pg_catalog.float8'
    server.query(f'CREATE TABLE {table} (key {kind} PRIMARY KEY, value {value} NOT NULL)')
    for start in range(0, len(keys), CHUNK_KEYS):
        part = values[start:start + CHUNK_KEYS]
        shown = ['{' + ','.join(repr(float(v)) for v in row) + '}' for row in part] if vector else \
            [repr(float(v[0])) for v in part]
        server.query(f'INSERT INTO {table} (key, value) SELECT pg_catalog.unnest($1)::{kind}, '
                     f'pg_catalog.unnest($2)::{value}',
                     [keys[start:start + CHUNK_KEYS], shown], ['pg_catalog.text[]', 'pg_catalog.text[]'])
        server.check_interrupts()
    literal = printer.quote_literal
    server.query(f'ALTER TABLE {table} ENABLE ROW LEVEL SECURITY')
    server.query(f'CREATE POLICY readers ON {table} FOR SELECT TO PUBLIC USING '
                 f'((SELECT pgad._weights_readable({literal(model)}, {int(version)})))')
    server.query(f'GRANT SELECT ON {table} TO PUBLIC')
    server.query(f'COMMENT ON TABLE {table} IS '
                 f'{literal(f"the values of a keyed weight of model {model}, version {version}: see pgad.models")}')
    server.query(f'ANALYZE {table}')
