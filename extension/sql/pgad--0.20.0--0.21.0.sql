-- pgad 0.20.0 → 0.21.0: the newcomer's path (issue 47). One source of the install script
-- (extension/sql/pgad.sql): tests/test_upgrade.py checks that this path gives its catalog.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.21.0'" to load this file. \quit

-- pgad.train takes a model family's name without loss, data or weights: they get defaults (NULL).
-- Not STRICT: learning_rate, iterations, optimizer, standardize, regularize, seed, group_by, validation,
-- early_stopping and likelihood are NULL unless given; loss, data and weights too, for a model named by its family
-- (pgad.train(name, 'softmax', 'wine'): the family's loss, data third, its own weights; pgad/models/regression.py). validation is a fraction (validation => 0.2, numeric) or a query (text):
-- anycompatible takes both (an unknown literal as text), and reaches pgad._train as its text (pgad_call).
CREATE OR REPLACE FUNCTION pgad.train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text DEFAULT NULL,
                           data pg_catalog.text DEFAULT NULL, weights pg_catalog.jsonb DEFAULT NULL,
                           learning_rate pg_catalog.float8 DEFAULT NULL,
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

-- pgad.tune takes pgad.train's arguments by their names.
DROP FUNCTION pgad.tune(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                        pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.int4, pg_catalog.int8,
                        pg_catalog.anycompatible, pg_catalog.text, pg_catalog.bool, pg_catalog.jsonb);
DROP FUNCTION pgad._tune(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                         pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.int4,
                         pg_catalog.int8, pg_catalog.text, pg_catalog.text, pg_catalog.bool,
                         pg_catalog.jsonb);
-- pgad.tune: a training of the model per combination of a grid, or per draw of a random search, each a version
-- (deploy => false) on the same validation rows, the best by the metric deployed (pgad/models/tuning.py); a row per
-- trial. Not STRICT: grid, random, trials and seed are NULL unless given, and one of grid and random is. It takes
-- pgad.train's arguments by their names (issue 47), NULL unless given, as options does.
CREATE FUNCTION pgad._tune(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                           weights pg_catalog.jsonb, grid pg_catalog.jsonb, random pg_catalog.jsonb,
                           trials pg_catalog.int4, seed pg_catalog.int8, validation pg_catalog.text,
                           metric pg_catalog.text, deploy pg_catalog.bool, options pg_catalog.jsonb,
                           learning_rate pg_catalog.float8, iterations pg_catalog.int4, mode pg_catalog.text,
                           backend pg_catalog.text, optimizer pg_catalog.text, batch_size pg_catalog.int4,
                           tolerance pg_catalog.float8, l1 pg_catalog.float8, l2 pg_catalog.float8,
                           regularize pg_catalog.jsonb, standardize pg_catalog.bool, label pg_catalog.text,
                           group_by pg_catalog.text, progress_every pg_catalog.int4, dtype pg_catalog.text,
                           early_stopping pg_catalog.int4, likelihood pg_catalog.bool, order_by pg_catalog.text,
                           state pg_catalog.jsonb, impute pg_catalog.jsonb, bounds pg_catalog.jsonb,
                           frequency pg_catalog.text)
RETURNS TABLE (trial pg_catalog.int4, version pg_catalog.int4, parameters pg_catalog.jsonb, value pg_catalog.float8,
               converged pg_catalog.bool, training_time pg_catalog.interval, deployed pg_catalog.bool,
               error pg_catalog.text)
LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.tune(name, model, loss, data, weights, grid, random, trials, seed, validation, metric, deploy, options,
                dict(learning_rate=learning_rate, iterations=iterations, mode=mode, backend=backend,
                     optimizer=optimizer, batch_size=batch_size, tolerance=tolerance, l1=l1, l2=l2,
                     regularize=regularize, standardize=standardize, label=label, group_by=group_by,
                     progress_every=progress_every, dtype=dtype, early_stopping=early_stopping,
                     likelihood=likelihood, order_by=order_by, state=state, impute=impute, bounds=bounds,
                     frequency=frequency))
$$;
REVOKE ALL ON FUNCTION pgad._tune(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                  pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.int4,
                                  pg_catalog.int8, pg_catalog.text, pg_catalog.text, pg_catalog.bool,
                                  pg_catalog.jsonb,
                                  pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text,
                                  pg_catalog.text, pg_catalog.int4, pg_catalog.float8, pg_catalog.float8,
                                  pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text,
                                  pg_catalog.text, pg_catalog.int4, pg_catalog.text, pg_catalog.int4, pg_catalog.bool,
                                  pg_catalog.text, pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.jsonb,
                                  pg_catalog.text) FROM PUBLIC;
-- validation is a fraction (numeric) or a query (text), as pgad.train's: anycompatible, reaching pgad._tune as text.
CREATE FUNCTION pgad.tune(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text DEFAULT NULL,
                          data pg_catalog.text DEFAULT NULL, weights pg_catalog.jsonb DEFAULT NULL,
                          grid pg_catalog.jsonb DEFAULT NULL,
                          random pg_catalog.jsonb DEFAULT NULL, trials pg_catalog.int4 DEFAULT NULL,
                          seed pg_catalog.int8 DEFAULT NULL,
                          validation pg_catalog.anycompatible DEFAULT 0.2::pg_catalog.numeric,
                          metric pg_catalog.text DEFAULT 'validation_loss', deploy pg_catalog.bool DEFAULT true,
                          options pg_catalog.jsonb DEFAULT NULL,
                          learning_rate pg_catalog.float8 DEFAULT NULL, iterations pg_catalog.int4 DEFAULT NULL,
                          mode pg_catalog.text DEFAULT NULL, backend pg_catalog.text DEFAULT NULL,
                          optimizer pg_catalog.text DEFAULT NULL, batch_size pg_catalog.int4 DEFAULT NULL,
                          tolerance pg_catalog.float8 DEFAULT NULL, l1 pg_catalog.float8 DEFAULT NULL,
                          l2 pg_catalog.float8 DEFAULT NULL, regularize pg_catalog.jsonb DEFAULT NULL,
                          standardize pg_catalog.bool DEFAULT NULL, label pg_catalog.text DEFAULT NULL,
                          group_by pg_catalog.text DEFAULT NULL, progress_every pg_catalog.int4 DEFAULT NULL,
                          dtype pg_catalog.text DEFAULT NULL, early_stopping pg_catalog.int4 DEFAULT NULL,
                          likelihood pg_catalog.bool DEFAULT NULL, order_by pg_catalog.text DEFAULT NULL,
                          state pg_catalog.jsonb DEFAULT NULL, impute pg_catalog.jsonb DEFAULT NULL,
                          bounds pg_catalog.jsonb DEFAULT NULL, frequency pg_catalog.text DEFAULT NULL)
RETURNS TABLE (trial pg_catalog.int4, version pg_catalog.int4, parameters pg_catalog.jsonb, value pg_catalog.float8,
               converged pg_catalog.bool, training_time pg_catalog.interval, deployed pg_catalog.bool,
               error pg_catalog.text)
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.tune(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                              pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.int4, pg_catalog.int8,
                              pg_catalog.anycompatible, pg_catalog.text, pg_catalog.bool, pg_catalog.jsonb,
                              pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                              pg_catalog.int4, pg_catalog.float8, pg_catalog.float8, pg_catalog.float8,
                              pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                              pg_catalog.text, pg_catalog.int4, pg_catalog.bool, pg_catalog.text, pg_catalog.jsonb,
                              pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.text) IS
    'train model name once per combination of the grid (or per draw of the random search), each a version on the '
    'same validation rows, and deploy the best by the metric; a row per trial. It takes pgad.train''s arguments by '
    'their names';

-- ---------------------------------------------------------------------------------------------------------------
-- §5 the newcomer's path (issue 47): predictions over a query, labelled; a deployment by strategy; a rollback
-- ---------------------------------------------------------------------------------------------------------------

-- pgad.prediction_query(name, data, version): the query pgad.predict runs, over the version's own scoring
-- functions (pgad/models/predict.py): a row per row of the data, (key, prediction, class, probabilities).
CREATE FUNCTION pgad._prediction_query(name pg_catalog.text, data pg_catalog.text, version pg_catalog.int4)
RETURNS pg_catalog.text LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.prediction_query(name, data, version)
$$;
REVOKE ALL ON FUNCTION pgad._prediction_query(pg_catalog.text, pg_catalog.text, pg_catalog.int4) FROM PUBLIC;
CREATE FUNCTION pgad.prediction_query(name pg_catalog.text, data pg_catalog.text,
                                      version pg_catalog.int4 DEFAULT NULL)
RETURNS pg_catalog.text LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.prediction_query(pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'the query pgad.predict runs: the data''s rows scored by the model''s functions, which read its columns by name';

-- pgad.predict(name, data, version): every row of the data scored, its columns read by name, as BigQuery ML's
-- ML.PREDICT reads a table. RETURN QUERY EXECUTE of the query above, in which the planner inlines the scoring
-- functions. No SET clause: the data query is the caller's, under the caller's search_path; every name in the body
-- and in the generated query is schema-qualified.
CREATE FUNCTION pgad.predict(name pg_catalog.text, data pg_catalog.text, version pg_catalog.int4 DEFAULT NULL)
RETURNS TABLE (key pg_catalog.jsonb, prediction pg_catalog.float8, class pg_catalog.text,
               probabilities pg_catalog.jsonb)
LANGUAGE plpgsql STABLE AS $body$
BEGIN
  RETURN QUERY EXECUTE pgad.prediction_query(name, data, version);
END
$body$;
COMMENT ON FUNCTION pgad.predict(pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'model name''s predictions for every row of the data, its columns read by name: the row''s other columns '
    '(key), the prediction in the label''s units, the class and the probabilities keyed by class';

-- The probabilities of a model of classes keyed by class, {"barolo": 0.9, …}: classes and probabilities in one order.
CREATE FUNCTION pgad._labelled(classes pg_catalog.text[], probabilities pg_catalog.float8[])
RETURNS pg_catalog.jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN (SELECT pg_catalog.jsonb_object_agg(classes[k], probabilities[k])
        FROM pg_catalog.generate_subscripts(classes, 1) AS k);
COMMENT ON FUNCTION pgad._labelled(pg_catalog.text[], pg_catalog.float8[]) IS
    'the probabilities of a model of classes as a jsonb object keyed by class';

-- pgad.deploy(name, 'previous'): a strategy given second, where a version number would stand (a literal that is no
-- number resolves to this one: PostgreSQL prefers the string category for an unknown literal). Its second argument
-- is not named strategy, so that strategy => 'previous' still names pgad.deploy(name, version, strategy) alone.
CREATE FUNCTION pgad.deploy(name pg_catalog.text, which pg_catalog.text)
RETURNS SETOF pgad.model_versions LANGUAGE sql VOLATILE
BEGIN ATOMIC
  SELECT * FROM pgad.deploy(name, NULL::pg_catalog.int4, which);
END;
COMMENT ON FUNCTION pgad.deploy(pg_catalog.text, pg_catalog.text) IS
    'deploy the version of a model that a strategy picks (best_validation, most_recent, previous)';

-- pgad.rollback(name): the version deployed before the deployed one, deployed again; pgad.rollback(name, 3): version 3.
CREATE FUNCTION pgad.rollback(name pg_catalog.text, version pg_catalog.int4 DEFAULT NULL)
RETURNS SETOF pgad.model_versions LANGUAGE sql VOLATILE
BEGIN ATOMIC
  SELECT * FROM pgad.deploy(name, version, CASE WHEN version IS NULL THEN 'previous' END);
END;
COMMENT ON FUNCTION pgad.rollback(pg_catalog.text, pg_catalog.int4) IS
    'deploy again the version of a model deployed before its deployed one (pgad.deploy(name, strategy => ''previous'')), '
    'or version version';

-- The column loss holds the loss's name; its value at the fit is final_loss (issue 47: read as the number).
COMMENT ON COLUMN pgad.model_versions.loss IS 'the loss''s name (''squared'', ''softmax'', a lambda): its value at the fitted weights is final_loss';
