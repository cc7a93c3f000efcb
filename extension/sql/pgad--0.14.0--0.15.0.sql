-- pgad 0.14.0 → 0.15.0: many classes, and explanations from the derivatives (issue 36).
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.15.0'" to load this file. \quit

-- A 'softmax' model gets functions beside its scoring function too (pgad/models/catalog.py, EXTRAS).
DROP FUNCTION pgad._model_owners(pg_catalog.text);
CREATE FUNCTION pgad._model_owners(name pg_catalog.text)
RETURNS TABLE (owner pg_catalog.text, loss pg_catalog.text) LANGUAGE sql STABLE STRICT SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp AS $$
SELECT DISTINCT m.trained_by::pg_catalog.text,
       CASE WHEN m.loss OPERATOR(pg_catalog.=) ANY (ARRAY['logistic', 'hinge', 'poisson', 'gamma', 'softmax'])
            THEN m.loss END
FROM pgad.models AS m WHERE m.name OPERATOR(pg_catalog.=) $1
$$;
REVOKE ALL ON FUNCTION pgad._model_owners(pg_catalog.text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgad._model_owners(pg_catalog.text) TO PUBLIC;  -- pgad's Python calls it as the caller

-- ---------------------------------------------------------------------------------------------------------------
-- §1 multiclass models (issue 36)
-- ---------------------------------------------------------------------------------------------------------------

-- ---------------------------------------------------------------------------------------------------------------
-- §2 explanations (issue 36)
-- ---------------------------------------------------------------------------------------------------------------
