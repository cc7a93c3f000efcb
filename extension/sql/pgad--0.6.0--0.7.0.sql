-- pgad 0.6.0 → 0.7.0: the cuda backend. pgad.gradient, pgad.gradient_descent and pgad.train take a last argument
-- dtype ('float64' by default; 'float32' is the cuda backend's), and pgad.explain takes backend and rows and
-- shows the backend stage (which backend runs, and why) and that backend's own stages; explain is no longer STRICT
-- (rows is NULL unless given). A function's arguments cannot change in place: each changed function and its
-- implementation is dropped by its 0.6.0 signature and created as in pgad--0.7.0.sql, with the same privileges,
-- comments and defaults. The aggregates' comments name their new option. Every name is schema-qualified
-- (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.7.0'" to load this file. \quit

-- The 0.6.0 functions. A view or function of the user's that calls one of them by its 0.6.0 signature stops this
-- update (the DROP's dependency error) and nothing changes: drop it first and create it again after.
DROP FUNCTION pgad.gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text);
DROP FUNCTION pgad.gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8,
                                    pg_catalog.int4, pg_catalog.text, pg_catalog.text);
DROP FUNCTION pgad.explain(pg_catalog.text, pg_catalog.text);
DROP FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                         pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8, pg_catalog.float8,
                         pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4);
DROP FUNCTION pgad._gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text);
DROP FUNCTION pgad._gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8,
                                     pg_catalog.int4, pg_catalog.text, pg_catalog.text);
DROP FUNCTION pgad._explain(pg_catalog.text, pg_catalog.text);
DROP FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                          pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                          pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8, pg_catalog.float8,
                          pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4);

-- The implementations, as in pgad--0.7.0.sql: not executable by PUBLIC, reached through pgad_call.
CREATE FUNCTION pgad._gradient(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                               mode pg_catalog.text, backend pg_catalog.text, dtype pg_catalog.text)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient(loss, data, weights, mode, backend, dtype)
$$;

CREATE FUNCTION pgad._gradient_descent(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                       learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                                       mode pg_catalog.text, backend pg_catalog.text, dtype pg_catalog.text)
RETURNS pgad.fit LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient_descent(loss, data, weights, learning_rate, iterations, mode, backend, dtype)
$$;

-- Not STRICT, as pgad.explain: rows is NULL unless given (api.explain gives no rows for a NULL loss, mode or
-- backend, as STRICT would).
CREATE FUNCTION pgad._explain(loss pg_catalog.text, mode pg_catalog.text, backend pg_catalog.text,
                              rows pg_catalog.int8)
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.explain(loss, mode, backend, rows)
$$;

REVOKE ALL ON FUNCTION
  pgad._gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text,
                 pg_catalog.text),
  pgad._gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4,
                         pg_catalog.text, pg_catalog.text, pg_catalog.text),
  pgad._explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8) FROM PUBLIC;

CREATE FUNCTION pgad._train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                            weights pg_catalog.jsonb, learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                            mode pg_catalog.text, backend pg_catalog.text, optimizer pg_catalog.text,
                            batch_size pg_catalog.int4, seed pg_catalog.int8, tolerance pg_catalog.float8,
                            l1 pg_catalog.float8, l2 pg_catalog.float8, regularize pg_catalog.jsonb,
                            standardize pg_catalog.bool, label pg_catalog.text, group_by pg_catalog.text,
                            progress_every pg_catalog.int4, dtype pg_catalog.text)
RETURNS SETOF pgad.models LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.train(name, model, loss, data, weights, learning_rate, iterations, mode, backend, optimizer, batch_size,
                 seed, tolerance, l1, l2, regularize, standardize, label, group_by, progress_every, dtype)
$$;

REVOKE ALL ON FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                   pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                                   pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                                   pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                                   pg_catalog.text) FROM PUBLIC;

-- The public functions, as in pgad--0.7.0.sql.
CREATE FUNCTION pgad.gradient(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                              mode pg_catalog.text DEFAULT 'reverse', backend pg_catalog.text DEFAULT 'auto',
                              dtype pg_catalog.text DEFAULT 'float64')
RETURNS pg_catalog.jsonb LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text,
                                  pg_catalog.text, pg_catalog.text) IS
    'the gradient of the mean loss by each weight, as {"weight": derivative, ...}; dtype: the cuda '
    'backend''s float64 or float32';

CREATE FUNCTION pgad.gradient_descent(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                      learning_rate pg_catalog.float8 DEFAULT 0.05,
                                      iterations pg_catalog.int4 DEFAULT 100, mode pg_catalog.text DEFAULT 'reverse',
                                      backend pg_catalog.text DEFAULT 'auto',
                                      dtype pg_catalog.text DEFAULT 'float64')
RETURNS pgad.fit LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8,
                                          pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'batch gradient descent from weights: the fitted weights, the loss at them and the iterations run; dtype: '
    'the cuda backend''s float64 or float32';

-- Not STRICT: rows (the rows the backend is chosen for) is NULL unless given.
CREATE FUNCTION pgad.explain(loss pg_catalog.text, mode pg_catalog.text DEFAULT 'reverse',
                             backend pg_catalog.text DEFAULT 'auto', rows pg_catalog.int8 DEFAULT NULL)
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8) IS
    'each stage from lambda to kernel with what it made and its time in ms: parse, differentiate, backend (the one '
    'that runs and why: auto chooses for rows rows), then that backend''s own (llvm: IR generation, optimisation, '
    'machine code; cuda: kernel source, PTX, compilation; python: none)';

-- Not STRICT: regularize, seed and group_by are NULL unless given; a NULL where a value is needed is an error.
CREATE FUNCTION pgad.train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                           weights pg_catalog.jsonb, learning_rate pg_catalog.float8 DEFAULT 0.05,
                           iterations pg_catalog.int4 DEFAULT 100, mode pg_catalog.text DEFAULT 'reverse',
                           backend pg_catalog.text DEFAULT 'auto', optimizer pg_catalog.text DEFAULT 'gd',
                           batch_size pg_catalog.int4 DEFAULT 256, seed pg_catalog.int8 DEFAULT NULL,
                           tolerance pg_catalog.float8 DEFAULT 0, l1 pg_catalog.float8 DEFAULT 0,
                           l2 pg_catalog.float8 DEFAULT 0, regularize pg_catalog.jsonb DEFAULT NULL,
                           standardize pg_catalog.bool DEFAULT false, label pg_catalog.text DEFAULT 'y',
                           group_by pg_catalog.text DEFAULT NULL, progress_every pg_catalog.int4 DEFAULT 0,
                           dtype pg_catalog.text DEFAULT 'float64')
RETURNS SETOF pgad.models LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                               pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                               pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.text) IS
    'train a model (one per group, with group_by), store it in pgad.models and create its scoring function '
    'pgad_models.<name>';

-- The aggregates take dtype among their options (pgad/api.py).
COMMENT ON AGGREGATE pgad.gradient_agg(pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement, pg_catalog.jsonb) IS
    'the gradient of the group''s mean loss by each weight; options: mode, backend, dtype';
COMMENT ON AGGREGATE pgad.gradient_descent_agg(pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement, pg_catalog.jsonb) IS
    'batch gradient descent over the group''s rows; options: learning_rate, iterations, mode, backend, '
    'dtype';
