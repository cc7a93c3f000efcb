-- pgad's SQL surface as psql shows it: results, derivatives, and the errors a user meets.
-- Run by `make installcheck` (pg_regress) and by tests/test_regress.py against a throwaway cluster.
CREATE EXTENSION pgad CASCADE;
SET extra_float_digits = 0;
\set SHOW_CONTEXT never

CREATE TABLE points AS SELECT x::float8 AS x, (2*x + 1)::float8 AS y FROM generate_series(-10, 10) AS x;

-- the mean loss, and PostgreSQL's own avg of the same expression
SELECT round(pgad.loss('λ(d, w) (w.a*d.x + w.b - d.y)^2', 'points', '{"a": 1, "b": 0}')::numeric, 9) AS loss,
       round(avg((1*x + 0 - y)^2)::numeric, 9) AS avg
FROM points;

-- the gradient, in both modes and both backends
SELECT mode, backend, key AS weight, round(value::numeric, 9) AS derivative
FROM (VALUES ('reverse'), ('forward')) AS m(mode), (VALUES ('python'), ('llvm')) AS b(backend),
     jsonb_each(pgad.gradient('λ(d, w) (w.a*d.x + w.b - d.y)^2', 'points', '{"a": 0, "b": 0}', mode, backend))
ORDER BY 1, 2, 3;

-- a weight the lambda does not read gets 0
SELECT key AS weight, round(value::numeric, 9) AS derivative
FROM jsonb_each(pgad.gradient('lambda(row, theta) (theta.a*row.x - row.y)^2', 'SELECT x, y FROM points',
                              '{"a": 0, "unused": 7}'));

-- gradient descent recovers y = 2x + 1
SELECT round((weights->>'a')::numeric, 6) AS a, round((weights->>'b')::numeric, 6) AS b, loss < 1e-12 AS converged,
       iterations
FROM pgad.gradient_descent('λ(d, w) (w.a*d.x + w.b - d.y)^2', 'points', '{"a": 0, "b": 0}',
                           learning_rate => 0.01, iterations => 3000);

-- the derivatives, as expressions
SELECT * FROM pgad.derivatives('λ(d, w) (w.a*d.x + w.b - d.y)^2');
SELECT * FROM pgad.derivatives('λ(d, w) softplus(w.a*d.x) - d.y*w.a*d.x');
SELECT * FROM pgad.derivatives('λ(d, w) CASE WHEN w.a*d.x > 0 THEN ln(w.a*d.x) ELSE 0 END');

-- explain lists its stages
SELECT stage FROM pgad.explain('λ(d, w) (w.a*d.x - d.y)^2');

-- rows with NULL are skipped, with a NOTICE
SELECT pgad.loss('λ(d, w) (w.a*d.column1 - d.column2)^2', 'VALUES (1.0, 2.0), (NULL, 1.0), (2.0, NULL)', '{"a": 2}') AS loss;

-- the packing aggregate: header (magic, columns, rows, skipped) and the columns, native float8
SELECT pg_catalog.length(pgad.pack(x, y)) AS bytes, pg_catalog.substr(pgad.pack(x, y), 1, 24) AS header
FROM (VALUES (1::float8, 2::float8), (3, NULL), (5, 6)) AS t(x, y);
SELECT pgad.pack(x) IS NULL AS no_rows FROM points WHERE false;
SELECT pgad.pack(1);

-- the aggregates: one fit per group of a GROUP BY, the functions' numbers, NULL for an empty group
CREATE TABLE regions AS SELECT r, x::float8 AS x, (r*x + 1)::numeric AS y
FROM generate_series(1, 3) AS r, generate_series(-5, 5) AS x;
SELECT r, round(pgad.loss_agg('λ(d, w) (w.a*d.x + w.b - d.y)^2', '{"a": 1, "b": 0}', t)::numeric, 9) AS loss,
       pgad.gradient_agg('λ(d, w) (w.a*d.x + w.b - d.y)^2', '{"a": 1, "b": 0}', t) AS gradient
FROM regions AS t GROUP BY r ORDER BY r;
SELECT r, round(((fit).weights->>'a')::numeric, 6) AS a, round(((fit).weights->>'b')::numeric, 6) AS b,
       (fit).iterations
FROM (SELECT r, pgad.gradient_descent_agg('λ(d, w) (w.a*d.x + w.b - d.y)^2', '{"a": 0, "b": 0}', t,
                                          '{"learning_rate": 0.02, "iterations": 2000}') AS fit
      FROM regions AS t GROUP BY r) AS fits ORDER BY r;
SELECT r, pgad.loss_agg('λ(d, w) (w.a*d.x - d.y)^2', '{"a": 1}', t) FILTER (WHERE x > 100) AS nothing
FROM regions AS t GROUP BY r ORDER BY r;
SELECT pgad.loss_agg('λ(d, w) w.a*d.z', '{"a": 0}', t) FROM regions AS t;
SELECT pgad.gradient_descent_agg('λ(d, w) w.a*d.x', '{"a": 0}', t, '{"rate": 1}') FROM regions AS t;
SELECT pgad.loss_agg('λ(d, w) w.a*d.x', '{"a": 0}', t.x) FROM regions AS t;

-- pgad.train: a model in pgad.models, scored by its SQL function pgad_models.<name>, then dropped
SELECT name, group_key, round((weights->>'a')::numeric, 6) AS a, round((weights->>'b')::numeric, 6) AS b,
       round(final_loss::numeric, 9) AS loss, scoring_function
FROM pgad.train('line', 'λ(d, w) w.a*d.x + w.b', 'squared', 'points', '{"a": 0, "b": 0}', optimizer => 'lbfgs');
SELECT x, round(pgad_models.line(x)::numeric, 6) AS predicted FROM points WHERE x BETWEEN 1 AND 3 ORDER BY x;
SELECT name, group_key, round((weights->>'a')::numeric, 6) AS a, round((weights->>'b')::numeric, 6) AS b,
       scoring_function
FROM pgad.train('by_region', 'λ(d, w) w.a*d.x + w.b', 'squared', 'regions', '{"a": 0, "b": 0}',
                optimizer => 'lbfgs', group_by => 'r')
ORDER BY group_key::text;
SELECT r, round(pgad_models.by_region(r, 10)::numeric, 6) AS at_10 FROM generate_series(0, 4) AS r ORDER BY r;
SELECT pgad.drop_model('line'), pgad.drop_model('by_region');
SELECT count(*) FROM pgad.models;
SELECT * FROM pgad.train('line', 'λ(d, w) w.a*d.x', 'squared', 'points', '{"a": 0}', optimizer => 'irls');
SELECT * FROM pgad.train('line', 'λ(d, w) w.a*d.x', 'quadratic', 'points', '{"a": 0}');
SELECT * FROM pgad.train('line', 'λ(d, w) w.a*d.x', 'squared', 'regions', '{"a": 0}', group_by => 'region');
SELECT pgad.drop_model('line');

-- bad input: an ERROR with what is wrong, and nothing changed
SELECT pgad.loss('λ(d, w) (w.a*d.x + - d.y', 'points', '{"a": 0}');
SELECT pgad.loss('λ(d, w) w.a*d.z', 'points', '{"a": 0}');
SELECT pgad.loss('λ(d, w) w.c*d.x', 'points', '{"a": 0, "b": 0}');
SELECT pgad.loss('λ(d, w) w.a*d.t', 'SELECT x, ''1''::text AS t FROM points', '{"a": 0}');
SELECT pgad.loss('λ(d, w) w.a*d.x', 'no_such_table', '{"a": 0}');
SELECT pgad.loss('λ(d, w) w.a*d.x', 'points', '[1, 2]');
SELECT pgad.loss('λ(d, w) w.a*d.x', 'points', '{"a": "one"}');
SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT x FROM points WHERE false', '{"a": 0}');
SELECT pgad.gradient('λ(d, w) w.a*d.x', 'points', '{"a": 0}', mode => 'sideways');
SELECT pgad.gradient('λ(d, w) w.a*d.x', 'points', '{"a": 0}', backend => 'fortran');
SELECT * FROM pgad.gradient_descent('λ(d, w) (w.a*d.x - d.y)^2', 'points', '{"a": 0}', learning_rate => 0);
SELECT * FROM pgad.gradient_descent('λ(d, w) (w.a*d.x - d.y)^2', 'points', '{"a": 0}', iterations => -1);
SELECT * FROM pgad.gradient_descent('λ(d, w) (w.a*d.x - d.y)^2', 'points', '{"a": 0}', learning_rate => 100);
SELECT pgad.loss('λ(d, w) w.a*d.x', 'DELETE FROM points RETURNING x', '{"a": 0}');
SELECT count(*) FROM points;

-- vectors and matrices: the weights keep their shapes; a float8[] column is a vector
SELECT pgad.gradient('λ(d, w) sum((w.m @ [d.x, 1] - [d.y, 2 * d.y])^2)', 'points', '{"m": [[1, 0], [0, 1]]}');
SELECT pgad.loss('λ(d, w) (w.v @ d.xy - 1)^2', 'SELECT ARRAY[x, y] AS xy FROM points', '{"v": [0.5, 0.25]}');
SELECT pgad.init_weights('{"m": [2, 3], "b": [2]}', 'glorot', 42);
SELECT pgad.loss('λ(d, w) sum(w.m @ [d.x, d.y])', 'points', '{"m": [[1, 2, 3]]}');
SELECT pgad.loss('λ(d, w) w.v[3]', 'points', '{"v": [1, 2]}');
SELECT pgad.loss('λ(d, w) (w.v @ d.xy)^2', 'SELECT ARRAY[x, y] AS xy FROM points UNION ALL SELECT ARRAY[1]', '{"v": [1, 2]}');

DROP TABLE points;
DROP EXTENSION pgad;
