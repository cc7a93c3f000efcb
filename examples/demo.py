"""make demo: train a linear and a logistic regression on 1M rows inside PostgreSQL, in forward and reverse mode,
then one linear model per group of rows with the aggregate pgad.gradient_descent_agg, then named models with
pgad.train (by L-BFGS, one per group, with its progress NOTICEs), scored in plain SQL by the functions it generates.

With PGAD_DSN set (a libpq connection string) it uses that server, where pgad must be installable; otherwise it
starts a throwaway PostgreSQL cluster of its own (temporary directory, own port) and stops it at the end.
"""
import contextlib
import os
import time

import psycopg

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


@contextlib.contextmanager
def server():
    if os.environ.get('PGAD_DSN'):
        yield os.environ['PGAD_DSN']
        return
    print('starting a throwaway PostgreSQL cluster …')
    with Cluster(server_settings={'shared_preload_libraries': 'pgad'}) as pg:  # pgad's settings in every session
        yield pg.conninfo()
    print('stopped the throwaway cluster')


def main():
    with server() as dsn, psycopg.connect(dsn, autocommit=True) as db:
        db.execute('DROP EXTENSION IF EXISTS pgad CASCADE')
        db.execute('CREATE EXTENSION pgad CASCADE')
        version = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgad'").fetchone()[0]
        print(f'pgad {version} on {db.execute("SHOW server_version").fetchone()[0]}\n')
        for title, (loss, create, table, start, rate, iterations, truth) in DATASETS.items():
            db.execute(f'DROP TABLE IF EXISTS {table}')
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
        named_models(db)
        print('derivatives of the linear loss, as pgad.derivatives shows them:')
        for weight, derivative in db.execute('SELECT * FROM pgad.derivatives(%s)', (DATASETS['linear regression'][0],)):
            print(f'  ∂/∂{weight} = {derivative}')


def named_models(db):
    """pgad.train: a stored logistic model scored by pgad_models.churn, and one linear model per sign of x1."""
    print('named models: pgad.train stores them in pgad.models and writes each a scoring function in pgad_models')
    db.add_notice_handler(lambda notice: print(f'  NOTICE: {notice.message_primary}'))
    started = time.perf_counter()
    weights, iterations, loss = db.execute(
        "SELECT weights, iterations, final_loss FROM pgad.train('churn', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', "
        "'logistic', 'logistic', '{\"a\": 0, \"b\": 0, \"c\": 0}', label => 'label', optimizer => 'lbfgs', "
        "iterations => 50, progress_every => 5)").fetchone()
    took = time.perf_counter() - started
    fitted = ', '.join(f'{k} = {v:.4f}' for k, v in sorted(weights.items()))
    print(f'  churn (logistic, lbfgs)  {fitted}   loss {loss:.6f}   {iterations} iterations in {took:.2f} s')
    started = time.perf_counter()
    accuracy = db.execute('SELECT avg(((pgad_models.churn(x1, x2) > 0)::int = label)::int) FROM logistic').fetchone()[0]
    print(f'  SELECT avg(((pgad_models.churn(x1, x2) > 0)::int = label)::int) FROM logistic  →  accuracy '
          f'{accuracy:.4f}, in {time.perf_counter() - started:.2f} s')
    started = time.perf_counter()
    fits = db.execute("SELECT group_key, weights FROM pgad.train('by_sign', 'λ(d, w) w.a*d.x1 + w.b*d.x2 + w.c', "
                      "'squared', 'SELECT x1, x2, y, x1 > 0 AS positive FROM linear', "
                      "'{\"a\": 0, \"b\": 0, \"c\": 0}', optimizer => 'lbfgs', group_by => 'positive') "
                      "ORDER BY group_key::text").fetchall()
    took = time.perf_counter() - started
    for key, weights in fits:
        print(f'  by_sign {key}  ' + ', '.join(f'{k} = {v:.4f}' for k, v in sorted(weights.items())))
    print(f'  both groups in {took:.2f} s; scored by pgad_models.by_sign(positive, x1, x2):')
    for row in db.execute('SELECT x1 > 0 AS positive, round(avg(abs(pgad_models.by_sign(x1 > 0, x1, x2) - y))::numeric, '
                          '4) AS mean_abs_error FROM linear GROUP BY 1 ORDER BY 1'):
        print(f'    positive = {row[0]}: mean absolute error {row[1]}')
    print(db.execute("SELECT string_agg(name || coalesce(' ' || group_key::text, ''), ', ' ORDER BY name, "
                     "group_key::text) FROM pgad.models").fetchone()[0].join(('  pgad.models: ', '\n')))


if __name__ == '__main__':
    main()
