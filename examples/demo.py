"""make demo: train a linear and a logistic regression on 1M rows inside PostgreSQL, in forward and reverse mode,
then one linear model per group of rows with the aggregate pgad.gradient_descent_agg, then named models with
pgad.train (by L-BFGS, one per group, with its progress NOTICEs), scored in plain SQL by the functions it generates.

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
TABLES = tuple(dataset[2] for dataset in DATASETS.values())


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


def scorer(name):
    """The scoring function pgad.train made for model name, as SQL."""
    return sql.Identifier('pgad_models', name)


if __name__ == '__main__':
    main()
