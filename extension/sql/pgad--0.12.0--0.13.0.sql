-- pgad 0.12.0 → 0.13.0: trust, third round (issue 34).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.13.0'" to load this file. \quit

-- A model's rows only for the roles that may read what it was trained on (pgad--0.13.0.sql says how). The models
-- trained before record no relations (read_from NULL): their role and its members read them, until trained again.
ALTER TABLE pgad.models ADD COLUMN read_from pg_catalog.regclass[];
ALTER TABLE pgad.models ENABLE ROW LEVEL SECURITY;
CREATE POLICY models_readers ON pgad.models FOR SELECT TO PUBLIC USING (
  trained_by OPERATOR(pg_catalog.=) CURRENT_USER
  OR COALESCE(pg_catalog.pg_has_role((SELECT r.oid FROM pg_catalog.pg_roles AS r
                                      WHERE r.rolname OPERATOR(pg_catalog.=) trained_by), 'USAGE'), false)
  OR (read_from IS NOT NULL AND NOT EXISTS (
        SELECT FROM pg_catalog.unnest(read_from) AS relation
        WHERE NOT COALESCE(pg_catalog.has_table_privilege(relation::pg_catalog.oid, 'SELECT')
                           AND NOT pg_catalog.row_security_active(relation::pg_catalog.oid), false))));
COMMENT ON COLUMN pgad.models.read_from IS
    'the relations the training read (a view''s and a function''s included); NULL: not recorded (before 0.13.0)';

-- The roles that trained model name's rows, and its loss where that gives it functions of its own (logistic,
-- hinge): what pgad.train and pgad.drop_model check a name against (pgad/models/catalog.py, owners), whichever
-- rows the caller may read. Nothing of the data: a model's name, its owner and its functions are in pg_proc.
CREATE FUNCTION pgad._model_owners(name pg_catalog.text)
RETURNS TABLE (owner pg_catalog.text, loss pg_catalog.text) LANGUAGE sql STABLE STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp AS $$
SELECT DISTINCT m.trained_by::pg_catalog.text,
       CASE WHEN m.loss OPERATOR(pg_catalog.=) ANY (ARRAY['logistic', 'hinge']) THEN m.loss END
FROM pgad.models AS m WHERE m.name OPERATOR(pg_catalog.=) $1
$$;
REVOKE ALL ON FUNCTION pgad._model_owners(pg_catalog.text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgad._model_owners(pg_catalog.text) TO PUBLIC;  -- pgad's Python calls it as the caller

-- The names of the models, one row each, claimed by pgad._write_models before it writes (pgad--0.13.0.sql): every
-- name in pgad.models now.
CREATE TABLE pgad.model_names (name pg_catalog.text PRIMARY KEY);
COMMENT ON TABLE pgad.model_names IS 'the names in pgad.models, one row each, claimed by the writer';
SELECT pg_catalog.pg_extension_config_dump('pgad.model_names', '');
INSERT INTO pgad.model_names (name) SELECT DISTINCT m.name FROM pgad.models AS m;

-- pgad._element(v, k, length, name): element k of an array column's value in a row of the data, which the loader's
-- pgad.pack queries read in place of (v)[k] (pgad/loader.py): an array that is not one-dimensional from index 1 of
-- length elements, the length the lambda reads, is SQLSTATE 2202E naming column name, as the native load's is (the
-- data query may give other rows than when pgad measured its arrays). STRICT: a NULL array gives NULL, as a NULL
-- element does, and pgad.pack skips the row. STABLE, not IMMUTABLE, so that the planner never folds it over a
-- constant array of a branch that gives no rows. Executable by PUBLIC: the loader's queries run as the caller.
CREATE FUNCTION pgad._element(v pg_catalog.anyarray, k pg_catalog.int4, length pg_catalog.int4, name pg_catalog.text)
RETURNS pg_catalog.anyelement LANGUAGE C STABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'pgad_element';
COMMENT ON FUNCTION pgad._element(pg_catalog.anyarray, pg_catalog.int4, pg_catalog.int4, pg_catalog.text) IS
    'element k of v, an array of the data''s column name that must be one-dimensional from 1 with length elements '
    '(pgad''s loader)';
