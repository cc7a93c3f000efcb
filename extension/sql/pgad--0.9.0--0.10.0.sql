-- pgad 0.9.0 → 0.10.0: trust, again (issue 27). pgad.models is written by pgad alone: PUBLIC loses INSERT, UPDATE
-- and DELETE and row level security goes with its policies; pgad.train and pgad.drop_model write through
-- pgad._write_models, a SECURITY DEFINER function of the extension's owner, which checks that a model's name belongs to
-- the role that trained it first. The scoring functions pgad.train creates from now on take a domain group column as
-- its base type and call nothing another role owns (pgad/catalog.py); a model trained before keeps its function until
-- it is trained again. Every name is schema-qualified (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.10.0'" to load this file. \quit

DROP POLICY models_write ON pgad.models;
DROP POLICY models_read ON pgad.models;
ALTER TABLE pgad.models DISABLE ROW LEVEL SECURITY;
REVOKE INSERT, UPDATE, DELETE ON pgad.models FROM PUBLIC;

-- The one writer of pgad.models: pgad.train and pgad.drop_model (pgad/catalog.py) leave the rows to write, and the
-- role that called them, in the backend's Python, and call this at once; it runs as the extension's owner, checks
-- again that the name is free or the caller's (a name belongs to the role that trained it first; a superuser may
-- replace or drop anyone's) and writes. It takes no argument, so a direct call has nothing to write and is refused.
CREATE FUNCTION pgad._write_models() RETURNS SETOF pgad.models LANGUAGE plpython3u VOLATILE STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import catalog
return catalog.write()
$$;
REVOKE ALL ON FUNCTION pgad._write_models() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgad._write_models() TO PUBLIC;  -- pgad's Python calls it as the caller; it checks itself
