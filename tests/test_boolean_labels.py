"""A boolean label column under loss 'logistic' (issue 28 §5), against a real server: read as 1 (true) or 0 (false)
by the loader, the label column only, in pgad.train (ungrouped, group_by, validation by fraction and by query),
pgad.evaluate and pgad.summary; NULL skips the row as any NULL does. Every fit equals the same fit on the labels as
0/1 integers. Loss 'hinge', whose labels are −1/1, refuses a boolean column and says how to map it."""
import numpy as np
import psycopg
import pytest

from conftest import error_of

MODEL = 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c'
START = '{"a": 0, "b": 0, "c": 0}'
BOOLEAN = 'SELECT id, x1, x2, region, flag AS y FROM flags'
INTEGER = 'SELECT id, x1, x2, region, flag::int AS y FROM flags'


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    rng = np.random.default_rng(5)
    x1, x2 = rng.normal(0, 1, 400), rng.normal(0, 1, 400)
    flag = rng.uniform(size=400) < 1 / (1 + np.exp(-(0.5 + 1.5 * x1 - 2 * x2)))
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE flags (id int, x1 float8, x2 float8, flag boolean, region text)')
        with db.cursor().copy('COPY flags FROM STDIN') as copy:
            for k in range(400):
                copy.write_row((k, x1[k], x2[k], None if k % 50 == 7 else bool(flag[k]),
                                'north' if k % 2 else 'south'))


def fit(db, name, data, **options):
    extra = ''.join(f', {k} => {v}' for k, v in options.items())
    return db.execute(f"SELECT group_key, weights, final_loss, rows, validation_history FROM pgad.train(%s, %s, "
                      f"'logistic', %s, %s{extra}) ORDER BY group_key::text", (name, MODEL, data, START)).fetchall()


def same(got, expected):
    """Two pgad.train results, row for row: the same groups, rows, weights, losses and validation histories."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert (g[0], g[3]) == (e[0], e[3])
        np.testing.assert_allclose([g[1][k] for k in 'abc'], [e[1][k] for k in 'abc'], rtol=1e-12, atol=1e-14)
        assert g[2] == pytest.approx(e[2], rel=1e-12)
        assert (g[4] is None) == (e[4] is None)
        if g[4] is not None:
            np.testing.assert_allclose(g[4], e[4], rtol=1e-12)


def test_a_boolean_label_fits_as_its_0_1_integers_and_the_defaults_converge(db):
    """true → 1, false → 0, NULL skips the row (8 of 400 here); the defaults (L-BFGS) reach Newton's maximum
    likelihood on the same rows (what statsmodels' Logit computes) within 1e-5 relative."""
    got = fit(db, 'flagged', BOOLEAN)
    same(got, fit(db, 'flagged_int', INTEGER))
    assert got[0][3] == 392
    data = np.array(db.execute('SELECT x1, x2, flag::int FROM flags WHERE flag IS NOT NULL ORDER BY id').fetchall(),
                    dtype=float)
    x, y = np.column_stack([data[:, 0], data[:, 1], np.ones(len(data))]), data[:, 2]
    beta = np.zeros(3)
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ beta))
        beta += np.linalg.solve(x.T @ (x * (p * (1 - p))[:, None]), x.T @ (y - p))
    np.testing.assert_allclose([got[0][1][k] for k in 'abc'], beta, rtol=1e-5)
    # the scoring, probability and class functions read the features only
    z, p, c = db.execute('SELECT pgad_models.flagged(x1, x2), pgad_models.flagged_probability(x1, x2), '
                         'pgad_models.flagged_class(x1, x2) FROM flags WHERE id = 3').fetchone()
    assert p == pytest.approx(1 / (1 + np.exp(-z))) and c == int(p >= 0.5)


def test_a_boolean_label_per_group_and_with_validation(db):
    same(fit(db, 'flag_groups', BOOLEAN, group_by="'region'"), fit(db, 'flag_groups_int', INTEGER,
                                                                   group_by="'region'"))
    same(fit(db, 'flag_held', BOOLEAN, validation='0.25', seed='3'),
         fit(db, 'flag_held_int', INTEGER, validation='0.25', seed='3'))
    query = "'SELECT x1, x2, region, flag AS y FROM flags WHERE id >= 300'"
    same(fit(db, 'flag_query', BOOLEAN.replace('flags', 'flags WHERE id < 300'), validation=query),
         fit(db, 'flag_query_int', INTEGER.replace('flags', 'flags WHERE id < 300'),
             validation=query.replace('flag AS y', 'flag::int AS y')))
    same(fit(db, 'flag_both', BOOLEAN, group_by="'region'", validation=query, early_stopping='3',
             iterations='20'),
         fit(db, 'flag_both_int', INTEGER, group_by="'region'", validation=query.replace('flag AS y', 'flag::int AS y'),
             early_stopping='3', iterations='20'))


def evaluation(db, name, data):
    return {(k and k['region'], m): v for k, m, v in
            db.execute('SELECT group_key, metric, value FROM pgad.evaluate(%s, %s)', (name, data)).fetchall()}


def test_evaluate_and_summary_read_a_boolean_label(db):
    """Evaluate's metrics on the boolean label equal those on its integers (whichever the model was trained on),
    and accuracy is the share of rows whose class is the label; summary's table is the integer model's."""
    fit(db, 'judged', BOOLEAN)
    fit(db, 'judged_groups', BOOLEAN, group_by="'region'")
    for name in ('judged', 'judged_groups'):
        got, expected = evaluation(db, name, BOOLEAN), evaluation(db, name, INTEGER)
        assert got.keys() == expected.keys() and {'log_loss', 'accuracy', 'roc_auc'} <= {m for _, m in got}
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-12)
    right = db.execute('SELECT avg((pgad_models.judged_class(x1, x2) = flag::int)::int) FROM flags '
                       'WHERE flag IS NOT NULL').fetchone()[0]
    assert evaluation(db, 'judged', BOOLEAN)[(None, 'accuracy')] == pytest.approx(float(right))
    assert evaluation(db, 'judged', BOOLEAN)[(None, 'skipped_rows')] == 8
    fit(db, 'judged_int', INTEGER)
    got = db.execute("SELECT weight, estimate, std_error FROM pgad.summary('judged') ORDER BY weight").fetchall()
    expected = db.execute("SELECT weight, estimate, std_error FROM pgad.summary('judged_int') "
                          "ORDER BY weight").fetchall()
    assert [g[0] for g in got] == [e[0] for e in expected]
    np.testing.assert_allclose([g[1:] for g in got], [e[1:] for e in expected], rtol=1e-9)


def test_hinge_refuses_a_boolean_label_and_says_how_to_map_it(db):
    e = error_of(db, "SELECT pgad.train('hinged', %s, 'hinge', %s, %s)", (MODEL, BOOLEAN, START))
    assert (e.sqlstate, e.message_primary) == ('42804', 'loss "hinge" takes labels -1 or 1, but column "y" is of '
                                                        'type boolean')
    assert 'CASE WHEN y THEN 1 ELSE -1 END AS y' in e.message_hint
    e = error_of(db, "SELECT pgad.train('hinged', %s, 'hinge', 'flags', %s, label => 'flag')", (MODEL, START))
    assert e.sqlstate == '42804' and 'CASE WHEN flag THEN 1 ELSE -1 END AS flag' in e.message_hint
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'hinged'").fetchone()[0] == 0


def test_only_the_label_may_be_boolean(db):
    """A boolean feature the model reads as a number (the label itself included), or a boolean label under a loss
    without label values ('squared', a lambda loss), is the loader's error as before."""
    e = error_of(db, "SELECT pgad.train('featured', 'λ(d, w) w.a*d.flag + w.c', 'logistic', "
                     "'SELECT flag, flag AS y FROM flags', '{\"a\": 0, \"c\": 0}')")
    assert (e.sqlstate, e.message_primary) == ('42804', 'column "flag" is of type boolean, not a number')
    e = error_of(db, "SELECT pgad.train('featured', 'λ(d, w) w.a*d.y + w.c', 'logistic', %s, "
                     "'{\"a\": 0, \"c\": 0}')", (BOOLEAN,))
    assert (e.sqlstate, e.message_primary) == ('42804', 'column "y" is of type boolean, not a number')
    for loss in ('squared', 'λ(p, d) (p - d.y)^2'):
        e = error_of(db, "SELECT pgad.train('squared_flag', %s, %s, %s, %s)", (MODEL, loss, BOOLEAN, START))
        assert (e.sqlstate, e.message_primary) == ('42804', 'column "y" is of type boolean, not a number')
