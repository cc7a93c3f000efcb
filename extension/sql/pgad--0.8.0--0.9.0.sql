-- pgad 0.8.0 → 0.9.0: vectors and matrices in the lambda. The weights jsonb may hold vectors and matrices and a
-- float8[] column is a vector (the functions keep their signatures: the lambda language and the jsonb grew);
-- pgad.init_weights is new. Every name is schema-qualified (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.9.0'" to load this file. \quit

-- The implementation, as in pgad--0.9.0.sql: not executable by PUBLIC, reached through pgad_call.
CREATE FUNCTION pgad._init_weights(shapes pg_catalog.jsonb, scheme pg_catalog.text, seed pg_catalog.int4)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u IMMUTABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.init_weights(shapes, scheme, seed)
$$;

REVOKE ALL ON FUNCTION pgad._init_weights(pg_catalog.jsonb, pg_catalog.text, pg_catalog.int4) FROM PUBLIC;

-- The public function, as in pgad--0.9.0.sql.
CREATE FUNCTION pgad.init_weights(shapes pg_catalog.jsonb, scheme pg_catalog.text DEFAULT 'glorot',
                                  seed pg_catalog.int4 DEFAULT 0)
RETURNS pg_catalog.jsonb LANGUAGE C IMMUTABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.init_weights(pg_catalog.jsonb, pg_catalog.text, pg_catalog.int4) IS
    'starting weights of the shapes {"w1": [20, 4], "b1": [20]}: matrices at random by scheme (glorot, he or '
    'zeros) from seed, vectors and numbers 0; the same for the same arguments';
