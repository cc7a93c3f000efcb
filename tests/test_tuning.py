"""pgad.tune (models/tuning.py) and the metrics of a version on its validation rows (pgad.model_versions.metrics):
the tune deploys the version with the best validation metric, checked against scikit-learn's Ridge fitted on the
same training rows and scored on the same validation rows; every trial is a version; a cancel ends it; bad grids are
clear errors that change nothing."""
import json

import numpy as np
import psycopg
import pytest

from conftest import error_of

ROWS = 300


@pytest.fixture(scope='module')
def ridge(cluster, dbname):
    """A table of 300 rows, y linear in three columns with noise, and its validation rows apart (id % 4 = 0)."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(ROWS, 3)) * [1.0, 3.0, 0.5]
    y = x @ [1.5, -0.7, 2.0] + 0.4 + rng.normal(scale=1.5, size=ROWS)
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE ridge (id int, x1 float8, x2 float8, x3 float8, y float8)')
        with db.cursor().copy('COPY ridge FROM STDIN') as copy:
            for k in range(ROWS):
                copy.write_row((k, *x[k], y[k]))
    return x, y


MODEL = 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c*d.x3 + w.d'
WEIGHTS = '{"a": 0, "b": 0, "c": 0, "d": 0}'
TRAINING = 'SELECT x1, x2, x3, y FROM ridge WHERE id % 4 <> 0'
HELD = 'SELECT x1, x2, x3, y FROM ridge WHERE id % 4 = 0'


def test_metrics_of_a_version_on_its_validation_rows(db, ridge):
    """metrics: validation_loss (the mean squared error: loss 'squared' is (p − y)²), rmse, mae and r2 of the
    stored weights on the validation query's rows, computed here with numpy; NULL without validation."""
    x, y = ridge
    row = db.execute("SELECT weights, metrics FROM pgad.train('m', %s, 'squared', %s, %s, validation => %s)",
                     (MODEL, TRAINING, WEIGHTS, HELD)).fetchone()
    w, metrics = row
    held = np.arange(ROWS) % 4 == 0
    p = x[held] @ [w['a'], w['b'], w['c']] + w['d']
    err = p - y[held]
    assert metrics['validation_rows'] == held.sum()
    assert metrics['rmse'] == pytest.approx(np.sqrt(np.mean(err ** 2)), rel=1e-9)
    assert metrics['mae'] == pytest.approx(np.mean(np.abs(err)), rel=1e-9)
    assert metrics['r2'] == pytest.approx(1 - np.sum(err ** 2) / np.sum((y[held] - y[held].mean()) ** 2), rel=1e-9)
    assert metrics['validation_loss'] == pytest.approx(np.mean(err ** 2), rel=1e-9)
    assert db.execute("SELECT metrics FROM pgad.train('m', %s, 'squared', %s, %s)",
                      (MODEL, TRAINING, WEIGHTS)).fetchone()[0] is None
