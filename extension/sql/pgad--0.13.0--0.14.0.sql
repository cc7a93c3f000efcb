-- pgad 0.13.0 → 0.14.0: numerics you can rely on (issue 35).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.14.0'" to load this file. \quit

-- Whether each fit converged, and the measure of its gradient the criterion judged (docs/sql.md, "Convergence"). A
-- model trained before has NULL in both: pgad.summary judges its weights itself.
ALTER TABLE pgad.models ADD COLUMN converged pg_catalog.bool;
ALTER TABLE pgad.models ADD COLUMN gradient_norm pg_catalog.float8;

-- pgad.train takes likelihood (a lambda loss that is a negative log-likelihood, for pgad.summary); pgad.summary
-- takes unconverged ('error' or 'warning').
DROP FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                         pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                         pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4);
DROP FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                          pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                          pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                          pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                          pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                          pg_catalog.text, pg_catalog.text, pg_catalog.int4);
DROP FUNCTION pgad.summary(pg_catalog.text);
DROP FUNCTION pgad._summary(pg_catalog.text);

-- A poisson or gamma model gets a function of its own too, "<name>_mean" (pgad/models/catalog.py, EXTRAS).
CREATE OR REPLACE FUNCTION pgad._model_owners(name pg_catalog.text)
RETURNS TABLE (owner pg_catalog.text, loss pg_catalog.text) LANGUAGE sql STABLE STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp AS $$
SELECT DISTINCT m.trained_by::pg_catalog.text,
       CASE WHEN m.loss OPERATOR(pg_catalog.=) ANY (ARRAY['logistic', 'hinge', 'poisson', 'gamma']) THEN m.loss END
FROM pgad.models AS m WHERE m.name OPERATOR(pg_catalog.=) $1
$$;

CREATE FUNCTION pgad._train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                            weights pg_catalog.jsonb, learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                            mode pg_catalog.text, backend pg_catalog.text, optimizer pg_catalog.text,
                            batch_size pg_catalog.int4, seed pg_catalog.int8, tolerance pg_catalog.float8,
                            l1 pg_catalog.float8, l2 pg_catalog.float8, regularize pg_catalog.jsonb,
                            standardize pg_catalog.bool, label pg_catalog.text, group_by pg_catalog.text,
                            progress_every pg_catalog.int4, dtype pg_catalog.text,
                            validation pg_catalog.text, early_stopping pg_catalog.int4,
                            likelihood pg_catalog.bool)
RETURNS SETOF pgad.models LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.train(name, model, loss, data, weights, learning_rate, iterations, mode, backend, optimizer, batch_size,
                 seed, tolerance, l1, l2, regularize, standardize, label, group_by, progress_every, dtype,
                 validation, early_stopping, likelihood)
$$;
REVOKE ALL ON FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                   pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                                   pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                                   pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.bool) FROM PUBLIC;

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
                           likelihood pg_catalog.bool DEFAULT NULL)
RETURNS SETOF pgad.models LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                               pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                               pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4,
                               pg_catalog.bool) IS
    'train a model (one per group, with group_by), store it in pgad.models and create its scoring function '
    'pgad_models.<name>';

CREATE FUNCTION pgad._summary(name pg_catalog.text, unconverged pg_catalog.text)
RETURNS TABLE (group_key pg_catalog.jsonb, weight pg_catalog.text, estimate pg_catalog.float8,
               std_error pg_catalog.float8, statistic pg_catalog.float8, p_value pg_catalog.float8,
               ci_low pg_catalog.float8, ci_high pg_catalog.float8)
LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.summary(name, unconverged)
$$;

REVOKE ALL ON FUNCTION pgad._summary(pg_catalog.text, pg_catalog.text) FROM PUBLIC;

CREATE FUNCTION pgad.summary(name pg_catalog.text, unconverged pg_catalog.text DEFAULT 'error')
RETURNS TABLE (group_key pg_catalog.jsonb, weight pg_catalog.text, estimate pg_catalog.float8,
               std_error pg_catalog.float8, statistic pg_catalog.float8, p_value pg_catalog.float8,
               ci_low pg_catalog.float8, ci_high pg_catalog.float8)
LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.summary(pg_catalog.text, pg_catalog.text) IS
    'the coefficient table of an unregularised model whose loss is a negative log-likelihood (squared: t on n - p '
    'degrees of freedom; logistic, poisson, gamma, a lambda trained with likelihood => true: Wald z), per group, at '
    'a converged fit (unconverged => ''warning'' gives it with a WARNING): estimate, std_error, statistic, p_value '
    'and the 95% interval, from the exact Hessian';
