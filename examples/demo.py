"""make demo: train a linear and a logistic regression on 1M rows inside PostgreSQL, in forward and reverse mode,
then one linear model per group of rows with the aggregate pgad.gradient_descent_agg, then named models with
pgad.train (by L-BFGS, one per group, with its progress NOTICEs), scored in plain SQL by the functions it generates;
then the breadth: a model of three classes by its family's name, evaluated on held-out rows, a row predicted and
explained; a forecast per store with its intervals; a retraining and a rollback.

Without PGAD_DSN it starts a throwaway PostgreSQL cluster of its own (temporary directory, own port) and stops it at
the end. With PGAD_DSN set (a libpq connection string) it uses that server, and touches nothing there that it did
not create (a Sandbox):
- where the role may create databases, it creates a database of its own, pgad_demo_<random>, installs pgad there
  and drops that database, and only that, at the end;
- otherwise, in the database PGAD_DSN names, where pgad must be installed already, it creates a schema of its own,
  pgad_demo_<random>, for its tables, and prefixes its models' names with it; at the end it drops its models
  (pgad.drop_model) and that schema, nothing else. Never the extension, and never a table, model or function that
  was there before.
"""
import contextlib
import os
import secrets
import time

import psycopg
from psycopg import sql

from pgad.throwaway import Cluster

ROWS = int(os.environ.get('PGAD_DEMO_ROWS', 1_000_000))
GAUSS = 'sqrt(-2*ln(1 - random()))*cos(2*pi()*random())'  # a standard normal, by Box–Muller
DATASETS = {
    'linear regression': (
        'λ(d, w) (w.a*d.x1 + w.b*d.x2 + w.c - d.y)^2',
        f"""CREATE TABLE linear AS SELECT x1, x2, 3*x1 - 2*x2 + 0.5 + 0.1*z AS y FROM (
              SELECT {GAUSS} AS x1, {GAUSS} AS x2, {GAUSS} AS z FROM generate_series(1, {ROWS}) AS i) AS s""",
        'linear', '{"a": 0, "b": 0, "c": 0}', 0.3, 100, 'y = 3·x1 − 2·x2 + 0.5 + noise'),
    'logistic regression': (
        'λ(d, w) softplus(w.a*d.x1 + w.b*d.x2 + w.c) - d.label*(w.a*d.x1 + w.b*d.x2 + w.c)',
        f"""CREATE TABLE logistic AS SELECT x1, x2,
              (random() < 1/(1 + exp(-(1.5*x1 - 2*x2 + 0.3))))::int AS label FROM (
              SELECT {GAUSS} AS x1, {GAUSS} AS x2 FROM generate_series(1, {ROWS}) AS i) AS s""",
        'logistic', '{"a": 0, "b": 0, "c": 0}', 2.0, 200, 'P(label) = sigmoid(1.5·x1 − 2·x2 + 0.3)'),
}
# The breadth after the 1M-row fits: three classes of flowers (a model by its family's name), and the daily sales of
# three stores (a forecast per store).
FLOWERS = f"""CREATE TABLE flowers AS SELECT i, c, CASE c WHEN 0 THEN 'iris' WHEN 1 THEN 'lily' ELSE 'rose' END AS kind,
                5 + c + 0.8*{GAUSS} AS petal, 3 + 0.5*c*c + 0.7*{GAUSS} AS sepal, 2 - c + 0.9*{GAUSS} AS stem
              FROM (SELECT i, i % 3 AS c FROM generate_series(1, 3000) AS i) AS s"""
SALES = f"""CREATE TABLE sales AS SELECT store, day, 100 + 20*store + 10*sin(2*pi()*k/7)
                + sum(step) OVER (PARTITION BY store ORDER BY k) + 3*{GAUSS} AS units
              FROM (SELECT store, k, DATE '2026-01-01' + k AS day, 0.5 + 2*{GAUSS} AS step
                    FROM generate_series(1, 3) AS store, generate_series(0, 139) AS k) AS s"""
TABLES = (*(dataset[2] for dataset in DATASETS.values()), 'flowers', 'sales')


@contextlib.contextmanager
def server():
    """The connection string of the server the demo runs on: PGAD_DSN's, or a throwaway cluster's."""
    if os.environ.get('PGAD_DSN'):
        yield os.environ['PGAD_DSN']
        return
    print('starting a throwaway PostgreSQL cluster …')
    with Cluster(server_settings={'shared_preload_libraries': 'pgad'}) as pg:  # pgad's settings in every session
        yield pg.conninfo()
    print('stopped the throwaway cluster')


class Sandbox:
    """Where the demo works on a server: its own database, or its own schema in the database dsn names (module
    docstring). db is the connection to use; model(name) is the name a demo model is stored under."""

    def __init__(self, dsn):
        self.dsn, self.tag = dsn, f'pgad_demo_{secrets.token_hex(4)}'
        self.database = self.schema = None
        self.models = []

    def __enter__(self):
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            try:
                admin.execute(sql.SQL('CREATE DATABASE {}').format(sql.Identifier(self.tag)))
                self.database = self.tag
            except psycopg.errors.InsufficientPrivilege:
                pass
        if self.database:
            self.db = psycopg.connect(psycopg.conninfo.make_conninfo(self.dsn, dbname=self.database), autocommit=True)
            self.db.execute('CREATE EXTENSION pgad CASCADE')
            print(f'working in a database of its own, {self.database}, dropped at the end')
            return self
        self.db = psycopg.connect(self.dsn, autocommit=True)
        if self.db.execute("SELECT FROM pg_catalog.pg_extension WHERE extname = 'pgad'").fetchone() is None:
            self.db.close()
            raise SystemExit('pgad demo: this role may not create a database, and pgad is not installed in the one '
                             'PGAD_DSN names; install it there (CREATE EXTENSION pgad CASCADE) or use a role with '
                             'CREATEDB')
        self.schema = self.tag
        self.db.execute(sql.SQL('CREATE SCHEMA {}').format(sql.Identifier(self.schema)))
        self.db.execute(sql.SQL('SET search_path = {}, public').format(sql.Identifier(self.schema)))
        print(f'working in a schema of its own, {self.schema}, dropped at the end with the models it trains')
        return self

    def model(self, name):
        """The name a demo model is stored under (in a shared database, prefixed with the sandbox's tag)."""
        stored = name if self.database else f'{self.tag}_{name}'
        self.models.append(stored)
        return stored

    def __exit__(self, *exc):
        try:
            if self.schema:
                for name in self.models:
                    self.db.execute('SELECT pgad.drop_model(%s) FROM pgad.models WHERE name = %s LIMIT 1', (name, name))
                for table in TABLES:  # RESTRICT: whatever another made on them stops the drop
                    self.db.execute(sql.SQL('DROP TABLE IF EXISTS {}').format(sql.Identifier(self.schema, table)))
                self.db.execute(sql.SQL('DROP SCHEMA {}').format(sql.Identifier(self.schema)))
        finally:
            self.db.close()
        if self.database:
            with psycopg.connect(self.dsn, autocommit=True) as admin:
                admin.execute(sql.SQL('DROP DATABASE {} WITH (FORCE)').format(sql.Identifier(self.database)))


def main():
    with server() as dsn, Sandbox(dsn) as sandbox:
        db = sandbox.db
        version = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgad'").fetchone()[0]
        print(f'pgad {version} on {db.execute("SHOW server_version").fetchone()[0]}\n')
        for title, (loss, create, table, start, rate, iterations, truth) in DATASETS.items():
            started = time.perf_counter()
            db.execute(create)
            print(f'{title}: {ROWS:,} rows in table {table} ({truth}), made in {time.perf_counter() - started:.1f} s')
            print(f'  loss  {loss}')
            for mode in ('forward', 'reverse'):
                started = time.perf_counter()
                weights, value, ran = db.execute(
                    'SELECT * FROM pgad.gradient_descent(%s, %s, %s, learning_rate => %s, iterations => %s, '
                    'mode => %s)', (loss, table, start, rate, iterations, mode)).fetchone()
                took = time.perf_counter() - started
                fitted = ', '.join(f'{k} = {v:.4f}' for k, v in sorted(weights.items()))
                print(f'  {mode:7}  {fitted}   loss {value:.6f}   {ran} iterations in {took:.2f} s')
            print()
        print('one model per group, as an aggregate: pgad.gradient_descent_agg(loss, weights, t) … GROUP BY')
        loss, _, table, start, rate, iterations, _ = DATASETS['linear regression']
        started = time.perf_counter()
        fits = db.execute('SELECT positive, (fit).weights, (fit).loss, (fit).iterations FROM ('
                          'SELECT x1 > 0 AS positive, pgad.gradient_descent_agg(%s, %s, t, %s) AS fit '
                          f'FROM {table} AS t GROUP BY x1 > 0) AS fits ORDER BY positive',
                          (loss, start, f'{{"learning_rate": {rate}, "iterations": {iterations}}}')).fetchall()
        took = time.perf_counter() - started
        for positive, weights, value, ran in fits:
            fitted = ', '.join(f'{k} = {v:.4f}' for k, v in sorted(weights.items()))
            print(f'  x1 {">" if positive else "≤"} 0   {fitted}   loss {value:.6f}   {ran} iterations')
        print(f'  both groups in {took:.2f} s\n')
        named_models(db, sandbox)
        breadth(db, sandbox)
        print('derivatives of the linear loss, as pgad.derivatives shows them:')
        for weight, derivative in db.execute('SELECT * FROM pgad.derivatives(%s)', (DATASETS['linear regression'][0],)):
            print(f'  ∂/∂{weight} = {derivative}')


def named_models(db, sandbox):
    """pgad.train: a stored logistic model scored by its generated function, and one linear model per sign of x1."""
    print('named models: pgad.train stores them in pgad.models and writes each a scoring function in pgad_models')
    db.add_notice_handler(lambda notice: print(f'  NOTICE: {notice.message_primary}'))
    churn, by_sign = sandbox.model('churn'), sandbox.model('by_sign')
    started = time.perf_counter()
    weights, iterations, loss = db.execute(
        "SELECT weights, iterations, final_loss FROM pgad.train(%s, 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', "
        "'logistic', 'logistic', '{\"a\": 0, \"b\": 0, \"c\": 0}', label => 'label', optimizer => 'lbfgs', "
        "iterations => 50, progress_every => 5)", (churn,)).fetchone()
    took = time.perf_counter() - started
    fitted = ', '.join(f'{k} = {v:.4f}' for k, v in sorted(weights.items()))
    print(f'  {churn} (logistic, lbfgs)  {fitted}   loss {loss:.6f}   {iterations} iterations in {took:.2f} s')
    started = time.perf_counter()
    scoring = sql.SQL('SELECT avg((({}(x1, x2) > 0)::int = label)::int) FROM logistic').format(scorer(churn))
    accuracy = db.execute(scoring).fetchone()[0]
    print(f'  {scoring.as_string(db)}  →  accuracy {accuracy:.4f}, in {time.perf_counter() - started:.2f} s')
    started = time.perf_counter()
    fits = db.execute("SELECT group_key, weights FROM pgad.train(%s, 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', "
                      "'squared', 'SELECT x1, x2, y, x1 > 0 AS positive FROM linear', "
                      "'{\"a\": 0, \"b\": 0, \"c\": 0}', optimizer => 'lbfgs', group_by => 'positive') "
                      "ORDER BY group_key::text", (by_sign,)).fetchall()
    took = time.perf_counter() - started
    for key, weights in fits:
        print(f'  {by_sign} {key}  ' + ', '.join(f'{k} = {v:.4f}' for k, v in sorted(weights.items())))
    print(f'  both groups in {took:.2f} s; scored by {scorer(by_sign).as_string(db)}(positive, x1, x2):')
    for row in db.execute(sql.SQL('SELECT x1 > 0 AS positive, round(avg(abs({}(x1 > 0, x1, x2) - y))::numeric, 4) '
                                  'AS mean_abs_error FROM linear GROUP BY 1 ORDER BY 1').format(scorer(by_sign))):
        print(f'    positive = {row[0]}: mean absolute error {row[1]}')
    print(db.execute("SELECT string_agg(name || coalesce(' ' || group_key::text, ''), ', ' ORDER BY name, "
                     "group_key::text) FROM pgad.models WHERE name = ANY(%s)",
                     (sandbox.models,)).fetchone()[0].join(('  pgad.models: ', '\n')))


def breadth(db, sandbox):
    """A model of classes by its family's name, evaluated on held-out rows and one prediction explained; a forecast
    per store with its intervals; a retraining and a rollback."""
    print('\nmany classes by a family\'s name: pgad.train(name, \'softmax\', data, label => …), no lambda to write')
    db.execute(FLOWERS)
    kinds = sandbox.model('kinds')
    started = time.perf_counter()
    model, converged = db.execute(
        "SELECT model, converged FROM pgad.train(%s, 'softmax', 'SELECT petal, sepal, stem, kind FROM flowers "
        "WHERE i %% 5 <> 0', label => 'kind', l2 => 0.001)", (kinds,)).fetchone()
    print(f'  the lambda it stands for: {model}\n  converged {converged}, in {time.perf_counter() - started:.2f} s')
    metrics = dict(db.execute("SELECT metric, value FROM pgad.evaluate(%s, 'SELECT petal, sepal, stem, kind FROM "
                              "flowers WHERE i %% 5 = 0') WHERE metric IN ('accuracy', 'rows', 'loss')",
                              (kinds,)).fetchall())
    print(f'  pgad.evaluate on {metrics["rows"]:.0f} held-out rows: accuracy {metrics["accuracy"]:.3f}, '
          f'cross-entropy {metrics["loss"]:.3f}')
    row = db.execute("SELECT class, probabilities, key FROM pgad.predict(%s, 'SELECT i, petal, sepal, stem, kind FROM "
                     "flowers WHERE i = 5')", (kinds,)).fetchone()
    shown = ', '.join(f'{k} {v:.3f}' for k, v in sorted(row[1].items()))
    print(f'  pgad.predict, row {row[2]["i"]} (a {row[2]["kind"]}): class {row[0]}; {shown}')
    explained = db.execute(sql.SQL('SELECT {}(petal, sepal, stem) FROM flowers WHERE i = 5').format(
        sql.Identifier('pgad_models', f'{kinds}_explain'))).fetchone()[0]
    print(f'  why {row[0]}: ' + ', '.join(f'{k} {v:+.3f}' for k, v in explained[row[0]].items()))
    print('\na forecast per store: pgad.train(name, \'auto\', …, order_by, group_by), then pgad.forecast')
    db.execute(SALES)
    demand = sandbox.model('demand')
    started = time.perf_counter()
    chosen = db.execute("SELECT group_key->>'store', options->>'family' FROM pgad.train(%s, 'auto(7)', "
                        "'SELECT store, day, units FROM sales', label => 'units', order_by => 'day', "
                        "group_by => 'store') ORDER BY 1", (demand,)).fetchall()
    print(f'  chosen per store in {time.perf_counter() - started:.2f} s: '
          + ', '.join(f'store {s} {family}' for s, family in chosen))
    for store, step, at, value, lower, upper in db.execute(
            "SELECT group_key->>'store', step, at, value, lower, upper FROM pgad.forecast(%s, 3) "
            "WHERE step IN (1, 3) ORDER BY 1, 2", (demand,)):
        print(f'  store {store} {at}: {value:7.1f} units, 95 % interval [{lower:.1f}, {upper:.1f}]')
    print('\nversions: a retraining on fewer features, then pgad.rollback')
    db.execute("SELECT pgad.train(%s, 'softmax', 'SELECT petal, kind FROM flowers WHERE i %% 5 <> 0', "
               "label => 'kind', l2 => 0.001)", (kinds,))
    for version, deployed, model in db.execute("SELECT version, deployed, model FROM pgad.model_versions "
                                               "WHERE name = %s ORDER BY version", (kinds,)):
        print(f'  version {version}{" (deployed)" if deployed else ""}: {model}')
    back = db.execute('SELECT version FROM pgad.rollback(%s)', (kinds,)).fetchone()[0]
    accuracy = db.execute("SELECT avg((class = key->>'kind')::int) FROM pgad.predict(%s, 'SELECT petal, sepal, stem, "
                          "kind FROM flowers WHERE i %% 5 = 0')", (kinds,)).fetchone()[0]
    print(f'  pgad.rollback deployed version {back} again: its held-out accuracy {accuracy:.3f}\n')


def scorer(name):
    """The scoring function pgad.train made for model name, as SQL."""
    return sql.Identifier('pgad_models', name)


if __name__ == '__main__':
    main()
