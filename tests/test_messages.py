"""Messages a new user was misled by (issue 28 §7): each one's SQLSTATE, message, DETAIL and HINT, against a real
server."""
import psycopg
import pytest

from conftest import error_of, heard

TRAIN = "SELECT pgad.train(%s, 'λ(d, w) w.a*d.x', %s, %s, '{\"a\": 0}'{})"


@pytest.fixture(scope='module', autouse=True)
def data(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE t (id int, region text, x float8, y float8, "Name" float8, arr float8[])')
        db.execute("INSERT INTO t VALUES (1, 'n', 1, 2, 3, '{1,2}'), (2, 'n', 2, 4, 5, '{3,4}'), "
                   "(3, 's', NULL, 1, 1, '{1,1}'), (4, 's', 3, 6, 1, '{1,1}')")


def notices(db, sql):
    with heard(db) as got:
        db.execute(sql)
    return got


def test_a_model_lambda_given_as_the_loss(db):
    e = error_of(db, "SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'λ(d, w) (w.a*d.x - d.y)^2', 't', '{\"a\": 0}')")
    assert (e.sqlstate, e.message_primary) == ('42809', '"d" is the prediction, a number: it has no field "x"')
    assert e.message_hint == ("The loss is a λ(p, d) of the prediction p and the data row d, for example "
                              "'λ(p, d) (p - d.y)^2', or a named loss ('squared', 'absolute', 'logistic', 'hinge', "
                              "'poisson', 'gamma', 'huber', 'quantile'); "
                              "the model λ(d, w) goes in model.")


def test_a_wrong_label(db):
    e = error_of(db, "SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 't', '{\"a\": 0}', label => 'name')")
    assert (e.sqlstate, e.message_primary) == ('42703', 'the label column "name" is not in the data')
    assert e.message_detail == 'The data has columns: "id", "region", "x", "y", "Name", "arr".'
    assert e.message_hint == "label => 'Name': a label is named as the data spells it."


def test_a_forgotten_label(db):
    e = error_of(db, "SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'SELECT x, \"Name\" FROM t', "
                     "'{\"a\": 0}')")
    assert (e.sqlstate, e.message_primary) == ('42703', 'the label column "y" is not in the data')
    assert e.message_detail == 'The data has columns: "x", "Name".'
    assert e.message_hint == ("label is 'y' unless given: label => 'Name' names the column the loss 'squared' "
                              "compares the prediction with.")


def test_nan_in_the_data_names_its_column_and_row(db):
    e = error_of(db, "SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', "
                     "'SELECT x, CASE WHEN id = 2 THEN ''NaN''::float8 ELSE y END AS y FROM t ORDER BY id', "
                     "'{\"a\": 0}')")
    assert (e.sqlstate, e.message_primary) == ('22000', 'column "y" of the data is NaN')
    assert e.message_detail == ("Row 2 of the rows the lambda reads (the data's rows without NULL in them, in the "
                                "order the data query gives) has y = NaN.")
    assert "WHERE y <> 'NaN'" in e.message_hint


def test_an_array_column_in_an_aggregate(db):
    e = error_of(db, "SELECT pgad.loss_agg('λ(d, w) (w.a*d.arr - 1)^2', '{\"a\": 0}', t) FROM t")
    assert (e.sqlstate, e.message_primary) == (
        '42804', 'column "arr" is of type double precision[]: the aggregates take numbers')
    assert 'cast' not in e.message_hint and 'pgad.train, pgad.loss, pgad.gradient' in e.message_hint


def test_drop_model_under_a_dependent_view(db):
    db.execute("SELECT pgad.train('dropped', 'λ(d, w) w.a*d.x', 'squared', 't', '{\"a\": 0}')")
    db.execute('CREATE VIEW scored AS SELECT pgad_models.dropped(x) FROM t')
    e = error_of(db, "SELECT pgad.drop_model('dropped')")
    assert (e.sqlstate, e.message_primary) == (
        '2BP01', 'cannot drop model "dropped" because other objects depend on its scoring function')
    assert e.message_detail == 'view scored depends on function pgad_models.dropped(double precision)'
    assert e.message_hint == 'Drop them first (DROP VIEW scored), then the model: pgad.drop_model drops no other object.'
    assert 'CASCADE' not in e.message_hint
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'dropped'").fetchone() == (1,)
    db.execute('DROP VIEW scored')
    db.execute("SELECT pgad.drop_model('dropped')")


def test_a_mixed_case_weight(db):
    """{"W1": 0} starts w.W1, which folds to w1 as a PostgreSQL identifier does, where no other key is spelt so; two
    keys that fold alike are the error that says how to tell them apart."""
    got = db.execute("SELECT weights FROM pgad.train('m', 'λ(d, w) w.W1*d.x', 'squared', 't', '{\"W1\": 0}')")
    assert list(got.fetchone()[0]) == ['w1']
    got = db.execute("SELECT weights FROM pgad.train('m', 'λ(d, w) w.W1*d.x', 'squared', 't', '{\"W1\": 0}', "
                     "l2 => 1e-3, regularize => '[\"W1\"]')")  # regularize's names fold alike
    assert list(got.fetchone()[0]) == ['w1']
    e = error_of(db, "SELECT pgad.train('m', 'λ(d, w) w.AB*d.x', 'squared', 't', '{\"Ab\": 0, \"aB\": 0}')")
    assert (e.sqlstate, e.message_primary) == ('22023', 'weight "ab" is not in the weights')
    assert e.message_hint == ('Names in the lambda fold to lower case, as PostgreSQL identifiers do: write w."Ab" '
                              'for the weight "Ab".')


def test_the_null_notice_names_the_group(db):
    got = notices(db, "SELECT pgad.train('g', 'λ(d, w) w.a*d.x', 'squared', 't', '{\"a\": 0}', group_by => 'region')")
    assert 'group {"region": "s"}: skipped 1 of 2 rows with NULL in "x" (1 row)' in got
    assert not any('skipped' in n and 'group' not in n for n in got)


def test_the_null_notice_names_only_the_columns_with_null(db):
    got = notices(db, "SELECT pgad.train('n', 'λ(d, w) w.a*d.x', 'squared', 't', '{\"a\": 0}')")
    assert 'skipped 1 of 4 rows with NULL in "x" (1 row)' in got
