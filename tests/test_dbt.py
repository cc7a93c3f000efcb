"""examples/dbt works as a dbt user runs it: dbt itself (pyproject's dbt group, installed in build/dbt-venv) seeds,
runs and tests the project against a fresh database of the throwaway cluster, in two targets (prod, schema analytics,
and dev, schema dev); then the models pgad.train stored and the predictions of its scoring functions are checked in
SQL against the rule the seed's prices follow, and dev's run against prod's models; then versions through dbt (each run
a version, config deploy, the operations pgad_deploy and pgad_drop_model, each in its own target, with the view
predicted_prices following the deployed version) and the deployed version's statistics in dbt docs' catalog.json."""
import json
import re
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

    def run(*args, fails=False, schema=None):
        result = subprocess.run([str(dbt), *args], cwd=directory, capture_output=True, text=True,
                                env={**env, **({'PGAD_DBT_SCHEMA': schema} if schema else {})})
        assert fails is None or (result.returncode != 0) == fails, f'dbt {" ".join(args)}:\n{result.stdout}\n{result.stderr}'
        return result.stdout

    run.directory = directory
    yield run, name
    if isinstance(cluster, Running):  # a cluster that outlives the session keeps no database of it
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


PROD = 'analytics__house_prices', 'analytics__house_prices_by_region'
DEV = 'dev__house_prices', 'dev__house_prices_by_region'


def state(db, names):
    """What a target's runs made: its models' rows in pgad.models and its scoring functions' definitions."""
    rows = db.execute("SELECT name, group_key, weights, final_loss, trained_at FROM pgad.models "
                      "WHERE name = ANY(%s) ORDER BY name, group_key::text", (list(names),)).fetchall()
    functions = [db.execute("SELECT pg_get_functiondef(%s::regproc)", (f'pgad_models."{n}"',)).fetchone()[0]
                 for n in names]
    return rows, functions


@pytest.fixture(scope='module')
def built(cluster, project):
    """The database after dbt seed, dbt run and dbt test in the prod target (each must succeed), then dbt seed and
    dbt run in the dev target on dev's data, the seed's prices doubled: (a connection to it, prod's state before
    dev's run, the output of prod's run)."""
    run, name = project
    run('seed', '--target', 'prod')
    out = run('run', '--target', 'prod')
    assert 'OK created sql pgad_model model analytics.house_prices ' in out
    assert 'OK created sql pgad_model model analytics.house_prices_by_region ' in out
    test = run('test', '--target', 'prod')  # dbt test exits 1 when a test fails
    assert 'PASS assert_predictions_within_5_percent' in test and 'PASS not_null_scored_houses_predicted ' in test
    with psycopg.connect(cluster.conninfo(name), autocommit=True) as db:
        prod = state(db, PROD)
        run('seed')  # the default target, dev
        db.execute('UPDATE dev.houses SET price = 2 * price')
        run('run')
        yield db, prod, out


def test_the_final_loss_shows_in_dbts_output(built):
    _, _, out = built
    assert re.search(r'pgad model analytics__house_prices: final loss [0-9.eE+-]+ after \d+ iterations', out)
    for region in OFFSET:
        assert re.search(rf'pgad model analytics__house_prices_by_region {{"region": "{region}"}}: final loss '
                         r'[0-9.eE+-]+ after \d+ iterations', out)


def test_a_dev_run_leaves_prods_models_alone(built):
    db, prod, _ = built
    # dev's run trained models of its own, and changed nothing of prod's: rows, weights, functions
    assert state(db, PROD) == prod
    dev_rows, _ = state(db, DEV)
    assert [(n, g) for n, g, *_ in dev_rows] == [('dev__house_prices', None)] + [
        ('dev__house_prices_by_region', {'region': r}) for r in sorted(OFFSET)]
    # each target's scored table used its own target's weights: dev's prices are prod's doubled, and so are its
    # weights (least squares is linear in the label), within the fit's 1e-6
    for schema, names in (('analytics', PROD), ('dev', DEV)):
        weights = {(n, (g or {}).get('region')): w for n, g, w, *_ in state(db, names)[0]}
        for sqft, rooms, region, predicted, by_region in db.execute(
                f'SELECT h.sqft, h.rooms, h.region, s.predicted, s.predicted_by_region FROM {schema}.scored_houses s '
                f'JOIN {schema}.stg_houses h USING (id)').fetchall():
            w = weights[(names[0], None)]
            assert predicted == pytest.approx(w['per_sqft'] * sqft + w['per_room'] * rooms + w['base'], rel=1e-9)
            w = weights[(names[1], region)]
            assert by_region == pytest.approx(w['per_sqft'] * sqft + w['per_room'] * rooms + w['base'], rel=1e-9)
    ratios = db.execute('SELECT d.predicted / p.predicted FROM dev.scored_houses d JOIN analytics.scored_houses p '
                        'USING (id)').fetchall()
    assert [r for r, in ratios] == pytest.approx([2.0] * 45, rel=1e-6)


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
    db, _, _ = built
    models = db.execute("SELECT name, group_key, data, model, loss FROM pgad.models "
                        "WHERE name LIKE 'analytics__house_prices%' ORDER BY name, group_key::text").fetchall()
    assert [(n, g) for n, g, *_ in models] == [('analytics__house_prices', None)] + [
        ('analytics__house_prices_by_region', {'region': r}) for r in sorted(OFFSET)]
    assert {(d, m, l) for _, _, d, m, l in models} == {
        (f'"analytics"."{n}"', 'λ(d, w) w.per_sqft*d.sqft + w.per_room*d.rooms + w.base', 'squared')
        for n in ('house_prices', 'house_prices_by_region')}
    # the options in the config blocks reached pgad.train
    options = db.execute("SELECT options FROM pgad.models WHERE name = 'analytics__house_prices'").fetchone()[0]
    assert options['optimizer'] == 'lbfgs' and options['standardize'] is True and options['iterations'] == 200
    # the training data are views named after the dbt models
    kinds = dict(db.execute("SELECT relname, relkind FROM pg_class WHERE relname LIKE 'house_prices%' "
                            "AND relnamespace = 'analytics'::regnamespace").fetchall())
    assert kinds == {'house_prices': 'v', 'house_prices_by_region': 'v'}


def test_the_predictions_follow_the_rule(built):
    db, _, _ = built
    scored = {i: (p, by_region) for i, p, by_region in
              db.execute('SELECT id, predicted, predicted_by_region FROM analytics.scored_houses').fetchall()}
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
    db, _, _ = built
    run, _ = project
    names = "name LIKE 'analytics__house_prices%'"
    before = dict(db.execute("SELECT name || coalesce(group_key::text, ''), trained_at FROM pgad.models "
                             f"WHERE {names}").fetchall())
    run('run', '--target', 'prod')  # the scoring functions are replaced while scored_houses, made with them, exists
    after = dict(db.execute("SELECT name || coalesce(group_key::text, ''), trained_at FROM pgad.models "
                            f"WHERE {names}").fetchall())
    assert after.keys() == before.keys() and len(after) == 4
    assert all(after[k] > before[k] for k in before)
    # what the models read (pgad.models.read_from, who may read them) is the data, not the view the run replaced
    # and dropped: every relation there still exists
    read, existing = db.execute(f"SELECT count(*), count(c.oid) FROM pgad.models AS m CROSS JOIN "
                                f"unnest(m.read_from) AS r LEFT JOIN pg_class AS c ON c.oid = r "
                                f"WHERE {names}").fetchone()
    assert read > 0 and existing == read
    assert db.execute('SELECT count(*), count(predicted) FROM analytics.scored_houses').fetchone() == (45, 45)


def test_dbt_build_empty_trains_nothing(built, project):
    """--empty builds every SELECT on no rows: in a fresh target (schema ci) the models are not trained and the
    scored table is built empty; in prod, the trained models and their scoring functions stay as they were."""
    db, _, _ = built
    run, _ = project
    out = run('build', '--empty', schema='ci')
    assert 'pgad model ci__house_prices: not trained (--empty)' in out and 'ERROR=0' in out
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name LIKE 'ci\\_\\_%'").fetchone() == (0,)
    assert db.execute('SELECT count(*) FROM ci.scored_houses').fetchone() == (0,)
    prod = state(db, PROD)
    run('build', '--empty', '--target', 'prod')  # dbt rebuilds the views, on no rows, and the tables, empty
    assert state(db, PROD) == prod
    assert db.execute('SELECT count(*) FROM analytics.house_prices').fetchone() == (0,)
    run('build', '--target', 'prod')  # and a run builds them again on the data
    assert db.execute('SELECT count(*) FROM analytics.scored_houses').fetchone() == (45,)


def with_model(run, name, text, *args, fails=False, schema=None):
    """dbt run of one more model, models/<name>.sql holding text, in the dev target (its schema `schema`, if given;
    the file removed afterwards)."""
    path = run.directory / 'models' / f'{name}.sql'
    path.write_text(text)
    try:
        return run('run', '-s', name, *args, fails=fails, schema=schema)
    finally:
        path.unlink()


def test_an_unknown_config_key_is_an_error_naming_it(built, project):
    run, _ = project
    config = ("materialized='pgad_model', model='λ(d, w) w.a*d.sqft', loss='squared', label='price', "
              "weights={'a': 0}")
    out = with_model(run, 'misspelt', f"{{{{ config({config}, optimiser='lbfgs') }}}}\n"
                     "select sqft, price from {{ ref('stg_houses') }}", fails=True)
    assert "unknown config key 'optimiser': did you mean 'optimizer'?" in out
    out = with_model(run, 'misspelt', f"{{{{ config({config}, meta={{'pgad': {{'standardise': true}}}}) }}}}\n"
                     "select sqft, price from {{ ref('stg_houses') }}", fails=True)
    assert "unknown config meta['pgad'] key 'standardise': did you mean 'standardize'?" in out
    db, _, _ = built
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name = 'dev__misspelt'").fetchone() == (0,)


def test_every_option_reaches_pgad_train_and_its_messages_show(built, project):
    """dtype (once lost) reaches pgad.train, from the config and from meta['pgad']; the NOTICE of the rows skipped for a
    NULL and the WARNING of a diverging descent show in dbt's output."""
    db, _, _ = built
    run, _ = project
    out = with_model(run, 'noisy', "{{ config(materialized='pgad_model', model='λ(d, w) w.a*d.sqft', "
                     "loss='squared', label='price', weights={'a': 0}, dtype='float32', learning_rate=1, "
                     "meta={'pgad': {'iterations': 5}}) }}\n"
                     "select sqft, case when id = 1 then null else price end as price from {{ ref('stg_houses') }}")
    options = db.execute("SELECT options FROM pgad.models WHERE name = 'dev__noisy'").fetchone()[0]
    assert options['dtype'] == 'float32' and options['iterations'] == 5 and options['learning_rate'] == 1
    assert 'pgad model dev__noisy: NOTICE:  skipped 1 of 45 rows with NULL' in out
    assert re.search(r'pgad model dev__noisy: WARNING: .*the loss grew', out)
    # options pgad.train gains (issue 28 §5) are passed, by name, already
    directory = run.directory
    with_model(run, 'later', "{{ config(materialized='pgad_model', model='λ(d, w) w.a*d.sqft', loss='squared', "
               "label='price', weights={'a': 0}, validation=0.2, early_stopping=5) }}\n"
               "select sqft, price from {{ ref('stg_houses') }}", fails=None)
    sent = (directory / 'target' / 'run' / 'pgad_houses' / 'models' / 'later.sql').read_text()
    assert "validation => '0.2'" in sent and "early_stopping => '5'" in sent


LINE = ("{{ config(materialized='pgad_model', model='λ(d, w) w.a*d.sqft', loss='squared', label='price', "
        "weights={'a': 0}, optimizer='lbfgs') }}\n"
        "select sqft, %d * sqft as price from (values (1.0::float8), (2.0), (3.0)) as v(sqft)")


def test_two_targets_never_share_a_pgad_name(built, project):
    """Schema a with model b__c and schema a__b with model c were both "a__b__c", so one target's run replaced the
    other's model: each has its own now, and each target's pgad_score finds its own (issue 34)."""
    db, _, _ = built
    run, _ = project
    with_model(run, 'b__c', LINE % 2, schema='a')
    with_model(run, 'c', LINE % 3, schema='a__b')
    with_model(run, 'c', LINE % 5, schema='a_')
    found = dict(db.execute("SELECT name, round((weights->>'a')::numeric, 6) FROM pgad.models "
                            "WHERE name IN ('a__b__c', 'a$u_b__c', 'a$u__c')").fetchall())
    assert found == {'a__b__c': 2, 'a$u_b__c': 3, 'a$u__c': 5}
    model = run.directory / 'models' / 'c.sql'
    model.write_text(LINE % 3)
    try:
        out = with_model(run, 'c_score', "select {{ pgad_score('c') }}(1) as s", 'c', schema='a__b')
    finally:
        model.unlink()
    assert 'ERROR=0' in out
    assert db.execute('SELECT s FROM a__b.c_score').fetchone()[0] == pytest.approx(3, abs=1e-6)
    db.execute('DROP VIEW a__b.c_score')
    for name in found:
        db.execute('SELECT pgad.drop_model(%s)', [name])


def test_a_pgad_name_past_63_bytes_is_an_error_not_a_truncation(built, project):
    db, _, _ = built
    run, _ = project
    schema = 's' * 60
    out = with_model(run, 'long_model', LINE % 2, schema=schema, fails=True)
    # dbt compiles every model of the project: the first name it meets past 63 bytes is the error
    assert re.search(rf"pgad model name '{schema}__\w+' \(<schema>__<model>\) is longer than 63 bytes", out)
    assert db.execute("SELECT count(*) FROM pgad.models WHERE name LIKE 'sss%'").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE 'sss%'").fetchone() == (0,)


def test_the_macros_list_of_dbt_configs_is_dbts():
    """pgad_dbt_configs in the macro lists every config key of dbt's models at the pinned versions (a new one would
    otherwise be refused as unknown)."""
    python = VENV / 'bin' / 'python'
    dbt_program()
    names = subprocess.run([str(python), '-c', 'import dataclasses\n'
                            'from dbt.artifacts.resources.v1.model import ModelConfig\n'
                            'from dbt.adapters.postgres.impl import PostgresConfig\n'
                            'print(*(f.metadata.get("alias") or f.name for c in (ModelConfig, PostgresConfig) '
                            'for f in dataclasses.fields(c) if f.name != "_extra"))'],
                           capture_output=True, text=True, check=True).stdout.split()
    macro = (EXAMPLE / 'macros' / 'pgad_model.sql').read_text()
    listed = macro[macro.index('macro pgad_dbt_configs'):]
    listed = set(re.findall(r"'([a-z_-]+)'", listed[:listed.index('endmacro')]))
    assert set(names) <= listed, set(names) - listed


def deployed(db, name):
    """(the deployed version of model name, without groups, and its weights)."""
    return db.execute('SELECT version, weights FROM pgad.models WHERE name = %s AND group_key IS NULL',
                      [name]).fetchone()


def versions(db, name):
    """{version: deployed} of model name's rows in pgad.model_versions (its groups' included)."""
    return dict(db.execute('SELECT version, bool_and(deployed) FROM pgad.model_versions WHERE name = %s '
                           'GROUP BY version', [name]).fetchall())


def follows(db, schema, weights):
    """Whether every row of the view <schema>.predicted_prices is the prediction of the model with weights (the
    view calls pgad_models."<schema>__house_prices", which scores by the deployed version), within 1e-9."""
    rows = db.execute(f'SELECT p.predicted, h.sqft, h.rooms FROM {schema}.predicted_prices p '
                      f'JOIN {schema}.stg_houses h USING (id)').fetchall()
    return len(rows) == 45 and all(
        p == pytest.approx(weights['per_sqft'] * sqft + weights['per_room'] * rooms + weights['base'], rel=1e-9)
        for p, sqft, rooms in rows)


def operation(run, macro, args, *options, fails=False):
    return run('run-operation', macro, '--args', args, *options, fails=fails)


def test_versions_through_dbt_in_two_targets(built, project):
    """Each dbt run that trains makes a new version; config deploy (here through --vars pgad_deploy) chooses whether it
    is deployed; pgad_deploy deploys a version by number or by strategy (previous: the rollback) and pgad_drop_model
    drops one, each in its own target only; the view predicted_prices, built once, follows the deployed version."""
    db, _, _ = built
    run, _ = project
    dev, prod = 'dev__house_prices', 'analytics__house_prices'
    run('run', '-s', 'house_prices', '--target', 'prod')  # prod has two versions at least
    prod_versions, (prod_version, prod_weights) = versions(db, prod), deployed(db, prod)
    assert len(prod_versions) >= 2 and follows(db, 'analytics', prod_weights)
    prod_state = state(db, PROD)

    first, first_weights = deployed(db, dev)
    assert follows(db, 'dev', first_weights)
    db.execute('UPDATE dev.houses SET price = 3 * price / 2')  # dev's prices: the seed's tripled
    out = run('run', '-s', 'house_prices')
    second, second_weights = deployed(db, dev)
    assert second == max(versions(db, dev)) == first + 1 and f'iterations, version {second}, deployed' in out
    assert second_weights['per_sqft'] == pytest.approx(1.5 * first_weights['per_sqft'], rel=1e-6)
    assert follows(db, 'dev', second_weights)

    out = operation(run, 'pgad_deploy', '{name: house_prices, strategy: previous}')  # the rollback
    assert f'pgad model {dev}: version {first} deployed' in out
    assert deployed(db, dev) == (first, first_weights) and follows(db, 'dev', first_weights)

    db.execute('UPDATE dev.houses SET price = 4 * price / 3')  # the seed's quadrupled
    out = run('run', '-s', 'house_prices', '--vars', '{pgad_deploy: false}')  # trained, stored, not deployed
    third = max(versions(db, dev))
    assert third == second + 1 and f'iterations, version {third}, not deployed' in out
    assert deployed(db, dev) == (first, first_weights) and follows(db, 'dev', first_weights)
    sent = (run.directory / 'target' / 'run' / 'pgad_houses' / 'models' / 'house_prices.sql').read_text()
    assert "deploy => 'false'::pg_catalog.bool" in sent
    out = operation(run, 'pgad_deploy', f'{{name: house_prices, version: {third}}}')
    assert f'pgad model {dev}: version {third} deployed' in out
    third_weights = deployed(db, dev)[1]
    assert third_weights['per_sqft'] == pytest.approx(2 * first_weights['per_sqft'], rel=1e-6)
    assert follows(db, 'dev', third_weights)

    out = operation(run, 'pgad_drop_model', f'{{name: house_prices, version: {second}}}')
    assert f'pgad model {dev}: version {second} dropped' in out
    assert second not in versions(db, dev) and {first, third} <= versions(db, dev).keys()
    operation(run, 'pgad_drop_model', f'{{name: house_prices, version: {third}}}', fails=True)  # the deployed one
    assert deployed(db, dev)[0] == third and follows(db, 'dev', third_weights)

    # all that in dev changed nothing of prod's
    assert state(db, PROD) == prod_state and versions(db, prod) == prod_versions
    # and prod's rollback changes nothing of dev's
    dev_state, dev_versions = state(db, DEV), versions(db, dev)
    operation(run, 'pgad_deploy', '{name: house_prices, strategy: previous}', '--target', 'prod')
    back, back_weights = deployed(db, prod)
    assert back != prod_version and back in prod_versions and follows(db, 'analytics', back_weights)
    assert state(db, DEV) == dev_state and versions(db, dev) == dev_versions
    operation(run, 'pgad_deploy', '{name: house_prices, strategy: most_recent}', '--target', 'prod')
    assert deployed(db, prod) == (prod_version, prod_weights) and follows(db, 'analytics', prod_weights)
    run('seed')  # dev's seed as it was


def catalog(run, *options):
    """The nodes of the catalog.json that dbt docs generate writes, by unique id."""
    run('docs', 'generate', *options)
    return json.loads((run.directory / 'target' / 'catalog.json').read_text())['nodes']


def stats(node):
    """A catalog node's statistics, {key: value}, those shown (a value of a model with groups read as JSON)."""
    return {k: v['value'] for k, v in node['stats'].items() if v['include']}


def value(text):
    """A statistic's value: JSON read as JSON, else the text itself."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def test_dbt_docs_show_the_deployed_versions_weights_and_metrics(built, project):
    """dbt docs generate shows, in the statistics of a pgad_model's view (catalog.json, the docs site's Details), the
    model's pgad name, deployed version and versions kept, weights, final loss, fit, and with validation the
    validation loss and metrics, as pgad.models has them when the docs are generated; another view shows none."""
    db, _, _ = built
    run, _ = project
    nodes = catalog(run, '--target', 'prod')
    assert stats(nodes['model.pgad_houses.stg_houses']) == {}
    for model in ('house_prices', 'house_prices_by_region'):
        name = f'analytics__{model}'
        rows = db.execute('SELECT group_key, version, weights, final_loss, converged, iterations FROM pgad.models '
                          'WHERE name = %s', [name]).fetchall()
        kept = ', '.join(str(v) for v in sorted(versions(db, name)))
        shown = stats(nodes[f'model.pgad_houses.{model}'])
        assert shown.pop('pgad_model') == name and shown.pop('pgad_version') == f'{rows[0][1]} (versions kept: {kept})'
        assert shown.pop('pgad_trained_at')
        shown = {k: value(v) for k, v in shown.items()}
        expected = {', '.join(g.values()) if g else None: (w, loss, f'converged after {i} iterations')
                    for g, _, w, loss, converged, i in rows if converged}
        assert len(expected) == len(rows)
        if model == 'house_prices':  # no groups: the values themselves
            assert shown == dict(zip(('pgad_weights', 'pgad_final_loss', 'pgad_fit'), expected[None]))
        else:  # a JSON object by region
            assert shown == {k: {g: e[i] for g, e in expected.items()}
                             for i, k in enumerate(('pgad_weights', 'pgad_final_loss', 'pgad_fit'))}
    # after a rollback, the next docs show the version deployed then
    operation(run, 'pgad_deploy', '{name: house_prices, strategy: previous}', '--target', 'prod')
    try:
        version, weights = deployed(db, 'analytics__house_prices')
        shown = stats(catalog(run, '--target', 'prod')['model.pgad_houses.house_prices'])
        assert shown['pgad_version'].startswith(f'{version} (') and json.loads(shown['pgad_weights']) == weights
    finally:
        operation(run, 'pgad_deploy', '{name: house_prices, strategy: most_recent}', '--target', 'prod')
    # a model trained with validation shows the last validation loss, and its metrics where it has them
    path = run.directory / 'models' / 'validated.sql'
    path.write_text("{{ config(materialized='pgad_model', model='λ(d, w) w.a*d.sqft + w.b', loss='squared', "
                    "label='price', weights={'a': 0, 'b': 0}, validation=0.2, seed=1) }}\n"
                    "select sqft, price from {{ ref('stg_houses') }}")
    try:
        run('run', '-s', 'validated')
        shown = stats(catalog(run)['model.pgad_houses.validated'])
    finally:
        path.unlink()
    history, metrics = db.execute('SELECT validation_history, metrics FROM pgad.models WHERE name = %s',
                                  ['dev__validated']).fetchone()
    assert float(shown['pgad_validation_loss']) == history[-1]
    if metrics is None:
        assert 'pgad_metrics' not in shown
    else:
        assert json.loads(shown['pgad_metrics']) == metrics
    db.execute("SELECT pgad.drop_model('dev__validated')")


def test_the_catalog_query_is_dbt_postgres_s():
    """macros/pgad_catalog.sql overrides dbt-postgres's catalog query (at the pinned versions) to add pgad's
    statistics: every line of dbt-postgres's macros is in it, in order."""
    dbt_program()
    theirs = next(VENV.glob('lib/python*/site-packages/dbt/include/postgres/macros/catalog.sql')).read_text()
    ours = iter((EXAMPLE / 'macros' / 'pgad_catalog.sql').read_text().splitlines())
    missing = [line for line in theirs.splitlines() if line.strip() and not any(line == o for o in ours)]
    assert missing == []


def test_dbts_output_in_the_example_is_ignored():
    """Running the example in examples/dbt leaves target/ and logs/ there: git ignores them."""
    paths = ['examples/dbt/target/catalog.json', 'examples/dbt/logs/dbt.log']
    result = subprocess.run(['git', 'check-ignore', *paths], cwd=ROOT, capture_output=True, text=True)
    assert result.stdout.split() == paths


def test_an_operations_arguments_reach_sql_as_literals(built, project):
    """pgad_deploy and pgad_drop_model act only on a pgad_model of the project, in the target, and their other
    arguments reach SQL as quoted literals: text that would end the call and run SQL of its own is refused as a
    version (22P02), and nothing changes."""
    db, _, _ = built
    run, _ = project
    out = operation(run, 'pgad_deploy', '{name: stg_houses, strategy: previous}', fails=True)
    assert "no dbt model 'stg_houses' with materialized='pgad_model' in this project" in out
    before = versions(db, 'dev__house_prices')
    attack = ('pg_catalog.abs(0)) FROM pg_catalog.pg_class WHERE false; DROP VIEW dev.predicted_prices; '
              'SELECT (1')
    out = operation(run, 'pgad_drop_model', json.dumps({'name': 'house_prices', 'version': attack}), fails=True)
    assert 'invalid input syntax for type integer' in out
    out = operation(run, 'pgad_deploy', json.dumps({'name': 'house_prices', 'strategy': attack}), fails=True)
    assert db.execute("SELECT to_regclass('dev.predicted_prices') IS NOT NULL").fetchone() == (True,)
    assert versions(db, 'dev__house_prices') == before


def test_deploy_if_better_keeps_the_deployed_version_unless_the_new_one_is_better(built, project):
    """config deploy='if_better' reaches pgad.train: the first version is deployed; a second trained on the same rows,
    whose validation loss is the same, is stored but not deployed, and pgad's NOTICE saying so shows in dbt's
    output."""
    db, _, _ = built
    run, _ = project
    text = ("{{ config(materialized='pgad_model', model='λ(d, w) w.a*d.sqft + w.b', loss='squared', label='price', "
            "weights={'a': 0, 'b': 0}, validation=0.2, seed=1, deploy='if_better') }}\n"
            "select sqft, price from {{ ref('stg_houses') }}")
    out = with_model(run, 'guarded', text)
    assert 'iterations, version 1, deployed' in out
    sent = (run.directory / 'target' / 'run' / 'pgad_houses' / 'models' / 'guarded.sql').read_text()
    assert "deploy => 'if_better'::pg_catalog.text" in sent
    out = with_model(run, 'guarded', text)
    assert 'iterations, version 2, not deployed' in out and 'version 2 is not deployed: its validation loss' in out
    assert versions(db, 'dev__guarded') == {1: True, 2: False}
    db.execute("SELECT pgad.drop_model('dev__guarded')")
