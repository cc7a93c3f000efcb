"""DAG → SQL: a model as one PostgreSQL float8 expression, the body of a generated scoring function.

expression(lam, root, columns, weights, max_chars) writes node root of lam's graph as the text of an expression that
a function `LANGUAGE sql IMMUTABLE PARALLEL SAFE … AS $$ SELECT <expression> $$` returns. The planner inlines such
a function into the query that calls it (the expression is evaluated in place, with no function call per row) as
long as the function is not STRICT (CASE and GREATEST are not strict), SECURITY DEFINER or given a SET clause: so
the text runs under the caller's search_path, whatever that is.

The safety rule: nothing in the text is looked up by name on the search_path. Every operator is written
OPERATOR(pg_catalog.+), every function pg_catalog.exp(…), every number '<repr>'::pg_catalog.float8 and every truth
value TRUE or FALSE; the rest is grammar, not names: CASE WHEN … THEN … ELSE … END, GREATEST, LEAST, AND, OR, NOT.
OPERATOR(…) parses with the precedence of a user-defined operator, so every application is parenthesised. Nothing
from the lambda's text reaches the SQL: a column is written as the caller's SQL for its value (columns: {'x': '$1'}),
a weight as the literal of its value (weights), and the names themselves never appear.

The meaning is what training used, the numpy `evaluate` of rules.PRIMITIVES in float8: wherever numpy's value is
finite (or a truth value) the SQL gives the same value, to a few units in the last place (sigmoid, softplus and power
near underflow are computed by other formulas than numpy's; 2.5e-13 relative at worst, for power), but for the gaps
named below. Where numpy's value is not finite, the SQL may raise an error instead: a scoring function that fails on
a row where the model is undefined is fine. These errors stay, in SQLSTATE class 22: ln and log of 0 ("cannot take
logarithm of zero") or of a negative number; sqrt of a negative number; x / 0 ("division by zero"); power(0, y < 0)
and power(x < 0, y not an integer); asin and acos outside [-1, 1] and sin, cos, tan of ±Infinity ("input is out of
range"); and every overflow of + - * / exp power ("value out of range: overflow").

The traps, where PostgreSQL 15 raises an error (or differs) although numpy's value is finite, and how each is avoided:
- Subexpressions that read no column. The planner folds constant subexpressions when it plans the query, even in a
  CASE arm that no row takes, so ln(0) there would fail every query. Every node that reads no column (the weights,
  and all that is computed from weights and constants only) is computed here, by the table's numpy function, and
  written as the literal of its value ('Infinity' and 'NaN' included): only the work that changes per row is SQL.
- exp(x) raises "value out of range: underflow" for x < -745.13 (numpy: 0). Written CASE WHEN x >= EXP_MIN THEN
  exp(x) ELSE 0 END, EXP_MIN the least double whose exp is not 0 (glibc's and numpy's; the tests check the server's).
  PostgreSQL ranks NaN above every number, so exp(NaN) takes the first arm and is NaN, as in numpy.
- power(x, y) raises "underflow" where |x|^y rounds to 0 (0.5^1075; 0.5^1074 is 5e-324, no error). Where
  y·ln|x| < -708 (a value below the normal range; above it power never underflows) the value is written
  power(sign(x), y) · exp(y·ln|x|) with exp guarded as above, sign(x) keeping (-2)^-1075 negative and 0^y zero. The
  logarithm is of GREATEST(|x|, 5e-324) so that x = 0 does not raise, y is clamped to ±1e300 (NaN kept) so that the
  product does not overflow, and |x| = Infinity goes to power itself. Where x or y is a literal the test is a
  comparison of the other with a number computed here: x^2 tests |x| < 1.6e-154, with no logarithm per row.
- sigmoid has no built-in. numpy's 1/(1+e) or e/(1+e) with e = exp(-|x|) would have exp underflow for |x| > 745.
  Written CASE WHEN x >= -709 THEN 1/(1+exp(GREATEST(-x, -40))) ELSE exp(x) END, exp guarded: from -709 on exp(-x)
  does not overflow, and from 36.8 on the value is 1 (so -x is capped at -40); below -709, 1+e is 1 and the value is e.
- softplus has no built-in; numpy's logaddexp(0, x) is max(x, 0) + log1p(exp(-|x|)). PostgreSQL has no log1p, and
  ln(1+e) loses a small e entirely (softplus(-40) = 4.2e-18 would be 0). log1p(e) = 2·atanh(e/(2+e)), which for
  e = exp(-|x|) is 2·atanh(1/(1+2·exp(|x|))). Written CASE WHEN x >= -709 THEN GREATEST(x, 0) +
  2·atanh(1/(1+2·exp(LEAST(|x|, 709)))) ELSE exp(x) END, exp guarded: past 709 the term is below half an ulp of x;
  below -709 softplus(x) is e.
- x % y has no float8 operator in PostgreSQL (its % is numeric's), and float8 to numeric keeps 15 digits, so neither
  gives fmod's exact remainder of the doubles (1e300 % 3, 0.3 % 0.1). Written CASE WHEN |x| < |y| THEN x ELSE
  (A % B)·2^e END in numeric, A and B the operands as exact integer multiples of 2^e (each operand scaled by powers of
  two to an integer, cast through int8, then A scaled up by 2^(its place − y's) in numeric): the remainder is a
  multiple of 2^e that float8 holds, so the value is fmod's exactly. A literal operand's multiple is computed here.
- Comparisons. PostgreSQL orders NaN above every number and counts NaN = NaN; in numpy every comparison with NaN is
  false but <>. So x < y is written (x < y) AND (y <> 'NaN'), x > y as (x > y) AND (x <> 'NaN'), x <> y as
  (x <> y) OR (x = 'NaN'), the guard left out where a literal settles it.
Gaps that stay, errors where numpy's value is finite: * and / of two nonzero numbers whose result rounds to 0
(1e-200 * 1e-200, 5e-324 / 2) raise "value out of range: underflow" where numpy gives 0: guarding every product and
quotient would write both operands twice at every level of a model, for operands that are tiny themselves. An
overflow inside the model raises even where numpy carries the Infinity on to a finite value (sigmoid(2 * 1e308) is 1
in numpy). And PostgreSQL's power refuses (-Infinity)^y for y not an integer, where numpy gives 0 for y < 0.
NULL columns: CASE, GREATEST, LEAST, AND and OR are not strict, so in this expression a NULL column does not always
give NULL (relu(NULL) is 0). The scoring function that wraps it (models/catalog.py, Scoring.checked) tests its
arguments first and gives NULL where a column the model reads is NULL, as training skips such a row.

A DAG shares subexpressions, and text repeats them (the CASE forms repeat their argument too): writing stops with
SQLSTATE 54001 once a subexpression's text passes max_chars, as the printer does.
"""
import math
import re
from fractions import Fraction

import numpy as np

from .. import limits as bounds
from ..errors import PgadError
from . import printer
from .rules import PRIMITIVES

EXP_MIN = -745.1332191019411  # the least double whose exp is not 0: exp of anything below it underflows to 0
TINY = 5e-324                 # the least positive double
HUGE_EXPONENT = 1e300         # |y| past it gives the same power as ±1e300: clamped so that y·ln|x| stays finite
NORMAL_EXP = -708.0           # exp of anything at or above it is a normal double (≥ 3.3e-308 > 2.2e-308)


def literal(value):
    """A number as a float8 literal that reads back exactly (repr's shortest round trip), or a truth value."""
    if isinstance(value, (bool, np.bool_)):
        return 'TRUE' if value else 'FALSE'
    value = float(value)
    text = 'NaN' if math.isnan(value) else 'Infinity' if value == math.inf else \
        '-Infinity' if value == -math.inf else repr(value)
    return f"'{text}'::pg_catalog.float8"


ZERO, ONE, TWO, NAN, INFINITY = map(literal, (0.0, 1.0, 2.0, math.nan, math.inf))


class Sql(str):
    """The SQL text of a subexpression; value is the number (or truth value) it stands for when it reads no column."""
    value = None


def known(value):
    text = Sql(literal(value))
    text.value = value
    return text


def op(x, symbol, y):
    return f'({x} OPERATOR(pg_catalog.{symbol}) {y})'


def neg(x):
    return f'(OPERATOR(pg_catalog.-) {x})'


def fn(name, *args):
    return f'pg_catalog.{name}({", ".join(args)})'


def case(condition, then, other):
    return f'CASE WHEN {condition} THEN {then} ELSE {other} END'


def exp(x):  # NaN ranks above EXP_MIN in PostgreSQL: exp(NaN) is NaN
    return case(op(x, '>=', literal(EXP_MIN)), fn('exp', x), ZERO)


def power(x, y):
    """x^y, with the values below the normal range written as power(sign(x), y)·exp(y·ln|x|) (see the docstring).

    Where the base or the exponent is a literal, the test of y·ln|x| < NORMAL_EXP becomes a comparison of the other
    with a number computed here (x^2 tests |x| < 1.6e-154); near that number both forms are right."""
    if x.value is not None and not abs(x.value) < math.inf or y.value is not None and math.isnan(y.value):
        return fn('power', x, y)  # a base of ±Infinity or NaN, an exponent of NaN: power never underflows
    if x.value is not None:
        ln_x, sign_x = np.log(np.maximum(abs(x.value), TINY)), literal(np.sign(x.value))
        if ln_x == 0:  # ±1
            return fn('power', x, y)
        small = op(y, '>' if ln_x < 0 else '<', literal(NORMAL_EXP / ln_x))
        ln_x = literal(ln_x)
    else:
        ln_x, sign_x = fn('ln', f'GREATEST({fn("abs", x)}, {literal(TINY)})'), fn('sign', x)
    if y.value is not None:
        with np.errstate(all='ignore'):
            bound = np.exp(NORMAL_EXP / y.value)  # |x|^y < exp(NORMAL_EXP) where |x| is past it
        small = op(fn('abs', x), '<' if y.value > 0 else '>', literal(bound))
        y_clamped = literal(np.clip(y.value, -HUGE_EXPONENT, HUGE_EXPONENT))
    else:  # -GREATEST(-GREATEST(y, -c), -c): PostgreSQL's GREATEST ranks NaN highest, so NaN stays NaN
        y_clamped = neg(f'GREATEST({neg(f"GREATEST({y}, {literal(-HUGE_EXPONENT)})")}, {literal(-HUGE_EXPONENT)})')
    exponent = op(y_clamped, '*', ln_x)
    if x.value is None and y.value is None:
        small = f'({op(exponent, "<", literal(NORMAL_EXP))} AND {op(fn("abs", x), "<", INFINITY)})'
    return case(small, op(fn('power', sign_x, y), '*', exp(exponent)), fn('power', x, y))


def remainder(x, y):
    """x % y exactly as numpy's fmod gives it (see the docstring): x where |x| < |y| (x = 0, y = ±Infinity included),
    else (A % B)·2^e in numeric, the operands as exact integer multiples A, B of 2^e, e a power of two that y is a
    multiple of; A % B is the remainder's own multiple of 2^e, so float8 holds it exactly. A literal operand's
    multiple and power are computed here: the planner would fold ln(0) of a literal 0 even in the arm no row takes."""
    if any(v.value is not None and not math.isfinite(v.value) for v in (x, y)) or y.value == 0:
        return x if y.value is not None and math.isinf(y.value) else NAN  # NaN but x % ±Infinity
    if x.value == 0:
        return x
    e = _place(y)
    a = op(_multiple(x), '*', fn('power', "'2'::pg_catalog.numeric", f'{op(_place(x), "-", e)}::pg_catalog.numeric'))
    exact = op(f'{op(a, "%", _multiple(y))}::pg_catalog.float8', '*', fn('power', TWO, e))
    return case(op(fn('abs', x), '<', fn('abs', y)), x, exact)


def _place(v):
    """A float8 integer e such that v (finite, not 0) is an integer multiple of 2^e, below |v| by at most 2^56: two
    places under v's last bit (ln may round floor(log2|v|) either way), and never below 2^-1074, every double's."""
    if v.value is not None:  # a literal: the place of its last bit
        return literal(_last_bit(v.value))
    log2 = op(fn('ln', fn('abs', v)), '/', literal(math.log(2)))
    return f'GREATEST({op(fn("floor", log2), "-", literal(54.0))}, {literal(-1074.0)})'


def _multiple(v):
    """v / 2^e as an exact numeric integer, e = _place(v): scaled by two powers of two (2^1074 is past float8)."""
    if v.value is not None:
        return f"'{int(Fraction(v.value) * Fraction(2) ** -_last_bit(v.value))}'::pg_catalog.numeric"
    e = _place(v)
    half = fn('floor', op(e, '/', literal(-2.0)))
    scaled = op(op(v, '*', fn('power', TWO, half)), '*', fn('power', TWO, op(neg(e), '-', half)))
    return f'{scaled}::pg_catalog.int8::pg_catalog.numeric'


def _last_bit(value):
    """The place of a finite double's last bit: value is an integer multiple of 2^_last_bit(value)."""
    return max(math.frexp(value)[1] - 53, -1074)


def sigmoid(x):  # the common case first; NaN ranks above -709 and gives NaN
    logistic = op(ONE, '/', op(ONE, '+', fn('exp', f'GREATEST({neg(x)}, {literal(-40.0)})')))
    return f'CASE WHEN {op(x, ">=", literal(-709.0))} THEN {logistic} ELSE {exp(x)} END'


def softplus(x):
    log1p = op(TWO, '*', fn('atanh', op(ONE, '/', op(ONE, '+', op(TWO, '*', fn(
        'exp', f'LEAST({fn("abs", x)}, {literal(709.0)})'))))))
    value = op(f'GREATEST({x}, {ZERO})', '+', log1p)
    return f'CASE WHEN {op(x, ">=", literal(-709.0))} THEN {value} ELSE {exp(x)} END'


def ordered(symbol, operand):
    """x symbol y, false where numpy's is false: where the operand PostgreSQL can rank above the other is NaN
    (operand 0 or 1; None for = and <>, where either may be, and a literal that is not NaN settles it)."""
    def rule(x, y):
        nans = (x, y) if operand is None else ((x, y)[operand],)
        if any(a.value is not None and not math.isnan(a.value) for a in nans):
            return op(x, symbol, y)
        if any(a.value is not None for a in nans):  # NaN itself
            return 'TRUE' if symbol == '<>' else 'FALSE'
        if symbol == '<>':
            return f'({op(x, symbol, y)} OR {op(x, "=", NAN)})'
        return f'({op(x, symbol, y)} AND {op(nans[0], "<>", NAN)})'
    return rule


# op → its SQL, a function of the arguments' SQL (each a Sql: .value is set for a literal); one rule a line
SQL = {
    # arithmetic
    'add': lambda x, y: op(x, '+', y),
    'sub': lambda x, y: op(x, '-', y),
    'mul': lambda x, y: op(x, '*', y),
    'div': lambda x, y: op(x, '/', y),
    'mod': remainder,
    'neg': neg,
    'pow': power,
    # exponentials and logarithms
    'exp': exp,
    'ln': lambda x: fn('ln', x),
    'log10': lambda x: fn('log', x),
    'sqrt': lambda x: fn('sqrt', x),
    'cbrt': lambda x: fn('cbrt', x),
    # sign and magnitude
    'abs': lambda x: fn('abs', x),
    'sign': lambda x: fn('sign', x),
    'greatest': lambda x, y: f'GREATEST({x}, {y})',
    'least': lambda x, y: f'LEAST({x}, {y})',
    # trigonometric and hyperbolic
    'sin': lambda x: fn('sin', x),
    'cos': lambda x: fn('cos', x),
    'tan': lambda x: fn('tan', x),
    'asin': lambda x: fn('asin', x),
    'acos': lambda x: fn('acos', x),
    'atan': lambda x: fn('atan', x),
    'atan2': lambda y, x: fn('atan2', y, x),
    'sinh': lambda x: fn('sinh', x),
    'cosh': lambda x: fn('cosh', x),
    'tanh': lambda x: fn('tanh', x),
    # machine learning, which SQL lacks
    'sigmoid': sigmoid,
    'relu': lambda x: f'GREATEST({x}, {ZERO})',
    'softplus': softplus,
    # conditions
    'case': lambda c, a, b: case(c, a, b),
    'lt': ordered('<', 1),
    'le': ordered('<=', 1),
    'gt': ordered('>', 0),
    'ge': ordered('>=', 0),
    'eq': ordered('=', None),
    'ne': ordered('<>', None),
    'iff': lambda x, y: op(x, '=', y),   # of booleans: no NaN
    'xor': lambda x, y: op(x, '<>', y),
    'and': lambda x, y: f'({x} AND {y})',
    'or': lambda x, y: f'({x} OR {y})',
    'not': lambda x: f'(NOT {x})',
    'truth': lambda x: op(x, '<>', ZERO),  # a boolean column's 1 or 0
}


def expression(lam, root, columns, weights, max_chars=printer.budget(bounds.DEFAULT), per_row=None):
    """Node root of lam's graph as a PostgreSQL expression, safe under any search_path: a column reads as the SQL
    text columns[name] ('$1'), a weight as the float8 literal of weights[name]. SQLSTATE 54001 past max_chars.

    Each node's rule is applied once, to its arguments' SQL where that is short (a literal, a column) and to a
    placeholder where it is a node of its own; the text is spelt out at the end, in time linear in its length
    (building each node's text from its arguments' would copy a long chain of + quadratically). per_row: the
    graph's depends_on_data(), where the caller writes many roots of one graph."""
    graph = lam.graph
    per_row = per_row or graph.depends_on_data()
    args, pieces, lengths = {}, {}, {}  # the Sql a node's parents see; its rule's text split at placeholders
    for i in graph.ancestors([root]):
        bounds.tick()
        node = graph.nodes[i]
        if not per_row[i]:
            args[i] = known(_value(node, args, weights))
        elif node.op == 'column':
            args[i] = Sql(_column(columns, node.value))
        else:
            args[i] = Sql(f'\0{i}\0')
            text = _simple_case(graph, i, per_row, args) if node.op == 'case' else None
            pieces[i] = PLACEHOLDER.split(text or SQL[node.op](*[args[a] for a in node.args]))
            lengths[i] = sum(map(len, pieces[i][0::2])) + sum(lengths[int(a)] for a in pieces[i][1::2])
        if lengths.get(i, len(args[i])) > max_chars:
            raise PgadError('54001', f'expression is too long to write as SQL: more than {max_chars} characters',
                            detail=f'pgad writes at most {printer.PRINTED_PER_BYTE} times pgad.max_lambda_bytes '
                                   'characters for one expression; its DAG shares subexpressions that its SQL '
                                   'text repeats.',
                            hint='Write a smaller lambda, or have a superuser raise pgad.max_lambda_bytes.')
    return _spell(pieces, root) if root in pieces else str(args[root])


PLACEHOLDER = re.compile('\0([0-9]+)\0')  # where a rule's text holds the SQL of node <id>


def _simple_case(graph, i, per_row, args):
    """Node i, a chain of CASEs testing one subexpression against numbers, case(x = k₁, a₁, case(x = k₂, a₂, … b))
    (a vector indexed by a column: vectors._index), as one CASE x WHEN k₁ THEN a₁ … ELSE b END, x written once and
    not once an arm: a categorical weight of K categories, whose x is the scoring function's K-arm CASE coding its
    argument, is then K arms, not K². None where node i is no such chain (of two arms at least). x = k with a
    number k is false for a NaN x either way."""
    nodes, arms, x, j = graph.nodes, [], None, i
    while nodes[j].op == 'case' and per_row[j]:
        test = nodes[nodes[j].args[0]]
        if test.op != 'eq':
            break
        a, k = test.args if nodes[test.args[1]].op == 'const' else reversed(test.args)
        if nodes[k].op != 'const' or math.isnan(nodes[k].value) or not per_row[a] or x not in (None, a):
            break
        x = a
        arms.append((nodes[k].value, nodes[j].args[1]))
        j = nodes[j].args[2]
    if len(arms) < 2:
        return None
    return (f'CASE {args[x]} ' + ' '.join(f'WHEN {literal(k)} THEN {args[a]}' for k, a in arms) +
            f' ELSE {args[j]} END')


def _spell(pieces, root):
    """The text of node root, its placeholders replaced by their nodes' text, depth first without recursion."""
    out, stack = [], [(pieces[root], 0)]
    while stack:
        split, k = stack.pop()
        if k < len(split):
            stack.append((split, k + 1))
            if k % 2:
                bounds.tick()
                stack.append((pieces[int(split[k])], 0))
            else:
                out.append(split[k])
    return ''.join(out)


def _value(node, args, weights):
    """The value of a node that reads no column: its constant, its weight, or numpy's value of its primitive."""
    if node.op == 'const':
        return node.value
    if node.op == 'weight':
        if node.value not in weights:
            raise PgadError('42704', f'weight "{node.value}" has no value')
        return float(weights[node.value])
    values = [args[a].value for a in node.args]
    with np.errstate(all='ignore'):
        result = PRIMITIVES[node.op].evaluate(*[np.bool_(v) if isinstance(v, bool) else np.float64(v) for v in values])
    return bool(result) if np.asarray(result).dtype == np.bool_ else float(result)


def _column(columns, name):
    if name not in columns:
        raise PgadError('42703', f'column "{name}" has no SQL value')
    text = columns[name]
    return text if re.fullmatch(r'\$\d+', text) else f'({text})'
