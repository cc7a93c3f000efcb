-- pgad 0.4.0 → 0.5.0: the aggregates pgad.loss_agg, pgad.gradient_agg and pgad.gradient_descent_agg, which train
-- over each group's rows. Every name is schema-qualified (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.5.0'" to load this file. \quit

-- The aggregates pgad.loss_agg, pgad.gradient_agg and pgad.gradient_descent_agg(loss, weights, row[, options]),
-- whose row is a whole-row reference of the data (docs/sql.md). The transition function (extension/pgad.c) packs the
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
    'the gradient of the group''s mean loss by each weight; options: mode, backend';
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
    'batch gradient descent over the group''s rows; options: learning_rate, iterations, mode, backend';

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
