-- pgad 0.7.0 → 0.8.0: training on sharded tables. pgad.partial_sums is new: a shard's part of a training on a
-- table whose partitions are postgres_fdw foreign tables, which the coordinator calls through dblink
-- (docs/scaling.md). pgad.explain takes a last argument, data, and shows where its rows are computed. A function's
-- arguments cannot change in place: explain and its implementation are dropped by their 0.7.0 signatures and
-- created as in pgad--0.8.0.sql, with the same privileges and comment. Every name is schema-qualified
-- (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.8.0'" to load this file. \quit

-- The 0.7.0 explain. A view or function of the user's that calls it by its 0.7.0 signature stops this update (the
-- DROP's dependency error) and nothing changes: drop it first and create it again after.
DROP FUNCTION pgad.explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8);
DROP FUNCTION pgad._explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8);

-- The implementations, as in pgad--0.8.0.sql: not executable by PUBLIC, reached through pgad_call.
CREATE FUNCTION pgad._explain(loss pg_catalog.text, mode pg_catalog.text, backend pg_catalog.text,
                              rows pg_catalog.int8, data pg_catalog.text)
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.explain(loss, mode, backend, rows, data)
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

REVOKE ALL ON FUNCTION
  pgad._explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8, pg_catalog.text),
  pgad._partial_sums(pg_catalog.text, pg_catalog.text, pg_catalog.text[], pg_catalog.float8[], pg_catalog.text,
                     pg_catalog.text, pg_catalog.text) FROM PUBLIC;

-- The public functions, as in pgad--0.8.0.sql.
-- Not STRICT: rows (the rows the backend is chosen for) and data (whose layout is shown) are NULL unless given.
CREATE FUNCTION pgad.explain(loss pg_catalog.text, mode pg_catalog.text DEFAULT 'reverse',
                             backend pg_catalog.text DEFAULT 'auto', rows pg_catalog.int8 DEFAULT NULL,
                             data pg_catalog.text DEFAULT NULL)
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.explain(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8,
                                 pg_catalog.text) IS
    'each stage from lambda to kernel with what it made and its time in ms: parse, differentiate, backend (the one '
    'that runs and why: auto chooses for rows rows), then that backend''s own (llvm: IR generation, optimisation, '
    'machine code; cuda: kernel source, PTX, compilation; python: none); with data, where its rows are computed '
    '(here, or on which shard server) and the bytes a round sends';

CREATE FUNCTION pgad.partial_sums(loss pg_catalog.text, data pg_catalog.text, names pg_catalog.text[],
                                  weights pg_catalog.float8[], mode pg_catalog.text DEFAULT 'reverse',
                                  backend pg_catalog.text DEFAULT 'auto', dtype pg_catalog.text DEFAULT 'float64')
RETURNS pg_catalog.float8[] LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.partial_sums(pg_catalog.text, pg_catalog.text, pg_catalog.text[], pg_catalog.float8[],
                                      pg_catalog.text, pg_catalog.text, pg_catalog.text) IS
    'a shard''s part of a sharded training: {rows, loss sum, gradient sums by names} over data at weights, the '
    'columns loaded once per REPEATABLE READ READ ONLY transaction';
