"""Nothing pgad runs can be shadowed: another role's functions, operators and types on the caller's search_path
never run in pgad's place, whoever calls it (docs/security.md).

An unprivileged role, mallory, creates in a schema of her own (and in public, where she may create, as in databases
made before PostgreSQL 15) a function, aggregate, operator or type for every built-in name pgad's SQL uses, each
recording in a sequence (which a rollback does not undo) and a NOTICE that it ran. A superuser with mallory's
schema first on the search_path, before pg_catalog, then uses every pgad function on every path of the loader. None
of mallory's objects may run. The server tracks every statement pgad runs (pg_stat_statements, nested statements
included), and each must name its built-ins schema-qualified, so the test also covers names missing from the list.
"""
import pathlib
import re

import psycopg
import pytest

from conftest import new_database
from pgad.throwaway import Cluster

ROOT = pathlib.Path(__file__).parent.parent
LINEAR = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'

# Mallory's objects: every one calls mallory.hit, which leaves a trace and calls the built-in it stands for.
SHADOWS = r'''
CREATE SEQUENCE {s}.calls;
CREATE FUNCTION {s}.hit(what pg_catalog.text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.nextval('{s}.calls');
  RAISE NOTICE 'hijacked: % ran as %', what, current_user;
END $$;
CREATE FUNCTION {s}.float8send(pg_catalog.float8) RETURNS pg_catalog.bytea LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('float8send'); RETURN pg_catalog.float8send($1); END $$;
CREATE FUNCTION {s}.format_type(pg_catalog.oid, pg_catalog.int4) RETURNS pg_catalog.text LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('format_type'); RETURN pg_catalog.format_type($1, $2); END $$;
CREATE FUNCTION {s}.format_type(pg_catalog.oid, pg_catalog.text) RETURNS pg_catalog.text LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('format_type, a better match for NULL'); RETURN pg_catalog.format_type($1, NULL); END $$;
CREATE FUNCTION {s}.to_regclass(pg_catalog.text) RETURNS pg_catalog.regclass LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('to_regclass'); RETURN pg_catalog.to_regclass($1); END $$;
CREATE FUNCTION {s}.quote_ident(pg_catalog.text) RETURNS pg_catalog.text LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('quote_ident'); RETURN pg_catalog.quote_ident($1); END $$;
CREATE FUNCTION {s}.current_setting(pg_catalog.text) RETURNS pg_catalog.text LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('current_setting'); RETURN pg_catalog.current_setting($1); END $$;
CREATE FUNCTION {s}.current_setting(pg_catalog.text, pg_catalog.bool) RETURNS pg_catalog.text LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('current_setting'); RETURN pg_catalog.current_setting($1, $2); END $$;
CREATE FUNCTION {s}.regexp_replace(pg_catalog.text, pg_catalog.text, pg_catalog.text) RETURNS pg_catalog.text
  LANGUAGE plpgsql AS $$ BEGIN PERFORM {s}.hit('regexp_replace'); RETURN pg_catalog.regexp_replace($1, $2, $3); END $$;
CREATE FUNCTION {s}.count_step(pg_catalog.int8) RETURNS pg_catalog.int8 LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('count'); RETURN $1 OPERATOR(pg_catalog.+) 1; END $$;
CREATE AGGREGATE {s}.count(*) (SFUNC = {s}.count_step, STYPE = pg_catalog.int8, INITCOND = '0');
CREATE AGGREGATE {s}.row_number(*) (SFUNC = {s}.count_step, STYPE = pg_catalog.int8, INITCOND = '0');
CREATE FUNCTION {s}.string_agg_step(pg_catalog.bytea, pg_catalog.bytea, pg_catalog.bytea) RETURNS pg_catalog.bytea
  LANGUAGE plpgsql AS $$ BEGIN PERFORM {s}.hit('string_agg');
                            RETURN pg_catalog.byteacat(COALESCE($1, ''::pg_catalog.bytea), $2); END $$;
CREATE AGGREGATE {s}.string_agg(pg_catalog.bytea, pg_catalog.bytea) (SFUNC = {s}.string_agg_step,
                                                                       STYPE = pg_catalog.bytea);
CREATE FUNCTION {s}.concat(pg_catalog.bytea, pg_catalog.bytea) RETURNS pg_catalog.bytea LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('||'); RETURN pg_catalog.byteacat($1, $2); END $$;
CREATE OPERATOR {s}.|| (LEFTARG = pg_catalog.bytea, RIGHTARG = pg_catalog.bytea, FUNCTION = {s}.concat);
CREATE FUNCTION {s}.minus(pg_catalog.int8, pg_catalog.int4) RETURNS pg_catalog.int8 LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('-'); RETURN pg_catalog.int84mi($1, $2); END $$;
CREATE OPERATOR {s}.- (LEFTARG = pg_catalog.int8, RIGHTARG = pg_catalog.int4, FUNCTION = {s}.minus);
CREATE FUNCTION {s}.divide(pg_catalog.int8, pg_catalog.int4) RETURNS pg_catalog.int8 LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('/'); RETURN pg_catalog.int84div($1, $2); END $$;
CREATE OPERATOR {s}./ (LEFTARG = pg_catalog.int8, RIGHTARG = pg_catalog.int4, FUNCTION = {s}.divide);
CREATE FUNCTION {s}.equal(pg_catalog.oid, pg_catalog.oid) RETURNS pg_catalog.bool LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('='); RETURN pg_catalog.oideq($1, $2); END $$;
CREATE OPERATOR {s}.= (LEFTARG = pg_catalog.oid, RIGHTARG = pg_catalog.oid, FUNCTION = {s}.equal);
CREATE TYPE {s}.float8 AS (x pg_catalog.float8);
CREATE FUNCTION {s}.to_float8(pg_catalog.float8) RETURNS {s}.float8 LANGUAGE plpgsql AS
  $$ BEGIN PERFORM {s}.hit('::float8'); RETURN ROW($1); END $$;
CREATE CAST (pg_catalog.float8 AS {s}.float8) WITH FUNCTION {s}.to_float8(pg_catalog.float8);
CREATE TYPE {s}.bytea AS (x pg_catalog.int4);
CREATE TYPE {s}.int4 AS (x pg_catalog.int4);
CREATE TYPE {s}.oid AS (x pg_catalog.int4);
CREATE TYPE {s}.text AS (x pg_catalog.int4);
'''

# Every way into pgad's SQL: each public function, the loader's paths (a query, a table name, chunks, a lambda that
# reads no column, NULL rows, a text column's error, a bad name), and the settings it reads.
CALLS = [
    ("SELECT pgad.loss(%s, 'points', %s)", (LINEAR, '{"a": 1, "b": 0}')),
    ("SELECT pgad.loss(%s, 'public.points', %s)", (LINEAR, '{"a": 1, "b": 0}')),
    ("SELECT pgad.gradient(%s, 'SELECT x, y FROM points', %s, 'forward', 'python')", (LINEAR, '{"a": 1, "b": 0}')),
    ("SELECT pgad.gradient(%s, 'TABLE with_nulls', %s, 'reverse', 'llvm')", (LINEAR, '{"a": 1, "b": 0}')),
    ("SELECT * FROM pgad.gradient_descent(%s, 'points', %s, 0.01, 10)", (LINEAR, '{"a": 0, "b": 0}')),
    ("SELECT pgad.loss('λ(d, w) (w.a - 3)^2', 'points', %s)", ('{"a": 1}',)),
    ("SELECT * FROM pgad.derivatives(%s)", (LINEAR,)),
    ("SELECT stage FROM pgad.explain(%s)", (LINEAR,)),
    ("SET pgad.load_chunk_rows = 7", ()),
    ("SELECT pgad.gradient(%s, 'points', %s)", (LINEAR, '{"a": 1, "b": 0}')),
    ("SELECT pgad.loss('λ(d, w) sum(w.a * d.v)', 'vecs', %s)", ('{"a": [1, 1]}',)),  # pgad._element, in chunks
    ("RESET pgad.load_chunk_rows", ()),
    ("SELECT pgad.gradient_agg(%s, %s, p) FROM points AS p", (LINEAR, '{"a": 1, "b": 0}')),
    ("SELECT (pgad.gradient_descent_agg(%s, %s, p, '{\"iterations\": 5}')).loss FROM with_nulls AS p",
     (LINEAR, '{"a": 0, "b": 0}')),
    ("SELECT * FROM pgad.train('line', 'λ(d, w) w.a*d.x + w.b', 'squared', 'points', %s, iterations => 5)",
     ('{"a": 0, "b": 0}',)),
    ("SELECT * FROM pgad.summary('line', unconverged => 'warning')", ()),  # 5 iterations: not at the optimum
    ("SELECT * FROM pgad.evaluate('line', 'points')", ()),
    ("SELECT pgad.hessian(%s, 'points', %s)", (LINEAR, '{"a": 1, "b": 0}')),
    ("SELECT * FROM pgad.train('line', 'λ(d, w) w.a*d.x + w.b', 'λ(p, d) abs(p - d.y)', 'with_nulls', %s, "
     "optimizer => 'lbfgs', iterations => 5, group_by => 'y')", ('{"a": 0, "b": 0}',)),
    ("SELECT pgad_models.line(y, x) FROM points", ()),
    ("SELECT pgad.drop_model('line')", ()),
    ("SELECT * FROM pgad.train('flag', 'λ(d, w) w.a*d.x + w.b', 'logistic', 'flags', %s, "
     "iterations => 5, validation => 'TABLE flags')", ('{"a": 0, "b": 0}',)),
    ("SELECT * FROM pgad.evaluate('flag', 'flags')", ()),
    ("SELECT * FROM pgad.summary('flag', unconverged => 'warning')", ()),
    ("SELECT * FROM pgad.train('flag', 'λ(d, w) w.a*d.x + w.b', 'logistic', 'flags', %s, iterations => 5, "
     "group_by => 'part')",
     ('{"a": 0, "b": 0}',)),
    ("SELECT pgad.drop_model('flag')", ()),
    ("SELECT pgad.gradient('λ(d, w) (w.r[d.region] - d.y)^2', 'shops', '{\"r\": {\"1\": 2}}')", ()),
    ("SELECT * FROM pgad.train('cat', 'λ(d, w) w.r[d.region] + w.a*d.x', 'squared', 'shops', "
     "'{\"r\": {}, \"a\": 0}', iterations => 5, group_by => 'part')", ()),
    ("SELECT pgad_models.cat(part, region, x) FROM shops", ()),
    ("SELECT pgad.drop_model('cat')", ()),
    # a keyed model (issue 48): its keys, its tables and their policy, its scoring function, its recommendations
    ("SELECT * FROM pgad.train('keyed', 'λ(d, w) w.b[d.region] + dot(w.p[d.region], w.q[d.part])', 'squared', "
     "'keyed_rows', '{\"b\": {}, \"p\": {\"shape\": [2]}, "
     "\"q\": {\"shape\": [2]}}', iterations => 3)", ()),
    ("SELECT pgad_models.keyed(region, part) FROM keyed_rows", ()),
    ("SELECT * FROM pgad.recommend('keyed', '1', 1, seen => 'keyed_rows')", ()),
    ("SELECT * FROM pgad.embeddings('keyed', 'q')", ()),
    ("SELECT * FROM pgad.train('keyed', 'λ(d, w) w.b[d.mood]', 'squared', "
     "'keyed_rows', '{\"b\": {\"shape\": []}}', iterations => 1)",
     ()),
    ("SELECT pgad.drop_model('keyed')", ()),
]
FAILING = [  # the error paths, whose queries must be safe too
    ("SELECT pgad.loss('λ(d, w) d.t', 'labels', '{}')", ()),
    ("SELECT pgad.loss_agg('λ(d, w) d.t', '{}', l) FROM labels AS l", ()),
    ("SELECT pgad.loss('λ(d, w) d.x', 'no_such_table', '{}')", ()),
    ("SELECT pgad.loss('λ(d, w) d.x', 'DELETE FROM points', '{}')", ()),
    ("SELECT pgad.drop_model('no_such_model')", ()),
    ("SELECT * FROM pgad.summary('no_such_model')", ()),
    ("SELECT * FROM pgad.evaluate('no_such_model', 'points')", ()),
    ("SELECT pgad.train('x', 'λ(d, w) w.a*d.x', 'squared', 'points', '{\"a\": 0}', group_by => 'z')", ()),
]


@pytest.fixture(scope='module')
def server():
    with Cluster(server_settings={'shared_preload_libraries': 'pg_stat_statements',
                                  'pg_stat_statements.track': 'all', 'pg_stat_statements.max': '10000'}) as pg:
        yield pg


@pytest.fixture(scope='module')
def dbname(server):
    name = new_database(server, 'victim')
    with psycopg.connect(server.conninfo(name), autocommit=True) as db:
        db.execute('CREATE EXTENSION pg_stat_statements')
        db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute('CREATE TABLE points AS SELECT x::float8 AS x, (2*x + 1)::float8 AS y '
                   'FROM generate_series(1, 50) AS x')
        db.execute('CREATE TABLE with_nulls AS SELECT * FROM points UNION ALL SELECT NULL, 1')
        db.execute("CREATE TABLE labels AS SELECT 'a'::text AS t")
        db.execute('CREATE TABLE flags AS SELECT x, x::int % 3 = 0 AS y, x > 25 AS part FROM points '
                   'UNION ALL SELECT NULL, true, true')  # a boolean label, and a row it skips
        db.execute("CREATE TABLE shops AS SELECT (x::int % 3)::text AS region, x::int % 2 AS part, x, y FROM points")
        db.execute('CREATE TABLE vecs AS SELECT ARRAY[x, 1]::float8[] AS v FROM points')
        db.execute("CREATE TYPE moods AS ENUM ('calm', 'glad', 'sad')")  # an enum's keys: grouped by its equality
        db.execute("CREATE TABLE keyed_rows AS SELECT region, part::text AS part, y, "
                   "(ARRAY['sad', 'glad', 'calm'])[x::int % 3 + 1]::moods AS mood FROM shops")
        db.execute('CREATE ROLE mallory LOGIN')
        db.execute('CREATE SCHEMA mallory AUTHORIZATION mallory')
        db.execute('GRANT CREATE ON SCHEMA public TO mallory')  # as every database made before PostgreSQL 15
        db.execute('GRANT USAGE ON SCHEMA mallory TO PUBLIC')
    with psycopg.connect(server.conninfo(name, user='mallory'), autocommit=True) as mallory:
        for schema in ('mallory', 'public'):
            mallory.execute(SHADOWS.format(s=schema))
        mallory.execute('GRANT USAGE, SELECT, UPDATE ON SEQUENCE mallory.calls, public.calls TO PUBLIC')
    return name


def hijacks(db):
    """How often mallory's objects ran, by her sequences."""
    return sum(db.execute(f'SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {s}.calls').fetchone()[0]
               for s in ('mallory', 'public'))


@pytest.mark.parametrize('search_path', ['mallory, pg_catalog, public', '"$user", public'])
def test_no_shadow_runs_when_a_superuser_uses_pgad(server, dbname, search_path):
    notices = []
    with psycopg.connect(server.conninfo(dbname), autocommit=True) as db:
        db.add_notice_handler(lambda diag: notices.append(diag.message_primary))
        db.execute(f'SET search_path = {search_path}')
        assert db.execute('SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user').fetchone()[0]
        for sql, args in CALLS:
            db.execute(sql, args).fetchall() if sql.startswith('SELECT') else db.execute(sql)
        for sql, args in FAILING:
            with pytest.raises(psycopg.Error):
                db.execute(sql, args)
        db.execute('RESET search_path')
        assert [n for n in notices if 'hijacked' in n] == [] and hijacks(db) == 0


def test_the_shadows_work_when_called_unqualified(server, dbname):
    """The test's own control: with mallory's schema first, an unqualified call does run her function."""
    with psycopg.connect(server.conninfo(dbname), autocommit=True) as db:
        db.execute('SET search_path = mallory, pg_catalog')
        before = hijacks(db)
        db.execute("SELECT float8send(1::pg_catalog.float8), format_type(23, NULL), quote_ident('x'), "
                   "1::pg_catalog.float8::float8")
        db.execute("SELECT count(*), string_agg(''::pg_catalog.bytea, ''::pg_catalog.bytea) FROM (VALUES (1)) AS v")
        db.execute('RESET search_path')
        assert hijacks(db) == before + 6


# --- every statement pgad ran, and every statement of its install and upgrade scripts, names its built-ins --------
SQL_WORDS = {'SELECT', 'FROM', 'AS', 'OVER', 'IN', 'VALUES', 'AND', 'OR', 'NOT', 'EXISTS', 'JOIN', 'ON', 'WHERE',
             'LIMIT', 'GROUP', 'BY', 'ORDER', 'CASE', 'WHEN', 'THEN', 'ELSE', 'END', 'TABLE', 'WITH', 'ROW', 'ARRAY',
             'COALESCE', 'NULLIF', 'GREATEST', 'LEAST', 'USING', 'INTO', 'CHECK', 'DISTINCT', 'RETURN',
             'ANY', 'ALL', 'CONFLICT',  # OPERATOR(pg_catalog.=) ANY (…): syntax, its operator qualified
             'GIN'}  # CREATE INDEX … USING gin (…): an access method, which no schema holds


def unqualified(sql):
    """The built-ins a SQL text names without their schema: function calls, casts and operators."""
    text = re.sub(r"'(?:[^']|'')*'", "''", sql)                    # string literals
    text = re.sub(r'"(?:[^"]|"")*"', 'x', text)                    # quoted identifiers
    text = re.sub(r'--[^\n]*', '', text)                           # comments
    text = re.sub(r'OPERATOR\(pg_catalog\.[^)]+\)', ' , ', text)   # qualified operators (x OPERATOR(…) (y): no call)
    text = re.sub(r'\bSET\s+(\w+|\([^)]*\))\s*=', ' ', text)        # UPDATE's assignments: no operator
    text = re.sub(r':=|\bsecurity_invoker\s*=', ' ', text)          # PL/pgSQL's assignments, a view's option
    text = re.sub(r'\b\w+\s*=\s*(?=RETURNED_SQLSTATE|MESSAGE_TEXT|PG_EXCEPTION_)', ' ', text)  # GET DIAGNOSTICS
    text = re.sub(r'\(\s*\*\s*\)|SELECT\s+\*|\.\*', ' ', text)     # count(*), SELECT *: no operator
    text = re.sub(r'\b(ERRCODE|MESSAGE|DETAIL|HINT)\s*=', ' ', text)  # PL/pgSQL's RAISE … USING options
    text = re.sub(r'\b(SFUNC|STYPE|FINALFUNC|COMBINEFUNC|SERIALFUNC|DESERIALFUNC|PARALLEL)\s*=', ' ',
                  text)                                              # CREATE AGGREGATE's options
    text = re.sub(r'\$\d+', ' ', text)                               # parameters
    text = re.sub(r'\bWITH\s+ORDINALITY\s+AS\s+\w+\s*\(', ' ', text)     # a FROM item's alias(columns): no call
    calls = [m.group(1) for m in re.finditer(r'(?<![\w.])([A-Za-z_]\w*)\s*\(', text)
             if m.group(1).upper() not in SQL_WORDS]
    casts = ['::' + m.group(1) for m in re.finditer(r'::\s*([A-Za-z_]\w*)\b(?!\s*\.)', text)]
    return calls + casts + re.findall(r'[-+*/<>=~!@#%^&|`?]+', text)


def test_the_checker_finds_what_is_unqualified():
    assert unqualified("SELECT format_type($1, NULL) || x::float8 FROM t WHERE a = 1") == \
        ['format_type', '::float8', '||', '=']
    assert unqualified("SELECT pg_catalog.count(*) AS n, 'a = b(' AS s FROM \"f(\" WHERE x OPERATOR(pg_catalog.=) 1") \
        == []
    assert unqualified('SELECT u.k FROM pg_catalog.unnest($1) WITH ORDINALITY AS u(k, n), unnest($1) AS v(k)') == \
        ['unnest', 'v']  # an alias's columns after WITH ORDINALITY are no call; elsewhere the checker stays strict


def test_every_statement_pgad_ran_is_qualified(server, dbname):
    with psycopg.connect(server.conninfo(dbname), autocommit=True) as db:
        db.execute('SELECT pg_stat_statements_reset()')
        for sql, args in CALLS:
            db.execute(sql, args)
        for sql, args in FAILING:
            with pytest.raises(psycopg.Error):
                db.execute(sql, args)
        ran = [q for q, in db.execute('SELECT query FROM pg_stat_statements WHERE NOT toplevel').fetchall()]
    assert len(ran) >= 8  # the data's columns, the loads (settings and interrupt checks are read in C)
    assert {q: unqualified(q) for q in ran if unqualified(q)} == {}


@pytest.mark.parametrize('script', sorted(p.name for p in (ROOT / 'extension' / 'sql').glob('*.sql')))
def test_every_statement_of_the_scripts_is_qualified(script):
    parts = (ROOT / 'extension' / 'sql' / script).read_text().split('$$')
    sql = ' '.join(part for k, part in enumerate(parts) if k % 2 == 0 or not part.startswith('\nimport'))
    assert unqualified(re.sub(r'\\echo[^\n]*', '', sql)) == []


def test_pgad_data_query_keeps_the_callers_search_path(server, dbname):
    """The data query is the caller's text: its names resolve on the caller's search_path, as typed."""
    with psycopg.connect(server.conninfo(dbname), autocommit=True) as db:
        db.execute('CREATE SCHEMA elsewhere')
        db.execute('CREATE TABLE elsewhere.points AS SELECT 10::float8 AS x, 0::float8 AS y')
        db.execute('SET search_path = elsewhere, public')
        got = db.execute("SELECT pgad.loss('λ(d, w) d.x', 'points', '{}')").fetchone()[0]
        db.execute('RESET search_path')
    assert got == 10


def test_a_pgad_schema_another_role_made_first_is_refused(server):
    """Schema pgad made beforehand by another role would let that role replace pgad's functions (its owner may
    drop anything in it): CREATE EXTENSION refuses it, and changes nothing."""
    name = new_database(server, 'squatted')
    with psycopg.connect(server.conninfo(name), autocommit=True) as db:
        db.execute('DROP ROLE IF EXISTS squatter')
        db.execute('CREATE ROLE squatter LOGIN')
        db.execute(f'GRANT CREATE ON DATABASE {name} TO squatter')
        with psycopg.connect(server.conninfo(name, user='squatter'), autocommit=True) as squatter:
            squatter.execute('CREATE SCHEMA pgad')
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
            db.execute('CREATE EXTENSION pgad CASCADE')
        assert caught.value.diag.message_primary == \
            'schema "pgad" must be owned by a superuser and writable by its owner alone'
        assert caught.value.diag.message_detail == 'The schema exists already, owned by role squatter.'
        assert db.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pgad'").fetchone()[0] == 0
        db.execute('ALTER SCHEMA pgad OWNER TO postgres')
        db.execute('GRANT CREATE ON SCHEMA pgad TO squatter')
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            db.execute('CREATE EXTENSION pgad CASCADE')
        db.execute('REVOKE CREATE ON SCHEMA pgad FROM squatter')
        db.execute('CREATE EXTENSION pgad CASCADE')
        assert db.execute("SELECT pgad.loss('λ(d, w) w.a', 'SELECT 1', '{\"a\": 3}')").fetchone()[0] == 3
