"""A data query of more than one statement ('SELECT …; DROP TABLE …') is refused before anything of it runs, with a
message that says so, "one statement only", and a caret under the ";" (the query is the error's internal query, as
a lambda's is: tests/test_psql_caret.py); SQLSTATE 42601, as PostgreSQL's syntax error was before (issue 36 §3).
Every function that takes a data query reads it through loader.check_columns: pgad.train (its data and a validation
query), pgad.loss, pgad.gradient, pgad.evaluate. A ";" inside a string, and a trailing one, are no second statement."""
import psycopg
import pytest

from conftest import error_of

LINE = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
AB = '{"a": 0, "b": 0}'
SECOND = 'SELECT x, y FROM pts; DROP TABLE pts'
MESSAGE = 'data must be one statement only: it goes on after a ";"'


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE pts AS SELECT x::float8 AS x, (2*x + 1)::float8 AS y FROM generate_series(1, 10) AS x')
        db.execute('CREATE TABLE written (n int)')
        db.execute("SELECT pgad.train('line', 'λ(d, w) w.a*d.x + w.b', 'squared', 'pts', %s)", (AB,))


def untouched(db):
    assert db.execute('SELECT count(*) FROM pts').fetchone()[0] == 10
    assert db.execute('SELECT count(*) FROM written').fetchone()[0] == 0


@pytest.mark.parametrize('sql, args', [
    ("SELECT pgad.train('second', 'λ(d, w) w.a*d.x + w.b', 'squared', %s, %s)", (SECOND, AB)),
    ("SELECT pgad.train('second', 'λ(d, w) w.a*d.x + w.b', 'squared', 'pts', %s, validation => %s::text)",
     (AB, SECOND)),
    ('SELECT pgad.loss(%s, %s, %s)', (LINE, SECOND, AB)),
    ('SELECT pgad.gradient(%s, %s, %s)', (LINE, SECOND, AB)),
    ("SELECT * FROM pgad.evaluate('line', %s)", (SECOND,)),
])
def test_a_second_statement_is_refused_before_anything_runs(db, sql, args):
    e = error_of(db, sql, args)
    assert (e.sqlstate, e.message_primary) == ('42601', MESSAGE)
    assert (e.internal_query, e.internal_position) == (SECOND, str(SECOND.index(';') + 1))
    assert 'one query' in e.message_hint
    untouched(db)
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'second'").fetchone()[0] == 0


@pytest.mark.parametrize('data, place', [
    ('SELECT x, y FROM pts; INSERT INTO written VALUES (1)', 'pts;'),
    ("SELECT x, y, ';' AS s FROM pts ; INSERT INTO written VALUES (1);", "pts ;"),  # a trailing ";" too
    ('SELECT x, y FROM pts\n;\nINSERT INTO written VALUES (1)', 'pts\n;'),
    ("SELECT x, y, 'λ→' AS s FROM pts; INSERT INTO written VALUES (1)", 'pts;'),  # the place counts characters
])
def test_the_caret_is_under_the_semicolon_that_ends_the_first(db, data, place):
    e = error_of(db, 'SELECT pgad.loss(%s, %s, %s)', (LINE, data, AB))
    assert (e.sqlstate, e.message_primary) == ('42601', MESSAGE)
    assert e.internal_position == str(data.index(place) + len(place))
    untouched(db)


def test_a_semicolon_in_a_string_or_at_the_end_is_one_statement(db):
    for data in ("SELECT x, y, ';' AS s FROM pts", 'SELECT x, y FROM pts;', 'SELECT x, y FROM pts ; ;',
                 'SELECT x, y /* ; */ FROM pts', "SELECT x, y, $$;$$ AS s FROM pts"):
        assert db.execute('SELECT pgad.loss(%s, %s, %s)', (LINE, data, AB)).fetchone()[0] == pytest.approx(
            sum((2 * x + 1) ** 2 for x in range(1, 11)) / 10)


def test_another_syntax_error_is_postgresqls_own(db):
    e = error_of(db, 'SELECT pgad.loss(%s, %s, %s)', (LINE, 'SELECT x, y FROM', AB))
    assert (e.sqlstate, e.message_primary, e.message_detail) == (
        '42601', 'syntax error at or near ")"', 'The data query: SELECT x, y FROM')
