"""A scoring function's arguments are named after the columns the model reads (and its group columns), so named
notation (docs/sql.md, "Scoring functions"; the README's form) passes each column to its own argument whatever the
order: the same number as the positional call in the right order, where the positional call with two float8
arguments swapped silently gives another. A wrong name, or a grouped model called without its group column, is
PostgreSQL's own 42883."""
import psycopg
import pytest

from conftest import error_of

MODEL = 'λ(d, w) w.a*d.sqft + w.b*d.rooms + w.c'
START = '{"a": 0, "b": 0, "c": 0}'


@pytest.fixture(scope='module', autouse=True)
def models(cluster, dbname):
    """prices (sqft, rooms) and quoted ("Sq Ft", rooms), fitted to price = 100·sqft + 20·rooms + 7 exactly, and
    prices_by_region (region, sqft, rooms) to that + 30 in the north."""
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TABLE houses AS SELECT g AS id, (ARRAY['north', 'south'])[1 + g % 2] AS region, "
                   "(0.5 + g % 7 / 4.0)::float8 AS sqft, 1 + g % 5 AS rooms FROM generate_series(1, 100) AS g")
        db.execute("ALTER TABLE houses ADD COLUMN price float8")
        db.execute("UPDATE houses SET price = 100*sqft + 20*rooms + 7")
        db.execute("SELECT pgad.train('prices', %s, 'squared', 'houses', %s, label => 'price')", (MODEL, START))
        db.execute("SELECT pgad.train('prices_by_region', %s, 'squared', 'SELECT region, sqft, rooms, price + CASE "
                   "region WHEN ''north'' THEN 30 ELSE 0 END AS price FROM houses', %s, label => 'price', "
                   "group_by => 'region')", (MODEL, START))
        db.execute("""SELECT pgad.train('quoted', 'λ(d, w) w.a*d."Sq Ft" + w.b*d.rooms + w.c', 'squared',
                      'SELECT sqft AS "Sq Ft", rooms, price FROM houses', %s, label => 'price')""", (START,))


def one(db, sql, params=None):
    return db.execute(sql, params).fetchone()[0]


def test_named_notation_in_any_order_is_the_positional_call_in_the_right_order(db):
    right = one(db, 'SELECT pgad_models.prices(2.0, 3)')
    assert right == pytest.approx(100 * 2 + 20 * 3 + 7, rel=1e-9)
    assert one(db, 'SELECT pgad_models.prices(sqft => 2.0, rooms => 3)') == right
    assert one(db, 'SELECT pgad_models.prices(rooms => 3, sqft => 2.0)') == right
    assert one(db, 'SELECT pgad_models.prices(2.0, rooms => 3)') == right  # mixed: positional first
    # what named notation guards against: the positional call swapped is a number, and a wrong one
    assert one(db, 'SELECT pgad_models.prices(3, 2.0)') != pytest.approx(right, rel=0.1)
    # over a table: the columns by name, in the README's form
    rows = db.execute('SELECT pgad_models.prices(rooms => rooms, sqft => sqft) = pgad_models.prices(sqft, rooms) '
                      'FROM houses').fetchall()
    assert rows == [(True,)] * 100


def test_a_wrong_name_is_postgresqls_42883(db):
    diag = error_of(db, 'SELECT pgad_models.prices(sqft => 2.0, room => 3)')
    assert (diag.sqlstate, diag.message_primary) == (
        '42883', 'function pgad_models.prices(sqft => numeric, room => integer) does not exist')


def test_group_columns_are_named_too(db):
    right = one(db, "SELECT pgad_models.prices_by_region('north', 2.0, 3)")
    assert right == pytest.approx(100 * 2 + 20 * 3 + 37, rel=1e-9)
    assert one(db, "SELECT pgad_models.prices_by_region(rooms => 3, region => 'north', sqft => 2.0)") == right
    assert one(db, "SELECT pgad_models.prices_by_region(sqft => 2.0, rooms => 3, region => 'south')") == \
        pytest.approx(right - 30, rel=1e-9)
    rows = db.execute('SELECT pgad_models.prices_by_region(sqft => sqft, region => region, rooms => rooms) '
                      '= pgad_models.prices_by_region(region, sqft, rooms) FROM houses').fetchall()
    assert rows == [(True,)] * 100


def test_a_grouped_model_without_its_group_argument_is_postgresqls_bare_42883(db):
    """docs/sql.md's error table says what it means (tests/test_error_table.py produces its example)."""
    diag = error_of(db, 'SELECT pgad_models.prices_by_region(sqft, rooms) FROM houses')
    assert (diag.sqlstate, diag.message_primary) == (
        '42883', 'function pgad_models.prices_by_region(double precision, integer) does not exist')
    diag = error_of(db, 'SELECT pgad_models.prices_by_region(sqft => sqft, rooms => rooms) FROM houses')
    assert diag.sqlstate == '42883'


def test_a_column_whose_name_needs_quoting_is_named_quoted(db):
    right = one(db, 'SELECT pgad_models.quoted(2.0, 3)')
    assert right == pytest.approx(100 * 2 + 20 * 3 + 7, rel=1e-9)
    assert one(db, 'SELECT pgad_models.quoted(rooms => 3, "Sq Ft" => 2.0)') == right
    assert error_of(db, 'SELECT pgad_models.quoted(rooms => 3, sq_ft => 2.0)').sqlstate == '42883'
    assert error_of(db, 'SELECT pgad_models.quoted(rooms => 3, "sq ft" => 2.0)').sqlstate == '42883'
