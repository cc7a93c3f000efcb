"""A label column of a named loss that is not a number — a text or an enum of classes, most likely — gets an error
that names the loss and a hint that fits labels: loss 'softmax' for many classes, 'logistic' for two, or the labels
mapped to numbers in the data query; not a feature's hint to cast the column to float8 (issue 36 §3). A column the
model reads keeps the feature's error and hint, as does a lambda loss's column. Nothing is stored."""
import psycopg
import pytest

from conftest import error_of

MODEL = 'λ(d, w) w.a*d.x + w.b'
START = '{"a": 0, "b": 0}'
TEXT = 'SELECT x, species AS y FROM flowers'
CAST = 'Cast it in the data query, for example SELECT'


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute("CREATE TYPE kind AS ENUM ('setosa', 'versicolor', 'virginica')")
        db.execute("CREATE TABLE flowers AS SELECT g::float8 AS x, (ARRAY['setosa', 'versicolor', 'virginica'])"
                   "[1 + g % 3] AS species FROM generate_series(1, 30) AS g")
        db.execute('ALTER TABLE flowers ADD COLUMN kind kind')
        db.execute('UPDATE flowers SET kind = species::kind')


def stored(db):
    return db.execute("SELECT count(*) FROM pgad.models WHERE name = 'labelled'").fetchone()[0]


def label_hint_of(hint, column='y'):
    """Is hint the labels' one: the losses that take classes, and the mapping in the data query?"""
    return ("loss 'softmax' (many classes" in hint and "'logistic' (two classes)" in hint
            and f'CASE {column} WHEN … THEN 1 … END AS {column}' in hint and CAST not in hint)


@pytest.mark.parametrize('loss, said', [('squared', 'that are numbers'), ('huber(1.35)', 'that are numbers'),
                                        ('hinge', '-1 or 1'), ('poisson', '0 or more')])
def test_a_text_label_of_a_named_loss_gets_the_labels_hint(db, loss, said):
    e = error_of(db, "SELECT pgad.train('labelled', %s, %s, %s, %s)", (MODEL, loss, TEXT, START))
    name = loss.split('(')[0]
    assert (e.sqlstate, e.message_primary) == (
        '42804', f'loss "{name}" takes labels {said}, but column "y" is of type text')
    assert label_hint_of(e.message_hint), e.message_hint
    assert stored(db) == 0


def test_an_enum_label_and_a_quoted_label_column(db):
    e = error_of(db, "SELECT pgad.train('labelled', %s, 'squared', 'SELECT x, kind AS \"Kind\" FROM flowers', %s, "
                     "label => 'Kind')", (MODEL, START))
    assert (e.sqlstate, e.message_primary) == (
        '42804', 'loss "squared" takes labels that are numbers, but column "Kind" is of type kind')
    assert label_hint_of(e.message_hint, '"Kind"'), e.message_hint
    assert stored(db) == 0


def test_pgad_evaluate_of_a_text_label_gets_the_labels_hint(db):
    db.execute("SELECT pgad.train('numbered', %s, 'squared', 'SELECT x, length(species)::float8 AS y FROM flowers', "
               "%s)", (MODEL, START))
    e = error_of(db, "SELECT * FROM pgad.evaluate('numbered', %s)", (TEXT,))
    assert (e.sqlstate, e.message_primary) == (
        '42804', 'loss "squared" takes labels that are numbers, but column "y" is of type text')
    assert label_hint_of(e.message_hint), e.message_hint


@pytest.mark.parametrize('model, loss, data', [
    ('λ(d, w) w.a*d.species', 'squared', 'SELECT species, x AS y FROM flowers'),  # a feature
    ('λ(d, w) w.a*d.y', 'squared', TEXT),  # the label read by the model too: a feature there
    (MODEL, 'λ(p, d) (p - d.y)^2', TEXT),  # a lambda loss's column
])
def test_a_column_read_as_a_number_keeps_the_features_hint(db, model, loss, data):
    e = error_of(db, "SELECT pgad.train('labelled', %s, %s, %s, %s)", (model, loss, data, '{"a": 0, "b": 0}'))
    assert e.sqlstate == '42804' and e.message_primary.endswith('is of type text, not a number')
    assert e.message_hint.startswith(CAST)
    assert stored(db) == 0
