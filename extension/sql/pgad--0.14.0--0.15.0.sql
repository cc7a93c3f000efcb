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

-- A softmax model's probability and class functions (pgad/models/catalog.py, EXTRAS) call these on the logits: a SQL
-- function whose body has a subquery is not inlined, so the model's functions stay one inlined expression around a
-- call of them. IMMUTABLE, PARALLEL SAFE and STRICT; every operator and function pg_catalog's, so that no search_path
-- reaches them (and no SET clause costs each call its save and restore).
CREATE FUNCTION pgad._softmax(logits pg_catalog.float8[])
RETURNS pg_catalog.float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
  v pg_catalog.float8;
  m pg_catalog.float8 := '-Infinity';
  total pg_catalog.float8 := 0;
  out pg_catalog.float8[] := '{}';
BEGIN
  FOREACH v IN ARRAY logits LOOP  -- the greatest first: exp(v - m) neither overflows nor all underflows
    IF v OPERATOR(pg_catalog.>) m THEN m := v; END IF;
  END LOOP;
  FOREACH v IN ARRAY logits LOOP
    total := total OPERATOR(pg_catalog.+) pg_catalog.exp(v OPERATOR(pg_catalog.-) m);
  END LOOP;
  FOREACH v IN ARRAY logits LOOP
    out := out OPERATOR(pg_catalog.||) (pg_catalog.exp(v OPERATOR(pg_catalog.-) m) OPERATOR(pg_catalog./) total);
  END LOOP;
  RETURN out;
END
$$;
COMMENT ON FUNCTION pgad._softmax(pg_catalog.float8[]) IS
    'the softmax of a vector of logits, exp(v - max) / sum(exp(v - max)): a softmax model''s probabilities';

CREATE FUNCTION pgad._argmax(logits pg_catalog.float8[])
RETURNS pg_catalog.int4 LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
  v pg_catalog.float8;
  k pg_catalog.int4 := 0;
  best pg_catalog.int4;
  m pg_catalog.float8;
BEGIN
  FOREACH v IN ARRAY logits LOOP  -- the first of the greatest, as numpy's argmax
    k := k OPERATOR(pg_catalog.+) 1;
    IF best IS NULL OR v OPERATOR(pg_catalog.>) m THEN best := k; m := v; END IF;
  END LOOP;
  RETURN best;
END
$$;
COMMENT ON FUNCTION pgad._argmax(pg_catalog.float8[]) IS
    'the position (from 1) of the greatest element of a vector, the first on a tie: a softmax model''s class';

-- ---------------------------------------------------------------------------------------------------------------
-- §2 explanations (issue 36)
-- ---------------------------------------------------------------------------------------------------------------

-- pgad.importance: each feature's mean |contribution| (the integrated gradients of <name>_explain) and mean
-- contribution to a stored model's predictions on any data, per group and element of a vector prediction, and its
-- permutation importance where asked (pgad/models/importance.py). Not STRICT: seed is NULL unless given.
CREATE FUNCTION pgad._importance(name pg_catalog.text, data pg_catalog.text, permutation pg_catalog.bool,
                                 seed pg_catalog.int8)
RETURNS TABLE (group_key pg_catalog.jsonb, output pg_catalog.text, feature pg_catalog.text,
               mean_abs_contribution pg_catalog.float8, mean_contribution pg_catalog.float8,
               permutation_importance pg_catalog.float8)
LANGUAGE plpython3u STABLE AS $$
import sys
if '@PGAD_SITE_PACKAGES@' not in sys.path:
    sys.path.insert(0, '@PGAD_SITE_PACKAGES@')
from pgad import api
return api.importance(name, data, permutation, seed)
$$;
REVOKE ALL ON FUNCTION pgad._importance(pg_catalog.text, pg_catalog.text, pg_catalog.bool, pg_catalog.int8)
    FROM PUBLIC;

CREATE FUNCTION pgad.importance(name pg_catalog.text, data pg_catalog.text,
                                permutation pg_catalog.bool DEFAULT false, seed pg_catalog.int8 DEFAULT NULL)
RETURNS TABLE (group_key pg_catalog.jsonb, output pg_catalog.text, feature pg_catalog.text,
               mean_abs_contribution pg_catalog.float8, mean_contribution pg_catalog.float8,
               permutation_importance pg_catalog.float8)
LANGUAGE C STABLE AS 'MODULE_PATHNAME', 'pgad_call';
COMMENT ON FUNCTION pgad.importance(pg_catalog.text, pg_catalog.text, pg_catalog.bool, pg_catalog.int8) IS
    'each feature''s mean absolute and mean contribution to model name''s predictions on the data (the integrated '
    'gradients of its _explain function), per group and output, and with permutation the rise of the mean loss '
    'when the feature is shuffled';
