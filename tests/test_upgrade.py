"""The extension's upgrade path: every older version, updated, is the fresh install, object for object."""
import psycopg
import pytest

from conftest import new_database

# Every object of schema pgad as the catalog describes it: functions (signature with defaults, result, language,
# volatility, strictness, security, privileges, comment, body), aggregates (support functions, state, parallel
# safety), types, the table pgad.model_versions (columns, defaults, indexes, privileges, policies, pg_dump's configuration
# tables), the view pgad.models and the schemas pgad and pgad_models.
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
SELECT 'table', c.relname, concat_ws(' | ', c.relacl::text, c.relrowsecurity, (
         SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull ||
                           coalesce(' ' || pg_get_expr(d.adbin, d.adrelid), ''), ', ' ORDER BY a.attnum)
         FROM pg_attribute AS a LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE a.attrelid = c.oid AND a.attnum > 0), (
         SELECT string_agg(pg_get_indexdef(i.indexrelid), ', ') FROM pg_index AS i WHERE i.indrelid = c.oid),
       obj_description(c.oid, 'pg_class'))
FROM pg_class AS c WHERE c.relnamespace = 'pgad'::regnamespace AND c.relkind = 'r'
UNION ALL
SELECT 'view', c.relname, concat_ws(' | ', c.relacl::text, c.reloptions::text, pg_get_viewdef(c.oid),
                                    obj_description(c.oid, 'pg_class'))
FROM pg_class AS c WHERE c.relnamespace = 'pgad'::regnamespace AND c.relkind = 'v'
UNION ALL
SELECT 'policy', p.polname, concat_ws(' | ', p.polcmd, p.polroles::text, pg_get_expr(p.polqual, p.polrelid),
                                      pg_get_expr(p.polwithcheck, p.polrelid))
FROM pg_policy AS p WHERE p.polrelid = 'pgad.model_versions'::regclass
UNION ALL
SELECT 'configuration', extname, extconfig::regclass[]::text || ' ' || coalesce(extcondition::text, '')
FROM pg_extension WHERE extname = 'pgad'
UNION ALL
SELECT 'schema', nspname, concat_ws(' | ', nspacl::text, obj_description(oid, 'pg_namespace'))
FROM pg_namespace WHERE nspname IN ('pgad', 'pgad_models')
ORDER BY 1, 2
"""


def connect_new(cluster):
    return psycopg.connect(cluster.conninfo(new_database(cluster, 'upgrade')), autocommit=True)


@pytest.fixture(scope='module')
def fresh(cluster):
    with connect_new(cluster) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        return db.execute(CATALOG).fetchall()


@pytest.mark.parametrize('version', ['0.1.0', '0.2.0', '0.3.0', '0.4.0', '0.5.0', '0.6.0', '0.7.0', '0.8.0', '0.9.0', '0.10.0', '0.11.0',
                                     '0.12.0', '0.13.0', '0.14.0', '0.15.0', '0.16.0', '0.17.0',
                                     '0.18.0', '0.19.0', '0.20.0', '0.21.0'])
def test_an_updated_install_is_the_fresh_install(cluster, fresh, version):
    with connect_new(cluster) as db:
        db.execute(f"CREATE EXTENSION pgad VERSION '{version}' CASCADE")
        db.execute('CREATE TABLE points AS SELECT x::float8 AS x FROM generate_series(1, 3) AS x')
        db.execute("CREATE VIEW fitted AS SELECT pgad.loss('λ(d, w) (w.a*d.x)^2', 'points', '{\"a\": 1}') AS loss")
        db.execute('ALTER EXTENSION pgad UPDATE')
        assert db.execute(CATALOG).fetchall() == fresh
        assert db.execute('SELECT loss FROM fitted').fetchone()[0] == pytest.approx(14 / 3)  # the view survived
        db.execute('ALTER TABLE points ADD COLUMN y float8')
        db.execute('UPDATE points SET y = 2*x + 1')
        db.execute("SELECT * FROM pgad.train('line', 'λ(d, w) w.a*d.x + w.b', 'squared', 'points', "
                   "'{\"a\": 0, \"b\": 0}', optimizer => 'lbfgs')")
        assert db.execute('SELECT pgad_models.line(10)').fetchone()[0] == pytest.approx(21, abs=1e-6)
