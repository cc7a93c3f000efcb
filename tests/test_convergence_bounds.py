"""What 0.14.0's optimizers and tools add to the threat table (docs/security.md): a training left to run until it
converges (L-BFGS's 10,000 iterations, the curvature's passes before and after) still ends at statement_timeout
and pg_cancel_backend; and the mutation run's hook, which picks a mutant by a connection's setting, is nowhere in
an installed server."""
import pathlib
import threading
import time

import psycopg
import pytest

from conftest import error_of


SINES = 60  # weights, past newton's 48: the default is L-BFGS, 2·60 passes of curvature before its first step


@pytest.fixture
def waves(db):
    db.execute('CREATE TABLE IF NOT EXISTS waves AS SELECT k::float8 / 1000 AS x, sin(k::float8 / 1000) AS y '
               'FROM generate_series(1, 300000) AS k')
    model = 'λ(d, w) ' + ' + '.join(f'w.a{j}*sin({j}*d.x)' for j in range(1, SINES + 1))
    weights = '{' + ', '.join(f'"a{j}": 0' for j in range(1, SINES + 1)) + '}'
    return db, model, weights


def test_a_training_left_to_converge_ends_at_statement_timeout(waves):
    """300,000 rows of 60 sines a row: each pass over them is dear, and the default runs until the criterion holds.
    statement_timeout ends it as it ends any call, between the kernel's pieces or the passes, within a second."""
    db, model, weights = waves
    db.execute("SELECT pgad.loss(%s, 'SELECT x, y FROM waves LIMIT 10', %s)",  # the kernel compiled and cached
               ('λ(d, w) (' + model[len('λ(d, w) '):] + ' - d.y)^2', weights))
    db.execute("SET statement_timeout = '2s'")
    started = time.monotonic()
    e = error_of(db, "SELECT pgad.train('waves', %s, 'squared', 'waves', %s)", (model, weights))
    took = time.monotonic() - started
    db.execute('RESET statement_timeout')
    assert e.sqlstate == '57014'
    assert took < 2 + 3  # the bound's own 2 s and a loaded VM's slack
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'waves'").fetchone()[0] == 0


def test_a_training_left_to_converge_ends_at_pg_cancel_backend(waves, cluster):
    db, model, weights = waves
    pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
    done = threading.Event()

    def cancel():
        with psycopg.connect(cluster.conninfo(db.info.dbname), autocommit=True) as other:
            if not done.wait(2.0):
                other.execute('SELECT pg_cancel_backend(%s)', (pid,))
    canceller = threading.Thread(target=cancel)
    canceller.start()
    started = time.monotonic()
    try:
        e = error_of(db, "SELECT pgad.train('waves', %s, 'squared', 'waves', %s)", (model, weights))
    finally:
        done.set()
        canceller.join()
    assert e.sqlstate == '57014'
    assert time.monotonic() - started < 2 + 3


def test_the_mutation_hook_is_not_in_an_installed_server(db):
    """tools/mutation_server (a sitecustomize that imports mutated modules, the mutant chosen by the connection's
    mutmut.mutant) is on the PYTHONPATH of make mutation's throwaway cluster only: an installed server's backends
    have no such module, and the setting changes nothing."""
    found = db.execute("""
        CREATE FUNCTION pg_temp.hooked() RETURNS text LANGUAGE plpython3u AS $$
import sys
return ','.join(sorted(m for m in sys.modules if m == 'sitecustomize' and 'mutation_server' in
                       (getattr(sys.modules[m], '__file__', '') or '') or m.startswith('mutmut')))
$$""")
    db.execute("SET mutmut.mutant = 'pgad.models.summary.x_table__mutmut_1'")
    db.execute("SELECT pgad.loss('λ(d, w) (w.a*d.x)^2', 'SELECT 1::float8 AS x', '{\"a\": 2}')")
    assert db.execute('SELECT pg_temp.hooked()').fetchone()[0] == ''
    assert found is not None
    hook = pathlib.Path(__file__).resolve().parent.parent / 'tools' / 'mutation_server' / 'sitecustomize.py'
    assert hook.exists()  # what the assertion above would find, were it installed
