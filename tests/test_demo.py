"""examples/demo.py against a user's server (PGAD_DSN): it works in a database, or a schema, of its own and removes
only that — never the extension, nor a table, model, scoring function or view that was there before (issue 27 §7)."""
import os
import subprocess
import sys

import psycopg
import pytest

from conftest import new_database

DEMO = os.path.join(os.path.dirname(__file__), '..', 'examples', 'demo.py')
ROWS = '3000'


def run_demo(dsn):
    env = {**os.environ, 'PGAD_DSN': dsn, 'PGAD_DEMO_ROWS': ROWS}
    return subprocess.run([sys.executable, DEMO], env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def users_database(cluster):
    """A database with pgad installed and the user's own objects under the demo's names: tables linear and logistic,
    a model churn with its scoring function, and a view on that function."""
    name = new_database(cluster, 'users')
    with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute('CREATE TABLE linear AS SELECT g::float8 AS x1, 2.0 * g AS y FROM generate_series(1, 50) AS g')
        db.execute('CREATE TABLE logistic (note text)')
        db.execute("INSERT INTO logistic VALUES ('mine')")
        db.execute("SELECT pgad.train('churn', 'λ(d, w) w.a*d.x1', 'squared', 'linear', '{\"a\": 0}', "
                   "learning_rate => 0.0001, iterations => 20)")
        db.execute('CREATE VIEW scored AS SELECT x1, pgad_models.churn(x1) AS p FROM linear')
    yield name
    with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


def snapshot(db):
    """What the user had: the extension's oid, the tables' contents, the models and scoring functions, the view."""
    return (db.execute("SELECT oid FROM pg_extension WHERE extname = 'pgad'").fetchone(),
            db.execute('SELECT count(*), sum(x1), sum(y) FROM linear').fetchone(),
            db.execute('SELECT array_agg(note) FROM logistic').fetchone(),
            db.execute('SELECT name, weights::text, trained_by FROM pgad.models ORDER BY name').fetchall(),
            db.execute("SELECT oid, prosrc FROM pg_proc WHERE pronamespace = 'pgad_models'::regnamespace "
                       'ORDER BY oid').fetchall(),
            db.execute('SELECT sum(p) FROM scored').fetchone(),
            db.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgad_demo%' ORDER BY 1").fetchall())


def demo_databases(cluster):
    with psycopg.connect(cluster.conninfo('postgres')) as db:
        return db.execute("SELECT datname FROM pg_database WHERE datname LIKE 'pgad_demo%'").fetchall()


def test_the_demo_works_in_a_database_of_its_own_and_drops_only_that(cluster, users_database):
    with psycopg.connect(cluster.conninfo(users_database)) as db:
        before = snapshot(db)
    result = run_demo(cluster.conninfo(users_database))
    assert result.returncode == 0, result.stderr
    assert 'a database of its own' in result.stdout and 'linear regression' in result.stdout
    assert 'accuracy' in result.stdout
    with psycopg.connect(cluster.conninfo(users_database)) as db:
        assert snapshot(db) == before
    assert demo_databases(cluster) == []


@pytest.fixture
def plain_role(cluster, users_database):
    """A role that may not create databases but may train models in the user's database."""
    with psycopg.connect(cluster.conninfo(users_database), autocommit=True) as db:
        db.execute('DROP ROLE IF EXISTS demo_player')
        db.execute('CREATE ROLE demo_player LOGIN NOCREATEDB')
        db.execute(f'GRANT CREATE ON DATABASE {users_database} TO demo_player')
        db.execute('GRANT CREATE ON SCHEMA pgad_models TO demo_player')
        db.execute('GRANT SELECT ON linear, logistic, scored TO demo_player')
    yield 'demo_player'
    with psycopg.connect(cluster.conninfo(users_database), autocommit=True) as db:
        db.execute('DROP OWNED BY demo_player CASCADE')
        db.execute('DROP ROLE demo_player')


def test_without_createdb_the_demo_works_in_a_schema_of_its_own_and_removes_only_what_it_made(
        cluster, users_database, plain_role):
    with psycopg.connect(cluster.conninfo(users_database)) as db:
        before = snapshot(db)
    result = run_demo(cluster.conninfo(users_database, user=plain_role))
    assert result.returncode == 0, result.stderr
    assert 'a schema of its own' in result.stdout and 'accuracy' in result.stdout
    with psycopg.connect(cluster.conninfo(users_database)) as db:
        assert snapshot(db) == before  # no demo schema, model or function left; the user's untouched
    assert demo_databases(cluster) == []


def test_without_createdb_or_pgad_the_demo_stops_and_creates_nothing(cluster, plain_role):
    name = new_database(cluster, 'bare')
    try:
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
            db.execute(f'GRANT CREATE ON DATABASE {name} TO {plain_role}')
        result = run_demo(cluster.conninfo(name, user=plain_role))
        assert result.returncode != 0
        assert 'pgad is not installed' in result.stderr
        with psycopg.connect(cluster.conninfo(name)) as db:
            assert db.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgad_demo%'").fetchall() == []
            assert db.execute("SELECT FROM pg_extension WHERE extname = 'pgad'").fetchone() is None
    finally:
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'REVOKE ALL ON DATABASE {name} FROM {plain_role}')
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')
