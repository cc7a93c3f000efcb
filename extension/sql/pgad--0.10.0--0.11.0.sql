-- pgad 0.10.0 → 0.11.0: the model lifecycle (issue 28). pgad's Python keeps everything about a trained model in
-- pgad/models/, so the catalog's writer imports it from there. Every name is schema-qualified (docs/security.md).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.11.0'" to load this file. \quit

CREATE OR REPLACE FUNCTION pgad._write_models() RETURNS SETOF pgad.models LANGUAGE plpython3u VOLATILE STRICT
SECURITY DEFINER SET search_path TO pg_catalog, pg_temp AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad.models import catalog
return catalog.write()
$$;

-- ---------------------------------------------------------------------------------------------------------------
-- §1–2 pgad.evaluate (issue 28)
-- ---------------------------------------------------------------------------------------------------------------

-- ---------------------------------------------------------------------------------------------------------------
-- §3 pgad.hessian and pgad.summary (issue 28)
-- ---------------------------------------------------------------------------------------------------------------

-- ---------------------------------------------------------------------------------------------------------------
-- §4–5 pgad.train's new options (issue 28)
-- ---------------------------------------------------------------------------------------------------------------
