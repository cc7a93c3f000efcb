"""pgad.lang.sql against a real server: a model written as one SQL expression gives the value training used (numpy's,
from the evaluate column of rules.PRIMITIVES) for every primitive, on inputs chosen around every trap (zeros, both
signs, NaN and ±Infinity, the underflow and overflow edges of exp and power, large |x| for sigmoid and softplus);
it does so under a hostile search_path, is inlined by the planner, reads its weights back exactly, and stops with
SQLSTATE 54001 past max_chars; the scoring function that wraps it gives NULL for a NULL in any column it reads.

Adding a primitive to the lambda language means adding a row to CASES (test_cases_cover_every_primitive checks).
Tolerance: where numpy's value is finite, relative 1e-12 (the SQL computes sigmoid, softplus and power near underflow
by other formulas than numpy's, to a few ulp; 2.5e-13 at worst). Where it is not finite, the SQL may raise a data
exception (SQLSTATE class 22) instead, and nothing else. Random inputs come from np.random.default_rng(0).
"""
import math
import re

import numpy as np
import psycopg
import pytest

from conftest import Running, new_database
import pgad.lang  # noqa: F401  (binds pgad.lang)
from pgad.errors import PgadError
from pgad import limits
from pgad.lang import parse, printer, rules, sql
from pgad.models import catalog

RTOL = 1e-12
BIG = 1.7976931348623157e308
NEXT_BELOW_EXP_MIN = math.nextafter(sql.EXP_MIN, -math.inf)

# one column: every edge of every trap, and random values on three scales
_rng = np.random.default_rng(0)
_edges = [0.0, 5e-324, 1e-320, 1e-300, 1e-10, 0.25, 0.5, 0.75, 1.0, 2.0, 3.0, 10.0, 36.7, 37.5, 40.0, 100.0, 700.0,
          708.5, 709.0, 709.5, 710.0, 740.0, 745.0, -sql.EXP_MIN, -NEXT_BELOW_EXP_MIN, 745.2, 800.0, 1e5, 1e300, BIG,
          math.inf]
ONE_COLUMN = {'x': np.array([-0.0, math.nan] + _edges + [-v for v in _edges] + list(_rng.normal(0, 1, 30))
                            + list(_rng.normal(0, 30, 30)) + list(_rng.uniform(-1, 1, 20)))}
# two columns: every pair of a smaller set, and random pairs
_pair_values = [0.0, -0.0, 1e-300, -1e-300, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 2.5, -2.5, 3.0, 10.0, -10.0, 700.0,
                1074.0, 1075.0, -1075.0, 1e300, math.inf, -math.inf, math.nan]
_grid = np.array([(x, y) for x in _pair_values for y in _pair_values] + list(_rng.normal(0, 3, (40, 2))))
TWO_COLUMNS = {'x': _grid[:, 0], 'y': _grid[:, 1]}


def case(name, text, inputs, weights=None, gap=None):
    """A lambda, the column values to run it on, its weights, and gap(d): the rows where the SQL raises although
    numpy's value is finite (the gaps the module docstring names)."""
    return pytest.param(text, inputs, weights or {}, gap, id=name)


def overflow(d):
    """Rows where 1.5·d.x overflows."""
    return np.isfinite(d['x']) & ~np.isfinite(1.5 * d['x'])


X, XY = ONE_COLUMN, TWO_COLUMNS
CASES = [
    # arithmetic
    case('add', 'λ(d, w) d.x + d.y', XY),
    case('sub', 'λ(d, w) d.x - d.y', XY),
    # the gaps: nonzero operands whose product or quotient rounds to 0 (1e-300 * 1e-300)
    case('mul', 'λ(d, w) d.x * d.y', XY, gap=lambda d: (d['x'] * d['y'] == 0) & (d['x'] != 0) & (d['y'] != 0)),
    case('div', 'λ(d, w) d.x / d.y', XY, gap=lambda d: (d['x'] / d['y'] == 0) & (d['x'] != 0) & np.isfinite(d['y'])),
    case('neg', 'λ(d, w) -d.x', X),
    # fmod's exact remainder of the doubles (1e300 % 3, 5e-324 % 0.75, 0.3 % 0.1), which numeric's % is not
    case('mod', 'λ(d, w) d.x % d.y', XY),
    case('mod-by-literal', 'λ(d, w) d.x % 0.75', X),
    case('mod-of-literal', 'λ(d, w) 1e300 % d.x', X),
    case('mod-of-zero', 'λ(d, w) 0 % d.x', X),
    case('mod-by-infinity', "λ(d, w) d.x % 'Infinity'", X),
    case('mod-by-a-weight', 'λ(d, w) d.x % w.a', X, {'a': 0.1}),
    case('mod-of-a-tiny-weight', 'λ(d, w) w.a % d.x', X, {'a': 5e-324}),
    # the gap: PostgreSQL's power refuses (-Infinity)^y for y not an integer (numpy: 0 for y < 0)
    case('pow', 'λ(d, w) d.x ^ d.y', XY, gap=lambda d: (d['x'] == -math.inf) & (np.floor(d['y']) != d['y'])),
    case('pow-square', 'λ(d, w) d.x ^ 2', X),
    case('pow-cube', 'λ(d, w) d.x ^ 3', X),
    case('pow-root', 'λ(d, w) d.x ^ 0.5', X),
    case('pow-huge', 'λ(d, w) d.x ^ 1075', X),
    case('pow-tiny', 'λ(d, w) d.x ^ -1075', X),
    case('pow-half-base', 'λ(d, w) w.a ^ d.x', X, {'a': 0.5}),
    case('pow-negative-base', 'λ(d, w) w.a ^ d.x', X, {'a': -2.0}),
    case('pow-zero-base', 'λ(d, w) w.a ^ d.x', X, {'a': 0.0}),
    case('pow-ten-base', 'λ(d, w) 10 ^ d.x', X),
    # exponentials and logarithms
    case('exp', 'λ(d, w) exp(d.x)', X),
    case('ln', 'λ(d, w) ln(d.x)', X),
    case('log10', 'λ(d, w) log(d.x)', X),
    case('sqrt', 'λ(d, w) sqrt(d.x)', X),
    case('cbrt', 'λ(d, w) cbrt(d.x)', X),
    # sign and magnitude
    case('abs', 'λ(d, w) abs(d.x)', X),
    case('sign', 'λ(d, w) sign(d.x)', X),
    case('greatest', 'λ(d, w) greatest(d.x, d.y)', XY),
    case('least', 'λ(d, w) least(d.x, d.y)', XY),
    # trigonometric and hyperbolic
    case('sin', 'λ(d, w) sin(d.x)', X),
    case('cos', 'λ(d, w) cos(d.x)', X),
    case('tan', 'λ(d, w) tan(d.x)', X),
    case('asin', 'λ(d, w) asin(d.x)', X),
    case('acos', 'λ(d, w) acos(d.x)', X),
    case('atan', 'λ(d, w) atan(d.x)', X),
    case('atan2', 'λ(d, w) atan2(d.x, d.y)', XY),
    case('sinh', 'λ(d, w) sinh(d.x)', X),
    case('cosh', 'λ(d, w) cosh(d.x)', X),
    case('tanh', 'λ(d, w) tanh(d.x)', X),
    # machine learning
    case('sigmoid', 'λ(d, w) sigmoid(d.x)', X),
    # the gap: 1.5 * 1.8e308 overflows, an error in SQL where numpy goes on with Infinity to sigmoid's 1
    case('sigmoid-of-weights', 'λ(d, w) sigmoid(w.a*d.x + w.b)', X, {'a': 1.5, 'b': -0.25}, overflow),
    case('relu', 'λ(d, w) relu(d.x)', X),
    case('softplus', 'λ(d, w) softplus(d.x)', X),
    case('softplus-of-weights', 'λ(d, w) softplus(w.a*d.x + w.b)', X, {'a': 1.5, 'b': -0.25}, overflow),
    # conditions: an arm no row takes may be undefined (numpy computes it, PostgreSQL does not)
    case('case', 'λ(d, w) CASE WHEN d.x > 0 THEN ln(d.x) ELSE d.y END', XY),
    case('lt', 'λ(d, w) CASE WHEN d.x < d.y THEN 1 ELSE 2 END', XY),
    case('lt-literal', 'λ(d, w) CASE WHEN 1 < d.x THEN 1 ELSE 2 END', X),
    case('le', 'λ(d, w) CASE WHEN d.x <= d.y THEN 1 ELSE 2 END', XY),
    case('gt', 'λ(d, w) CASE WHEN d.x > d.y THEN 1 ELSE 2 END', XY),
    case('ge', 'λ(d, w) CASE WHEN d.x >= d.y THEN 1 ELSE 2 END', XY),
    case('ge-literal', 'λ(d, w) CASE WHEN d.x >= 1 THEN 1 ELSE 2 END', X),
    case('eq', 'λ(d, w) CASE WHEN d.x = d.y THEN 1 ELSE 2 END', XY),
    case('eq-literal', 'λ(d, w) CASE WHEN d.x = 2 THEN 1 ELSE 2 END', X),
    case('ne', 'λ(d, w) CASE WHEN d.x <> d.y THEN 1 ELSE 2 END', XY),
    case('and', 'λ(d, w) CASE WHEN d.x > 0 AND d.y > 0 THEN 1 ELSE 2 END', XY),
    case('or', 'λ(d, w) CASE WHEN d.x > 0 OR d.y > 0 THEN 1 ELSE 2 END', XY),
    case('not', 'λ(d, w) CASE WHEN NOT d.x > d.y THEN 1 ELSE 2 END', XY),
    # = and <> of booleans; a column read as a boolean: its value is the loader's 1 or 0, true where not 0
    case('iff', 'λ(d, w) CASE WHEN (d.x > 0) = (d.y > 0) THEN 1 ELSE 2 END', XY),
    case('xor', 'λ(d, w) CASE WHEN (d.x > 0) <> (d.y > 0) THEN 1 ELSE 2 END', XY),
    case('truth', 'λ(d, w) CASE WHEN d.x THEN 1 ELSE 2 END', X),
]


@pytest.fixture(scope='module')
def dbname(cluster):
    """A plain database: the expressions need nothing but PostgreSQL."""
    name = new_database(cluster, 'pgad_sql')
    yield name
    if isinstance(cluster, Running):  # a cluster that outlives the session keeps no database of it
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE {name} WITH (FORCE)')


@pytest.fixture(scope='module')
def conn(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as c:
        yield c


def reference(lam, inputs, weights):
    """numpy's value of the lambda on every row: the evaluate column of the rules table, node by node."""
    values, rows = {}, len(next(iter(inputs.values())))
    with np.errstate(all='ignore'):
        for i in lam.graph.ancestors([lam.root]):
            node = lam.graph.nodes[i]
            if node.op == 'const':
                values[i] = np.bool_(node.value) if isinstance(node.value, bool) else np.float64(node.value)
            elif node.op == 'column':
                values[i] = inputs[node.value]
            elif node.op == 'weight':
                values[i] = np.float64(weights[node.value])
            else:
                values[i] = rules.PRIMITIVES[node.op].evaluate(*[values[a] for a in node.args])
    return np.broadcast_to(values[lam.root], (rows,)).astype(np.float64)


def scoring_function(conn, lam, weights, name='f', strict=False):
    """CREATE FUNCTION pg_temp.<name>(float8, …) returning the expression, the columns in order as $1, $2, …"""
    text = sql.expression(lam, lam.root, {c: f'${k + 1}' for k, c in enumerate(lam.columns)}, weights)
    conn.execute(f'DROP FUNCTION IF EXISTS pg_temp.{name}')
    conn.execute(f"CREATE FUNCTION pg_temp.{name}({', '.join(['pg_catalog.float8'] * len(lam.columns))}) "
                 f"RETURNS pg_catalog.float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE {'STRICT' if strict else ''} "
                 f"AS $body$ SELECT {text} $body$")
    return text


def call(conn, lam, inputs, rows, name='f'):
    """pg_catalog.float8 values of pg_temp.<name> on the given rows of inputs, in one query."""
    arrays = [inputs[c][rows].tolist() for c in lam.columns]
    names = [f'c{k}' for k in range(len(arrays))]
    return np.array([v for v, in conn.execute(
        f"SELECT pg_temp.{name}({', '.join(names)}) FROM unnest({', '.join(['%s::pg_catalog.float8[]'] * len(arrays))})"
        f" WITH ORDINALITY AS t({', '.join(names)}, n) ORDER BY n", arrays)], dtype=np.float64)


def check(conn, lam, inputs, weights, gap=None, name='f'):
    """The SQL against numpy on every row: the same value where numpy's is finite, else a data exception or any value;
    a data exception on the gap rows."""
    expected = reference(lam, inputs, weights)
    rows = len(expected)
    with np.errstate(all='ignore'):
        raises = np.zeros(rows, bool) if gap is None else np.asarray(gap(inputs)) & np.isfinite(expected)
    finite = np.flatnonzero(np.isfinite(expected) & ~raises)
    try:
        got = call(conn, lam, inputs, finite, name)
    except psycopg.Error:
        for i in finite:  # which row
            try:
                call(conn, lam, inputs, [i], name)
            except psycopg.Error as error:
                where = tuple(float(inputs[c][i]) for c in lam.columns)
                raise AssertionError(f'{where}: numpy gives {expected[i]!r}, the SQL raises {error!r}') from None
        raise
    wrong = [(tuple(float(inputs[c][i]) for c in lam.columns), float(expected[i]), float(g))
             for i, g in zip(finite, got) if not np.isclose(g, expected[i], rtol=RTOL, atol=0)]
    assert not wrong, f'(inputs, numpy, SQL) differ beyond relative {RTOL}: {wrong[:10]}'
    for i in np.flatnonzero(~np.isfinite(expected) | raises):
        try:
            call(conn, lam, inputs, [i], name)
        except psycopg.DataError as error:  # allowed where numpy's value is not finite, expected on a gap row
            assert error.sqlstate.startswith('22'), error  # a data exception
            continue
        assert not raises[i], f'{tuple(float(inputs[c][i]) for c in lam.columns)} should raise (a documented gap)'


def ops_of(text):
    lam = parse(text)
    return {lam.graph.nodes[i].op for i in lam.graph.ancestors([lam.root])}


def test_cases_cover_every_primitive():
    covered = set().union(*(ops_of(p.values[0]) for p in CASES))
    assert set(rules.PRIMITIVES) - covered == set(), 'every primitive needs a row in CASES'
    assert set(rules.PRIMITIVES) == set(sql.SQL), 'every primitive needs a rule in sql.SQL'


@pytest.mark.parametrize('text, inputs, weights, gap', CASES)
def test_sql_gives_numpys_value(conn, text, inputs, weights, gap):
    lam = parse(text)
    scoring_function(conn, lam, weights)
    check(conn, lam, inputs, weights, gap)


def test_exp_underflows_where_the_module_says(conn):
    """sql.EXP_MIN is the least double whose exp is not 0, on this server as in numpy."""
    assert conn.execute(f"SELECT pg_catalog.exp({sql.literal(sql.EXP_MIN)})").fetchone()[0] == 5e-324
    with pytest.raises(psycopg.errors.NumericValueOutOfRange, match='underflow'):
        conn.execute(f"SELECT pg_catalog.exp({sql.literal(NEXT_BELOW_EXP_MIN)})")
    assert np.exp(sql.EXP_MIN) == 5e-324 and np.exp(NEXT_BELOW_EXP_MIN) == 0


def test_unguarded_forms_do_fail_on_the_traps(conn):
    """The traps are real: written plainly, each of these raises where numpy's value is finite."""
    for plain in ['pg_catalog.exp(-800::pg_catalog.float8)',                            # numpy 0
                  'pg_catalog.power(0.5::pg_catalog.float8, 1075::pg_catalog.float8)',  # numpy 0
                  'CASE WHEN x > 0 THEN x ELSE pg_catalog.ln(0::pg_catalog.float8) END']:  # folded when planned
        with pytest.raises(psycopg.DataError) as caught:
            conn.execute(f'SELECT {plain} FROM generate_series(1, 1) AS x')
        assert caught.value.sqlstate.startswith('22')
    # and PostgreSQL ranks NaN above every number, where numpy's comparisons with NaN are false
    assert conn.execute("SELECT 'NaN'::pg_catalog.float8 > 1::pg_catalog.float8").fetchone()[0] is True


EVIL = '''
CREATE SCHEMA evil;
CREATE FUNCTION evil.one(pg_catalog.float8) RETURNS pg_catalog.float8 LANGUAGE sql IMMUTABLE
  AS 'SELECT 42::pg_catalog.float8';
CREATE FUNCTION evil.two(pg_catalog.float8, pg_catalog.float8) RETURNS pg_catalog.float8 LANGUAGE sql IMMUTABLE
  AS 'SELECT 42::pg_catalog.float8';
CREATE FUNCTION evil.yes(pg_catalog.float8, pg_catalog.float8) RETURNS pg_catalog.bool LANGUAGE sql IMMUTABLE
  AS 'SELECT true';
CREATE FUNCTION evil.no(pg_catalog.float8, pg_catalog.float8) RETURNS pg_catalog.bool LANGUAGE sql IMMUTABLE
  AS 'SELECT false';
CREATE OPERATOR evil.- (RIGHTARG = pg_catalog.float8, FUNCTION = evil.one);
CREATE DOMAIN evil.float8 AS pg_catalog.float8 CHECK (VALUE = 42);
'''
ARITY = {'power': 2, 'atan2': 2}


def shadow(functions, operators):
    """evil's version of every function and operator the expressions name, each returning nonsense."""
    statements = [EVIL]
    for name in sorted(functions):
        args = ', '.join(['pg_catalog.float8'] * ARITY.get(name, 1))
        statements.append(f"CREATE FUNCTION evil.{name}({args}) RETURNS pg_catalog.float8 LANGUAGE sql IMMUTABLE "
                          f"AS 'SELECT 42::pg_catalog.float8';")
    for symbol in sorted(operators):
        function = 'two' if symbol in '+-*/' else 'yes' if symbol in ('<', '<=', '<>') else 'no'
        statements.append(f'CREATE OPERATOR evil.{symbol} (LEFTARG = pg_catalog.float8, RIGHTARG = pg_catalog.float8, '
                          f'FUNCTION = evil.{function});')
    return '\n'.join(statements)


def test_hostile_search_path_changes_nothing(cluster, dbname):
    """With evil's functions, operators and a float8 domain found before pg_catalog's, every case still gives numpy's
    value; the same text with its names unqualified does not (so the shadows would bite)."""
    texts = {}
    for p in CASES:
        lam = parse(p.values[0])
        texts[p.id] = sql.expression(lam, lam.root, {c: f'${k + 1}' for k, c in enumerate(lam.columns)}, p.values[2])
    functions = set(re.findall(r'pg_catalog\.(\w+)\(', ' '.join(texts.values())))
    operators = set(re.findall(r'OPERATOR\(pg_catalog\.([^)]+)\)', ' '.join(texts.values())))
    assert {'exp', 'ln', 'power', 'atanh'} <= functions and {'+', '*', '<', '<>', '='} <= operators
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as conn:
        conn.execute(shadow(functions, operators))
        conn.execute('SET search_path = evil, pg_catalog')
        assert conn.execute('SELECT exp(1::pg_catalog.float8) + 1::pg_catalog.float8').fetchone()[0] == 42
        for p in CASES:
            text, inputs, weights, gap = p.values
            lam = parse(text)
            scoring_function(conn, lam, weights)
            check(conn, lam, inputs, weights, gap)
            plain = re.sub(r'OPERATOR\(pg_catalog\.([^)]+)\)', r'\1', texts[p.id]).replace('pg_catalog.', '')
            conn.execute('DROP FUNCTION IF EXISTS pg_temp.plain')
            try:
                conn.execute(f"CREATE FUNCTION pg_temp.plain({', '.join(['pg_catalog.float8'] * len(lam.columns))}) "
                             f"RETURNS pg_catalog.float8 LANGUAGE sql IMMUTABLE AS $body$ SELECT {plain} $body$")
                rows = np.arange(len(inputs['x']))
                same = np.array_equal(call(conn, lam, inputs, rows, 'plain'), call(conn, lam, inputs, rows),
                                      equal_nan=True)
            except psycopg.Error:
                same = False
            assert same == ('pg_catalog.' not in texts[p.id]), p.id  # only greatest and least name nothing
        conn.execute('DROP SCHEMA evil CASCADE')


# A NULL in, NULL out (issue 34, item 5c): training skips a row with a NULL in a column the model reads, so its scoring
# function gives NULL there; GREATEST, LEAST, CASE, AND and OR are not strict, and relu(NULL) was 0.
NULL_SWALLOWING = {'greatest', 'least', 'relu', 'case', 'and', 'or', 'softplus', 'sigmoid', 'exp', 'pow', 'mod'}


@pytest.mark.parametrize('text, inputs, weights, gap', CASES)
def test_a_null_column_gives_null(conn, text, inputs, weights, gap):
    """The body pgad.train gives a model's scoring function (catalog.Scoring), for every primitive, with each column
    NULL in turn and the others a number that every primitive takes (0.5; true for a boolean)."""
    lam = parse(text)
    scoring = catalog.Scoring('f', lam, max_chars=printer.budget(limits.DEFAULT))
    conn.execute('DROP FUNCTION IF EXISTS pg_temp.scored')
    conn.execute(f"CREATE FUNCTION pg_temp.scored({', '.join(t for _, t in scoring.params)}) RETURNS "
                 f"pg_catalog.float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN {scoring.body([(None, weights)])}")
    names = [f'c{k}' for k in range(len(scoring.params))]
    for null in range(len(scoring.params)):  # values from a table, not literals the planner folds
        arrays = [[None if k == null else True if kind == 'pg_catalog.bool' else 0.5]
                  for k, (_, kind) in enumerate(scoring.params)]
        got = conn.execute(f"SELECT pg_temp.scored({', '.join(names)}) FROM unnest("
                           f"{', '.join(f'%s::{kind}[]' for _, kind in scoring.params)}) AS t({', '.join(names)})",
                           arrays).fetchone()[0]
        assert got is None, f'{scoring.params[null][0]} NULL gives {got}'


def test_the_null_rows_cover_the_primitives_that_swallow_nulls():
    covered = set().union(*(ops_of(p.values[0]) for p in CASES))
    assert NULL_SWALLOWING <= covered and NULL_SWALLOWING <= set(rules.PRIMITIVES)


def test_scoring_function_is_inlined(conn):
    """The planner writes the expression into the query in place of the call, for every case: no call per row."""
    def plan(name, columns):
        args = ', '.join(f'(x + {k})::pg_catalog.float8' for k in range(columns))
        return '\n'.join(r for r, in conn.execute(
            f'EXPLAIN (VERBOSE, COSTS OFF) SELECT pg_temp.{name}({args}) FROM generate_series(1, 3) AS x'))
    called = re.compile(r'\bf\(')
    lam = parse('λ(d, w) sigmoid(w.a*d.x)')
    scoring_function(conn, lam, {'a': 2.0}, strict=True)  # STRICT, and CASE is not strict: a call, not inlined
    assert called.search(plan('f', 1))
    for p in CASES:
        lam = parse(p.values[0])
        scoring_function(conn, lam, p.values[2])
        shown = plan('f', len(lam.columns))
        assert not called.search(shown) and '::double precision' in shown, (p.id, shown)


@pytest.mark.parametrize('value', [0.1 + 0.2, 1e-300, BIG, -BIG, 5e-324, -2.5e-310, 1 / 3, math.pi, -0.0])
def test_weights_read_back_exactly(conn, value):
    lam = parse('λ(d, w) w.a * d.x')
    text = scoring_function(conn, lam, {'a': value})
    assert f"'{value!r}'::pg_catalog.float8" in text
    got = conn.execute('SELECT pg_temp.f(1)').fetchone()[0]
    assert got == value and math.copysign(1, got) == math.copysign(1, value)  # exact, sign of zero included


@pytest.mark.parametrize('value, literal', [(math.inf, "'Infinity'"), (-math.inf, "'-Infinity'"), (math.nan, "'NaN'")])
def test_weights_that_are_not_finite(conn, value, literal):
    lam = parse('λ(d, w) d.x + w.a')
    assert f'{literal}::pg_catalog.float8' in scoring_function(conn, lam, {'a': value})
    got = conn.execute('SELECT pg_temp.f(1)').fetchone()[0]
    assert got == value or math.isnan(got) and math.isnan(value)


def test_subexpressions_of_weights_are_computed_by_numpy(conn):
    """exp(w.a) is written as numpy's value; ln(w.a) with w.a = 0 in an arm no row takes does not fail at plan time."""
    lam = parse('λ(d, w) d.x * exp(w.a)')
    text = scoring_function(conn, lam, {'a': 0.7})
    assert 'exp' not in text and conn.execute('SELECT pg_temp.f(3)').fetchone()[0] == 3 * np.exp(0.7)
    lam = parse('λ(d, w) CASE WHEN d.x > 0 THEN d.x ELSE ln(w.a) END')
    scoring_function(conn, lam, {'a': 0.0})
    assert conn.execute('SELECT pg_temp.f(2)').fetchone()[0] == 2
    assert conn.execute("SELECT pg_temp.f(-2)").fetchone()[0] == -math.inf


def test_names_never_reach_the_sql():
    lam = parse('λ(d, w) d."x$$; DROP TABLE t; --" * w."a$$ --" + sigmoid(d."x$$; DROP TABLE t; --")')
    text = sql.expression(lam, lam.root, {'x$$; DROP TABLE t; --': '$1'}, {'a$$ --': 2.0})
    assert '$$' not in text and '--' not in text and 'DROP' not in text and '$1' in text


def test_missing_column_or_weight_is_an_error():
    lam = parse('λ(d, w) w.a * d.x')
    with pytest.raises(PgadError) as caught:
        sql.expression(lam, lam.root, {}, {'a': 1.0})
    assert caught.value.sqlstate == '42703' and '"x"' in caught.value.message
    with pytest.raises(PgadError) as caught:
        sql.expression(lam, lam.root, {'x': '$1'}, {})
    assert caught.value.sqlstate == '42704' and '"a"' in caught.value.message


def test_too_long_an_expression_is_54001():
    """Nested sigmoids repeat their argument: the text grows fourfold a level, the DAG by a few nodes."""
    lam = parse('λ(d, w) ' + 'sigmoid(' * 6 + 'd.x' + ')' * 6)
    text = sql.expression(lam, lam.root, {'x': '$1'}, {}, max_chars=10 ** 9)
    assert sql.expression(lam, lam.root, {'x': '$1'}, {}, max_chars=len(text)) == text
    with pytest.raises(PgadError) as caught:
        sql.expression(lam, lam.root, {'x': '$1'}, {}, max_chars=len(text) - 1)
    assert caught.value.sqlstate == '54001'
    assert caught.value.message == f'expression is too long to write as SQL: more than {len(text) - 1} characters'
    deep = parse('λ(d, w) ' + 'sigmoid(' * 16 + 'd.x' + ')' * 16)  # 4^16 characters: past the default budget
    with pytest.raises(PgadError) as caught:
        sql.expression(deep, deep.root, {'x': '$1'}, {})
    assert caught.value.sqlstate == '54001'


def test_a_long_chain(conn):
    """A model of 2000 terms over 50 columns: written without recursion, and PostgreSQL gives numpy's value."""
    text = 'λ(d, w) ' + ' + '.join(f'w.a{k}*sigmoid(d.x{k % 50})' for k in range(2000))
    lam, rng = parse(text), np.random.default_rng(1)
    weights = {name: float(v) for name, v in zip(lam.weights, rng.normal(0, 1, len(lam.weights)))}
    inputs = {name: rng.normal(0, 3, 20) for name in lam.columns}
    scoring_function(conn, lam, weights)
    check(conn, lam, inputs, weights)
