-- pgad 0.1.0 → 0.2.0: the llvm backend (no SQL change: backend => 'llvm', and 'auto' now picks it) and pgad.explain.
\echo Use "ALTER EXTENSION pgad UPDATE TO '0.2.0'" to load this file. \quit

CREATE FUNCTION pgad._explain(loss text, mode text) RETURNS TABLE (stage text, detail text, ms float8)
LANGUAGE plpython3u STABLE AS $$
if 'pgad' not in GD: plpy.execute('SELECT pgad._boot()')
return GD['pgad'].explain(loss, mode)
$$;
CREATE FUNCTION pgad.explain(loss text, mode text DEFAULT 'reverse') RETURNS TABLE (stage text, detail text, ms float8)
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE s text; m text; d text; h text;
BEGIN
  RETURN QUERY SELECT * FROM pgad._explain(loss, mode);
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
  PERFORM pgad._raise(s, m, d, h);
END $$;
COMMENT ON FUNCTION pgad.explain(text, text) IS
    'each stage from lambda to machine code (parse, differentiate, IR generation, optimisation, machine code) with '
    'what it made and its time in ms';
