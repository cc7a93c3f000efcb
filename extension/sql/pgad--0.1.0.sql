-- pgad 0.1.0: thin shims. Each SQL function hands its arguments to a PL/Python function of the same name with a
-- leading underscore, which calls pgad.api; the logic lives in the Python package pgad, documented in docs/sql.md.
-- The PL/pgSQL layer only re-raises errors: PL/Python would print them as "plpy.Error: message" with a Python
-- traceback, and PostgreSQL users expect "ERROR:  message" with its DETAIL and HINT.
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

-- Re-raises an error caught by a shim as PostgreSQL's own: PL/Python's "plpy.Error: " prefix dropped.
CREATE FUNCTION pgad._raise(state text, message text, detail text, hint text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  message := pg_catalog.regexp_replace(message, '^(plpy\.Error|spiexceptions\.\w+|plpy\.SPIError): ', '');
  IF detail OPERATOR(pg_catalog.<>) '' AND hint OPERATOR(pg_catalog.<>) '' THEN RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail, HINT = hint;
  ELSIF detail OPERATOR(pg_catalog.<>) '' THEN RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail;
  ELSIF hint OPERATOR(pg_catalog.<>) '' THEN RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, HINT = hint;
  ELSE RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message;
  END IF;
END $$;

-- What gradient_descent returns: a type of its own rather than RETURNS TABLE, whose column names would clash with
-- the parameters loss, weights and iterations.
CREATE TYPE pgad.fit AS (weights jsonb, loss float8, iterations int);

CREATE FUNCTION pgad._loss(loss text, data text, weights jsonb) RETURNS float8 LANGUAGE plpython3u STABLE AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].loss(loss, data, weights)
$$;
CREATE FUNCTION pgad.loss(loss text, data text, weights jsonb) RETURNS float8 LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE s text; m text; d text; h text;
BEGIN
  RETURN pgad._loss(loss, data, weights);
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
  PERFORM pgad._raise(s, m, d, h);
END $$;
COMMENT ON FUNCTION pgad.loss(text, text, jsonb) IS 'the mean over the rows of data of the lambda loss, at weights';

CREATE FUNCTION pgad._gradient(loss text, data text, weights jsonb, mode text, backend text) RETURNS jsonb
LANGUAGE plpython3u STABLE AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].gradient(loss, data, weights, mode, backend)
$$;
CREATE FUNCTION pgad.gradient(loss text, data text, weights jsonb, mode text DEFAULT 'reverse',
                              backend text DEFAULT 'auto') RETURNS jsonb LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE s text; m text; d text; h text;
BEGIN
  RETURN pgad._gradient(loss, data, weights, mode, backend);
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
  PERFORM pgad._raise(s, m, d, h);
END $$;
COMMENT ON FUNCTION pgad.gradient(text, text, jsonb, text, text) IS
    'the gradient of the mean loss by each weight, as {"weight": derivative, ...}';

CREATE FUNCTION pgad._gradient_descent(loss text, data text, weights jsonb, learning_rate float8, iterations int,
                                       mode text, backend text) RETURNS pgad.fit LANGUAGE plpython3u STABLE AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].gradient_descent(loss, data, weights, learning_rate, iterations, mode, backend)
$$;
CREATE FUNCTION pgad.gradient_descent(loss text, data text, weights jsonb, learning_rate float8 DEFAULT 0.05,
                                      iterations int DEFAULT 100, mode text DEFAULT 'reverse',
                                      backend text DEFAULT 'auto') RETURNS pgad.fit
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE s text; m text; d text; h text;
BEGIN
  RETURN pgad._gradient_descent(loss, data, weights, learning_rate, iterations, mode, backend);
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
  PERFORM pgad._raise(s, m, d, h);
END $$;
COMMENT ON FUNCTION pgad.gradient_descent(text, text, jsonb, float8, int, text, text) IS
    'batch gradient descent from weights: the fitted weights, the loss at them and the iterations run';

CREATE FUNCTION pgad._derivatives(loss text) RETURNS TABLE (weight text, derivative text)
LANGUAGE plpython3u IMMUTABLE AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].derivatives(loss)
$$;
CREATE FUNCTION pgad.derivatives(loss text) RETURNS TABLE (weight text, derivative text)
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE s text; m text; d text; h text;
BEGIN
  RETURN QUERY SELECT * FROM pgad._derivatives(loss);
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
  PERFORM pgad._raise(s, m, d, h);
END $$;
COMMENT ON FUNCTION pgad.derivatives(text) IS 'each partial derivative of the lambda, simplified, in the lambda language';

-- Any role may train on the data it can read: the functions are SECURITY INVOKER, so the data query runs with the
-- caller's privileges.
GRANT USAGE ON SCHEMA pgad TO PUBLIC;
