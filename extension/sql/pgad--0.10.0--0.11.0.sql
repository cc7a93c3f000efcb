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

ALTER TABLE pgad.models ADD COLUMN validation_history pg_catalog.float8[];  -- the validation loss per iteration
COMMENT ON COLUMN pgad.models.validation_history IS 'the loss on the validation rows after each iteration (epoch)';

DROP FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                         pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8, pg_catalog.float8,
                         pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                         pg_catalog.text);
DROP FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                          pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                          pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8, pg_catalog.float8,
                          pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                          pg_catalog.text);

-- pgad.train, whose defaults converge on columns of any scale: learning_rate, iterations, optimizer and standardize
-- are NULL unless given, and pgad/api.py chooses (optimizer 'lbfgs', or 'gd' where a learning_rate or l1 is given).
CREATE FUNCTION pgad._train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                            weights pg_catalog.jsonb, learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                            mode pg_catalog.text, backend pg_catalog.text, optimizer pg_catalog.text,
                            batch_size pg_catalog.int4, seed pg_catalog.int8, tolerance pg_catalog.float8,
                            l1 pg_catalog.float8, l2 pg_catalog.float8, regularize pg_catalog.jsonb,
                            standardize pg_catalog.bool, label pg_catalog.text, group_by pg_catalog.text,
                            progress_every pg_catalog.int4, dtype pg_catalog.text,
                            validation pg_catalog.text, early_stopping pg_catalog.int4)
RETURNS SETOF pgad.models LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.train(name, model, loss, data, weights, learning_rate, iterations, mode, backend, optimizer, batch_size,
                 seed, tolerance, l1, l2, regularize, standardize, label, group_by, progress_every, dtype,
                 validation, early_stopping)
$$;
REVOKE ALL ON FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                   pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                                   pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                                   pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4) FROM PUBLIC;

-- Not STRICT: learning_rate, iterations, optimizer, standardize, regularize, seed, group_by, validation and
-- early_stopping are NULL unless given. validation is a fraction (validation => 0.2, numeric) or a query (text):
-- anycompatible takes both (an unknown literal as text), and reaches pgad._train as its text (pgad_call).
CREATE FUNCTION pgad.train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                           weights pg_catalog.jsonb, learning_rate pg_catalog.float8 DEFAULT NULL,
                           iterations pg_catalog.int4 DEFAULT NULL, mode pg_catalog.text DEFAULT 'reverse',
                           backend pg_catalog.text DEFAULT 'auto', optimizer pg_catalog.text DEFAULT NULL,
                           batch_size pg_catalog.int4 DEFAULT 256, seed pg_catalog.int8 DEFAULT NULL,
                           tolerance pg_catalog.float8 DEFAULT 0, l1 pg_catalog.float8 DEFAULT 0,
                           l2 pg_catalog.float8 DEFAULT 0, regularize pg_catalog.jsonb DEFAULT NULL,
                           standardize pg_catalog.bool DEFAULT NULL, label pg_catalog.text DEFAULT 'y',
                           group_by pg_catalog.text DEFAULT NULL, progress_every pg_catalog.int4 DEFAULT 0,
                           dtype pg_catalog.text DEFAULT 'float64',
                           validation pg_catalog.anycompatible DEFAULT NULL::pg_catalog.text,
                           early_stopping pg_catalog.int4 DEFAULT NULL)
RETURNS SETOF pgad.models LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                               pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                               pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4) IS
    'train a model (one per group, with group_by), store it in pgad.models and create its scoring function '
    'pgad_models.<name>';
