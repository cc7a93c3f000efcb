-- pgad 0.18.0 → 0.19.0: forecasting (issue 46). One source of the install script (extension/sql/pgad.sql):
-- tests/test_upgrade.py checks that this path gives its catalog.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.19.0'" to load this file. \quit

-- A NULL in taken is no name taken (0.18.0's loop never ended on one: NULL is never unequal).
CREATE OR REPLACE FUNCTION pgad._version_function_name(public pg_catalog.text, version pg_catalog.int4,
                                            taken pg_catalog.text[])
RETURNS pg_catalog.text LANGUAGE plpgsql STABLE STRICT SET search_path TO pg_catalog, pg_temp AS $$
DECLARE
  k pg_catalog.int4 := 1;
  tag pg_catalog.text;
  head pg_catalog.text;
  candidate pg_catalog.text;
  recorded pg_catalog.jsonpath;  -- a value of candidate's in a version's functions
BEGIN
  LOOP
    tag := CASE WHEN k OPERATOR(pg_catalog.=) 1 THEN pg_catalog.format('@%s', version)
                ELSE pg_catalog.format('@%s~%s', version, k) END;
    head := public;
    WHILE pg_catalog.octet_length(head OPERATOR(pg_catalog.||) tag) OPERATOR(pg_catalog.>) 63 LOOP
      head := pg_catalog.left(head, -1);
    END LOOP;
    candidate := head OPERATOR(pg_catalog.||) tag;
    recorded := pg_catalog.format('$.* ? (@ == %s)', pg_catalog.to_jsonb(candidate))::pg_catalog.jsonpath;
    IF (candidate OPERATOR(pg_catalog.=) ANY (taken)) IS NOT TRUE  -- a NULL in taken takes no name
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                       WHERE p.pronamespace OPERATOR(pg_catalog.=) 'pgad_models'::pg_catalog.regnamespace
                         AND p.proname OPERATOR(pg_catalog.=) candidate)
       AND (SELECT pg_catalog.count(*) FROM pgad.model_versions AS m  -- model_versions_functions, a bitmap scan
            WHERE m.functions OPERATOR(pg_catalog.@?) recorded) OPERATOR(pg_catalog.=) 0 THEN
      RETURN candidate;
    END IF;
    k := k OPERATOR(pg_catalog.+) 1;
  END LOOP;
END
$$;

-- §bounds (issue 46): pgad.train takes bounds => '{"alpha": [0, 1]}', each weight's interval (pgad/models/descent.py,
-- Bounds).
DROP FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                         pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                         pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4,
                         pg_catalog.bool, pg_catalog.text, pg_catalog.jsonb, "any", pg_catalog.jsonb);
DROP FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                          pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                          pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                          pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                          pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                          pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.bool,
                          pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.jsonb);
CREATE FUNCTION pgad._train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                            weights pg_catalog.jsonb, learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                            mode pg_catalog.text, backend pg_catalog.text, optimizer pg_catalog.text,
                            batch_size pg_catalog.int4, seed pg_catalog.int8, tolerance pg_catalog.float8,
                            l1 pg_catalog.float8, l2 pg_catalog.float8, regularize pg_catalog.jsonb,
                            standardize pg_catalog.bool, label pg_catalog.text, group_by pg_catalog.text,
                            progress_every pg_catalog.int4, dtype pg_catalog.text,
                            validation pg_catalog.text, early_stopping pg_catalog.int4,
                            likelihood pg_catalog.bool, order_by pg_catalog.text, state pg_catalog.jsonb,
                            deploy pg_catalog.text, impute pg_catalog.jsonb, bounds pg_catalog.jsonb)
RETURNS SETOF pgad.model_versions LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.train(name, model, loss, data, weights, learning_rate, iterations, mode, backend, optimizer, batch_size,
                 seed, tolerance, l1, l2, regularize, standardize, label, group_by, progress_every, dtype,
                 validation, early_stopping, likelihood, order_by, state, deploy, impute, bounds)
$$;
REVOKE ALL ON FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                   pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                                   pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                                   pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.bool,
                                   pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.jsonb,
                                   pg_catalog.jsonb) FROM PUBLIC;

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
                           early_stopping pg_catalog.int4 DEFAULT NULL,
                           likelihood pg_catalog.bool DEFAULT NULL,
                           order_by pg_catalog.text DEFAULT NULL, state pg_catalog.jsonb DEFAULT NULL,
                           deploy "any" DEFAULT true, impute pg_catalog.jsonb DEFAULT NULL,
                           bounds pg_catalog.jsonb DEFAULT NULL)
RETURNS SETOF pgad.model_versions LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                               pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                               pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4,
                               pg_catalog.bool, pg_catalog.text, pg_catalog.jsonb, "any",
                               pg_catalog.jsonb, pg_catalog.jsonb) IS
    'train a new version of a model (one per group, with group_by), store it in pgad.model_versions and, unless '
    'deploy => false, deploy it: its scoring function pgad_models.<name>';

-- pgad.anomalies (issue 46): a sequence model run along the data's rows from its start, each row's one-step
-- prediction and its interval at level, and whether the row lies outside it (pgad/models/forecast.py). Not
-- STRICT: a NULL gives no rows.
CREATE FUNCTION pgad._anomalies(name pg_catalog.text, data pg_catalog.text, level pg_catalog.float8)
RETURNS TABLE (group_key pg_catalog.jsonb, at pg_catalog.text, value pg_catalog.float8, predicted pg_catalog.float8,
               lower pg_catalog.float8, upper pg_catalog.float8, anomaly pg_catalog.bool)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.anomalies(name, data, level)
$$;
REVOKE ALL ON FUNCTION pgad._anomalies(pg_catalog.text, pg_catalog.text, pg_catalog.float8) FROM PUBLIC;

CREATE FUNCTION pgad.anomalies(name pg_catalog.text, data pg_catalog.text, level pg_catalog.float8 DEFAULT 0.95)
RETURNS TABLE (group_key pg_catalog.jsonb, at pg_catalog.text, value pg_catalog.float8, predicted pg_catalog.float8,
               lower pg_catalog.float8, upper pg_catalog.float8, anomaly pg_catalog.bool)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.anomalies(pg_catalog.text, pg_catalog.text, pg_catalog.float8) IS
    'sequence model name run along the data''s rows from its start: each row''s one-step prediction, its interval at '
    'level, and whether the row lies outside it';

-- pgad.cross_validation (issue 46): rolling-origin evaluation of a sequence model with its stored weights, per group
-- and over all groups (pgad/models/forecast.py). Not STRICT: step is NULL unless given (the horizon); a NULL
-- elsewhere gives no rows.
CREATE FUNCTION pgad._cross_validation(name pg_catalog.text, data pg_catalog.text, horizon pg_catalog.int4,
                                       windows pg_catalog.int4, step pg_catalog.int4, level pg_catalog.float8)
RETURNS TABLE (group_key pg_catalog.jsonb, metric pg_catalog.text, value pg_catalog.float8)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.cross_validation(name, data, horizon, windows, step, level)
$$;
REVOKE ALL ON FUNCTION pgad._cross_validation(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int4,
                                              pg_catalog.int4, pg_catalog.float8) FROM PUBLIC;

CREATE FUNCTION pgad.cross_validation(name pg_catalog.text, data pg_catalog.text, horizon pg_catalog.int4,
                                      windows pg_catalog.int4 DEFAULT 3, step pg_catalog.int4 DEFAULT NULL,
                                      level pg_catalog.float8 DEFAULT 0.95)
RETURNS TABLE (group_key pg_catalog.jsonb, metric pg_catalog.text, value pg_catalog.float8)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.cross_validation(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int4,
                                          pg_catalog.int4, pg_catalog.float8) IS
    'sequence model name''s forecasts of horizon rows from windows rolling origins of the data, step rows apart, '
    'scored against its labels with its stored weights: mae, rmse, mase and coverage per group and over all';
