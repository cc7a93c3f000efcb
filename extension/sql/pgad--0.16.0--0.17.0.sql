-- pgad 0.16.0 → 0.17.0: models over time (issue 38): versions, deployment and rollback, stored preprocessing,
-- tuning. One source of the install script (extension/sql/pgad.sql): tests/test_upgrade.py checks that this path
-- gives its catalog.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.17.0'" to load this file. \quit

-- §1 versions. pgad.models becomes pgad.model_versions, a row per version and group; each existing model is its
-- version 1, deployed.
ALTER TABLE pgad.models RENAME TO model_versions;
ALTER TABLE pgad.model_versions DROP CONSTRAINT models_name_group_key_key;
ALTER TABLE pgad.model_versions ADD COLUMN version pg_catalog.int4 NOT NULL DEFAULT 1,
  ADD COLUMN deployed pg_catalog.bool NOT NULL DEFAULT true, ADD COLUMN deployed_at pg_catalog.timestamptz,
  ADD COLUMN metrics pg_catalog.jsonb;
ALTER TABLE pgad.model_versions ALTER COLUMN version DROP DEFAULT, ALTER COLUMN deployed DROP DEFAULT;
UPDATE pgad.model_versions SET deployed_at = trained_at;
ALTER TABLE pgad.model_versions ADD UNIQUE NULLS NOT DISTINCT (name, version, group_key);
CREATE UNIQUE INDEX model_versions_deployed ON pgad.model_versions (name, group_key) NULLS NOT DISTINCT WHERE deployed;
COMMENT ON TABLE pgad.model_versions IS 'the models pgad.train made, one row per version and group';
ALTER TABLE pgad.model_names ADD COLUMN versions pg_catalog.int4 NOT NULL DEFAULT 0;
INSERT INTO pgad.model_names SELECT DISTINCT v.name, 1 FROM pgad.model_versions AS v
ON CONFLICT (name) DO UPDATE SET versions = 1;
COMMENT ON TABLE pgad.model_names IS 'the names in pgad.model_versions, one row each, claimed by the writer';
COMMENT ON FUNCTION pgad.drop_model(pg_catalog.text) IS
    'drop a model: every version''s rows in pgad.model_versions and its functions in pgad_models';

-- The deployed version of each model (issue 38): what pgad_models."name" scores by, and what pgad.evaluate,
-- pgad.summary, pgad.forecast and the other functions of a model read. security_invoker: read as the caller, under
-- pgad.model_versions' policy.
CREATE VIEW pgad.models WITH (security_invoker = true) AS
SELECT v.* FROM pgad.model_versions AS v WHERE v.deployed;
COMMENT ON VIEW pgad.models IS 'the deployed version of each model pgad.train made, one row per model and group';
GRANT SELECT ON pgad.models TO PUBLIC;

CREATE OR REPLACE FUNCTION pgad._model_owners(name pg_catalog.text)
RETURNS TABLE (owner pg_catalog.text, loss pg_catalog.text) LANGUAGE sql STABLE STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp AS $$
SELECT DISTINCT m.trained_by::pg_catalog.text,
       CASE WHEN m.loss OPERATOR(pg_catalog.=) ANY (ARRAY['logistic', 'hinge', 'poisson', 'gamma', 'softmax'])
            THEN m.loss END
FROM pgad.model_versions AS m WHERE m.name OPERATOR(pg_catalog.=) $1
$$;

DROP FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                         pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                         pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                         pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4,
                         pg_catalog.bool, pg_catalog.text, pg_catalog.jsonb);
DROP FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                          pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                          pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                          pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                          pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                          pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.bool,
                          pg_catalog.text, pg_catalog.jsonb);
-- pgad.train, whose defaults converge on columns of any scale: learning_rate, iterations, optimizer and standardize
-- are NULL unless given, and pgad/api.py chooses (optimizer 'lbfgs', or 'gd' where a learning_rate or l1 is given).
CREATE FUNCTION pgad._train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                            weights pg_catalog.jsonb, learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                            mode pg_catalog.text, backend pg_catalog.text, optimizer pg_catalog.text,
                            batch_size pg_catalog.int4, seed pg_catalog.int8, tolerance pg_catalog.float8,
                            l1 pg_catalog.float8, l2 pg_catalog.float8, regularize pg_catalog.jsonb,
                            standardize pg_catalog.bool, label pg_catalog.text, group_by pg_catalog.text,
                            progress_every pg_catalog.int4, dtype pg_catalog.text,
                            validation pg_catalog.text, early_stopping pg_catalog.int4,
                            likelihood pg_catalog.bool, order_by pg_catalog.text, state pg_catalog.jsonb,
                            deploy pg_catalog.text, impute pg_catalog.jsonb)
RETURNS SETOF pgad.model_versions LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.train(name, model, loss, data, weights, learning_rate, iterations, mode, backend, optimizer, batch_size,
                 seed, tolerance, l1, l2, regularize, standardize, label, group_by, progress_every, dtype,
                 validation, early_stopping, likelihood, order_by, state, deploy, impute)
$$;
REVOKE ALL ON FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                   pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                                   pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                                   pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.bool,
                                   pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.jsonb) FROM PUBLIC;

-- Not STRICT: learning_rate, iterations, optimizer, standardize, regularize, seed, group_by, validation,
-- early_stopping and likelihood are NULL unless given. validation is a fraction (validation => 0.2, numeric) or a query (text):
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
                           early_stopping pg_catalog.int4 DEFAULT NULL,
                           likelihood pg_catalog.bool DEFAULT NULL,
                           order_by pg_catalog.text DEFAULT NULL, state pg_catalog.jsonb DEFAULT NULL,
                           deploy "any" DEFAULT true, impute pg_catalog.jsonb DEFAULT NULL)
RETURNS SETOF pgad.model_versions LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                               pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                               pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.text, pg_catalog.anycompatible, pg_catalog.int4,
                               pg_catalog.bool, pg_catalog.text, pg_catalog.jsonb, "any",
                               pg_catalog.jsonb) IS
    'train a new version of a model (one per group, with group_by), store it in pgad.model_versions and, unless '
    'deploy => false, deploy it: its scoring function pgad_models.<name>';

-- pgad.deploy: make a version of a model the deployed one, its functions pgad_models."name"'s, in the caller's
-- transaction (pgad/models/catalog.py, deploy): a version by number, or by strategy 'best_validation',
-- 'most_recent' or 'previous'. Not STRICT: version and strategy are NULL unless given, and one of them is.
CREATE FUNCTION pgad._deploy(name pg_catalog.text, version pg_catalog.int4, strategy pg_catalog.text)
RETURNS SETOF pgad.model_versions LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.deploy(name, version, strategy)
$$;
REVOKE ALL ON FUNCTION pgad._deploy(pg_catalog.text, pg_catalog.int4, pg_catalog.text) FROM PUBLIC;
CREATE FUNCTION pgad.deploy(name pg_catalog.text, version pg_catalog.int4 DEFAULT NULL,
                            strategy pg_catalog.text DEFAULT NULL)
RETURNS SETOF pgad.model_versions LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.deploy(pg_catalog.text, pg_catalog.int4, pg_catalog.text) IS
    'deploy a version of a model, by number or by strategy (best_validation, most_recent, previous): its '
    'functions become pgad_models.<name>''s';

-- pgad.drop_model(name, version): drop one version that is not deployed, and its functions.
CREATE FUNCTION pgad._drop_model(name pg_catalog.text, version pg_catalog.int4) RETURNS pg_catalog.void
LANGUAGE plpython3u VOLATILE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.drop_model(name, version)
$$;
REVOKE ALL ON FUNCTION pgad._drop_model(pg_catalog.text, pg_catalog.int4) FROM PUBLIC;
CREATE FUNCTION pgad.drop_model(name pg_catalog.text, version pg_catalog.int4) RETURNS pg_catalog.void
LANGUAGE C VOLATILE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.drop_model(pg_catalog.text, pg_catalog.int4) IS
    'drop a version of a model that is not deployed: its rows in pgad.model_versions and its functions';

-- pgad.evaluate(name, data, version): the metrics of a version of a model, deployed or not, on any data.
CREATE FUNCTION pgad._evaluate(name pg_catalog.text, data pg_catalog.text, version pg_catalog.int4)
RETURNS TABLE (group_key pg_catalog.jsonb, metric pg_catalog.text, value pg_catalog.float8)
LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.evaluate(name, data, version)
$$;
REVOKE ALL ON FUNCTION pgad._evaluate(pg_catalog.text, pg_catalog.text, pg_catalog.int4) FROM PUBLIC;
CREATE FUNCTION pgad.evaluate(name pg_catalog.text, data pg_catalog.text, version pg_catalog.int4)
RETURNS TABLE (group_key pg_catalog.jsonb, metric pg_catalog.text, value pg_catalog.float8)
LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.evaluate(pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'the metrics of version version of model name on the data, per group, as pgad.evaluate(name, data) gives them';

-- Each model trained before 0.17.0 is its version 1, deployed, whose functions are pgad_models."name" and the others
-- beside it (pgad/models/catalog.py, suffixes). A version has functions of its own, "name@1" (catalog.py,
-- versioned), which the deployed ones call; a model's version 1 gets copies of its functions under those names, owned
-- by the role that trained it and not members of the extension, so that it can be deployed again after a new
-- version. Their bodies are PostgreSQL's own text of the stored ones (pg_get_function_sqlbody), every float written
-- exactly (extra_float_digits 3). A name that a function has already (any role's, any overload: issue 45), or that
-- would not fit in 63 bytes, is skipped, never an error: the update to 0.18.0 gives that version copies under names
-- of their own (pgad--0.17.0--0.18.0.sql).
DO $$
DECLARE
  f pg_catalog.record;
  m pg_catalog.record;
  scoring pg_catalog.regprocedure;
  digits pg_catalog.text := pg_catalog.current_setting('extra_float_digits');
BEGIN
  PERFORM pg_catalog.set_config('extra_float_digits', '3', true);
  FOR m IN SELECT DISTINCT v.name, v.scoring_function, v.trained_by FROM pgad.model_versions AS v LOOP
  BEGIN
    scoring := pg_catalog.to_regprocedure(m.scoring_function);
  EXCEPTION WHEN OTHERS THEN  -- a row written by hand before 0.10.0 may name no function, in no syntax
    scoring := NULL;
  END;
  FOR f IN
    SELECT DISTINCT p.oid, p.proname
    FROM pg_catalog.pg_proc AS s
    JOIN pg_catalog.pg_proc AS p ON p.pronamespace OPERATOR(pg_catalog.=) s.pronamespace
      AND p.proargtypes OPERATOR(pg_catalog.=) s.proargtypes AND p.proowner OPERATOR(pg_catalog.=) s.proowner
      AND (p.proname OPERATOR(pg_catalog.=) m.name OR p.proname OPERATOR(pg_catalog.=) ANY (ARRAY[
           m.name OPERATOR(pg_catalog.||) '_probability', m.name OPERATOR(pg_catalog.||) '_class',
           m.name OPERATOR(pg_catalog.||) '_mean', m.name OPERATOR(pg_catalog.||) '_explain']))
    JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) p.proowner
      AND r.rolname OPERATOR(pg_catalog.=) m.trained_by
    WHERE s.oid OPERATOR(pg_catalog.=) scoring
      AND s.pronamespace OPERATOR(pg_catalog.=) 'pgad_models'::pg_catalog.regnamespace
      AND pg_catalog.octet_length(p.proname) OPERATOR(pg_catalog.<) 62 AND p.prosqlbody IS NOT NULL
      AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc AS q
                      WHERE q.pronamespace OPERATOR(pg_catalog.=) 'pgad_models'::pg_catalog.regnamespace
                        AND q.proname OPERATOR(pg_catalog.=) (p.proname OPERATOR(pg_catalog.||) '@1'))
  LOOP
    EXECUTE pg_catalog.format('CREATE FUNCTION pgad_models.%I(%s) RETURNS %s LANGUAGE sql IMMUTABLE PARALLEL SAFE %s',
                              f.proname OPERATOR(pg_catalog.||) '@1', pg_catalog.pg_get_function_arguments(f.oid),
                              pg_catalog.pg_get_function_result(f.oid), pg_catalog.pg_get_function_sqlbody(f.oid));
    EXECUTE pg_catalog.format('ALTER FUNCTION pgad_models.%I(%s) OWNER TO %I', f.proname OPERATOR(pg_catalog.||) '@1',
                              pg_catalog.pg_get_function_identity_arguments(f.oid), m.trained_by);
    -- made by this script, it would be the extension's: it is the model's, as the function it copies
    EXECUTE pg_catalog.format('ALTER EXTENSION pgad DROP FUNCTION pgad_models.%I(%s)',
                              f.proname OPERATOR(pg_catalog.||) '@1', pg_catalog.pg_get_function_identity_arguments(f.oid));
  END LOOP;
  END LOOP;
  PERFORM pg_catalog.set_config('extra_float_digits', digits, true);
END $$;

-- §3 tuning (issue 38)
-- pgad.tune: a training of the model per combination of a grid, or per draw of a random search, each a version
-- (deploy => false) on the same validation rows, the best by the metric deployed (pgad/models/tuning.py); a row per
-- trial. Not STRICT: grid, random, trials and seed are NULL unless given, and one of grid and random is.
CREATE FUNCTION pgad._tune(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                           weights pg_catalog.jsonb, grid pg_catalog.jsonb, random pg_catalog.jsonb,
                           trials pg_catalog.int4, seed pg_catalog.int8, validation pg_catalog.text,
                           metric pg_catalog.text, deploy pg_catalog.bool, options pg_catalog.jsonb)
RETURNS TABLE (trial pg_catalog.int4, version pg_catalog.int4, parameters pg_catalog.jsonb, value pg_catalog.float8,
               converged pg_catalog.bool, training_time pg_catalog.interval, deployed pg_catalog.bool,
               error pg_catalog.text)
LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.tune(name, model, loss, data, weights, grid, random, trials, seed, validation, metric, deploy, options)
$$;
REVOKE ALL ON FUNCTION pgad._tune(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                  pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.int4,
                                  pg_catalog.int8, pg_catalog.text, pg_catalog.text, pg_catalog.bool,
                                  pg_catalog.jsonb) FROM PUBLIC;
-- validation is a fraction (numeric) or a query (text), as pgad.train's: anycompatible, reaching pgad._tune as text.
CREATE FUNCTION pgad.tune(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                          weights pg_catalog.jsonb, grid pg_catalog.jsonb DEFAULT NULL,
                          random pg_catalog.jsonb DEFAULT NULL, trials pg_catalog.int4 DEFAULT NULL,
                          seed pg_catalog.int8 DEFAULT NULL,
                          validation pg_catalog.anycompatible DEFAULT 0.2::pg_catalog.numeric,
                          metric pg_catalog.text DEFAULT 'validation_loss', deploy pg_catalog.bool DEFAULT true,
                          options pg_catalog.jsonb DEFAULT NULL)
RETURNS TABLE (trial pg_catalog.int4, version pg_catalog.int4, parameters pg_catalog.jsonb, value pg_catalog.float8,
               converged pg_catalog.bool, training_time pg_catalog.interval, deployed pg_catalog.bool,
               error pg_catalog.text)
LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.tune(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                              pg_catalog.jsonb, pg_catalog.jsonb, pg_catalog.int4, pg_catalog.int8,
                              pg_catalog.anycompatible, pg_catalog.text, pg_catalog.bool, pg_catalog.jsonb) IS
    'train model name once per combination of the grid (or per draw of the random search), each a version on the '
    'same validation rows, and deploy the best by the metric; a row per trial';
