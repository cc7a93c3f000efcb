-- pgad 0.1.0: thin PL/Python shims. Every function hands its arguments to pgad.api and returns what it returns;
-- the logic lives in the Python package pgad, documented in docs/sql.md.
\echo Use "CREATE EXTENSION pgad CASCADE" to load this file. \quit

-- Puts pgad's Python environment on sys.path and keeps pgad.api in GD for the session. The path is written here by
-- `make install` (root), never taken from a setting a user can change.
CREATE FUNCTION pgad._boot() RETURNS void LANGUAGE plpython3u AS $$
import sys
site = '@PGAD_SITE_PACKAGES@'
if site not in sys.path:
    sys.path.insert(0, site)
import pgad.api
GD['pgad'] = pgad.api
$$;
REVOKE ALL ON FUNCTION pgad._boot() FROM PUBLIC;

CREATE FUNCTION pgad.loss(loss text, data text, weights jsonb) RETURNS float8
LANGUAGE plpython3u STABLE STRICT AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].loss(loss, data, weights)
$$;
COMMENT ON FUNCTION pgad.loss(text, text, jsonb) IS 'the mean over the rows of data of the lambda loss, at weights';

CREATE FUNCTION pgad.gradient(loss text, data text, weights jsonb, mode text DEFAULT 'reverse',
                              backend text DEFAULT 'auto') RETURNS jsonb
LANGUAGE plpython3u STABLE STRICT AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].gradient(loss, data, weights, mode, backend)
$$;
COMMENT ON FUNCTION pgad.gradient(text, text, jsonb, text, text) IS
    'the gradient of the mean loss by each weight, as {"weight": derivative, ...}';

-- What gradient_descent returns. A type of its own rather than RETURNS TABLE, whose column names would clash with the
-- parameters loss, weights and iterations.
CREATE TYPE pgad.fit AS (weights jsonb, loss float8, iterations int);

CREATE FUNCTION pgad.gradient_descent(loss text, data text, weights jsonb, learning_rate float8 DEFAULT 0.05,
                                      iterations int DEFAULT 100, mode text DEFAULT 'reverse',
                                      backend text DEFAULT 'auto')
RETURNS pgad.fit
LANGUAGE plpython3u STABLE STRICT AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].gradient_descent(loss, data, weights, learning_rate, iterations, mode, backend)
$$;
COMMENT ON FUNCTION pgad.gradient_descent(text, text, jsonb, float8, int, text, text) IS
    'batch gradient descent from weights: the fitted weights, the loss at them and the iterations run';

CREATE FUNCTION pgad.derivatives(loss text) RETURNS TABLE (weight text, derivative text)
LANGUAGE plpython3u IMMUTABLE STRICT AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].derivatives(loss)
$$;
COMMENT ON FUNCTION pgad.derivatives(text) IS 'each partial derivative of the lambda, simplified, in the lambda language';
