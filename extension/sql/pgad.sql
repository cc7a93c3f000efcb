-- pgad, the current version (default_version in extension/pgad.control; make install builds it as
-- pgad--<version>.sql): thin shims. Each public function pgad.f is the C function pgad_call (extension/call.c), which calls
-- the PL/Python function pgad._f with the same arguments; that one hands them to pgad.api, where the logic lives
-- (documented in docs/sql.md). Every name below is schema-qualified: see docs/security.md.
\echo Use "CREATE EXTENSION pgad CASCADE" to load this file. \quit

-- pgad's functions run as whoever calls them, superusers included: a schema that another role could write to would
-- let that role put its own code in their place.
DO $$
DECLARE owner pg_catalog.text;
BEGIN
  SELECT r.rolname INTO owner FROM pg_catalog.pg_namespace AS n JOIN pg_catalog.pg_roles AS r
    ON r.oid OPERATOR(pg_catalog.=) n.nspowner
  WHERE n.nspname OPERATOR(pg_catalog.=) 'pgad'
    AND (NOT r.rolsuper OR EXISTS (SELECT FROM pg_catalog.aclexplode(n.nspacl) AS a
                                   WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
                                     AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner));
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = 'schema "pgad" must be owned by a superuser and writable by its owner alone',
      DETAIL = pg_catalog.format('The schema exists already, owned by role %I.', owner),
      HINT = 'Drop the schema and create the extension again, or ALTER SCHEMA pgad OWNER TO a superuser and '
             'REVOKE CREATE ON SCHEMA pgad FROM every other role.';
  END IF;
END $$;

-- What gradient_descent returns: a type of its own rather than RETURNS TABLE, whose column names would clash with
-- the parameters loss, weights and iterations.
CREATE TYPE pgad.fit AS (weights pg_catalog.jsonb, loss pg_catalog.float8, iterations pg_catalog.int4);

-- The implementations. Each puts pgad's Python environment on sys.path (the path is written here by `make install`,
-- never taken from a setting) and calls pgad.api. Not executable by PUBLIC: they are reached through pgad_call.
CREATE FUNCTION pgad._loss(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb)
RETURNS pg_catalog.float8 LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.loss(loss, data, weights)
$$;

CREATE FUNCTION pgad._gradient(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                               mode pg_catalog.text, backend pg_catalog.text, dtype pg_catalog.text,
                               tape pg_catalog.text)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient(loss, data, weights, mode, backend, dtype, tape)
$$;

CREATE FUNCTION pgad._gradient_descent(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                       learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                                       mode pg_catalog.text, backend pg_catalog.text, dtype pg_catalog.text,
                                       tape pg_catalog.text)
RETURNS pgad.fit LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient_descent(loss, data, weights, learning_rate, iterations, mode, backend, dtype, tape)
$$;

CREATE FUNCTION pgad._derivatives(loss pg_catalog.text, weights pg_catalog.jsonb, data pg_catalog.text)
RETURNS TABLE (weight pg_catalog.text, derivative pg_catalog.text) LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.derivatives(loss, weights, data)
$$;

-- Not STRICT, as pgad.explain: rows and data are NULL unless given (api.explain gives no rows for a NULL loss,
-- mode or backend, as STRICT would).
CREATE FUNCTION pgad._explain(loss pg_catalog.text, mode pg_catalog.text, backend pg_catalog.text,
                              rows pg_catalog.int8, data pg_catalog.text, weights pg_catalog.jsonb,
                              tape pg_catalog.text)
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.explain(loss, mode, backend, rows, data, weights, tape)
$$;

-- A shard's part of a sharded training (pgad.partial_sums), called by the coordinator through dblink.
CREATE FUNCTION pgad._partial_sums(loss pg_catalog.text, data pg_catalog.text, names pg_catalog.text[],
                                   weights pg_catalog.float8[], mode pg_catalog.text, backend pg_catalog.text,
                                   dtype pg_catalog.text)
RETURNS pg_catalog.float8[] LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.partial_sums(loss, data, names, weights, mode, backend, dtype)
$$;

CREATE FUNCTION pgad._init_weights(shapes pg_catalog.jsonb, scheme pg_catalog.text, seed pg_catalog.int4)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u IMMUTABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.init_weights(shapes, scheme, seed)
$$;

REVOKE ALL ON FUNCTION pgad._init_weights(pg_catalog.jsonb, pg_catalog.text, pg_catalog.int4) FROM PUBLIC;

REVOKE ALL ON FUNCTION pgad._loss(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb),
  pgad._gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text,
                 pg_catalog.text, pg_catalog.text),
  pgad._gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4,
                         pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text),
  pgad._derivatives(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text),
  pgad._explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.text,
                pg_catalog.jsonb, pg_catalog.text),
  pgad._partial_sums(pg_catalog.text, pg_catalog.text, pg_catalog.text[], pg_catalog.float8[], pg_catalog.text,
                     pg_catalog.text, pg_catalog.text) FROM PUBLIC;

-- The public functions: SECURITY INVOKER (the data query runs with the caller's privileges), STABLE (in the
-- caller's snapshot), STRICT (a NULL argument gives NULL; pgad.explain, whose rows is NULL unless given, gives no
-- rows for a NULL loss, mode or backend).
CREATE FUNCTION pgad.loss(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb)
RETURNS pg_catalog.float8 LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.loss(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb) IS
    'the mean over the rows of data of the lambda loss, at weights';

CREATE FUNCTION pgad.gradient(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                              mode pg_catalog.text DEFAULT 'reverse', backend pg_catalog.text DEFAULT 'auto',
                              dtype pg_catalog.text DEFAULT 'float64', tape pg_catalog.text DEFAULT 'auto')
RETURNS pg_catalog.jsonb LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text,
                                  pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'the gradient of the mean loss by each weight, as {"weight": derivative, ...} in the weights'' shapes; dtype: '
    'the cuda backend''s float64 or float32; tape: how the llvm backend''s loop kernel keeps the forward values '
    '(store, recompute, reversible; auto chooses)';

CREATE FUNCTION pgad.gradient_descent(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                      learning_rate pg_catalog.float8 DEFAULT 0.05,
                                      iterations pg_catalog.int4 DEFAULT 100, mode pg_catalog.text DEFAULT 'reverse',
                                      backend pg_catalog.text DEFAULT 'auto',
                                      dtype pg_catalog.text DEFAULT 'float64', tape pg_catalog.text DEFAULT 'auto')
RETURNS pgad.fit LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8,
                                          pg_catalog.int4, pg_catalog.text, pg_catalog.text, pg_catalog.text,
                                          pg_catalog.text) IS
    'batch gradient descent from weights: the fitted weights (in their shapes), the loss at them and the '
    'iterations run; dtype: the cuda backend''s float64 or float32; tape: how the llvm backend''s loop kernel '
    'keeps the forward values (store, recompute, reversible; auto chooses)';

CREATE FUNCTION pgad.init_weights(shapes pg_catalog.jsonb, scheme pg_catalog.text DEFAULT 'glorot',
                                  seed pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.jsonb LANGUAGE C IMMUTABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.init_weights(pg_catalog.jsonb, pg_catalog.text, pg_catalog.int4) IS
    'starting weights of the shapes {"w1": [20, 4], "b1": [20]}: matrices at random by scheme (glorot, he or '
    'zeros) from seed, vectors and numbers 0; the same for the same arguments';

-- Not STRICT: weights (the shapes of vector and matrix weights) and data (the lengths of array columns) are NULL
-- unless given; a NULL loss gives no rows.
CREATE FUNCTION pgad.derivatives(loss pg_catalog.text, weights pg_catalog.jsonb DEFAULT NULL,
                                 data pg_catalog.text DEFAULT NULL)
RETURNS TABLE (weight pg_catalog.text, derivative pg_catalog.text)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.derivatives(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text) IS
    'each partial derivative of the lambda, simplified, in the lambda language; with vectors, the derivative by '
    'each vector or matrix weight as one vector expression, at the shapes of weights and of data''s array columns';

-- Not STRICT: rows (the rows the backend is chosen for), data (whose layout is shown) and weights (the shapes of a
-- lambda with vectors) are NULL unless given.
CREATE FUNCTION pgad.explain(loss pg_catalog.text, mode pg_catalog.text DEFAULT 'reverse',
                             backend pg_catalog.text DEFAULT 'auto', rows pg_catalog.int8 DEFAULT NULL,
                             data pg_catalog.text DEFAULT NULL, weights pg_catalog.jsonb DEFAULT NULL,
                             tape pg_catalog.text DEFAULT 'auto')
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8,
                                 pg_catalog.text, pg_catalog.jsonb, pg_catalog.text) IS
    'each stage from lambda to kernel with what it made and its time in ms: parse, (with vectors: their shapes and '
    'the kernel), differentiate, backend (the one that runs and why: auto chooses for rows rows), then that '
    'backend''s own (llvm: IR generation, optimisation, machine code; cuda: kernel source, PTX, compilation; python: '
    'none); with data, where its rows are computed (here, or on which shard server) and the bytes a round sends';

CREATE FUNCTION pgad.partial_sums(loss pg_catalog.text, data pg_catalog.text, names pg_catalog.text[],
                                  weights pg_catalog.float8[], mode pg_catalog.text DEFAULT 'reverse',
                                  backend pg_catalog.text DEFAULT 'auto', dtype pg_catalog.text DEFAULT 'float64')
RETURNS pg_catalog.float8[] LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.partial_sums(pg_catalog.text, pg_catalog.text, pg_catalog.text[], pg_catalog.float8[],
                                      pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'a shard''s part of a sharded training: {rows, loss sum, gradient sums by names} over data at weights, the '
    'columns loaded once per REPEATABLE READ READ ONLY transaction';

-- pgad.pack(VARIADIC "any"): the native packing aggregate every loader query runs (extension/pack.c). Its float8
-- arguments are one row's values; its result is a bytea holding a header (magic, columns, rows packed, rows skipped
-- for a NULL) and each column's values as native float8, column after column, which numpy reads in place. Parallel
-- safe: the serial form is the same bytea.
CREATE FUNCTION pgad._pack_step(pg_catalog.internal, VARIADIC "any") RETURNS pg_catalog.internal
LANGUAGE C PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_pack_step';
CREATE FUNCTION pgad._pack_combine(pg_catalog.internal, pg_catalog.internal) RETURNS pg_catalog.internal
LANGUAGE C PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_pack_combine';
CREATE FUNCTION pgad._pack_bytes(pg_catalog.internal) RETURNS pg_catalog.bytea
LANGUAGE C STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_pack_bytes';
CREATE FUNCTION pgad._pack_deserialize(pg_catalog.bytea, pg_catalog.internal) RETURNS pg_catalog.internal
LANGUAGE C STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_pack_deserialize';
CREATE AGGREGATE pgad.pack(VARIADIC "any") (
  SFUNC = pgad._pack_step, STYPE = pg_catalog.internal, FINALFUNC = pgad._pack_bytes,
  COMBINEFUNC = pgad._pack_combine, SERIALFUNC = pgad._pack_bytes, DESERIALFUNC = pgad._pack_deserialize,
  PARALLEL = SAFE);
COMMENT ON AGGREGATE pgad.pack(VARIADIC "any") IS
    'the rows'' float8 arguments as native float8 columns in one bytea (pgad''s loader; rows with a NULL skipped)';
REVOKE ALL ON FUNCTION pgad._pack_step(pg_catalog.internal, VARIADIC "any"),
  pgad._pack_combine(pg_catalog.internal, pg_catalog.internal), pgad._pack_bytes(pg_catalog.internal),
  pgad._pack_deserialize(pg_catalog.bytea, pg_catalog.internal) FROM PUBLIC;

-- pgad._element(v, k, length, name): element k of an array column's value in a row of the data, which the loader's
-- pgad.pack queries read in place of (v)[k] (pgad/loader.py): an array that is not one-dimensional from index 1 of
-- length elements, the length the lambda reads, is SQLSTATE 2202E naming column name, as the native load's is (the
-- data query may give other rows than when pgad measured its arrays). STRICT: a NULL array gives NULL, as a NULL
-- element does, and pgad.pack skips the row. STABLE, not IMMUTABLE, so that the planner never folds it over a
-- constant array of a branch that gives no rows. Executable by PUBLIC: the loader's queries run as the caller.
CREATE FUNCTION pgad._element(v pg_catalog.anyarray, k pg_catalog.int4, length pg_catalog.int4, name pg_catalog.text)
RETURNS pg_catalog.anyelement LANGUAGE C STABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_element';
COMMENT ON FUNCTION pgad._element(pg_catalog.anyarray, pg_catalog.int4, pg_catalog.int4, pg_catalog.text) IS
    'element k of v, an array of the data''s column name that must be one-dimensional from 1 with length elements '
    '(pgad''s loader)';

-- The aggregates pgad.loss_agg, pgad.gradient_agg and pgad.gradient_descent_agg(loss, weights, row[, options]),
-- whose row is a whole-row reference of the data (docs/sql.md). The transition function (extension/aggregates.c) packs the
-- columns the lambda reads, as pgad.pack does, asking pgad._lambda_columns which they are; the final function
-- hands them to pgad._<aggregate>, which trains as the functions do. Parallel safe: the state serialises.
CREATE FUNCTION pgad._lambda_columns(loss pg_catalog.text, names pg_catalog.text[], types pg_catalog.text[])
RETURNS pg_catalog.int4[] LANGUAGE plpython3u STABLE STRICT PARALLEL SAFE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.lambda_columns(loss, names, types)
$$;

CREATE FUNCTION pgad._loss_agg(packed pg_catalog.bytea, columns pg_catalog.text[], loss pg_catalog.text,
                               weights pg_catalog.jsonb, options pg_catalog.jsonb)
RETURNS pg_catalog.float8 LANGUAGE plpython3u STABLE PARALLEL SAFE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.loss_agg(packed, columns, loss, weights, options)
$$;

CREATE FUNCTION pgad._gradient_agg(packed pg_catalog.bytea, columns pg_catalog.text[], loss pg_catalog.text,
                                   weights pg_catalog.jsonb, options pg_catalog.jsonb)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u STABLE PARALLEL SAFE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient_agg(packed, columns, loss, weights, options)
$$;

CREATE FUNCTION pgad._gradient_descent_agg(packed pg_catalog.bytea, columns pg_catalog.text[], loss pg_catalog.text,
                                           weights pg_catalog.jsonb, options pg_catalog.jsonb)
RETURNS pgad.fit LANGUAGE plpython3u STABLE PARALLEL SAFE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient_descent_agg(packed, columns, loss, weights, options)
$$;

CREATE FUNCTION pgad._lambda_step(pg_catalog.internal, pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement)
RETURNS pg_catalog.internal LANGUAGE C PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_lambda_step';
CREATE FUNCTION pgad._lambda_step(pg_catalog.internal, pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement,
                                  pg_catalog.jsonb)
RETURNS pg_catalog.internal LANGUAGE C PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_lambda_step';
CREATE FUNCTION pgad._lambda_combine(pg_catalog.internal, pg_catalog.internal) RETURNS pg_catalog.internal
LANGUAGE C PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_lambda_combine';
CREATE FUNCTION pgad._lambda_serialize(pg_catalog.internal) RETURNS pg_catalog.bytea
LANGUAGE C STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_lambda_serialize';
CREATE FUNCTION pgad._lambda_deserialize(pg_catalog.bytea, pg_catalog.internal) RETURNS pg_catalog.internal
LANGUAGE C STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_lambda_deserialize';
CREATE FUNCTION pgad._loss_agg_final(pg_catalog.internal) RETURNS pg_catalog.float8
LANGUAGE C STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_lambda_final';
CREATE FUNCTION pgad._gradient_agg_final(pg_catalog.internal) RETURNS pg_catalog.jsonb
LANGUAGE C STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_lambda_final';
CREATE FUNCTION pgad._gradient_descent_agg_final(pg_catalog.internal) RETURNS pgad.fit
LANGUAGE C STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_lambda_final';

CREATE AGGREGATE pgad.loss_agg(loss pg_catalog.text, weights pg_catalog.jsonb, "row" pg_catalog.anyelement) (
  SFUNC = pgad._lambda_step, STYPE = pg_catalog.internal, FINALFUNC = pgad._loss_agg_final,
  COMBINEFUNC = pgad._lambda_combine, SERIALFUNC = pgad._lambda_serialize,
  DESERIALFUNC = pgad._lambda_deserialize, PARALLEL = SAFE);
COMMENT ON AGGREGATE pgad.loss_agg(pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement) IS
    'the mean over the group''s rows of the lambda loss, at weights (row: the whole row, t of FROM tbl AS t)';
CREATE AGGREGATE pgad.gradient_agg(loss pg_catalog.text, weights pg_catalog.jsonb, "row" pg_catalog.anyelement) (
  SFUNC = pgad._lambda_step, STYPE = pg_catalog.internal, FINALFUNC = pgad._gradient_agg_final,
  COMBINEFUNC = pgad._lambda_combine, SERIALFUNC = pgad._lambda_serialize,
  DESERIALFUNC = pgad._lambda_deserialize, PARALLEL = SAFE);
COMMENT ON AGGREGATE pgad.gradient_agg(pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement) IS
    'the gradient of the group''s mean loss by each weight, as {"weight": derivative, ...}';
CREATE AGGREGATE pgad.gradient_agg(loss pg_catalog.text, weights pg_catalog.jsonb, "row" pg_catalog.anyelement,
                                   options pg_catalog.jsonb) (
  SFUNC = pgad._lambda_step, STYPE = pg_catalog.internal, FINALFUNC = pgad._gradient_agg_final,
  COMBINEFUNC = pgad._lambda_combine, SERIALFUNC = pgad._lambda_serialize,
  DESERIALFUNC = pgad._lambda_deserialize, PARALLEL = SAFE);
COMMENT ON AGGREGATE pgad.gradient_agg(pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement, pg_catalog.jsonb) IS
    'the gradient of the group''s mean loss by each weight; options: mode, backend, dtype';
CREATE AGGREGATE pgad.gradient_descent_agg(loss pg_catalog.text, weights pg_catalog.jsonb, "row" pg_catalog.anyelement) (
  SFUNC = pgad._lambda_step, STYPE = pg_catalog.internal, FINALFUNC = pgad._gradient_descent_agg_final,
  COMBINEFUNC = pgad._lambda_combine, SERIALFUNC = pgad._lambda_serialize,
  DESERIALFUNC = pgad._lambda_deserialize, PARALLEL = SAFE);
COMMENT ON AGGREGATE pgad.gradient_descent_agg(pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement) IS
    'batch gradient descent over the group''s rows from weights: the fitted weights, the loss and the iterations';
CREATE AGGREGATE pgad.gradient_descent_agg(loss pg_catalog.text, weights pg_catalog.jsonb, "row" pg_catalog.anyelement,
                                           options pg_catalog.jsonb) (
  SFUNC = pgad._lambda_step, STYPE = pg_catalog.internal, FINALFUNC = pgad._gradient_descent_agg_final,
  COMBINEFUNC = pgad._lambda_combine, SERIALFUNC = pgad._lambda_serialize,
  DESERIALFUNC = pgad._lambda_deserialize, PARALLEL = SAFE);
COMMENT ON AGGREGATE pgad.gradient_descent_agg(pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement, pg_catalog.jsonb) IS
    'batch gradient descent over the group''s rows; options: learning_rate, iterations, mode, backend, '
    'dtype';

REVOKE ALL ON FUNCTION pgad._lambda_columns(pg_catalog.text, pg_catalog.text[], pg_catalog.text[]),
  pgad._loss_agg(pg_catalog.bytea, pg_catalog.text[], pg_catalog.text, pg_catalog.jsonb, pg_catalog.jsonb),
  pgad._gradient_agg(pg_catalog.bytea, pg_catalog.text[], pg_catalog.text, pg_catalog.jsonb, pg_catalog.jsonb),
  pgad._gradient_descent_agg(pg_catalog.bytea, pg_catalog.text[], pg_catalog.text, pg_catalog.jsonb,
                             pg_catalog.jsonb),
  pgad._lambda_step(pg_catalog.internal, pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement),
  pgad._lambda_step(pg_catalog.internal, pg_catalog.text, pg_catalog.jsonb, pg_catalog.anyelement, pg_catalog.jsonb),
  pgad._lambda_combine(pg_catalog.internal, pg_catalog.internal), pgad._lambda_serialize(pg_catalog.internal),
  pgad._lambda_deserialize(pg_catalog.bytea, pg_catalog.internal), pgad._loss_agg_final(pg_catalog.internal),
  pgad._gradient_agg_final(pg_catalog.internal), pgad._gradient_descent_agg_final(pg_catalog.internal) FROM PUBLIC;

-- pgad.train's models (docs/sql.md): the catalog pgad.model_versions, one row per version of a model (per group, with
-- group_by), its deployed versions in the view pgad.models, and schema pgad_models, where each model's scoring
-- functions live. Users' models are not the extension's: pg_dump dumps the rows of pgad.model_versions
-- (pg_extension_config_dump) and the functions in pgad_models (not members of the extension), and a restore brings
-- both back. A role reads the rows of the models whose data it may read (below); only pgad writes them, through
-- pgad._write_models (below). A role creates scoring functions only with CREATE on pgad_models, which no role but its
-- owner has until granted: a function there is one every user of the model calls.
CREATE SCHEMA pgad_models;
COMMENT ON SCHEMA pgad_models IS 'the scoring functions of the models pgad.train made: pgad_models.<model>(columns)';
GRANT USAGE ON SCHEMA pgad_models TO PUBLIC;

CREATE TABLE pgad.model_versions (
  name pg_catalog.text NOT NULL,
  group_key pg_catalog.jsonb,                 -- the group's values by column ({"region": "north"}); NULL: no groups
  model pg_catalog.text NOT NULL,             -- the prediction lambda, λ(d, w) …
  loss pg_catalog.text NOT NULL,              -- a loss lambda λ(p, d) …, or a named loss (docs/sql.md)
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
  validation_history pg_catalog.float8[],     -- the validation loss after each iteration (epoch); NULL: none
  read_from pg_catalog.regclass[],            -- the relations the training read; NULL: not recorded (0.12.0)
  converged pg_catalog.bool,                  -- whether the fit met the convergence criterion; NULL: before 0.14.0
  gradient_norm pg_catalog.float8,            -- the criterion's measure of the gradient at the fitted weights
  version pg_catalog.int4 NOT NULL,           -- 1, 2, …: each pgad.train of the name makes the next (issue 38)
  deployed pg_catalog.bool NOT NULL,          -- its functions are pgad_models."name"'s: one version of a name is
  deployed_at pg_catalog.timestamptz,         -- when it was last deployed; NULL: never
  metrics pg_catalog.jsonb,                   -- its metrics on the validation rows; NULL: no validation
  functions pg_catalog.jsonb NOT NULL,        -- its own functions' names in pgad_models by suffix ("" the scoring
                                              -- function's): {"": "name@3", "explain": "name_explain@3"} (issue 45)
  UNIQUE NULLS NOT DISTINCT (name, version, group_key));
CREATE UNIQUE INDEX model_versions_deployed ON pgad.model_versions (name, group_key) NULLS NOT DISTINCT WHERE deployed;
CREATE INDEX model_versions_functions ON pgad.model_versions USING gin (functions);  -- the names recorded (issue 45)
COMMENT ON TABLE pgad.model_versions IS 'the models pgad.train made, one row per version and group';
SELECT pg_catalog.pg_extension_config_dump('pgad.model_versions', '');
GRANT SELECT ON pgad.model_versions TO PUBLIC;

-- Who reads a model's rows (issue 34): they hold the data's category values and group keys, with rows per group, so
-- a role sees them as pg_stats shows a column's statistics, only where it may read what they came from: the role
-- that trained the model, a role with that role's privileges, and a role that may read every relation the training
-- read (read_from, which pgad.train records as the executor checks them: pgad/models/catalog.py, relations_read, and
-- extension/reads.c) with SELECT and no row-level security hiding rows from it; a superuser reads all. read_from NULL (a model trained before 0.13.0): its role
-- and that role's members only, until it is trained again. What pgad runs as the caller reads pgad.models under
-- the same rule; pgad._write_models, its owner's, reads every row.
ALTER TABLE pgad.model_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY models_readers ON pgad.model_versions FOR SELECT TO PUBLIC USING (
  trained_by OPERATOR(pg_catalog.=) CURRENT_USER
  OR COALESCE(pg_catalog.pg_has_role((SELECT r.oid FROM pg_catalog.pg_roles AS r
                                      WHERE r.rolname OPERATOR(pg_catalog.=) trained_by), 'USAGE'), false)
  OR (read_from IS NOT NULL AND NOT EXISTS (
        SELECT FROM pg_catalog.unnest(read_from) AS relation
        WHERE NOT COALESCE(pg_catalog.has_table_privilege(relation::pg_catalog.oid, 'SELECT')
                           AND NOT pg_catalog.row_security_active(relation::pg_catalog.oid), false))));
COMMENT ON COLUMN pgad.model_versions.read_from IS
    'the relations the training read as PostgreSQL checked them (a view, not what it reads as its owner; what a '
    'function reads); NULL: not recorded (before 0.13.0)';

-- The deployed version of each model (issue 38): what pgad_models."name" scores by, and what pgad.evaluate,
-- pgad.summary, pgad.forecast and the other functions of a model read. security_invoker: read as the caller, under
-- pgad.model_versions' policy.
CREATE VIEW pgad.models WITH (security_invoker = true) AS
SELECT v.* FROM pgad.model_versions AS v WHERE v.deployed;
COMMENT ON VIEW pgad.models IS 'the deployed version of each model pgad.train made, one row per model and group';
GRANT SELECT ON pgad.models TO PUBLIC;

-- The roles that trained model name's rows, and its loss where that gives it functions of its own (logistic,
-- hinge, poisson, gamma): what pgad.train and pgad.drop_model check a name against (pgad/models/catalog.py,
-- owners), whichever rows the caller may read. Nothing of the data: a model's name, its owner and its functions are
-- in pg_proc.
CREATE FUNCTION pgad._model_owners(name pg_catalog.text)
RETURNS TABLE (owner pg_catalog.text, loss pg_catalog.text) LANGUAGE sql STABLE STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp AS $$
SELECT DISTINCT m.trained_by::pg_catalog.text,
       CASE WHEN m.loss OPERATOR(pg_catalog.=) ANY (ARRAY['logistic', 'hinge', 'poisson', 'gamma', 'softmax'])
            THEN m.loss END
FROM pgad.model_versions AS m WHERE m.name OPERATOR(pg_catalog.=) $1
$$;
REVOKE ALL ON FUNCTION pgad._model_owners(pg_catalog.text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgad._model_owners(pg_catalog.text) TO PUBLIC;  -- pgad's Python calls it as the caller

-- The name of a version's own function in pgad_models (issue 45): public (the deployed function's name, "m" or
-- "m_probability"), '@' and the version's number, then '~2', '~3', … while that name is taken: by any function of
-- pgad_models (any overload, any role's: one with a DEFAULT argument would make a call ambiguous), by a name a
-- version's row records, or by one of taken (the names chosen for the version's other functions); public cut, at a
-- character, so that the name fits in 63 bytes. pgad._write_models records it in the version's rows (functions), so
-- no role's function blocks a training: it takes another name. Also the update from 0.17.0's.
CREATE FUNCTION pgad._version_function_name(public pg_catalog.text, version pg_catalog.int4,
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
REVOKE ALL ON FUNCTION pgad._version_function_name(pg_catalog.text, pg_catalog.int4, pg_catalog.text[]) FROM PUBLIC;

-- The names of the models, one row each, whoever trained them: pgad._write_models claims the name here before it
-- writes (INSERT … ON CONFLICT DO NOTHING). Under repeatable read or serializable a transaction's snapshot may be
-- older than the writer's lock, and miss the rows of a first training of the name that committed in between: the
-- claim then fails (40001) where two trainings would otherwise both commit under one name (issue 34).
CREATE TABLE pgad.model_names (
  name pg_catalog.text PRIMARY KEY,
  versions pg_catalog.int4 NOT NULL DEFAULT 0);  -- the versions the name has had: the next is one more (issue 38)
COMMENT ON TABLE pgad.model_names IS 'the names in pgad.model_versions, one row each, claimed by the writer';
SELECT pg_catalog.pg_extension_config_dump('pgad.model_names', '');

-- The one writer of pgad.model_versions: pgad.train, pgad.deploy and pgad.drop_model (pgad/models/catalog.py) leave
-- what to write, and the
-- role that called them, in the backend's Python, and call this at once; it runs as the extension's owner, checks
-- again that the name is free or the caller's (a name belongs to the role that trained it first; a superuser may
-- replace or drop anyone's) and writes. It takes no argument, so a direct call has nothing to write and is refused.
CREATE FUNCTION pgad._write_models() RETURNS SETOF pgad.model_versions LANGUAGE plpython3u VOLATILE STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad.models import catalog
return catalog.write()
$$;
REVOKE ALL ON FUNCTION pgad._write_models() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgad._write_models() TO PUBLIC;  -- pgad's Python calls it as the caller; it checks itself

CREATE FUNCTION pgad._drop_model(name pg_catalog.text) RETURNS pg_catalog.void LANGUAGE plpython3u VOLATILE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.drop_model(name)
$$;

REVOKE ALL ON FUNCTION pgad._drop_model(pg_catalog.text) FROM PUBLIC;

CREATE FUNCTION pgad.drop_model(name pg_catalog.text) RETURNS pg_catalog.void
LANGUAGE C VOLATILE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.drop_model(pg_catalog.text) IS
    'drop a model: every version''s rows in pgad.model_versions and its functions in pgad_models';

-- Any role may train on the data it can read.
GRANT USAGE ON SCHEMA pgad TO PUBLIC;

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

-- ---------------------------------------------------------------------------------------------------------------
-- §4–5 pgad.train's new options (issue 28)
-- ---------------------------------------------------------------------------------------------------------------

-- pgad.train, whose defaults converge on columns of any scale: learning_rate, iterations, optimizer and standardize
-- are NULL unless given, and pgad/models/training.py chooses (_default_optimizer: 'interior_point' for a
-- piecewise-linear loss where its programme applies, 'gd' where a learning_rate or l1 is given, else 'lbfgs', or
-- 'newton' where it pays).
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

COMMENT ON COLUMN pgad.model_versions.validation_history IS 'the loss on the validation rows after each iteration (epoch)';

-- The column loss holds the loss's name; its value at the fit is final_loss (issue 47: read as the number).
COMMENT ON COLUMN pgad.model_versions.loss IS 'the loss''s name (''squared'', ''softmax'', a lambda): its value at the fitted weights is final_loss';

-- Not STRICT: learning_rate, iterations, optimizer, standardize, regularize, seed, group_by, validation,
-- early_stopping and likelihood are NULL unless given; loss, data and weights too, for a model named by its family
-- (pgad.train(name, 'softmax', 'wine'): the family's loss, data third, its own weights; pgad/models/regression.py). validation is a fraction (validation => 0.2, numeric) or a query (text):
-- anycompatible takes both (an unknown literal as text), and reaches pgad._train as its text (pgad_call).
CREATE FUNCTION pgad.train(name pg_catalog.text, model pg_catalog.text, loss pg_catalog.text DEFAULT NULL,
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

-- ---------------------------------------------------------------------------------------------------------------
-- §1 multiclass models (issue 36)
-- ---------------------------------------------------------------------------------------------------------------

-- A softmax model's probability and class functions (pgad/models/catalog.py, EXTRAS) call these on the logits: a SQL
-- function whose body has a subquery is not inlined, so the model's functions stay one inlined expression around a
-- call of them. IMMUTABLE, PARALLEL SAFE and STRICT; every operator and function pg_catalog's, so that no search_path
-- reaches them (and no SET clause costs each call its save and restore).
CREATE FUNCTION pgad._softmax(logits pg_catalog.float8[])
RETURNS pg_catalog.float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
  v pg_catalog.float8;
  m pg_catalog.float8 := '-Infinity';
  total pg_catalog.float8 := 0;
  out pg_catalog.float8[] := '{}';
BEGIN
  FOREACH v IN ARRAY logits LOOP  -- the greatest first: exp(v - m) neither overflows nor all underflows
    IF v OPERATOR(pg_catalog.>) m THEN m := v; END IF;
  END LOOP;
  FOREACH v IN ARRAY logits LOOP
    total := total OPERATOR(pg_catalog.+) pg_catalog.exp(v OPERATOR(pg_catalog.-) m);
  END LOOP;
  FOREACH v IN ARRAY logits LOOP
    out := out OPERATOR(pg_catalog.||) (pg_catalog.exp(v OPERATOR(pg_catalog.-) m) OPERATOR(pg_catalog./) total);
  END LOOP;
  RETURN out;
END
$$;
COMMENT ON FUNCTION pgad._softmax(pg_catalog.float8[]) IS
    'the softmax of a vector of logits, exp(v - max) / sum(exp(v - max)): a softmax model''s probabilities';

CREATE FUNCTION pgad._argmax(logits pg_catalog.float8[])
RETURNS pg_catalog.int4 LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
  v pg_catalog.float8;
  k pg_catalog.int4 := 0;
  best pg_catalog.int4;
  m pg_catalog.float8;
BEGIN
  FOREACH v IN ARRAY logits LOOP  -- the first of the greatest, as numpy's argmax
    k := k OPERATOR(pg_catalog.+) 1;
    IF best IS NULL OR v OPERATOR(pg_catalog.>) m THEN best := k; m := v; END IF;
  END LOOP;
  RETURN best;
END
$$;
COMMENT ON FUNCTION pgad._argmax(pg_catalog.float8[]) IS
    'the position (from 1) of the greatest element of a vector, the first on a tie: a softmax model''s class';

-- ---------------------------------------------------------------------------------------------------------------
-- §2 explanations (issue 36)
-- ---------------------------------------------------------------------------------------------------------------

-- pgad.importance: each feature's mean |contribution| (the integrated gradients of <name>_explain) and mean
-- contribution to a stored model's predictions on any data, per group and element of a vector prediction, and its
-- permutation importance where asked (pgad/models/importance.py). Not STRICT: seed is NULL unless given.
CREATE FUNCTION pgad._importance(name pg_catalog.text, data pg_catalog.text, permutation pg_catalog.bool,
                                 seed pg_catalog.int8)
RETURNS TABLE (group_key pg_catalog.jsonb, output pg_catalog.text, feature pg_catalog.text,
               mean_abs_contribution pg_catalog.float8, mean_contribution pg_catalog.float8,
               permutation_importance pg_catalog.float8)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.importance(name, data, permutation, seed)
$$;
REVOKE ALL ON FUNCTION pgad._importance(pg_catalog.text, pg_catalog.text, pg_catalog.bool, pg_catalog.int8)
    FROM PUBLIC;

CREATE FUNCTION pgad.importance(name pg_catalog.text, data pg_catalog.text,
                                permutation pg_catalog.bool DEFAULT false, seed pg_catalog.int8 DEFAULT NULL)
RETURNS TABLE (group_key pg_catalog.jsonb, output pg_catalog.text, feature pg_catalog.text,
               mean_abs_contribution pg_catalog.float8, mean_contribution pg_catalog.float8,
               permutation_importance pg_catalog.float8)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.importance(pg_catalog.text, pg_catalog.text, pg_catalog.bool, pg_catalog.int8) IS
    'each feature''s mean absolute and mean contribution to model name''s predictions on the data (the integrated '
    'gradients of its _explain function), per group and output, and with permutation the rise of the mean loss '
    'when the feature is shuffled';

-- ---------------------------------------------------------------------------------------------------------------
-- §1 sequences (issue 37)
-- ---------------------------------------------------------------------------------------------------------------

-- ---------------------------------------------------------------------------------------------------------------
-- §2 forecasts (issue 37)
-- ---------------------------------------------------------------------------------------------------------------

-- pgad.forecast: a sequence model's recurrence run past its last row, with prediction intervals
-- (pgad/models/forecast.py). Not STRICT: data is NULL unless given (a NULL elsewhere gives no rows).
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

-- ---------------------------------------------------------------------------------------------------------------
-- §1 versions, deployment and rollback (issue 38)
-- ---------------------------------------------------------------------------------------------------------------

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

-- ---------------------------------------------------------------------------------------------------------------
-- §2 stored preprocessing (issue 38)
-- ---------------------------------------------------------------------------------------------------------------

-- ---------------------------------------------------------------------------------------------------------------
-- §3 tuning (issue 38)
-- ---------------------------------------------------------------------------------------------------------------

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
-- §4 the first call (issue 38)
-- ---------------------------------------------------------------------------------------------------------------

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

-- ---------------------------------------------------------------------------------------------------------------
-- §6 weights at scale (issue 48): a keyed model's weights in tables, its recommendations and its vectors
-- ---------------------------------------------------------------------------------------------------------------

-- Whether the caller may read version `version` of model `name`'s rows (pgad.model_versions' policy, as the caller):
-- the policy of each of the version's weight tables (pgad/models/weight_tables.py), which raises 42501 rather than
-- let a scoring function read no row and score every key as unseen.
CREATE FUNCTION pgad._weights_readable(name pg_catalog.text, version pg_catalog.int4)
RETURNS pg_catalog.bool LANGUAGE plpgsql STABLE STRICT SET search_path TO pg_catalog, pg_temp AS $$
BEGIN
  IF EXISTS (SELECT FROM pgad.model_versions AS m
             WHERE m.name OPERATOR(pg_catalog.=) $1 AND m.version OPERATOR(pg_catalog.=) $2) THEN
    RETURN true;
  END IF;
  RAISE EXCEPTION 'permission denied for the weights of model "%", version %', $1, $2
    USING ERRCODE = 'insufficient_privilege',
          HINT = 'A role reads a model''s weights where it may read its rows in pgad.model_versions: where it may '
                 'read the data the model was trained on.';
END
$$;
COMMENT ON FUNCTION pgad._weights_readable(pg_catalog.text, pg_catalog.int4) IS
    'whether the caller may read a version of a model: the policy of its weight tables';

-- pgad.recommend(name, key, k, seen, version): the k items of highest score for a user (pgad/models/recommend.py).
CREATE FUNCTION pgad._recommend(name pg_catalog.text, keys pg_catalog.text[], k pg_catalog.int4,
                                seen pg_catalog.text, version pg_catalog.int4)
RETURNS TABLE (user_key pg_catalog.text, item pg_catalog.text, score pg_catalog.float8, rank pg_catalog.int4)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.recommend(name, keys, k, seen, version)
$$;
REVOKE ALL ON FUNCTION pgad._recommend(pg_catalog.text, pg_catalog.text[], pg_catalog.int4, pg_catalog.text,
                                       pg_catalog.int4) FROM PUBLIC;
CREATE FUNCTION pgad.recommend(name pg_catalog.text, keys pg_catalog.text[], k pg_catalog.int4 DEFAULT 10,
                               seen pg_catalog.text DEFAULT NULL, version pg_catalog.int4 DEFAULT NULL)
RETURNS TABLE (user_key pg_catalog.text, item pg_catalog.text, score pg_catalog.float8, rank pg_catalog.int4)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.recommend(pg_catalog.text, pg_catalog.text[], pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.int4) IS
    'the k items of highest score for each user of keys, leaving out those the seen query pairs with the user';
-- One user: pgad.recommend('recs', 'u42').
CREATE FUNCTION pgad.recommend(name pg_catalog.text, key pg_catalog.text, k pg_catalog.int4 DEFAULT 10,
                               seen pg_catalog.text DEFAULT NULL, version pg_catalog.int4 DEFAULT NULL)
RETURNS TABLE (user_key pg_catalog.text, item pg_catalog.text, score pg_catalog.float8, rank pg_catalog.int4)
LANGUAGE sql STABLE
BEGIN ATOMIC
  SELECT * FROM pgad.recommend(name, ARRAY[key], k, seen, version);
END;
COMMENT ON FUNCTION pgad.recommend(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.text,
                                   pg_catalog.int4) IS
    'the k items of highest score for a user, leaving out those the seen query pairs with the user';

-- pgad.embeddings(name, weight, version): a keyed weight's values as pgvector's text form, '[0.1,0.2]'.
CREATE FUNCTION pgad._embeddings(name pg_catalog.text, weight pg_catalog.text, version pg_catalog.int4)
RETURNS TABLE (key pg_catalog.text, vector pg_catalog.text)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.embeddings(name, weight, version)
$$;
REVOKE ALL ON FUNCTION pgad._embeddings(pg_catalog.text, pg_catalog.text, pg_catalog.int4) FROM PUBLIC;
CREATE FUNCTION pgad.embeddings(name pg_catalog.text, weight pg_catalog.text, version pg_catalog.int4 DEFAULT NULL)
RETURNS TABLE (key pg_catalog.text, vector pg_catalog.text)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.embeddings(pg_catalog.text, pg_catalog.text, pg_catalog.int4) IS
    'the values of a keyed weight of a model by key, as pgvector''s text form';
