-- pgad 0.17.0 → 0.18.0: trust, fourth round (issue 45). One source of the install script (extension/sql/pgad.sql):
-- tests/test_upgrade.py checks that this path gives its catalog.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.18.0'" to load this file. \quit

-- §read_from (issue 45): read_from records the relations the call read as the executor checked them
-- (extension/pgad.c, part 7): a view, not what it reads as its owner.
COMMENT ON COLUMN pgad.model_versions.read_from IS
    'the relations the training read as PostgreSQL checked them (a view, not what it reads as its owner; what a '
    'function reads); NULL: not recorded (before 0.13.0)';

-- §squat: names another role can squat (issue 45). A new model's name holds no '@' (pgad/models/catalog.py,
-- check_new); a version's own functions take names no function has, chosen by pgad._version_function_name and
-- recorded in the version's rows (functions), so that no role's function blocks a training, a deployment or this
-- update.
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
    IF NOT candidate OPERATOR(pg_catalog.=) ANY (taken)
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
ALTER TABLE pgad.model_versions ADD COLUMN functions pg_catalog.jsonb NOT NULL DEFAULT '{}';
ALTER TABLE pgad.model_versions ALTER COLUMN functions DROP DEFAULT;
CREATE INDEX model_versions_functions ON pgad.model_versions USING gin (functions);  -- the names recorded (issue 45)
CREATE OR REPLACE VIEW pgad.models WITH (security_invoker = true) AS
SELECT v.* FROM pgad.model_versions AS v WHERE v.deployed;
-- Each version's own functions as 0.17.0 named them ("name@3", "name_explain@3": of the arguments its row records,
-- owned by the role that trained it) are recorded. A deployed version that has none (a model of 0.16.0 whose
-- "name@1" a function had already, or whose name passed 61 bytes) gets copies of its deployed functions, as the
-- update to 0.17.0 makes them, under names of their own.
DO $$
DECLARE
  v pg_catalog.record;
  f pg_catalog.record;
  arguments pg_catalog.text;
  own pg_catalog.jsonb;
  copy pg_catalog.text;
  scoring pg_catalog.regprocedure;
  digits pg_catalog.text := pg_catalog.current_setting('extra_float_digits');
BEGIN
  PERFORM pg_catalog.set_config('extra_float_digits', '3', true);
  FOR v IN SELECT DISTINCT m.name, m.version, m.scoring_function, m.trained_by, m.deployed
           FROM pgad.model_versions AS m ORDER BY m.name, m.version LOOP
    own := '{}';
    arguments := NULL;
    IF pg_catalog.starts_with(v.scoring_function, 'pgad_models.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(v.name)
                              OPERATOR(pg_catalog.||) '(') THEN
      arguments := pg_catalog.substr(v.scoring_function, pg_catalog.length('pgad_models.' OPERATOR(pg_catalog.||)
                                     pg_catalog.quote_ident(v.name)) OPERATOR(pg_catalog.+) 1);
    END IF;
    FOR f IN SELECT suffix, CASE WHEN suffix OPERATOR(pg_catalog.=) '' THEN v.name
                                 ELSE v.name OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) suffix END
                            OPERATOR(pg_catalog.||) '@' OPERATOR(pg_catalog.||) v.version AS proname
             FROM pg_catalog.unnest(ARRAY['', 'probability', 'class', 'mean', 'explain']) AS suffix
             WHERE arguments IS NOT NULL LOOP
      CONTINUE WHEN pg_catalog.octet_length(f.proname) OPERATOR(pg_catalog.>) 63;  -- PostgreSQL would cut it
      BEGIN
        scoring := pg_catalog.to_regprocedure('pgad_models.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(f.proname)
                                              OPERATOR(pg_catalog.||) arguments);
      EXCEPTION WHEN OTHERS THEN  -- a row written by hand may name no function, in no syntax
        scoring := NULL;
      END;
      IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                 JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) p.proowner
                 WHERE p.oid OPERATOR(pg_catalog.=) scoring AND r.rolname OPERATOR(pg_catalog.=) v.trained_by) THEN
        own := own OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(f.suffix, f.proname);
      END IF;
    END LOOP;
    IF own OPERATOR(pg_catalog.=) '{}'::pg_catalog.jsonb AND v.deployed AND arguments IS NOT NULL THEN
      BEGIN
        scoring := pg_catalog.to_regprocedure(v.scoring_function);
      EXCEPTION WHEN OTHERS THEN
        scoring := NULL;
      END;
      FOR f IN
        SELECT p.oid, p.proname,
               CASE WHEN p.proname OPERATOR(pg_catalog.=) v.name THEN ''
                    ELSE pg_catalog.substr(p.proname, pg_catalog.length(v.name) OPERATOR(pg_catalog.+) 2) END AS suffix
        FROM pg_catalog.pg_proc AS s
        JOIN pg_catalog.pg_proc AS p ON p.pronamespace OPERATOR(pg_catalog.=) s.pronamespace
          AND p.proargtypes OPERATOR(pg_catalog.=) s.proargtypes AND p.proowner OPERATOR(pg_catalog.=) s.proowner
          AND (p.proname OPERATOR(pg_catalog.=) v.name OR p.proname OPERATOR(pg_catalog.=) ANY (ARRAY[
               v.name OPERATOR(pg_catalog.||) '_probability', v.name OPERATOR(pg_catalog.||) '_class',
               v.name OPERATOR(pg_catalog.||) '_mean', v.name OPERATOR(pg_catalog.||) '_explain']))
        JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) p.proowner
          AND r.rolname OPERATOR(pg_catalog.=) v.trained_by
        WHERE s.oid OPERATOR(pg_catalog.=) scoring
          AND s.pronamespace OPERATOR(pg_catalog.=) 'pgad_models'::pg_catalog.regnamespace AND p.prosqlbody IS NOT NULL
        ORDER BY p.proname
      LOOP
        copy := pgad._version_function_name(f.proname, v.version, '{}');  -- each copy is made before the next is named
        EXECUTE pg_catalog.format('CREATE FUNCTION pgad_models.%I(%s) RETURNS %s LANGUAGE sql IMMUTABLE '
                                  'PARALLEL SAFE %s', copy, pg_catalog.pg_get_function_arguments(f.oid),
                                  pg_catalog.pg_get_function_result(f.oid), pg_catalog.pg_get_function_sqlbody(f.oid));
        EXECUTE pg_catalog.format('ALTER FUNCTION pgad_models.%I(%s) OWNER TO %I', copy,
                                  pg_catalog.pg_get_function_identity_arguments(f.oid), v.trained_by);
        EXECUTE pg_catalog.format('ALTER EXTENSION pgad DROP FUNCTION pgad_models.%I(%s)', copy,
                                  pg_catalog.pg_get_function_identity_arguments(f.oid));
        own := own OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(f.suffix, copy);
      END LOOP;
    END IF;
    UPDATE pgad.model_versions AS m SET functions = own
    WHERE m.name OPERATOR(pg_catalog.=) v.name AND m.version OPERATOR(pg_catalog.=) v.version;
  END LOOP;
  PERFORM pg_catalog.set_config('extra_float_digits', digits, true);
END $$;
