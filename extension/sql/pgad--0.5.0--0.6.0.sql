-- pgad 0.5.0 → 0.6.0: pgad.train and pgad.drop_model, the catalog pgad.models and the schema pgad_models of the
-- models' scoring functions. Every name is schema-qualified (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.6.0'" to load this file. \quit

-- pgad.train's models (docs/sql.md): the catalog pgad.models, one row per model (per group, with group_by), and
-- schema pgad_models, where each model's scoring function lives. Users' models are not the extension's: pg_dump
-- dumps the rows of pgad.models (pg_extension_config_dump) and the functions in pgad_models (not members of the
-- extension), and a restore brings both back. Any role may read the catalog; a role writes only the rows of the
-- models it trained (row level security), and creates scoring functions only with CREATE on pgad_models, which no
-- role but its owner has until granted: a function there is one every user of the model calls.
CREATE SCHEMA pgad_models;
COMMENT ON SCHEMA pgad_models IS 'the scoring functions of the models pgad.train made: pgad_models.<model>(columns)';
GRANT USAGE ON SCHEMA pgad_models TO PUBLIC;

CREATE TABLE pgad.models (
  name pg_catalog.text NOT NULL,
  group_key pg_catalog.jsonb,                 -- the group's values by column ({"region": "north"}); NULL: no groups
  model pg_catalog.text NOT NULL,             -- the prediction lambda, λ(d, w) …
  loss pg_catalog.text NOT NULL,              -- a loss lambda λ(p, d) …, or squared, absolute, logistic, hinge
  weights pg_catalog.jsonb NOT NULL,          -- the fitted weights
  final_loss pg_catalog.float8 NOT NULL,      -- the objective at them: the mean loss plus the regularisation
  loss_history pg_catalog.float8[] NOT NULL,  -- the objective after each iteration (epoch, for sgd, momentum, adam)
  iterations pg_catalog.int4 NOT NULL,        -- the iterations run (fewer than asked when tolerance stopped early)
  options pg_catalog.jsonb NOT NULL,          -- every training option, the defaults included
  data pg_catalog.text NOT NULL,              -- the data query or table it trained on
  rows pg_catalog.int8 NOT NULL,              -- the rows it trained on (rows with a NULL skipped)
  training_time pg_catalog.interval NOT NULL,
  scoring_function pg_catalog.text NOT NULL,  -- pgad_models."name"(argument types)
  trained_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
  trained_by pg_catalog.name NOT NULL DEFAULT CURRENT_USER,
  UNIQUE NULLS NOT DISTINCT (name, group_key));
COMMENT ON TABLE pgad.models IS 'the models pgad.train made, one row per model and group';
SELECT pg_catalog.pg_extension_config_dump('pgad.models', '');
ALTER TABLE pgad.models ENABLE ROW LEVEL SECURITY;
CREATE POLICY models_read ON pgad.models FOR SELECT USING (true);
CREATE POLICY models_write ON pgad.models USING (trained_by OPERATOR(pg_catalog.=) CURRENT_USER)
  WITH CHECK (trained_by OPERATOR(pg_catalog.=) CURRENT_USER);
GRANT SELECT, INSERT, UPDATE, DELETE ON pgad.models TO PUBLIC;

CREATE FUNCTION pgad._train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                            weights pg_catalog.jsonb, learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                            mode pg_catalog.text, backend pg_catalog.text, optimizer pg_catalog.text,
                            batch_size pg_catalog.int4, seed pg_catalog.int8, tolerance pg_catalog.float8,
                            l1 pg_catalog.float8, l2 pg_catalog.float8, regularize pg_catalog.jsonb,
                            standardize pg_catalog.bool, label pg_catalog.text, group_by pg_catalog.text,
                            progress_every pg_catalog.int4)
RETURNS SETOF pgad.models LANGUAGE plpython3u VOLATILE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.train(name, model, loss, data, weights, learning_rate, iterations, mode, backend, optimizer, batch_size,
                 seed, tolerance, l1, l2, regularize, standardize, label, group_by, progress_every)
$$;

CREATE FUNCTION pgad._drop_model(name pg_catalog.text) RETURNS pg_catalog.void LANGUAGE plpython3u VOLATILE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.drop_model(name)
$$;

REVOKE ALL ON FUNCTION pgad._train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                   pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8,
                                   pg_catalog.float8, pg_catalog.float8, pg_catalog.float8, pg_catalog.jsonb,
                                   pg_catalog.bool, pg_catalog.text, pg_catalog.text, pg_catalog.int4),
  pgad._drop_model(pg_catalog.text) FROM PUBLIC;

-- Not STRICT: regularize, seed and group_by are NULL unless given; a NULL where a value is needed is an error.
CREATE FUNCTION pgad.train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text, data pg_catalog.text,
                           weights pg_catalog.jsonb, learning_rate pg_catalog.float8 DEFAULT 0.05,
                           iterations pg_catalog.int4 DEFAULT 100, mode pg_catalog.text DEFAULT 'reverse',
                           backend pg_catalog.text DEFAULT 'auto', optimizer pg_catalog.text DEFAULT 'gd',
                           batch_size pg_catalog.int4 DEFAULT 256, seed pg_catalog.int8 DEFAULT NULL,
                           tolerance pg_catalog.float8 DEFAULT 0, l1 pg_catalog.float8 DEFAULT 0,
                           l2 pg_catalog.float8 DEFAULT 0, regularize pg_catalog.jsonb DEFAULT NULL,
                           standardize pg_catalog.bool DEFAULT false, label pg_catalog.text DEFAULT 'y',
                           group_by pg_catalog.text DEFAULT NULL, progress_every pg_catalog.int4 DEFAULT 0)
RETURNS SETOF pgad.models LANGUAGE C VOLATILE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.train(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.jsonb,
                               pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4, pg_catalog.int8, pg_catalog.float8, pg_catalog.float8,
                               pg_catalog.float8, pg_catalog.jsonb, pg_catalog.bool, pg_catalog.text, pg_catalog.text,
                               pg_catalog.int4) IS
    'train a model (one per group, with group_by), store it in pgad.models and create its scoring function '
    'pgad_models.<name>';

CREATE FUNCTION pgad.drop_model(name pg_catalog.text) RETURNS pg_catalog.void
LANGUAGE C VOLATILE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.drop_model(pg_catalog.text) IS 'drop a model: its rows in pgad.models and its scoring function';
