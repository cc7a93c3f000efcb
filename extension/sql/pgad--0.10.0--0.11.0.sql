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

-- ---------------------------------------------------------------------------------------------------------------
-- §4–5 pgad.train's new options (issue 28)
-- ---------------------------------------------------------------------------------------------------------------
