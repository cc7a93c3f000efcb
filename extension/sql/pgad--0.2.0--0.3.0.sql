-- pgad 0.2.0 → 0.3.0: security. The public functions become the C function pgad_call (extension/pgad.c), which
-- calls the PL/Python implementations; those become STRICT and not executable by PUBLIC. pgad._boot and pgad._raise
-- go: each implementation puts pgad's environment on sys.path itself, and pgad_call reports errors plainly.
-- Every name is schema-qualified (docs/security.md). The functions keep their oids, so views that call them stay.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.3.0'" to load this file. \quit

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

-- The implementations. Each puts pgad's Python environment on sys.path (the path is written here by `make install`,
-- never taken from a setting) and calls pgad.api. Not executable by PUBLIC: they are reached through pgad_call.
CREATE OR REPLACE FUNCTION pgad._loss(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb)
RETURNS pg_catalog.float8 LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.loss(loss, data, weights)
$$;

CREATE OR REPLACE FUNCTION pgad._gradient(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                          mode pg_catalog.text, backend pg_catalog.text)
RETURNS pg_catalog.jsonb LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient(loss, data, weights, mode, backend)
$$;

CREATE OR REPLACE FUNCTION pgad._gradient_descent(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                                  learning_rate pg_catalog.float8, iterations pg_catalog.int4,
                                                  mode pg_catalog.text, backend pg_catalog.text)
RETURNS pgad.fit LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.gradient_descent(loss, data, weights, learning_rate, iterations, mode, backend)
$$;

CREATE OR REPLACE FUNCTION pgad._derivatives(loss pg_catalog.text)
RETURNS TABLE (weight pg_catalog.text, derivative pg_catalog.text) LANGUAGE plpython3u IMMUTABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.derivatives(loss)
$$;

CREATE OR REPLACE FUNCTION pgad._explain(loss pg_catalog.text, mode pg_catalog.text)
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE plpython3u STABLE STRICT AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.explain(loss, mode)
$$;

REVOKE ALL ON FUNCTION pgad._loss(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb),
  pgad._gradient(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.text),
  pgad._gradient_descent(pg_catalog.text, pg_catalog.text, pg_catalog.jsonb, pg_catalog.float8, pg_catalog.int4,
                         pg_catalog.text, pg_catalog.text),
  pgad._derivatives(pg_catalog.text), pgad._explain(pg_catalog.text, pg_catalog.text) FROM PUBLIC;

-- The public functions: SECURITY INVOKER (the data query runs with the caller's privileges), STABLE (in the
-- caller's snapshot), STRICT (a NULL argument gives NULL).
CREATE OR REPLACE FUNCTION pgad.loss(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb)
RETURNS pg_catalog.float8 LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';

CREATE OR REPLACE FUNCTION pgad.gradient(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                         mode pg_catalog.text DEFAULT 'reverse', backend pg_catalog.text DEFAULT 'auto')
RETURNS pg_catalog.jsonb LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';

CREATE OR REPLACE FUNCTION pgad.gradient_descent(loss pg_catalog.text, data pg_catalog.text, weights pg_catalog.jsonb,
                                                 learning_rate pg_catalog.float8 DEFAULT 0.05,
                                                 iterations pg_catalog.int4 DEFAULT 100,
                                                 mode pg_catalog.text DEFAULT 'reverse',
                                                 backend pg_catalog.text DEFAULT 'auto')
RETURNS pgad.fit LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';

CREATE OR REPLACE FUNCTION pgad.derivatives(loss pg_catalog.text)
RETURNS TABLE (weight pg_catalog.text, derivative pg_catalog.text)
LANGUAGE C IMMUTABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';

CREATE OR REPLACE FUNCTION pgad.explain(loss pg_catalog.text, mode pg_catalog.text DEFAULT 'reverse')
RETURNS TABLE (stage pg_catalog.text, detail pg_catalog.text, ms pg_catalog.float8)
LANGUAGE C STABLE STRICT AS 'MODULE_PATHNAME', 'pgad_call';

DROP FUNCTION pgad._raise(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text);
DROP FUNCTION pgad._boot();
