-- pgad 0.8.0 → 0.9.0: vectors and matrices in the lambda. The weights jsonb may hold vectors and matrices and a
-- float8[] column is a vector (the lambda language and the jsonb grew); pgad.init_weights is new; pgad.gradient
-- and pgad.gradient_descent take a last argument, tape; pgad.derivatives takes weights and data (the shapes), and
-- is STABLE and not STRICT; pgad.explain takes weights and tape. A function's arguments cannot change in place:
-- those four and their implementations are dropped by their 0.8.0 signatures and created as in pgad--0.9.0.sql,
-- with the same privileges and comments. Every name is schema-qualified (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.9.0'" to load this file. \quit

-- The 0.8.0 gradient, gradient_descent, derivatives and explain. A view or function of the user's that calls them
-- by their 0.8.0 signatures stops this update (the DROP's dependency error) and nothing changes: drop it first and
-- create it again after.
DROP FUNCTION pgad.gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text,
                            pg_catalog.text);
DROP FUNCTION pgad.gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8,
                                    pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text);
DROP FUNCTION pgad.explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.text);
DROP FUNCTION pgad._explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.text);
DROP FUNCTION pgad.derivatives(pg_catalog.text);
DROP FUNCTION pgad._derivatives(pg_catalog.text);
DROP FUNCTION pgad._gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text,
                             pg_catalog.text);
DROP FUNCTION pgad._gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8,
                                     pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text);

-- The implementations, as in pgad--0.9.0.sql: not executable by PUBLIC, reached through pgad_call.
CREATE FUNCTION pgad._gradient(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                               mode pg_catalog.text, backend pg_catalog.text, dtype pg_catalog.text,
                               tape pg_catalog.text)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient(loss, data, weights, mode, backend, dtype, tape)
$$;

CREATE FUNCTION pgad._gradient_descent(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                       learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                                       mode pg_catalog.text, backend pg_catalog.text, dtype pg_catalog.text,
                                       tape pg_catalog.text)
RETURNS pgad.fit LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient_descent(loss, data, weights, learning_rate, iterations, mode, backend, dtype, tape)
$$;

CREATE FUNCTION pgad._derivatives(loss pg_catalog.text, weights pg_catalog.jsonb, data pg_catalog.text)
RETURNS TABLE (weight pg_catalog.text, derivative pg_catalog.text) LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.derivatives(loss, weights, data)
$$;

CREATE FUNCTION pgad._explain(loss pg_catalog.text, mode pg_catalog.text, backend pg_catalog.text,
                              rows pg_catalog.int8, data pg_catalog.text, weights pg_catalog.jsonb,
                              tape pg_catalog.text)
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.explain(loss, mode, backend, rows, data, weights, tape)
$$;

REVOKE ALL ON FUNCTION
  pgad._explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.text,
                pg_catalog.jsonb, pg_catalog.text),
  pgad._derivatives(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text),
  pgad._gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text,
                 pg_catalog.text, pg_catalog.text),
  pgad._gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4,
                         pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text) FROM PUBLIC;

CREATE FUNCTION pgad._init_weights(shapes pg_catalog.jsonb, scheme pg_catalog.text, seed pg_catalog.int4)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u IMMUTABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.init_weights(shapes, scheme, seed)
$$;

REVOKE ALL ON FUNCTION pgad._init_weights(pg_catalog.jsonb, pg_catalog.text, pg_catalog.int4) FROM PUBLIC;

-- The public functions, as in pgad--0.9.0.sql.
-- Not STRICT: rows (the rows the backend is chosen for), data (whose layout is shown) and weights (the shapes of a
-- lambda with vectors) are NULL unless given.
CREATE FUNCTION pgad.explain(loss pg_catalog.text, mode pg_catalog.text DEFAULT 'reverse',
                             backend pg_catalog.text DEFAULT 'auto', rows pg_catalog.int8 DEFAULT NULL,
                             data pg_catalog.text DEFAULT NULL, weights pg_catalog.jsonb DEFAULT NULL,
                             tape pg_catalog.text DEFAULT 'auto')
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8,
                                 pg_catalog.text, pg_catalog.jsonb, pg_catalog.text) IS
    'each stage from lambda to kernel with what it made and its time in ms: parse, (with vectors: their shapes and '
    'the kernel), differentiate, backend (the one that runs and why: auto chooses for rows rows), then that '
    'backend''s own (llvm: IR generation, optimisation, machine code; cuda: kernel source, PTX, compilation; python: '
    'none); with data, where its rows are computed (here, or on which shard server) and the bytes a round sends';

-- Not STRICT: weights (the shapes of vector and matrix weights) and data (the lengths of array columns) are NULL
-- unless given; a NULL loss gives no rows.
CREATE FUNCTION pgad.derivatives(loss pg_catalog.text, weights pg_catalog.jsonb DEFAULT NULL,
                                 data pg_catalog.text DEFAULT NULL)
RETURNS TABLE (weight pg_catalog.text, derivative pg_catalog.text)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.derivatives(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text) IS
    'each partial derivative of the lambda, simplified, in the lambda language; with vectors, the derivative by '
    'each vector or matrix weight as one vector expression, at the shapes of weights and of data''s array columns';

CREATE FUNCTION pgad.gradient(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                              mode pg_catalog.text DEFAULT 'reverse', backend pg_catalog.text DEFAULT 'auto',
                              dtype pg_catalog.text DEFAULT 'float64', tape pg_catalog.text DEFAULT 'auto')
RETURNS pg_catalog.jsonb LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text,
                                  pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'the gradient of the mean loss by each weight, as {"weight": derivative, ...} in the weights'' shapes; dtype: '
    'the cuda backend''s float64 or float32; tape: how the llvm backend''s loop kernel keeps the forward values '
    '(store, recompute, reversible; auto chooses)';

CREATE FUNCTION pgad.gradient_descent(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                      learning_rate pg_catalog.float8 DEFAULT 0.05,
                                      iterations pg_catalog.int4 DEFAULT 100, mode pg_catalog.text DEFAULT 'reverse',
                                      backend pg_catalog.text DEFAULT 'auto',
                                      dtype pg_catalog.text DEFAULT 'float64', tape pg_catalog.text DEFAULT 'auto')
RETURNS pgad.fit LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8,
                                          pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                          pg_catalog.text) IS
    'batch gradient descent from weights: the fitted weights (in their shapes), the loss at them and the '
    'iterations run; dtype: the cuda backend''s float64 or float32; tape: how the llvm backend''s loop kernel '
    'keeps the forward values (store, recompute, reversible; auto chooses)';

CREATE FUNCTION pgad.init_weights(shapes pg_catalog.jsonb, scheme pg_catalog.text DEFAULT 'glorot',
                                  seed pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.jsonb LANGUAGE C IMMUTABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.init_weights(pg_catalog.jsonb, pg_catalog.text, pg_catalog.int4) IS
    'starting weights of the shapes {"w1": [20, 4], "b1": [20]}: matrices at random by scheme (glorot, he or '
    'zeros) from seed, vectors and numbers 0; the same for the same arguments';
