-- pgad 0.19.0 → 0.20.0: forecasting in the data's periods (issue 46). One source of the install script
-- (extension/sql/pgad.sql): tests/test_upgrade.py checks that this path gives its catalog.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.20.0'" to load this file. \quit

-- pgad.train takes frequency => '1 day', the period of a sequence model's rows (pgad/models/periods.py).
DROP FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                         pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                         pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4,
                         pg_catalog.bool, pg_catalog.text, pg_catalog.jsonb, "any", pg_catalog.jsonb,
                         pg_catalog.jsonb);
DROP FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                          pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                          pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                          pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                          pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                          pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.bool,
                          pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.jsonb,
                          pg_catalog.jsonb);
CREATE FUNCTION pgad._train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                            weights pg_catalog.jsonb, learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                            mode pg_catalog.text, backend pg_catalog.text, optimizer pg_catalog.text,
                            batch_size pg_catalog.int4, seed pg_catalog.int8, tolerance pg_catalog.float8,
                            l1 pg_catalog.float8, l2 pg_catalog.float8, regularize pg_catalog.jsonb,
                            standardize pg_catalog.bool, label pg_catalog.text, group_by pg_catalog.text,
                            progress_every pg_catalog.int4, dtype pg_catalog.text,
                            validation pg_catalog.text, early_stopping pg_catalog.int4,
                            likelihood pg_catalog.bool, order_by pg_catalog.text, state pg_catalog.jsonb,
                            deploy pg_catalog.text, impute pg_catalog.jsonb, bounds pg_catalog.jsonb,
                            frequency pg_catalog.text)
RETURNS SETOF pgad.model_versions LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.train(name, model, loss, data, weights, learning_rate, iterations, mode, backend, optimizer, batch_size,
                 seed, tolerance, l1, l2, regularize, standardize, label, group_by, progress_every, dtype,
                 validation, early_stopping, likelihood, order_by, state, deploy, impute, bounds, frequency)
$$;
REVOKE ALL ON FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                   pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                                   pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                                   pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.bool,
                                   pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.jsonb,
                                   pg_catalog.jsonb, pg_catalog.text) FROM PUBLIC;

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
                           bounds pg_catalog.jsonb DEFAULT NULL, frequency pg_catalog.text DEFAULT NULL)
RETURNS SETOF pgad.model_versions LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                               pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                               pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4,
                               pg_catalog.bool, pg_catalog.text, pg_catalog.jsonb, "any",
                               pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.text) IS
    'train a new version of a model (one per group, with group_by), store it in pgad.model_versions and, unless '
    'deploy => false, deploy it: its scoring function pgad_models.<name>';

-- pgad.forecast returns each step's order value, at (the last row's stepped by the group's frequency).
DROP FUNCTION pgad.forecast(pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.float8, pg_catalog.int4,
                            pg_catalog.int8);
DROP FUNCTION pgad._forecast(pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.float8, pg_catalog.int4,
                             pg_catalog.int8);
CREATE FUNCTION pgad._forecast(name pg_catalog.text, horizon pg_catalog.int4, data pg_catalog.text,
                               level pg_catalog.float8, simulations pg_catalog.int4, seed pg_catalog.int8,
                               levels pg_catalog.float8[])
RETURNS TABLE (group_key pg_catalog.jsonb, step pg_catalog.int4, at pg_catalog.text, value pg_catalog.float8,
               lower pg_catalog.float8, upper pg_catalog.float8, level pg_catalog.float8)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.forecast(name, horizon, data, level, simulations, seed, levels)
$$;
REVOKE ALL ON FUNCTION pgad._forecast(pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.float8,
                                      pg_catalog.int4, pg_catalog.int8, pg_catalog.float8[]) FROM PUBLIC;

CREATE FUNCTION pgad.forecast(name pg_catalog.text, horizon pg_catalog.int4, data pg_catalog.text DEFAULT NULL,
                              level pg_catalog.float8 DEFAULT 0.95, simulations pg_catalog.int4 DEFAULT 1000,
                              seed pg_catalog.int8 DEFAULT 0, levels pg_catalog.float8[] DEFAULT NULL)
RETURNS TABLE (group_key pg_catalog.jsonb, step pg_catalog.int4, at pg_catalog.text, value pg_catalog.float8,
               lower pg_catalog.float8, upper pg_catalog.float8, level pg_catalog.float8)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.forecast(pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.float8,
                                  pg_catalog.int4, pg_catalog.int8, pg_catalog.float8[]) IS
    'sequence model name''s forecast horizon steps past its last row, per group, each at its order value (the last '
    'row''s stepped by the group''s frequency), with prediction intervals at level (or a row for each of levels): '
    'analytic for a recurrence linear along the forecast under loss squared, else simulated (simulations paths, seed)';
