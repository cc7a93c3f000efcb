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

-- What 0.9.0 let through stays until someone looks: rows another role wrote under a model's name (any role could
-- INSERT), and scoring functions that take a group column as a domain (whose CHECK runs as whoever scores). Each is
-- named in a WARNING; nothing is changed or dropped here.
DO $$
DECLARE
  m record;
BEGIN
  FOR m IN SELECT d.name, pg_catalog.string_agg(DISTINCT d.trained_by::pg_catalog.text, ', ') AS roles
           FROM pgad.models AS d GROUP BY d.name
           HAVING pg_catalog.count(DISTINCT d.trained_by) OPERATOR(pg_catalog.>) 1 LOOP
    RAISE WARNING USING
      MESSAGE = pg_catalog.format('model "%s" has rows trained by several roles: %s', m.name, m.roles),
      DETAIL = 'Before pgad 0.10.0 any role could insert rows into pgad.models under any name.',
      HINT = 'A superuser should delete the rows that the model''s owner did not train, or drop the model.';
  END LOOP;
  FOR m IN SELECT DISTINCT p.proname AS name FROM pg_catalog.pg_proc AS p
           CROSS JOIN pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) AS a
           JOIN pg_catalog.pg_type AS t ON t.oid OPERATOR(pg_catalog.=) a.a
           WHERE p.pronamespace OPERATOR(pg_catalog.=) 'pgad_models'::pg_catalog.regnamespace
             AND t.typtype OPERATOR(pg_catalog.=) 'd' LOOP
    RAISE WARNING USING
      MESSAGE = pg_catalog.format('the scoring function of model "%s" takes a domain', m.name),
      DETAIL = 'Its CHECK constraints run, as whoever scores, each time it is called.',
      HINT = 'Train the model again: pgad 0.10.0 takes the domain''s base type.';
  END LOOP;
END $$;
