-- pgad 0.3.0 → 0.4.0: the native packing aggregate pgad.pack (extension/pgad.c), which the loader now runs
-- instead of string_agg(float8send(…) || …). Every name is schema-qualified (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.4.0'" to load this file. \quit

-- pgad.pack(VARIADIC "any"): the native packing aggregate every loader query runs (extension/pgad.c). Its float8
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
