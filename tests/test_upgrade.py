"""The extension's upgrade path: every older version, updated, is the fresh install, object for object."""
import psycopg
import pytest

from conftest import new_database

# Every object of schema pgad as the catalog describes it: functions (signature with defaults, result, language,
# volatility, strictness, security, privileges, comment, body), aggregates (support functions, state, parallel
# safety) and types.
CATALOG = """
SELECT 'function' AS kind, p.proname || '(' || pg_get_function_arguments(p.oid) || ')' AS name,
       concat_ws(' | ', pg_get_function_result(p.oid), l.lanname, p.provolatile, p.proisstrict, p.prosecdef,
                 p.proacl::text, obj_description(p.oid, 'pg_proc'), p.prosrc) AS what
FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
WHERE p.pronamespace = 'pgad'::regnamespace
UNION ALL
SELECT 'type', t.typname, format_type(t.oid, NULL) || ' ' || coalesce((
         SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
         FROM pg_attribute AS a WHERE a.attrelid = t.typrelid AND a.attnum > 0), '')
FROM pg_type AS t WHERE t.typnamespace = 'pgad'::regnamespace AND t.typtype = 'c'
UNION ALL
SELECT 'aggregate', a.aggfnoid::regprocedure::text,
       concat_ws(' | ', a.aggtransfn::regprocedure, a.aggfinalfn::regprocedure, a.aggcombinefn::regprocedure,
                 a.aggserialfn::regprocedure, a.aggdeserialfn::regprocedure, a.aggtranstype::regtype,
                 a.aggfinalmodify, p.proparallel)
FROM pg_aggregate AS a JOIN pg_proc AS p ON p.oid = a.aggfnoid WHERE p.pronamespace = 'pgad'::regnamespace
UNION ALL
SELECT 'schema', nspname, nspacl::text FROM pg_namespace WHERE nspname = 'pgad'
ORDER BY 1, 2
"""


def connect_new(cluster):
    return psycopg.connect(cluster.conninfo(new_database(cluster, 'upgrade')), autocommit=True)


@pytest.fixture(scope='module')
def fresh(cluster):
    with connect_new(cluster) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        return db.execute(CATALOG).fetchall()


@pytest.mark.parametrize('version', ['0.1.0', '0.2.0', '0.3.0', '0.4.0'])
def test_an_updated_install_is_the_fresh_install(cluster, fresh, version):
    with connect_new(cluster) as db:
        db.execute(f"CREATE EXTENSION pgad VERSION '{version}' CASCADE")
        db.execute('CREATE TABLE points AS SELECT x::float8 AS x FROM generate_series(1, 3) AS x')
        db.execute("CREATE VIEW fitted AS SELECT pgad.loss('λ(d, w) (w.a*d.x)^2', 'points', '{\"a\": 1}') AS loss")
        db.execute('ALTER EXTENSION pgad UPDATE')
        assert db.execute(CATALOG).fetchall() == fresh
        assert db.execute('SELECT loss FROM fitted').fetchone()[0] == pytest.approx(14 / 3)  # the view survived
