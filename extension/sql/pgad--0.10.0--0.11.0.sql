-- pgad 0.10.0 → 0.11.0: the model lifecycle (issue 28). pgad's Python keeps everything about a trained model in
-- pgad/models/, so the catalog's writer imports it from there. Every name is schema-qualified (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.11.0'" to load this file. \quit

CREATE OR REPLACE FUNCTION pgad._write_models() RETURNS SETOF pgad.models LANGUAGE plpython3u VOLATILE STRICT
SECURITY DEFINER SET search_path TO pg_catalog, pg_temp AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad.models import catalog
return catalog.write()
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- §1–2 pgad.evaluate (issue 28)
-- ---------------------------------------------------------------------------------------------------------------

-- pgad.evaluate: the metrics of a stored model on any data (pgad/models/evaluate.py), one row a metric and group.
CREATE FUNCTION pgad._evaluate(name pg_catalog.text, data pg_catalog.text)
RETURNS TABLE (group_key pg_catalog.jsonb, metric pg_catalog.text, value pg_catalog.float8)
LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.evaluate(name, data)
$$;
REVOKE ALL ON FUNCTION pgad._evaluate(pg_catalog.text, pg_catalog.text) FROM PUBLIC;

CREATE FUNCTION pgad.evaluate(name pg_catalog.text, data pg_catalog.text)
RETURNS TABLE (group_key pg_catalog.jsonb, metric pg_catalog.text, value pg_catalog.float8)
LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.evaluate(pg_catalog.text, pg_catalog.text) IS
    'the metrics of model name on the data, per group: rows, loss (the mean objective without regularisation), '
    'the loss''s own metrics, unseen_rows of groups the model does not know and skipped_rows for a NULL';

-- What a scoring function that takes an array column raises when the array's length is not the model's: IMMUTABLE
-- and PARALLEL SAFE, so that the scoring function stays inlinable; result gives the type it stands in for.
CREATE FUNCTION pgad._wrong_length(argument pg_catalog.text, expected pg_catalog.int4, given pg_catalog.int4,
                                   result anyelement)
RETURNS anyelement LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path TO pg_catalog, pg_temp AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = '2202E',
    MESSAGE = pg_catalog.format('array argument "%s" has %s elements, the model reads %s', argument, given, expected),
    HINT = 'Pass an array of the length the model was trained on.';
END
$$;
COMMENT ON FUNCTION pgad._wrong_length(pg_catalog.text, pg_catalog.int4, pg_catalog.int4, anyelement) IS
    'the error of a scoring function given an array of another length than its model''s';

-- ---------------------------------------------------------------------------------------------------------------
-- §3 pgad.hessian and pgad.summary (issue 28)
-- ---------------------------------------------------------------------------------------------------------------

-- Second derivatives (lang/hessian.py): forward mode over the reverse-mode gradient, compiled like the gradient.
CREATE FUNCTION pgad._hessian(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                              backend pg_catalog.text)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.hessian(loss, data, weights, backend)
$$;

REVOKE ALL ON FUNCTION pgad._hessian(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text)
  FROM PUBLIC;

CREATE FUNCTION pgad.hessian(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                             backend pg_catalog.text DEFAULT 'auto')
RETURNS pg_catalog.jsonb LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.hessian(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text) IS
    'the Hessian of the mean loss by the weights, as {"a": {"a": d2/da2, "b": d2/dadb}, ...}, a vector''s elements '
    'named "v[1]", ...: forward mode over the reverse-mode gradient, at most 300 weight elements';

-- A stored model's coefficient table (pgad/models/summary.py), from the Hessian of its objective over its data
-- query, run again as the caller.
CREATE FUNCTION pgad._summary(name pg_catalog.text)
RETURNS TABLE (group_key pg_catalog.jsonb, weight pg_catalog.text, estimate pg_catalog.float8,
               std_error pg_catalog.float8, statistic pg_catalog.float8, p_value pg_catalog.float8,
               ci_low pg_catalog.float8, ci_high pg_catalog.float8)
LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.summary(name)
$$;

REVOKE ALL ON FUNCTION pgad._summary(pg_catalog.text) FROM PUBLIC;

CREATE FUNCTION pgad.summary(name pg_catalog.text)
RETURNS TABLE (group_key pg_catalog.jsonb, weight pg_catalog.text, estimate pg_catalog.float8,
               std_error pg_catalog.float8, statistic pg_catalog.float8, p_value pg_catalog.float8,
               ci_low pg_catalog.float8, ci_high pg_catalog.float8)
LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.summary(pg_catalog.text) IS
    'the coefficient table of an unregularised squared (OLS: t on n - p degrees of freedom) or logistic (Wald z) '
    'model, per group: estimate, std_error, statistic, p_value and the 95% interval, from the exact Hessian';

-- ---------------------------------------------------------------------------------------------------------------
-- §4–5 pgad.train's new options (issue 28)
-- ---------------------------------------------------------------------------------------------------------------
