"""Every error in docs/sql.md's error table is produced exactly as documented: the table is read from the docs, and
each example message in it is produced by a call (CALLS, one line per example) against a real server, with the
documented SQLSTATE, message and, where the table gives one, DETAIL. In the table, `…` stands for any text.

A few examples need a machine other than this one (a GPU, or none; numba-cuda missing; a shard server that goes away
mid-training): ELSEWHERE names the test that produces each."""
import json
import pathlib
import re

import psycopg
import pytest

from conftest import error_of, new_database

DOCS = pathlib.Path(__file__).parent.parent / 'docs' / 'sql.md'
LINEAR = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
AB = '{"a": 0, "b": 0}'
FEW = 'SELECT ' + ', '.join(f'1.0 AS x{k}' for k in range(8)) + ', 1.0 AS y'
BIG_SUM = 'λ(d, w) (' + ' + '.join(f'w.a{i}*d.x{i % 8}' for i in range(3000)) + ' - d.y)^2'  # 9020 nodes
HUGE = 'λ(d, w) ' + ' + '.join(f'sin(w.a*{i + 2})' for i in range(25000))  # 5 nodes a term, with its derivative
PRODUCT = 'λ(d, w) ' + '*'.join(['w.a', 'd.x'] * 1500)  # its derivative prints as about 20 million characters
MLP = 'λ(d, w) sum(exp(w.m @ [d.x, d.y])) + w.v[1]'
# pgad.evaluate and the functions of a model (docs/sql.md, "Evaluating a model")
TRAIN = "SELECT pgad.train('{}', %s, '{}', '{}', %s, iterations => 1)"
LINE, VECTOR_MODEL = 'λ(d, w) w.a*d.x + w.b', 'λ(d, w) dot(w.a, d.v) + w.c'
CLASSES = 'SELECT x, (x > 5)::int AS y FROM points'
VECTORS = 'SELECT ARRAY[x, 1]::float8[] AS v, y FROM points'
SES = '{"level": {"start": "w.l0", "next": "s.level + w.alpha*(d.y - s.level)"}}'
SEQUENCE = [("SELECT pgad.train('sq', 'λ(d, w, s) s.level', 'squared', 'SELECT x AS t, y FROM points', %s, "
             "order_by => 't', state => %s, iterations => 1)", ('{"alpha": 0.5, "l0": 0}', SES))]
SES_AB = '{"level": {"start": "w.a", "next": "s.level + w.b*(d.y - s.level)"}}'
SEQUENCE_OF = ("SELECT pgad.train('q', 'λ(d, w, s) s.level', 'squared', '{}', '{{\"a\": 0, \"b\": 0.5}}', "
            "order_by => '{}', state => '" + SES_AB.replace('{', '{{').replace('}', '}}') + "'{})")
# a model "vm" of one version, deployed, without validation (trained again by each call that needs it)
VM = [("SELECT pgad.drop_model(m.name) FROM pgad.models AS m WHERE m.name = 'vm'", ()),
      ("SELECT pgad.train('vm', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, iterations => 1)", ('{"a": 0}',))]
TUNE = "SELECT * FROM pgad.tune('m', 'λ(d, w) w.a*d.x', 'squared', 'points', '{\"a\": 0}', "
# a keyed model "mk": a vector per key of column k (issue 48)
KEYED = 'λ(d, w) sum(w.p[d.k])'
KEYED_TRAIN = "SELECT pgad.train('mk', %s, 'squared', 'keyed_rows', %s)"
SHARDED = 'SELECT * FROM pgad.train(\'m\', \'λ(d, w) w.a*d.x\', \'squared\', \'sharded\', \'{{"a": 0}}\'{})'


def call(sql, *args):
    return [(sql, args)]


def shard2(dbname):
    """shard2 pointing at database dbname of the same cluster."""
    return [(f"ALTER SERVER shard2 OPTIONS (SET dbname '{dbname}')", ())]


# example message → the statements that produce it (the last one fails); an example appears once even if the table
# repeats it
CALLS = {
    'column "t" indexes a categorical weight and cannot be read as a number':
        call("SELECT pgad.loss('λ(d, w) w.r[d.t] + d.t', 'mixed', '{\"r\": {}}')"),
    'weight "r" is categorical and must be indexed by a column':
        call("SELECT pgad.loss('λ(d, w) w.r * d.x', 'mixed', '{\"r\": {}}')"),
    'column "x" is of type pg_catalog.float8, which cannot index a categorical weight':
        call("SELECT pgad.loss('λ(d, w) w.r[d.x]', 'mixed', '{\"r\": {}}')"),
    'column "c" has more than 10 categories, the most a categorical weight takes':
        [('SET pgad.max_lambda_nodes = 100', ())] +
        call("SELECT pgad.loss('λ(d, w) w.r[d.c]', 'SELECT (k % 11)::text AS c FROM pg_catalog.generate_series(1, 50) "
             "AS k', '{\"r\": {}}')"),
    'the categories of column "c" need 1.1 MB, more than pgad.memory_limit (1.0 MB)':
        [("SET pgad.memory_limit = '1MB'", ())] +
        call("SELECT pgad.loss('λ(d, w) w.r[d.c]', 'SELECT k::text AS c FROM pg_catalog.generate_series(1, 1100) "
             "AS k', '{\"r\": {}}')"),
    'the aggregates take no categorical weight':
        call("SELECT pgad.loss_agg('λ(d, w) w.r[d.t]', '{\"r\": {}}', m) FROM mixed AS m"),
    'model "linear" reads every column of the data but the label, and column "t" is of type pg_catalog.timestamptz':
        call("SELECT pgad.train('m', 'linear', 'SELECT x, pg_catalog.now() AS t, y FROM points')"),
    'model "poisson" trains with loss "poisson", not "huber"':
        call("SELECT pgad.train('m', 'poisson', 'huber', 'points')"),
    'model "mlp(0)" has 1 layers of 0 units':
        call("SELECT pgad.train('m', 'mlp(0)', 'points')"),
    'weight "p" has shape [0], which is not [] or [n] for n from 1 to 4096':
        call(KEYED_TRAIN, KEYED, '{"p": {"shape": [0]}}'),
    'weight "p" has init \'gamma(1)\', which is not zeros, normal(mean, sd) or uniform(low, high)':
        call(KEYED_TRAIN, KEYED, '{"p": {"shape": [2], "init": "gamma(1)"}}'),
    'weight "p" has an unknown field "scale"':
        call(KEYED_TRAIN, KEYED, '{"p": {"shape": [2], "scale": 1}}'),
    'pgad.train takes no group_by for a keyed model':
        call(KEYED_TRAIN[:-1] + ", group_by => 'k')", KEYED, '{"p": {"shape": [2]}}'),
    'optimizer "newton" cannot train a keyed model':
        call(KEYED_TRAIN[:-1] + ", optimizer => 'newton')", KEYED, '{"p": {"shape": [2]}}'),
    'pgad.train takes no dtype "float32" for a keyed model':
        call(KEYED_TRAIN[:-1] + ", dtype => 'float32')", KEYED, '{"p": {"shape": [2]}}'),
    'the keys of column "k" need … MB with the rows, more than pgad.memory_limit (1.0 MB)':
        call("SET pgad.memory_limit = '1MB'") + call(KEYED_TRAIN.replace(
            "'keyed_rows'", "'SELECT md5(x::text) AS k, 0.0::float8 AS y FROM generate_series(1, 100000) AS x'"),
            KEYED, '{"p": {"shape": [1]}}'),
    'the keyed weights need … MB, more than pgad.memory_limit (1.0 MB)':
        call("SET pgad.memory_limit = '1MB'") + call(KEYED_TRAIN.replace(
            "'keyed_rows'", "'SELECT x::text AS k, 0.0::float8 AS y FROM generate_series(1, 2000) AS x'"), KEYED,
            '{"p": {"shape": [64]}}'),
    'model "m" has no keyed weight':
        VM[:1] + call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', '{{\"a\": 0}}', "
                      "iterations => 1)")
        + call("SELECT * FROM pgad.recommend('m', 'x')"),
    'model "m2" is keyed by 1 column, not two':
        call(KEYED_TRAIN.replace("'mk'", "'m2'"), KEYED, '{"p": {"shape": [2]}}')
        + call("SELECT * FROM pgad.recommend('m2', 'x')"),
    'permission denied for the weights of model "mk", version 1':
        call("DROP TABLE IF EXISTS hidden_keys") + call("CREATE TABLE hidden_keys AS SELECT * FROM keyed_rows")
        + call("SELECT pgad.drop_model(m.name) FROM pgad.models AS m WHERE m.name = 'mk'")
        + call(KEYED_TRAIN.replace("'keyed_rows'", "'hidden_keys'"), KEYED, '{"p": {"shape": [2]}}')
        + call("DROP ROLE IF EXISTS keyed_stranger") + call('CREATE ROLE keyed_stranger')
        + call('SET ROLE keyed_stranger') + call("SELECT pgad_models.mk('a')"),
    'model "m" reads column "acid", which the data does not have':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.acid', 'squared', 'SELECT x AS acid, y FROM points', "
             "'{{\"a\": 0}}', iterations => 1)") + call("SELECT * FROM pgad.predict('m', 'points')"),
    'pgad.tune takes "label" once, but it is given both as an argument and in options':
        call(TUNE + "label => 'y', options => '{\"label\": \"y\"}', grid => '{\"l2\": [0]}')"),
    'the label column "x" is of type pg_catalog.float8, which cannot be a class':
        call("SELECT pgad.train('m', 'λ(d, w) w.w @ [d.y] + w.b', 'softmax', 'points', '{\"w\": {}, \"b\": {}}', "
             "label => 'x')"),
    'loss "softmax" needs two classes or more, but the label column "y" has 1':
        call("SELECT pgad.train('m', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', 'SELECT x, 1 AS y FROM points', "
             "'{\"w\": {}, \"b\": {}}')"),
    'loss "logistic" takes a label of two classes, but column "y" has 3':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'logistic', 'SELECT x, (x::int % 3)::text AS y FROM points', "
             "'{\"a\": 0}')"),
    'the label column "y" has more than 10 classes, the most a model takes':
        [('SET pgad.max_lambda_nodes = 100', ())] +
        call("SELECT pgad.train('m', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', 'SELECT x, x::int AS y FROM "
             "(SELECT pg_catalog.generate_series(1, 50)::float8 AS x) AS s', '{\"w\": {}, \"b\": {}}')"),
    'loss "softmax" takes a prediction of 3 logits, a number per class of the label column "y", but the model '
    'predicts a number':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'softmax', 'SELECT x, x::int % 3 AS y FROM points', "
             "'{\"a\": 0}')"),
    'weight "w" is class-sized and starts at {} only':
        call("SELECT pgad.train('m', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', 'SELECT x, x::int % 3 AS y FROM points', "
             "'{\"w\": {\"a\": 1}, \"b\": {}}')"),
    "the model reads column \"y\", the label of loss 'softmax'":
        call("SELECT pgad.train('m', 'λ(d, w) w.w @ [d.x, d.y] + w.b', 'softmax', "
             "'SELECT x, x::int % 3 AS y FROM points', '{\"w\": {}, \"b\": {}}')"),
    'the label column "y" is not in the data':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'SELECT 1.0::float8 AS x', '{\"a\": 0}')"),
    'column "v" is of type double precision[]: the aggregates take numbers':
        call("SELECT pgad.loss_agg('λ(d, w) w.a*d.v', '{\"a\": 0}', t) FROM (SELECT ARRAY[1.0::float8] AS v) AS t"),
    'column "y" of the data is NaN':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'SELECT 1.0::float8 AS x, ''NaN''::float8 AS y', "
             "'{\"a\": 0}')"),
    'cannot drop model "viewed" because other objects depend on its scoring function':
        call("SELECT pgad.train('viewed', 'λ(d, w) w.a*d.x', 'squared', 'points', %s)", '{"a": 0}')
        + call('CREATE VIEW viewed_scores AS SELECT pgad_models.viewed(x) FROM points')
        + call("SELECT pgad.drop_model('viewed')"),
    'syntax error at or near "*"': call("SELECT pgad.loss('λ(d, w) * d.x', 'points', %s)", AB),
    'function foo(double precision) does not exist': call("SELECT pgad.loss('λ(d, w) foo(w.a)', 'points', %s)", AB),
    '"q" is neither the data row "d" nor the weights "w"': call("SELECT pgad.loss('λ(d, w) q.a', 'points', %s)", AB),
    'column reference "x" needs a row': call("SELECT pgad.loss('λ(d, w) x', 'points', %s)", AB),
    'argument of + must be double precision, not boolean':
        call("SELECT pgad.loss('λ(d, w) (w.a > 1) + 1', 'points', %s)", AB),
    'column "z" does not exist in the data': call("SELECT pgad.loss('λ(d, w) w.a*d.z', 'points', %s)", AB),
    'column "t" is of type text, not a number': call("SELECT pgad.loss('λ(d, w) w.a*d.t', 'mixed', %s)", AB),
    'loss "squared" takes labels that are numbers, but column "t" is of type text':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'mixed', %s, label => 't')", '{"a": 0}'),
    'operator does not exist: double precision ^- double precision':
        call("SELECT pgad.loss('λ(d, w) w.a*2^-1', 'points', %s)", AB),
    'column "x" is of type double precision, not boolean':
        call("SELECT pgad.loss('λ(d, w) CASE WHEN d.x THEN w.a ELSE 0 END', 'points', %s)", AB),
    'column "f" is read both as a number and as a boolean':
        call("SELECT pgad.loss('λ(d, w) CASE WHEN d.f THEN d.f ELSE 0 END', 'points', %s)", AB),
    'cannot multiply a 3×4 matrix by a vector of 2 with @':
        call("SELECT pgad.loss('λ(d, w) sum(w.m @ w.v)', 'points', %s)", '{"m": [[1,2,3,4],[1,2,3,4],[1,2,3,4]], '
                                                                        '"v": [1, 2]}'),
    'cannot apply + to a vector of 3 and a vector of 2':
        call("SELECT pgad.loss('λ(d, w) sum(w.v + w.u)', 'points', %s)", '{"v": [1, 2, 3], "u": [1, 2]}'),
    'the body of a lambda must be a number, not a vector of 3':
        call("SELECT pgad.loss('λ(d, w) w.v', 'points', %s)", '{"v": [1, 2, 3]}'),
    'index 4 is out of range for a vector of 3': call("SELECT pgad.loss('λ(d, w) w.v[4]', 'points', %s)",
                                                      '{"v": [1, 2, 3]}'),
    'column "v" has arrays of different lengths':
        call("SELECT pgad.loss('λ(d, w) sum(d.v)', 'SELECT ARRAY[1.0, 2.0] AS v UNION ALL SELECT ARRAY[1.0]', '{}')"),
    'column "v" has an empty array in row 3 of the data':
        call("SELECT pgad.loss('λ(d, w) sum(d.v)', 'SELECT * FROM (VALUES (ARRAY[1.0, 2.0]), (ARRAY[3.0, 4.0]), "
             "(''{}''::numeric[])) AS t(v)', '{}')"),
    'the weights need 3.7 MB, more than pgad.memory_limit (1.0 MB)':
        [("SET pgad.memory_limit = '1MB'", ())] + call(
            "SELECT pgad.loss(%s, 'points', %s)", LINEAR, '{"a": 0, "b": 0, "u": [' + ', '.join(['0'] * 12000) + ']}'),
    'weight "m" must be a matrix whose rows have one length':
        call("SELECT pgad.loss('λ(d, w) sum(w.m)', 'points', %s)", '{"m": [[1, 2], [3]]}'),
    'pgad.train takes no group_by for a model with vectors':
        call("SELECT * FROM pgad.train('m', %s, 'squared', 'points', %s, group_by => 'x')", MLP,
             '{"m": [[1, 2], [3, 4]], "v": [1]}'),
    'tape "reversible" cannot run "^" backwards':
        call("SELECT pgad.gradient('λ(d, w) (w.v @ [d.x, d.y])^2', 'points', %s, tape => 'reversible')",
             '{"v": [1, 2]}'),
    'unknown tape "tiled"': call("SELECT pgad.gradient(%s, 'points', %s, tape => 'tiled')", LINEAR, AB),
    'tape "store" is not available in mode "forward"':
        call("SELECT pgad.gradient(%s, 'points', %s, mode => 'forward', tape => 'store')", LINEAR, AB),
    'unknown scheme "xavier"': call("SELECT pgad.init_weights('{\"m\": [2, 2]}', 'xavier')"),
    'weight "c" is not in the weights': call("SELECT pgad.loss('λ(d, w) w.c*d.x', 'points', %s)", AB),
    'weights must be a JSON object of numbers': call("SELECT pgad.loss(%s, 'points', '[0, 0]')", LINEAR),
    'relation "pointz" does not exist': call("SELECT pgad.loss(%s, 'pointz', %s)", LINEAR, AB),
    'data must be one statement only: it goes on after a ";"':
        call("SELECT pgad.loss(%s, 'SELECT x, y FROM points; DROP TABLE points', %s)", LINEAR, AB),
    'the data has no rows': call("SELECT pgad.loss(%s, 'SELECT x, y FROM points WHERE false', %s)", LINEAR, AB),
    'learning_rate must be a positive number, not 0':
        call("SELECT * FROM pgad.gradient_descent(%s, 'points', %s, learning_rate => 0)", LINEAR, AB),
    'unknown mode "sideways"': call("SELECT pgad.gradient(%s, 'points', %s, mode => 'sideways')", LINEAR, AB),
    'dtype "float32" is not available on backend "llvm"':
        call("SELECT pgad.gradient(%s, 'points', %s, backend => 'llvm', dtype => 'float32')", LINEAR, AB),
    'cannot take logarithm of zero': call("SELECT pgad.loss('λ(d, w) ln(d.x)', 'SELECT 0 AS x', '{}')"),
    'the gradient by "a" is infinite at the starting weights':
        call("SELECT pgad.gradient('λ(d, w) sqrt(w.a*d.x)', 'points', '{\"a\": 0}')"),
    'training diverged at iteration 3: the loss is infinite':
        call("SELECT * FROM pgad.gradient_descent('λ(d, w) (w.a*d.x - d.y)^2', 'points', '{\"a\": 1}', 1e100, 10)"),
    'loss "logistic" takes labels 0 or 1, but column "y" is 3':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'logistic', 'points', '{\"a\": 0}')"),
    'loss "hinge" takes labels -1 or 1, but column "y" is of type boolean':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'hinge', 'SELECT x, x > 5 AS y FROM points', '{\"a\": 0}')"),
    'early_stopping needs validation rows':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', '{\"a\": 0}', early_stopping => 3)"),
    'lambda is too long: 2000000 bytes':
        call("SELECT pgad.loss(%s, 'points', %s)", LINEAR + ' ' * (2000000 - len(LINEAR.encode())), AB),
    'the data needs 6.1 MB, more than pgad.memory_limit (1.0 MB)':
        [("SET pgad.memory_limit = '1MB'", ())] + call(
            "SELECT pgad.loss(%s, 'SELECT x::float8 AS x, x::float8 AS y FROM generate_series(1, 100000) AS x', %s)",
            LINEAR, AB),
    'lambda is too large: more than 100000 expression nodes with its derivatives':
        call("SELECT * FROM pgad.derivatives(%s)", HUGE),
    'lambda is too large: outer of a vector of 20000 and a vector of 20000 alone unrolls to 400000000 expression nodes':
        call("SELECT pgad.loss('λ(d, w) w.a * sum(outer(d.v, d.v))', "
             "'SELECT array_fill(1.0::float8, ARRAY[20000]) AS v', '{\"a\": 1}')"),
    'lambda is too large for forward mode: its tangents hold more than 400000 entries':
        call("SELECT pgad.gradient('λ(d, w) sum(sum(w.u) + d.v)', 'SELECT array_fill(1.0::float8, ARRAY[2000]) AS v', "
             "%s, mode => 'forward')", json.dumps({'u': [0] * 2000})),
    'expression is too long to print: more than 16777216 characters':
        call("SELECT * FROM pgad.derivatives(%s)", PRODUCT),
    'lambda is too large for the llvm backend: … nodes with its derivatives':
        call("SELECT pgad.gradient(%s, %s, %s, backend => 'llvm')", BIG_SUM, FEW,
             json.dumps({f'a{i}': 0 for i in range(3000)})),
    'column name "x…x" is too long': call("SELECT pgad.loss(%s, 'points', '{}')", 'λ(d, w) d.' + 'x' * 64),
    'canceling statement due to statement timeout':
        [("SET statement_timeout = '300ms'", ())] + call(
            "SELECT * FROM pgad.gradient_descent(%s, 'SELECT x::float8 AS x, x::float8 AS y FROM "
            "generate_series(1, 100000) AS x', %s, 1e-12, 1000000)", LINEAR, AB),
    'pgad is not installed on shard server "shard2"': shard2('{bare}') + call(SHARDED.format('')),
    'shard server "shard2" runs pgad 0.7.0, not … as here': shard2('{old}') + call(SHARDED.format('')),
    'optimizer "sgd" cannot train where the rows are sharded':
        shard2('{current}') + call(SHARDED.format(", optimizer => 'sgd'")),
    'optimizer "interior_point" cannot train loss "squared"':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, optimizer => 'interior_point')",
             '{"a": 0}'),
    'optimizer "interior_point" cannot train a model that is not linear in its weights':
        call("SELECT pgad.train('m', 'λ(d, w) exp(w.a*d.x)', 'quantile(0.5)', 'points', %s, "
             "optimizer => 'interior_point')", '{"a": 0}'),
    'optimizer "interior_point" needs 1.6 MB for its design, more than pgad.memory_limit (1.0 MB)':
        [("SET pgad.memory_limit = '1MB'", ())] + call(
            "SELECT pgad.train('m', 'λ(d, w) w.a*d.x + w.b', 'quantile(0.5)', 'SELECT x::float8 AS x, "
            "(x %% 7)::float8 AS y FROM generate_series(1, 12000) AS x', %s)", AB),
    'model "nosuch" does not exist': call("SELECT * FROM pgad.evaluate('nosuch', 'points')"),
    'model "m" would publish values of the data in its functions\' bodies: …':  # points: PUBLIC may not read it
        [('SET pgad.publish_data_values = off', ())] +
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', '{\"a\": 0}', iterations => 1)"),
    # versions (docs/sql.md, "Versions")
    'pgad.deploy takes a version or a strategy, one of them': VM + call("SELECT * FROM pgad.deploy('vm')"),
    'unknown deployment strategy "newest"': VM + call("SELECT * FROM pgad.deploy('vm', strategy => 'newest')"),
    'version 9 of model "vm" does not exist': VM + call("SELECT * FROM pgad.deploy('vm', 9)"),
    'no version of model "vm" has a validation loss':
        VM + call("SELECT * FROM pgad.deploy('vm', strategy => 'best_validation')"),
    'model "vm" has no version deployed before its deployed one':
        VM + call("SELECT * FROM pgad.deploy('vm', strategy => 'previous')"),
    'version 1 of model "vm" is deployed': VM + call("SELECT pgad.drop_model('vm', 1)"),
    'invalid value for argument "deploy" of pgad.train: "maybe"':
        call("SELECT pgad.train('vm', 'λ(d, w) w.a*d.x', 'squared', 'points', '{\"a\": 0}', deploy => 'maybe')"),
    "deploy => 'if_better' compares validation losses, and there are no validation rows":
        call("SELECT pgad.train('vm', 'λ(d, w) w.a*d.x', 'squared', 'points', '{\"a\": 0}', "
             "deploy => 'if_better')"),
    # sequence models (docs/sql.md, "Sequences")
    'order_by "x" has more than one row at 1': call(SEQUENCE_OF.format('SELECT 1 AS x, y FROM points', 'x', '')),
    'state needs order_by: a sequence model carries a state along ordered rows':
        call("SELECT pgad.train('q', 'λ(d, w, s) s.level', 'squared', 'points', %s, state => %s)", AB, SES_AB),
    'order_by names one column': call(SEQUENCE_OF.format('points', 'x, y', '')),
    'column "x" is both order_by and group_by': call(SEQUENCE_OF.format('points', 'x', ", group_by => 'x'")),
    'column "z" of order_by does not exist in the data': call(SEQUENCE_OF.format('points', 'z', '')),
    'column "x" of order_by is of type text': call(SEQUENCE_OF.format('SELECT x::text AS x, y FROM points', 'x', '')),
    'the model reads its order column "x"':
        call(SEQUENCE_OF.replace("'λ(d, w, s) s.level'", "'λ(d, w, s) s.level + 0*d.x'").format('points', 'x', '')),
    'state field "trend" is not in the state':
        call(SEQUENCE_OF.replace("'λ(d, w, s) s.level'", "'λ(d, w, s) s.level + s.trend'").format('points', 'x', '')),
    'state must be a JSON object of at least one field':
        call("SELECT pgad.train('q', 'λ(d, w, s) s.level', 'squared', 'points', %s, order_by => 'x', state => '{}')",
             AB),
    'the state has 10001 fields, more than pgad.max_lambda_nodes / 10 (10000)':
        call("SELECT pgad.train('q', 'λ(d, w, s) s.f0', 'squared', 'points', %s, order_by => 'x', state => %s)", AB,
             json.dumps({f'f{k}': {'start': '0', 'next': '0'} for k in range(10001)})),
    'weight "state.x" is named as pgad names a state field':
        call("SELECT pgad.train('q', 'λ(d, w, s) s.level + w.\"state.x\"', 'squared', 'points', "
             "'{\"a\": 0, \"b\": 0.5, \"state.x\": 0}', order_by => 'x', state => %s)", SES_AB),
    'optimizer "sgd" cannot train a sequence model': call(SEQUENCE_OF.format('points', 'x', ", optimizer => 'sgd'")),
    "a sequence model takes no loss 'softmax'":
        call(SEQUENCE_OF.replace("'squared'", "'softmax'").format('points', 'x', '')),
    'pgad.train takes no validation or standardize for a sequence model':
        call(SEQUENCE_OF.format('points', 'x', ', standardize => true')),
    "a lambda of a state, λ(d, w, s), is a sequence model's":
        call("SELECT pgad.loss('λ(d, w, s) s.level', 'points', '{}')"),
    'pgad.evaluate does not take model "vlen", a model with vectors':
        call(TRAIN.format('vlen', 'squared', VECTORS), VECTOR_MODEL, '{"a": [0, 0], "c": 0}') +
        call("SELECT * FROM pgad.evaluate('vlen', %s)", VECTORS),
    'model "e1" has a probability function named "e1_probability"':
        call(TRAIN.format('e1', 'logistic', CLASSES), LINE, AB) +
        call(TRAIN.format('e1_probability', 'squared', CLASSES), LINE, AB),
    'model "e3" has an explain function named "e3_explain"':
        call(TRAIN.format('e3', 'squared', CLASSES), LINE, AB) +
        call(TRAIN.format('e3_explain', 'squared', CLASSES), LINE, AB),
    'model "old" has no baseline to explain its predictions from':  # as a model trained before 0.15.0 has none
        call(TRAIN.format('old', 'squared', CLASSES), LINE, AB) +
        call("UPDATE pgad.models SET options = options - 'baseline' WHERE name = 'old'") +
        call("SELECT * FROM pgad.importance('old', 'points')"),
    'argument "name" of pgad.importance must not be NULL':
        call("SELECT * FROM pgad.importance(NULL, 'points')"),
    'the explanation of the data needs 1.2 MB, more than pgad.memory_limit (1.0 MB)':
        call(TRAIN.format('wide', 'λ(p, d) (sum(p) - d.y)^2', 'SELECT x, x AS z, y FROM points'),
             'λ(d, w) w.m @ [d.x, d.z]', '{"m": [[0, 0], [0, 0], [0, 0], [0, 0]]}') +
        [("SET pgad.memory_limit = '1MB'", ())] +  # the data needs 0.6 MB
        call("SELECT * FROM pgad.importance('wide', 'SELECT x, x AS z, y FROM points, "
             "pg_catalog.generate_series(1, 660) AS k')"),
    'model "e2_class" exists, and the class function of model "e2" would take its name':
        call(TRAIN.format('e2_class', 'squared', CLASSES), LINE, AB) +
        call(TRAIN.format('e2', 'logistic', CLASSES), LINE, AB),
    'the probability function of model "m…m" would be named "m…m_probability", longer than 63 bytes':
        call(TRAIN.format('m' * 60, 'logistic', CLASSES), LINE, AB),
    'invalid model name "m@2": it holds "@"': call(TRAIN.format('m@2', 'squared', 'points'), LINE, AB),
    'function pgad_models.amb(…) of role "…" makes calls of pgad_models.amb(pg_catalog.float8) ambiguous':
        [("DROP FUNCTION IF EXISTS pgad_models.amb(float8, int)", ()),
         ("CREATE FUNCTION pgad_models.amb(x float8, z int DEFAULT 0) RETURNS float8 LANGUAGE sql RETURN 0", ())] +
        call(TRAIN.format('amb', 'squared', 'points'), LINE, AB),
    'array argument "v" has 3 elements, the model reads 2':
        call(TRAIN.format('vlen', 'squared', VECTORS), VECTOR_MODEL, '{"a": [0, 0], "c": 0}') +
        call("SELECT pgad_models.vlen('{1, 2, 3}')"),
    'array argument "v[0:1]" has 2 elements, the model reads 2':
        call(TRAIN.format('vlen', 'squared', VECTORS), VECTOR_MODEL, '{"a": [0, 0], "c": 0}') +
        call("SELECT pgad_models.vlen('[0:1]={1, 2}')"),
    'function pgad_models.regional(double precision) does not exist':
        call("SELECT pgad.train('regional', 'λ(d, w) w.a*d.x', 'squared', 'SELECT x, y, mod(x::int, 2)::text AS g "
             "FROM points', %s, group_by => 'g', iterations => 1)", '{"a": 0}')
        + call('SELECT pgad_models.regional(x) FROM points'),
    'too many weights for second derivatives: 301':
        call("SELECT pgad.hessian(%s, 'points', %s)",
             'λ(d, w) (' + ' + '.join(f'w.a{i}*d.x' for i in range(301)) + ' - d.y)^2',
             json.dumps({f'a{i}': 0 for i in range(301)})),
    'optimizer "newton" does not take l1':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, optimizer => 'newton', "
             "l1 => 0.1)", '{"a": 0}'),
    'optimizer "lbfgs" takes no learning_rate':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, optimizer => 'lbfgs', "
             "learning_rate => 0.1)", '{"a": 0}'),
    'loss "quantile(1)" has τ = 1, but τ must be between 0 and 1, both excluded':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'quantile(1)', 'points', %s)", '{"a": 0}'),
    'loss "huber(x)" is not huber(number)':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'huber(x)', 'points', %s)", '{"a": 0}'),
    'loss "gamma" takes labels greater than 0, but column "y" is 0':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'gamma', 'SELECT x, x - 1 AS y FROM points', %s)",
             '{"a": 0}'),
    'model "m" has no standard errors: the labels are separated: …':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x + w.b', 'logistic', "
             "'SELECT x, (x > 5)::int AS y FROM points', %s, optimizer => 'newton')", AB)
        + call("SELECT * FROM pgad.summary('m', unconverged => 'warning')"),
    'model "m" has 2 weights and only 2 rows: no residual degrees of freedom for its dispersion':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x + w.b', 'gamma', 'SELECT x, y FROM points WHERE x < 3', %s, "
             "optimizer => 'newton')", AB)
        + call("SELECT * FROM pgad.summary('m', unconverged => 'warning')"),
    'pgad.summary takes no \'gamma\' model that reads its label column "y" too':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x + w.b*ln(d.y)', 'gamma', 'points', %s, "
             "optimizer => 'newton')", AB)
        + call("SELECT * FROM pgad.summary('m', unconverged => 'warning')"),
    "pgad.summary takes a 'squared', 'logistic', 'softmax', 'poisson' or 'gamma' model, not model \"m\" with loss "
    "'hinge'":
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'hinge', "
             "'SELECT x, CASE WHEN y > 2 THEN 1 ELSE -1 END AS y FROM points', %s, iterations => 1)", '{"a": 0}')
        + call("SELECT * FROM pgad.summary('m')"),
    'model "m" has no standard errors: class "a" is separated from the others':
        call("SELECT pgad.train('m', 'λ(d, w) w.w @ [d.x] + w.b', 'softmax', "
             "$$SELECT x, CASE WHEN x < 4 THEN 'a' WHEN x::int %% 2 = 0 THEN 'b' ELSE 'c' END AS y FROM points$$, "
             "%s)", '{"w": {}, "b": {}}') + call("SELECT * FROM pgad.summary('m', unconverged => 'warning')"),
    "pgad.summary takes a 'softmax' model whose logits are affine in weights of one row per class, not model \"m\"":
        call("SELECT pgad.train('m', 'λ(d, w) w.v @ tanh(w.u @ [d.x])', 'softmax', "
             "'SELECT x, (x::int %% 3)::text AS y FROM points', pgad.init_weights(%s, 'glorot'), iterations => 1)",
             '{"u": [2, 1], "v": [3, 2]}') + call("SELECT * FROM pgad.summary('m')"),
    'pgad.summary takes an unregularised model, not model "m" with l2 = 0.1':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, l2 => 0.1, "
             "iterations => 1)", '{"a": 0}') + call("SELECT * FROM pgad.summary('m')"),
    'the Hessian of model "m" is singular: its weights are not identified by the data':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x + w.b*(2*d.x)', 'squared', 'points', %s, iterations => 1)", AB)
        + call("SELECT * FROM pgad.summary('m')"),
    'model "m" is not at an optimum: …':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x + w.b', 'squared', 'SELECT x, y + sin(x) AS y FROM points', "
             "%s, optimizer => 'lbfgs', iterations => 1)", AB) + call("SELECT * FROM pgad.summary('m')"),
    'model "m" is not at a minimum: the Hessian of its objective at its weights is not positive definite':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'λ(p, d) 0 - (p - d.y)^2', 'points', %s, optimizer => 'gd', "
             "learning_rate => 0.001, iterations => 1, likelihood => true)", '{"a": 0}')
        + call("SELECT * FROM pgad.summary('m')"),
    'unconverged must be \'error\' or \'warning\', not "ignore"':
        call("SELECT * FROM pgad.summary('m', unconverged => 'ignore')"),
    'likelihood => true takes a loss that is a negative log-likelihood, not loss "hinge"':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'hinge', 'SELECT x, CASE WHEN y > 2 THEN 1 ELSE -1 END AS y "
             "FROM points', %s, likelihood => true)", '{"a": 0}'),
    # pgad.train's impute (docs/sql.md, "Preprocessing")
    'column "q" of impute is not a column the model reads':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, impute => '{\"q\": \"mean\"}')",
             '{"a": 0}'),
    'unknown impute strategy "average" for column "x"':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, "
             "impute => '{\"x\": \"average\"}')", '{"a": 0}'),
    'impute must be a jsonb object of columns and strategies':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, impute => '[\"x\"]')", '{"a": 0}'),
    'impute strategy "mean" needs a numeric column, and column "t" is a categorical one':
        call("SELECT pgad.train('m', 'λ(d, w) w.r[d.t] + w.a*d.x', 'squared', 'SELECT t, x, x AS y FROM mixed', %s, "
             "impute => '{\"t\": \"mean\"}')", '{"r": {}, "a": 0}'),
    'the impute constant of column "x" must be a finite number':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, impute => '{\"x\": 1e400}')",
             '{"a": 0}'),
    'the impute constant of boolean column "b" must be 0 or 1':
        call("SELECT pgad.train('m', 'λ(d, w) CASE WHEN d.b THEN w.a ELSE 0 END', 'squared', "
             "'SELECT x > 5 AS b, y FROM points', %s, impute => '{\"b\": 2}')", '{"a": 0}'),
    'column "x" of impute has no value that is not NULL in the training rows':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'SELECT NULL::float8 AS x, y FROM points', %s, "
             "impute => '{\"x\": \"median\"}')", '{"a": 0}'),
    'pgad.train takes no impute with group_by':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'SELECT x, y, mod(x::int, 2) AS g FROM points', %s, "
             "group_by => 'g', impute => '{\"x\": \"mean\"}')", '{"a": 0}'),
    'pgad.train takes no impute for a sequence model':
        call("SELECT pgad.train('sq', 'λ(d, w, s) s.level', 'squared', 'SELECT x AS t, y FROM points', %s, "
             "order_by => 't', state => %s, impute => '{\"y\": \"mean\"}')", '{"alpha": 0.5, "l0": 0}', SES),
    'pgad.train takes no impute for column "v", an array':
        call(f"SELECT pgad.train('m', %s, 'squared', '{VECTORS}', %s, impute => '{{\"v\": \"mean\"}}')",
             VECTOR_MODEL, '{"a": [0, 0], "c": 0}'),
    # pgad.forecast and pgad.evaluate of a sequence model (docs/sql.md, "Forecasts")
    'model "m" is not a sequence model':
        call("SELECT pgad.train('m', 'λ(d, w) w.a*d.x', 'squared', 'points', %s, iterations => 1)", '{"a": 0}')
        + call("SELECT * FROM pgad.forecast('m', 3)"),
    'horizon must be at least 1, not 0': SEQUENCE + call("SELECT * FROM pgad.forecast('sq', 0)"),
    'a forecast of 2000000000 steps for 1 group needs 488281 MB, more than pgad.memory_limit (…)':
        SEQUENCE + call("SELECT * FROM pgad.forecast('sq', 2000000000)"),
    "the data has 0 rows after the training's last row, fewer than the horizon (3)":
        call("SELECT pgad.train('sqx', 'λ(d, w, s) s.level + w.b*d.x', 'squared', 'SELECT x AS t, x, y FROM points', "
             "%s, order_by => 't', state => %s, iterations => 1)", '{"alpha": 0.5, "l0": 0, "b": 0}', SES)
        + call("SELECT * FROM pgad.forecast('sqx', 3, 'SELECT x AS t, x FROM points')"),
    "the data has no rows after the training's last row":
        SEQUENCE + call("SELECT * FROM pgad.evaluate('sq', 'SELECT x AS t, y FROM points')"),
    'column "day" of order_by is of type timestamp without time zone in the data, and model "m" was trained on date':
        call("SELECT pgad.train('m', 'λ(d, w, s) s.level', 'squared', 'SELECT DATE ''2024-01-01'' + x::int AS day, y "
             "FROM points', %s, order_by => 'day', state => %s, iterations => 1)", '{"alpha": 0.5, "l0": 0}', SES)
        + call("SELECT * FROM pgad.evaluate('m', 'SELECT (DATE ''2024-01-01'' + x::int)::timestamp AS day, y "
               "FROM points')"),
    # frequency and the forecast function (docs/sql.md, "Forecasts")
    'frequency "xyz" is not an interval':
        call("SELECT pgad.train('m', 'ets(A,N,N)', 'squared', 'SELECT DATE ''2024-01-01'' + x::int AS day, y "
             "FROM points', NULL, order_by => 'day', frequency => 'xyz')"),
    'the rows of group {"store": 1} are not one per period of frequency "2 days"':
        call("SELECT pgad.train('m', 'ets(A,N,N)', 'squared', 'SELECT 1 AS store, DATE ''2024-01-01'' + x::int "
             "AS day, y FROM points', NULL, order_by => 'day', group_by => 'store', frequency => '2 days')"),
    'the rows span 3000000001 periods of frequency "1", more than pgad.memory_limit holds (…)':
        call("SELECT pgad.train('m', 'ets(A,N,N)', 'squared', 'SELECT (x::int8 - 1) * 1000000000 AS n, y FROM "
             "points WHERE x <= 4 UNION ALL SELECT 1, 5', NULL, order_by => 'n', frequency => '1')"),
    'model "m" has a forecast function named "m_forecast"':
        call("SELECT pgad.train('m', 'ets(A,N,N)', 'squared', 'SELECT x AS t, y FROM points', NULL, "
             "order_by => 't')")
        + call("SELECT pgad.train('m_forecast', 'λ(d, w) w.a*d.x', 'squared', 'points', %s)", '{"a": 0}'),
    'cannot replace the forecast function of model "…": its columns change, and other objects depend on it':
        call("SELECT pgad.train('fcv', 'ets(A,N,N)', 'squared', 'SELECT x::int % 2 AS g, x AS t, y FROM points', "
             "NULL, order_by => 't', group_by => 'g')")
        + call('CREATE OR REPLACE VIEW fcv_view AS SELECT * FROM pgad_models.fcv_forecast(2)')
        + call("SELECT pgad.train('fcv', 'ets(A,N,N)', 'squared', 'SELECT (x::int % 2)::text AS g, x AS t, y "
               "FROM points', NULL, order_by => 't', group_by => 'g')"),
    # pgad.tune (docs/sql.md, "Tuning")
    'pgad.tune cannot tune argument "mode"': call(TUNE + "grid => '{\"mode\": [\"forward\"]}')"),
    'grid value of "l2" must be a number, not "a"': call(TUNE + "grid => '{\"l2\": [\"a\"]}')"),
    'pgad.tune would run 110 trials, more than 100':
        call(TUNE + "grid => '{\"l2\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], \"l1\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}')"),
    'pgad.tune takes a grid or a random search, one of them': call(TUNE[:-2] + ')'),
    "unknown metric \"auc\" of loss 'squared'": call(TUNE + "grid => '{\"l2\": [0]}', metric => 'auc')"),
    'pgad.tune needs validation rows': call(TUNE + "grid => '{\"l2\": [0]}', validation => NULL::text)"),
}
ELSEWHERE = {
    'column "color" of a categorical weight is of type …, which role "…" owns':
        'tests/test_categorical.py::test_an_enum_another_role_owns_is_refused',
    'the cuda backend is not installed': 'tests/test_gpu.py::test_without_numba_cuda_the_error_says_how_to_install_it',
    'no CUDA GPU is available to the server': 'tests/test_gpu.py::test_without_a_gpu_backend_cuda_is_a_clear_error',
    'the data needs 24000 MB on the GPU, more than the 20000 MB free there': 'tests/test_gpu.py (a GPU\'s memory)',
    'lambda is too large for the cuda backend: 902 nodes with its derivatives':
        'tests/test_gpu.py (compiled within a second on a GPU)',
    'llvm target "x86-64-v4" needs CPU features this CPU lacks: …':
        'tests/test_targets.py::test_a_target_this_cpu_lacks_is_refused_before_anything_compiles (a CPU without AVX-512)',
    'compiling the kernel took more than 60 s':
        'tests/test_compile_worker.py::test_a_compile_past_its_wall_time_is_killed',
    'compiling the kernel failed: its process was killed by signal 9 (SIGKILL)':
        'tests/test_compile_worker.py::test_a_crashed_compiler_process_fails_the_call_alone',
    "kernel's stack frame is too large: … bytes, at most 262144 bytes":
        'tests/test_crash_fuzz.py::test_the_frame_check_refuses_a_kernel_past_its_bound',
    'model "prices" belongs to role "alice"':
        'tests/test_model_trust.py::test_a_name_belongs_to_the_role_that_trained_it_first',
    'column "y" of the label is of type …, which role "…" owns':
        'tests/test_multiclass.py::test_an_enum_label_of_another_role_is_refused',
    'column "color" of group_by is of type …, which role "…" owns':
        'tests/test_model_trust.py::test_an_enum_group_column_another_role_owns_is_refused',
    'model "alices" belongs to role "summary_alice"':
        'tests/test_summary.py::test_only_the_role_that_trained_may_summarize',
    'shard server "shard2" failed at iteration 37':
        'tests/test_shards.py::test_a_shard_that_stops_mid_training_is_named_with_the_iteration',
}
PYTHON_NAME = re.compile(r'\b[A-Z]\w*(Error|Exception|Warning)\b|Traceback')


def rows():
    """(what, SQLSTATEs, example message, its documented DETAIL or None) for each example of the error table."""
    text = DOCS.read_text()
    table = text[text.index('| what | SQLSTATE | example message |'):].split('\n\n')[0].splitlines()[2:]
    found = []
    for line in table:
        what, states, examples = [cell.strip() for cell in line.strip('|').split(' | ')]
        documented = re.search(r'\(DETAIL: `(.*)`\)', examples)
        examples = re.split(r' \((DETAIL|HINT): ', examples)[0]
        for message in re.findall(r'`([^`]*)`', examples):
            found.append((what, [s.strip() for s in states.split(',')], message,
                          documented.group(1) if documented else None))
    return found


ROWS = rows()


def test_the_table_and_the_calls_name_the_same_examples():
    documented = {message for _, _, message, _ in ROWS}
    assert len(ROWS) > 40 and documented == set(CALLS) | set(ELSEWHERE)


def matches(pattern, text):
    return re.fullmatch('.*'.join(map(re.escape, pattern.split('…'))), text or '', re.DOTALL) is not None


@pytest.fixture(scope='module')
def databases(cluster, dbname):
    """The module's database with the tables the calls read and a sharded table `sharded` whose one foreign partition
    is on server shard2: a database of the same cluster, without pgad (bare), with pgad 0.7.0 (old) or with this
    pgad (current)."""
    names = {'bare': new_database(cluster), 'old': new_database(cluster), 'current': new_database(cluster)}
    for kind, name in names.items():
        with psycopg.connect(cluster.conninfo(name), autocommit=True) as shard:
            if kind != 'bare':
                shard.execute('CREATE EXTENSION pgad ' + ("VERSION '0.7.0' " if kind == 'old' else '') + 'CASCADE')
            shard.execute('CREATE TABLE pts AS SELECT x::float8 AS x, (2*x)::float8 AS y, 1 AS part '
                          'FROM generate_series(1, 10) AS x')
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE TABLE points AS SELECT x::float8 AS x, (2*x + 1)::float8 AS y FROM generate_series(1, 10) '
                   'AS x')
        db.execute("CREATE TABLE mixed AS SELECT 1.0::float8 AS x, 'one'::text AS t")
        db.execute("CREATE TABLE keyed_rows AS SELECT (ARRAY['a', 'b', 'c'])[x % 3 + 1] AS k, x::float8 AS y "
                   "FROM generate_series(1, 9) AS x")
        db.execute('CREATE EXTENSION IF NOT EXISTS postgres_fdw')
        db.execute('CREATE EXTENSION IF NOT EXISTS dblink')
        db.execute("CREATE SERVER shard2 FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', "
                   f"port '{cluster.settings['port']}', dbname '{names['bare']}')")
        db.execute("CREATE USER MAPPING FOR PUBLIC SERVER shard2 OPTIONS (user 'postgres')")
        db.execute('CREATE TABLE sharded (x float8, y float8, part int) PARTITION BY LIST (part)')
        db.execute('CREATE TABLE sharded_here PARTITION OF sharded FOR VALUES IN (0)')
        db.execute("CREATE FOREIGN TABLE sharded_2 PARTITION OF sharded FOR VALUES IN (1) SERVER shard2 "
                   "OPTIONS (table_name 'pts')")
    return names


@pytest.mark.parametrize('what, states, message, detail', ROWS, ids=[message[:60] for _, _, message, _ in ROWS])
def test_every_error_in_the_table_is_produced_as_documented(cluster, dbname, databases, what, states, message,
                                                             detail):
    if message in ELSEWHERE:
        pytest.skip(f'needs another machine: {ELSEWHERE[message]}')
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        *setup, (sql, args) = CALLS[message]
        for statement, params in setup:
            db.execute(statement.format(**databases), params or None)
        with pytest.raises(psycopg.Error) as caught:
            db.execute(sql, args or None)
    diag = caught.value.diag
    assert matches(message, diag.message_primary), (what, diag.message_primary)
    assert diag.sqlstate in states or states == ["the shard's"], (what, diag.sqlstate)
    assert detail is None or diag.message_detail == detail, (what, diag.message_detail)
    for field in (diag.message_primary, diag.message_detail, diag.message_hint):
        assert not PYTHON_NAME.search(field or ''), (what, field)  # no Python exception name, no traceback


def test_a_weight_past_double_precision_is_named_as_the_user_wrote_it(db, databases):
    """jsonb writes 1e400 as 1 and 400 zeros, which float() cannot take: a 22023 that names the weight, not
    Python's OverflowError; the value as PostgreSQL writes a float8."""
    for weights in ('{"a": 1e400, "b": 0}', '{"a": [1, 1e400], "b": 0}'):
        diag = error_of(db, "SELECT pgad.loss('λ(d, w) sum(w.a)*d.x + w.b', 'points', %s)", (weights,))
        assert (diag.sqlstate, diag.message_primary, diag.message_detail) == (
            '22023', 'weight "a" is not a finite double precision number', 'It is 1e+400.')


@pytest.mark.parametrize('call, hint', [
    ('log(1, 2, 3)', 'log takes 1 or 2 arguments.'),  # log(x) and log(b, x)
    ('sin(1, 2)', 'sin takes 1 argument.'),
    ('atan2(1)', 'atan2 takes 2 arguments.'),
])
def test_the_hint_for_a_wrong_number_of_arguments_lists_every_arity(db, databases, call, hint):
    diag = error_of(db, f"SELECT pgad.loss('λ(d, w) {call}', 'points', '{{}}')")
    assert (diag.sqlstate, diag.message_hint) == ('42883', hint)
