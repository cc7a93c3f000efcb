-- pgad's limits, settings and privileges as psql shows them (docs/security.md).
CREATE EXTENSION pgad CASCADE;
SET extra_float_digits = 0;
\set SHOW_CONTEXT never
CREATE TABLE points AS SELECT x::float8 AS x, (2*x + 1)::float8 AS y FROM generate_series(-10, 10) AS x;

-- the settings, once pgad is loaded: a superuser's, every one but pgad.threads
SELECT pgad.loss('λ(d, w) d.x', 'SELECT x FROM points;', '{}') AS mean_x;
SELECT name, setting, unit, context FROM pg_settings WHERE name LIKE 'pgad.%' AND name <> 'pgad.cache_directory'
AND name <> 'pgad.memory_limit' AND name <> 'pgad.max_threads' ORDER BY name;
-- pgad.max_threads' default is the machine's cores (test_threads.py checks what it bounds)
SELECT unit, context FROM pg_settings WHERE name = 'pgad.max_threads';
-- pgad.memory_limit's default is a quarter of the machine's memory (test_memory.py checks it)
SELECT unit, context FROM pg_settings WHERE name = 'pgad.memory_limit';

-- past the limits: 54001, with the limit and the setting named
SET pgad.max_lambda_bytes = '64B';
SELECT pgad.loss('λ(d, w) (w.a*d.x + w.b - d.y)^2 + (w.a*d.x + w.b - d.y)^4 + (w.a*d.x + w.b - d.y)^6', 'points',
                 '{"a": 0, "b": 0}');
RESET pgad.max_lambda_bytes;
SET pgad.max_lambda_nodes = 20;
SELECT pgad.gradient('λ(d, w) (w.a*d.x + w.b - d.y)^2 + (w.a*d.x - d.y)^4', 'points', '{"a": 0, "b": 0}');
RESET pgad.max_lambda_nodes;

-- past pgad.memory_limit: 53200 while the rows are packed, and the session goes on
SET pgad.memory_limit = '1MB';
SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2',
                 'SELECT x::float8 AS x, x::float8 AS y FROM generate_series(1, 100000) AS x', '{"a": 0}');
SELECT pgad.loss_agg('λ(d, w) (w.a*d.x - d.y)^2', '{"a": 0}', t)
FROM (SELECT x::float8 AS x, x::float8 AS y FROM generate_series(1, 100000) AS x) AS t;
SELECT pgad.loss('λ(d, w) (w.a*d.x - d.y)^2', 'points', '{"a": 2}') AS within_the_limit;
RESET pgad.memory_limit;
SELECT pgad.gradient('λ(d, w) ' || string_agg(format('w.a%s*d.y', i), ' + '), 'points',
                     jsonb_object_agg(format('a%s', i), 0), backend => 'llvm')
FROM generate_series(1, 4000) AS i;
SELECT pgad.gradient('λ(d, w) ' || string_agg(format('w.a%s*d.y', i), ' + '), 'points',
                     jsonb_object_agg(format('a%s', i), 0))->>'a4000' AS "python, under auto"
FROM generate_series(1, 4000) AS i;

-- a column name longer than PostgreSQL's 63 bytes
SELECT pgad.loss('λ(d, w) d.' || repeat('x', 64), 'points', '{}');

-- another role: the public functions, yes; the implementations and the settings, no
CREATE ROLE regress_pgad_user;
GRANT SELECT ON points TO regress_pgad_user;
SET ROLE regress_pgad_user;
SELECT pgad.loss('λ(d, w) d.y', 'points', '{}') AS mean_y;
SELECT pgad._loss('λ(d, w) d.y', 'points', '{}');
SET pgad.max_lambda_bytes = '1GB';
SET pgad.memory_limit = '1TB';
SET pgad.load_chunk_rows = 5;
SET pgad.max_threads = 64;
SET pgad.threads = 64;
SELECT pgad.loss('λ(d, w) d.y', 'points', '{}') AS mean_y_in_chunks;
RESET ROLE;
REVOKE SELECT ON points FROM regress_pgad_user;
DROP ROLE regress_pgad_user;

DROP TABLE points;
DROP EXTENSION pgad;
