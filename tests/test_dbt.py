"""examples/dbt works as a dbt user runs it: dbt itself (pyproject's dbt group, installed in build/dbt-venv) seeds,
runs and tests the project against a fresh database of the throwaway cluster; then the models pgad.train stored and
the predictions of its scoring functions are checked in SQL against the rule the seed's prices follow."""
import csv
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

import numpy as np
import psycopg
import pytest

from conftest import Running, new_database

ROOT = pathlib.Path(__file__).parent.parent
EXAMPLE = ROOT / 'examples' / 'dbt'
VENV = ROOT / 'build' / 'dbt-venv'

# The seed's rule: price = 60000 + 120·sqft + 9000·rooms + the region's offset + noise, the noise ((7·id mod 11) − 5)·200,
# at most ±1000 on prices of 187,080 to 466,920 (examples/dbt/README.md).
OFFSET = {'north': 0, 'south': 6000, 'east': -6000}


def rule(sqft, rooms, region=None):
    return 60000 + 120 * sqft + 9000 * rooms + (OFFSET[region] if region else 0)


def dbt_pins():
    """The dbt group of pyproject.toml: the one place dbt's versions are written."""
    return tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['optional-dependencies']['dbt']


def dbt_program():
    """build/dbt-venv/bin/dbt, installed at the pins (the environment is built again when they change)."""
    pins = '\n'.join(dbt_pins()) + '\n'
    stamp, dbt = VENV / 'pins.txt', VENV / 'bin' / 'dbt'
    if not (stamp.exists() and stamp.read_text() == pins and dbt.exists()):
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, '-m', 'venv', str(VENV)], check=True)
        subprocess.run([str(VENV / 'bin' / 'python'), '-m', 'pip', 'install', '-q', '--disable-pip-version-check',
                        *dbt_pins()], check=True)
        stamp.write_text(pins)
    return dbt


@pytest.fixture(scope='module')
def project(cluster, tmp_path_factory):
    """(a function that runs dbt with arguments in a copy of examples/dbt, pointed at a fresh database where pgad is
    installed, and returns its output; that database's name)."""
    dbt = dbt_program()
    name = new_database(cluster, 'dbt')
    with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
        db.execute('CREATE EXTENSION pgad CASCADE')
    directory = tmp_path_factory.mktemp('dbt') / 'project'  # dbt writes target/ and logs/ in the project
    shutil.copytree(EXAMPLE, directory)
    env = {**os.environ, 'PGHOST': '127.0.0.1', 'PGPORT': str(cluster.settings['port']), 'PGUSER': 'postgres',
           'PGPASSWORD': '', 'PGDATABASE': name, 'DBT_PROFILES_DIR': str(directory), 'DO_NOT_TRACK': '1',
           'DBT_USE_COLORS': 'false'}

    def run(*args):
        result = subprocess.run([str(dbt), *args], cwd=directory, env=env, capture_output=True, text=True)
        assert result.returncode == 0, f'dbt {" ".join(args)} failed:\n{result.stdout}\n{result.stderr}'
        return result.stdout

    yield run, name
    if isinstance(cluster, Running):  # a cluster that outlives the session keeps no database of it
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


@pytest.fixture(scope='module')
def built(cluster, project):
    """The database after dbt seed, dbt run and dbt test (each must succeed): a connection to it."""
    run, name = project
    run('seed')
    out = run('run')
    assert 'OK created sql pgad_model model public.house_prices ' in out
    assert 'OK created sql pgad_model model public.house_prices_by_region ' in out
    out = run('test')  # dbt test exits 1 when a test fails
    assert 'PASS assert_predictions_within_5_percent' in out and 'PASS not_null_scored_houses_predicted ' in out
    with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
        yield db


def houses():
    with open(EXAMPLE / 'seeds' / 'houses.csv', newline='') as f:
        return [{**row, 'id': int(row['id']), 'sqft': float(row['sqft']), 'rooms': float(row['rooms']),
                 'price': float(row['price'])} for row in csv.DictReader(f)]


def test_the_seed_follows_the_rule():
    rows = houses()
    assert len(rows) == 45 and {r['region'] for r in rows} == set(OFFSET)
    for r in rows:
        assert r['price'] == rule(r['sqft'], r['rooms'], r['region']) + ((7 * r['id']) % 11 - 5) * 200


def test_dbt_trains_one_model_and_one_per_region(built):
    models = built.execute("SELECT name, group_key, data, model, loss FROM pgad.models "
                           "WHERE name LIKE 'house_prices%' ORDER BY name, group_key::text").fetchall()
    assert [(n, g) for n, g, *_ in models] == [('house_prices', None)] + [
        ('house_prices_by_region', {'region': r}) for r in sorted(OFFSET)]
    assert {(d, m, l) for _, _, d, m, l in models} == {
        (f'"public"."{n}"', 'λ(d, w) w.per_sqft*d.sqft + w.per_room*d.rooms + w.base', 'squared')
        for n in ('house_prices', 'house_prices_by_region')}
    # the options in the config blocks reached pgad.train
    options = built.execute("SELECT options FROM pgad.models WHERE name = 'house_prices'").fetchone()[0]
    assert options['optimizer'] == 'lbfgs' and options['standardize'] is True and options['iterations'] == 200
    # the training data are views named after the dbt models
    kinds = dict(built.execute("SELECT relname, relkind FROM pg_class WHERE relname LIKE 'house_prices%' "
                               "AND relnamespace = 'public'::regnamespace").fetchall())
    assert kinds == {'house_prices': 'v', 'house_prices_by_region': 'v'}


def test_the_predictions_follow_the_rule(built):
    scored = {i: (p, by_region) for i, p, by_region in
              built.execute('SELECT id, predicted, predicted_by_region FROM scored_houses').fetchall()}
    rows = houses()
    assert sorted(scored) == [r['id'] for r in rows]
    # The ungrouped model cannot see the regions: its best fit is the rule without their offsets (which average
    # out over the seed's 15 houses per region), within 0.55% here; the fit per region is each region's rule,
    # within 0.33% (the least squares fits of the seed, numpy.linalg.lstsq). Tolerance 1% of the rule: a model
    # ignoring the regions' offsets misses the regional rule by up to 3.1%.
    for r in rows:
        predicted, by_region = scored[r['id']]
        assert predicted == pytest.approx(rule(r['sqft'], r['rooms']), rel=0.01)
        assert by_region == pytest.approx(rule(r['sqft'], r['rooms'], r['region']), rel=0.01)
    # and both are the least squares fits: the exact optimum of the squared loss, from numpy, within 0.1%
    X = np.array([[r['sqft'], r['rooms'], 1] for r in rows])
    y = np.array([r['price'] for r in rows])
    best = X @ np.linalg.lstsq(X, y, rcond=None)[0]
    by_region = np.zeros(len(rows))
    for region in OFFSET:
        mask = np.array([r['region'] == region for r in rows])
        by_region[mask] = X[mask] @ np.linalg.lstsq(X[mask], y[mask], rcond=None)[0]
    assert np.array([scored[r['id']][0] for r in rows]) == pytest.approx(best, rel=1e-3)
    assert np.array([scored[r['id']][1] for r in rows]) == pytest.approx(by_region, rel=1e-3)


def test_a_second_dbt_run_retrains_the_models(built, project):
    run, _ = project
    before = dict(built.execute("SELECT name || coalesce(group_key::text, ''), trained_at FROM pgad.models "
                                "WHERE name LIKE 'house_prices%'").fetchall())
    run('run')  # the scoring functions are replaced while scored_houses, made with them, exists
    after = dict(built.execute("SELECT name || coalesce(group_key::text, ''), trained_at FROM pgad.models "
                               "WHERE name LIKE 'house_prices%'").fetchall())
    assert after.keys() == before.keys() and len(after) == 4
    assert all(after[k] > before[k] for k in before)
    assert built.execute('SELECT count(*), count(predicted) FROM scored_houses').fetchone() == (45, 45)
