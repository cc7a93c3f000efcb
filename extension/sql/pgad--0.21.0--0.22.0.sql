-- pgad 0.21.0 → 0.22.0: weights at scale (issue 48). One source of the install script
-- (extension/sql/pgad.sql): tests/test_upgrade.py checks that this path gives its catalog.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.22.0'" to load this file. \quit

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
