"""A fuzzer of the lambda language: random lambdas, mutations of them, and the oracles every input must pass.

Used by tests/test_fuzz.py (a few thousand inputs, a fixed seed, in `make test`) and bench/fuzz.py (`make fuzz`: a
million inputs on every core, a sample through PostgreSQL). Everything is drawn from random.Random(f'{seed}:{i}'),
so input i of a run is `generate(seed, i)` again anywhere: a failure is printed with its seed and index.

The inputs. generate() writes a well-formed lambda from the grammar (docs/sql.md, parser.py's docstring): numbers
(edge literals among them: 0, .5, 5., 1e308, 1e-320, 4.9e-324, 1e400, 1e-400, thirty digits), columns d.x d.y and
weights w.a w.b (now and then others, quoted ones, keywords as names), + - * / ^ with random parentheses, unary
minus and plus, every function of parser.FUNCTIONS with the right number of arguments and, now and then, the wrong
one, log(b, x), CASE in both forms, comparisons, AND, OR, NOT, true and false, keywords in any case, comments and
odd spacing, the λ and lambda heads with other parameter names; now and then a burst: thousands of parentheses,
minus signs, CASEs, a long ^ chain or a long sum of weights. Half the inputs are then mutated: characters or tokens
deleted, inserted, swapped or duplicated, two lambdas spliced, a number replaced by an edge literal, random bytes
and Unicode (lone surrogates included) put in.

The oracles (check()): every input either raises PgadError with a five-character SQLSTATE — never another Python
exception — or parses, differentiates in forward and in reverse mode, and the python backend evaluates it; then
- forward and reverse mode give the same gradient at each row (FORWARD_REVERSE_RTOL, NaN = NaN, inf = inf);
- a number literal outside float8's range is refused with 22003, as PostgreSQL refuses it;
- the primal value and each derivative printed by pgad's printer (pgad.derivatives' text) parse again to the same
  values (PRINTED_RTOL);
- the primal value is PostgreSQL's value of the user's text (postgres_sql(): the head dropped, each d.col and w.name
  replaced by the float8 literal of its value, each number written 'text'::float8 since the language's literals
  are float8, sigmoid, relu, softplus and log(b, x) — not PostgreSQL functions of float8 — taken from schema fuzz,
  SETUP_SQL; the rest of the text goes to PostgreSQL token for token) — see compare() for what counts as agreement.
"""
import json
import math
import random
import re
import time
from dataclasses import dataclass, field

import numpy as np

import pgad.lang  # noqa: F401  (binds pgad.lang)
from pgad import lang, python_backend
from pgad.errors import PgadError
from pgad.lang import parser, printer, rules, vectors
from pgad.limits import Limits
from pgad.program import Program

SQLSTATE = re.compile(r'[0-9A-Z]{5}')
FORWARD_REVERSE_RTOL = 1e-9   # forward and reverse sum the same terms in another order
PRINTED_RTOL = 1e-9           # the printed text drops no parenthesis, but constants print as repr: exact, but for -0
POSTGRES_RTOL = 1e-9          # glibc (PostgreSQL) and numpy's SIMD exp, sin, … differ in the last bits
TINY = 1e-300                 # below this two values are the same (the subnormals of sigmoid's tail)
SLOW_SECONDS = 2.0            # an input that takes longer is reported (quadratic work)
LIMITS = Limits()

# --- the generator -------------------------------------------------------------------------------------------------
EDGE_NUMBERS = ['0', '1', '0.0', '.5', '5.', '1e308', '1.7976931348623157e308', '1e-320', '4.9e-324', '1e400',
                '1E-400', '2.5e+3', '1e-5', '123456789012345678901234567890', '0.1', '00', '1e0', '709', '710',
                '-0', '3.141592653589793', '745.2']
PLAIN_NUMBERS = ['2', '3', '0.5', '1.5', '10', '0.25', '7', '100', '0.001']
# the functions of numbers: PostgreSQL has none of the vector ones (sum is its aggregate) to compare with
FUNCTIONS = sorted(name for name, (op, _) in parser.FUNCTIONS.items() if op in rules.PRIMITIVES)
COMPARISONS = ['<', '<=', '>', '>=', '=', '<>', '!=']
OPERATOR_CHARACTERS = set('~!@#^&|`?+-*/%<>=')
WEIGHT_NAMES = ['a', 'b']
# values of the data and the weights: mostly ordinary, some at the edges of the functions and of float8
VALUES = [0.3, -1.7, 2.5, 0.75, -0.4, 1.2, 3.0, -2.0, 0.05]
EDGE_VALUES = [0.0, 1.0, -1.0, 1e-300, -1e-300, 1e300, 710.0, -746.0, 5e-324, 1e154, 0.5]


def _number(r):
    return r.choice(EDGE_NUMBERS) if r.random() < 0.15 else r.choice(PLAIN_NUMBERS)


def _word(r, word):
    """A keyword in lower, upper or mixed case."""
    roll = r.random()
    if roll < 0.4:
        return word.upper()
    return word if roll < 0.8 else ''.join(r.choice((c.lower(), c.upper())) for c in word)


class _Writer:
    """Writes one lambda: tokens into a list, joined with random spacing by text()."""

    def __init__(self, r, row='d', params='w', depth=5):
        self.r, self.row, self.params, self.max_depth = r, row, params, depth

    def number_expr(self, depth=0):
        r = self.r
        if depth >= self.max_depth or r.random() < 0.25 + 0.12 * depth:
            return self.leaf()
        roll = r.random()
        if roll < 0.38:
            op = r.choice('+-*/^+-*')
            return self.operand(depth) + [op] + self.operand(depth)
        if roll < 0.48:
            return [r.choice('--+')] + self.operand(depth)
        if roll < 0.78:
            return self.call(depth)
        if roll < 0.93:
            return self.case(depth)
        return ['('] + self.number_expr(depth + 1) + [')']

    def operand(self, depth):
        inner = self.number_expr(depth + 1)
        return ['('] + inner + [')'] if len(inner) > 1 and self.r.random() < 0.6 else inner

    def leaf(self):
        r = self.r
        roll = r.random()
        if roll < 0.3:
            return [_number(r)]
        if roll < 0.6:
            return [self.row, '.', r.choice('xy') if r.random() < 0.95 else r.choice(['"x"', 'X', 'z', 'case'])]
        name = r.choice(WEIGHT_NAMES)
        if r.random() < 0.06:
            name = r.choice(['c', '"Weird name"', '"w"', 'end', 'é', 'x1'])
        return [self.params, '.', name]

    def call(self, depth):
        r = self.r
        name = r.choice(FUNCTIONS + ['log'])
        op, arity = parser.FUNCTIONS.get(name, (None, 1))
        count = r.randint(1, 4) if arity is None else (r.choice((1, 2)) if name == 'log' else arity)
        if r.random() < 0.05:
            count = r.choice([0, 1, 2, 3])  # perhaps the wrong number
        if r.random() < 0.05:
            name = r.choice([name.upper(), f'"{name}"', f'"{name.upper()}"', 'nosuch', 'pow'])
        args = []
        for k in range(count):
            args += ([','] if k else []) + self.number_expr(depth + 1)
        return [name, '('] + args + [')']

    def case(self, depth):
        r = self.r
        out = [_word(r, 'case')]
        simple = r.random() < 0.35
        if simple:
            out += self.number_expr(depth + 1)
        for _ in range(r.randint(1, 3)):
            out += [_word(r, 'when')] + (self.number_expr(depth + 1) if simple else self.bool_expr(depth + 1))
            out += [_word(r, 'then')] + self.number_expr(depth + 1)
        if r.random() < 0.97:
            out += [_word(r, 'else')] + self.number_expr(depth + 1)
        return out + [_word(r, 'end')]

    def bool_expr(self, depth=0):
        r = self.r
        roll = r.random()
        if depth >= self.max_depth or roll < 0.55:
            if r.random() < 0.05:
                return [_word(r, r.choice(['true', 'false']))]
            return self.operand(depth) + [r.choice(COMPARISONS)] + self.operand(depth)
        if roll < 0.7:
            return [_word(r, 'not')] + self.bool_operand(depth)
        return self.bool_operand(depth) + [_word(r, r.choice(['and', 'or']))] + self.bool_operand(depth)

    def bool_operand(self, depth):
        inner = self.bool_expr(depth + 1)
        return ['('] + inner + [')'] if self.r.random() < 0.5 else inner

    def text(self, tokens):
        r = self.r
        out = []
        for k, tok in enumerate(tokens):
            if k:
                prev = out[-1][-1]
                roll = r.random()
                if roll < 0.02:
                    out.append(' -- a comment\n')
                elif roll < 0.04:
                    out.append(r.choice(['\n', '\t', '  ', '\r\n']))
                elif roll < 0.5 or _glue(prev, tok[0]):
                    out.append(' ')
            out.append(tok)
        return ''.join(out)


def _glue(prev, first):
    """Would writing these two tokens together make one token, or a comment? Two operator characters make one
    operator, as PostgreSQL's lexer reads them (parser.py), but for a + or - after one of none of parser.SIGNED."""
    word = lambda c: c.isalnum() or c in '_."'  # noqa: E731
    operator = prev in OPERATOR_CHARACTERS and first in OPERATOR_CHARACTERS and (
        first not in '+-' or prev in parser.SIGNED)
    return (word(prev) and word(first)) or (prev == '-' and first == '-') or operator


def _head(r):
    """The head λ(d, w) in one of its spellings, and the two names as the body writes them."""
    row, params = r.choice([('d', 'w')] * 6 + [('row', 'p'), ('"D"', 'w'), ('d', '"W"'), ('D', 'W'), ('é', 'ü')])
    word = r.choice(['λ', 'λ', 'lambda', 'LAMBDA', 'Lambda'])
    space = r.choice(['', ' ', '\n'])
    return f'{word}{space}({row},{r.choice(["", " "])}{params})', row, params


def _burst(r, row, params):
    """A long or deep lambda body: what the parser, the DAG, the modes and the printer must survive."""
    n = r.choice([50, 200, 900, 1100, 3000])
    kind = r.choice(['parens', 'minus', 'case', 'pow', 'sum', 'calls', 'not'])
    x = f'{params}.a*{row}.x'
    if kind == 'parens':
        return '(' * n + x + ')' * n
    if kind == 'minus':
        return '- ' * n + x
    if kind == 'case':
        return f'CASE WHEN {row}.x > 0 THEN ' * n + x + ' ELSE 1 END' * n
    if kind == 'pow':
        return '^'.join([x] + ['1'] * n)
    if kind == 'sum':
        n = min(n, 1100)
        return ' + '.join(f'{params}.w{k}*{row}.x' for k in range(n))
    if kind == 'calls':
        return 'sin(' * n + x + ')' * n
    return 'CASE WHEN ' + 'NOT ' * n + f'{row}.x > 0 THEN 1 ELSE 2 END'


def valid(r, bursts=True):
    """A well-formed lambda (well-typed but now and then: a function of the wrong arity, a CASE without ELSE)."""
    head, row, params = _head(r)
    writer = _Writer(r, row, params, depth=r.choice([2, 3, 4, 5, 6]))
    if r.random() < 0.004 and bursts:
        return head + ' ' + _burst(r, row, params)
    return head + ' ' + writer.text(writer.number_expr())


INSERTS = list('()+-*/^,.<>=!"\'λ;:$%&|~[]{}#@?\\0123456789eE ') + ['--', 'CASE', 'WHEN', 'THEN', 'ELSE', 'END',
           'AND', 'OR', 'NOT', 'd.x', 'w.a', 'exp(', '1e400', 'λ(d, w)', 'é', '∞', '\u2212', '\x00', '\ud800',
           '\uffff', '\U0001F600', '\n', '\t', 'true', '""', '"', 'lambda', '1e', '.', '..']
TOKENS = re.compile(r'--[^\n]*|"(?:[^"]|"")*"|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+|\w+|<=|>=|<>|!=|\S')


def mutate(r, text, other, bursts=True):
    """text changed one to four times: characters or tokens deleted, inserted, swapped, duplicated, or spliced with
    another lambda."""
    for _ in range(r.choice([1, 1, 1, 2, 4])):
        kind = r.randrange(10)
        n = len(text)
        if kind == 0 and n:  # delete characters
            k = r.randrange(n)
            text = text[:k] + text[k + r.choice([1, 1, 2, 5]):]
        elif kind == 1:  # insert something
            k = r.randrange(n + 1)
            text = text[:k] + r.choice(INSERTS) + text[k:]
        elif kind in (2, 3, 4):  # a token deleted, swapped with another, duplicated, or replaced
            tokens = TOKENS.findall(text)
            if not tokens:
                continue
            i, j = r.randrange(len(tokens)), r.randrange(len(tokens))
            action = r.randrange(4)
            if action == 0:
                del tokens[i]
            elif action == 1:
                tokens[i], tokens[j] = tokens[j], tokens[i]
            elif action == 2:
                tokens.insert(i, tokens[j])
            else:
                tokens[i] = r.choice(EDGE_NUMBERS + COMPARISONS + FUNCTIONS + ['(', ')', ',', 'ELSE', 'END'])
            text = ' '.join(tokens)
        elif kind == 5:  # splice: the start of one, the end of the other
            text = text[:r.randint(0, n)] + other[r.randint(0, len(other)):]
        elif kind == 6 and n:  # a span duplicated
            a = r.randrange(n)
            b = min(n, a + r.randint(1, 20))
            text = text[:b] + text[a:b] + text[b:]
        elif kind == 7:  # random bytes, as Latin-1, or random code points
            k = r.randrange(n + 1)
            junk = (bytes(r.randrange(256) for _ in range(r.randint(1, 6))).decode('latin-1') if r.random() < 0.5
                    else ''.join(chr(r.randrange(0x10FFFF)) for _ in range(r.randint(1, 3))))
            text = text[:k] + junk + text[k:]
        elif kind == 8:  # a number made an edge literal
            numbers = list(re.finditer(r'\d+\.?\d*(?:[eE][+-]?\d+)?', text))
            if numbers:
                m = r.choice(numbers)
                text = text[:m.start()] + r.choice(EDGE_NUMBERS) + text[m.end():]
        else:  # a deep burst in the middle
            k = r.randrange(n + 1)
            burst = r.choice(['(', '-', 'NOT ', 'sin(', 'CASE WHEN '])
            burst *= r.choice([10, 100, 2000] if bursts else [10, 30])
            text = text[:k] + burst + text[k:]
    return text


def generate(seed, i, bursts=True):
    """Input i of the run with this seed (without bursts: no input of more than a few hundred tokens)."""
    r = random.Random(f'{seed}:{i}')
    text = valid(r, bursts)
    if r.random() < 0.5:
        text = mutate(r, text, valid(r, bursts), bursts)
    return text


def point(seed, i):
    """The rows (three) and the weights input i is evaluated at: {name: [value per row]}, {name: value}."""
    r = random.Random(f'point:{seed}:{i}')
    pool = lambda: r.choice(EDGE_VALUES) if r.random() < 0.1 else r.choice(VALUES)  # noqa: E731
    return (lambda name: [pool() for _ in range(3)]), (lambda name: pool())


# --- the oracles ---------------------------------------------------------------------------------------------------
@dataclass
class Result:
    text: str
    seed: str = ''
    outcome: str = 'accepted'      # 'accepted', 'rejected' or 'crash'
    sqlstate: str = None           # of a rejection
    weights: tuple = ()            # of an accepted lambda
    failures: list = field(default_factory=list)  # (kind, detail): what no input may do
    postgres: list = field(default_factory=list)  # (sql, pgad's value, was a value on the way not finite) per row
    seconds: float = 0.0

    def fail(self, kind, detail=''):
        self.failures.append((kind, detail))


def close(a, b, rtol, atol=TINY):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(atol, rtol * max(abs(a), abs(b)))


def check(text, seed=0, i=0, for_postgres=False, printed=True, at=None):
    """Run one input through parse, both modes and the python backend at point(seed, i) — or at `at`, ({column:
    [three values]}, {weight: value}) — and return a Result with every failed oracle."""
    started = time.perf_counter()
    result = Result(text, f'{seed}:{i}')
    if at is not None:
        where = (lambda name: at[0].get(name, [0.5] * 3)), (lambda name: at[1].get(name, 0.5))
    else:
        where = point(seed, i)
    try:
        _check(result, text, where, for_postgres, printed)
    except PgadError as e:
        result.outcome, result.sqlstate = 'rejected', e.sqlstate
        if not (isinstance(e.sqlstate, str) and SQLSTATE.fullmatch(e.sqlstate)):
            result.fail('bad SQLSTATE', repr(e.sqlstate))
    except RecursionError as e:
        result.outcome = 'crash'
        result.fail('RecursionError', str(e)[:100])
    except Exception as e:  # noqa: BLE001 — what the fuzzer looks for
        result.outcome = 'crash'
        result.fail(type(e).__name__, f'{e}'[:200])
    result.seconds = time.perf_counter() - started
    if result.seconds > SLOW_SECONDS:
        result.fail('slow', f'{result.seconds:.1f} s for {len(text)} characters')
    return result


def _check(result, text, where, for_postgres, printed):
    lam = lang.parse(text, LIMITS)
    if vectors.needed(lam):  # a mutation made a vector operation ([, ], @): unrolled with every weight a number
        lam = vectors.unroll(lam, vectors.Shapes(), LIMITS)
        for_postgres = False  # PostgreSQL has no such expression
    for literal in out_of_range_literals(text):
        result.fail('literal out of float8 range accepted', literal)
    weights = result.weights = tuple(lam.weights) or ('a',)
    forward = lang.gradient(lam, weights, 'forward')
    reverse = lang.gradient(lam, weights, 'reverse')
    graph = lam.graph
    nodes = graph.ancestors([lam.root]) if for_postgres else []
    outputs = (lam.root, *(forward[w] for w in weights), *(reverse[w] for w in weights), *nodes)
    kernel = python_backend.compile(Program(lam, outputs, weights))
    column, weight = where
    data = {name: column(name) for name in lam.columns}
    vector = np.array([weight(name) for name in weights])
    n = len(weights)
    # at values of 1e300 or 1e-300, forward and reverse cancel terms of 1e300 in another order: not compared
    extreme = any(v != 0 and not 1e-100 < abs(v) < 1e100 for v in [*vector, *(x for c in data.values() for x in c)])
    rows = []
    for k in range(3):
        values = kernel([np.array([data[c][k]]) for c in lam.columns], 1, vector)
        rows.append(values)
        primal, fwd, rev = values[0], values[1:1 + n], values[1 + n:1 + 2 * n]
        for name, f, b in zip(weights, fwd, rev):
            if not close(f, b, FORWARD_REVERSE_RTOL, atol=max(TINY, FORWARD_REVERSE_RTOL * _scale(values))) \
                    and not _overflowed(f, b) and not extreme:
                result.fail('forward != reverse', f'∂/∂{name} at row {k}: forward {f!r}, reverse {b!r}')
        if for_postgres:
            inner = values[1 + 2 * n:]
            result.postgres.append((postgres_sql(text, {c: v[k] for c, v in data.items()},
                                                 dict(zip(weights, vector))), float(primal),
                                    not np.all(np.isfinite(inner))))
    if printed:
        _check_printed(result, lam, weights, forward, data, vector, rows)


def _scale(values):
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else 0.0


def _overflowed(f, b):
    """Forward and reverse multiply the same factors in another order: where one of them overflows (or makes
    inf·0) the other may not."""
    return not (math.isfinite(f) and math.isfinite(b)) and (math.isfinite(f) or math.isfinite(b)
                                                            or math.isnan(f) or math.isnan(b))


def _check_printed(result, lam, weights, forward, data, vector, rows):
    """The primal and its forward derivatives as pgad prints them (pgad.derivatives) parse to the same values."""
    head = f'λ({printer.identifier(lam.row)}, {printer.identifier(lam.params)}) '
    for position, node in enumerate((lam.root, *(forward[w] for w in weights))):
        try:
            printed = printer.to_lambda(lam, node)
        except PgadError as e:
            if e.sqlstate != '54001':
                raise
            continue
        try:
            again = lang.parse(head + printed, LIMITS)
        except PgadError as e:
            result.fail('printed text does not parse', f'{printed!r}: {e.sqlstate} {e}')
            return
        kernel = python_backend.compile(Program(again, (again.root,), tuple(again.weights)))
        w = dict(zip(weights, vector))
        for k, expected in enumerate(rows):
            got = kernel([np.array([data[c][k]]) for c in again.columns], 1,
                         np.array([w[name] for name in again.weights]))[0]
            if not close(got, expected[position], PRINTED_RTOL, atol=PRINTED_RTOL * _scale(expected)):
                what = 'the primal' if position == 0 else f'∂/∂{weights[position - 1]}'
                result.fail('printed text means another value',
                            f'{what} printed as {printed!r}: {got!r} where the DAG gives {expected[position]!r}')
                return


NUMBER = re.compile(r'(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?')


def out_of_range_literals(text):
    """The number literals of a lambda that float8 cannot hold (PostgreSQL: 22003 '… is out of range for type double
    precision'): too large, or nonzero but rounding to 0."""
    out = []
    for kind, tok in tokens(text):
        if kind == 'number':
            value = float(tok)
            if math.isinf(value) or (value == 0 and re.search(r'[1-9]', tok.lower().split('e')[0])):
                out.append(tok)
    return out


# --- PostgreSQL's value of the same text -------------------------------------------------------------------------
LEXER = re.compile(r'''
    (?P<space>\s+|--[^\n]*)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<name>[^\W\d]\w*)
  | (?P<op><=|>=|<>|!=|[-+*/^(),.<>=])
''', re.VERBOSE)
# functions of float8 that PostgreSQL lacks, in schema fuzz (SETUP_SQL); GREATEST and LEAST are grammar; the rest
# are pg_catalog's
OURS = {'sigmoid', 'relu', 'softplus', 'log'}
GRAMMAR = {'greatest', 'least'}
KEYWORDS = {'case', 'when', 'then', 'else', 'end', 'and', 'or', 'not', 'true', 'false', 'lambda'}


def tokens(text):
    """(kind, text) of each token of an accepted lambda: the documented lexical rules, written again here."""
    out, pos = [], 0
    while pos < len(text):
        m = LEXER.match(text, pos)
        if m is None:
            raise ValueError(f'no token at {pos}')
        if m.lastgroup != 'space':
            out.append((m.lastgroup, m.group()))
        pos = m.end()
    return out


def _name(kind, tok):
    if kind == 'quoted':
        return tok[1:-1].replace('""', '"')
    return ''.join(c.lower() if 'A' <= c <= 'Z' else c for c in tok)


def literal(value):
    return f"'{float(value)!r}'::float8".replace('inf', 'Infinity')


def postgres_sql(text, columns, weights):
    """The body of an accepted lambda as PostgreSQL SQL over constants: the head dropped, d.col and w.name the
    float8 literals of their values, numbers 'text'::float8, function names schema-qualified."""
    toks = tokens(text)
    close_paren = next(k for k, (kind, tok) in enumerate(toks) if tok == ')')
    row, params = _name(*toks[2]), _name(*toks[4])
    out, k = [], close_paren + 1
    while k < len(toks):
        kind, tok = toks[k]
        following = toks[k + 1][1] if k + 1 < len(toks) else None
        if kind in ('name', 'quoted') and following == '.':
            owner, field_name = _name(kind, tok), _name(*toks[k + 2])
            out.append(literal(columns[field_name] if owner == row else weights[field_name]))
            k += 3
            continue
        if kind in ('name', 'quoted') and following == '(' and (kind == 'quoted' or _name(kind, tok) not in KEYWORDS):
            name = _name(kind, tok)
            out.append(f'fuzz.{name}' if name in OURS else name if name in GRAMMAR else f'pg_catalog.{name}')
        elif kind == 'number':
            out.append(f"'{tok}'::float8")
        else:
            out.append(tok)
        k += 1
    return ' '.join(out)


# PostgreSQL's value, or its error, for one expression: one EXECUTE in a block with an EXCEPTION clause (a
# subtransaction), so an error costs one expression, not the batch. The test harness's own code: it runs the SQL
# that postgres_sql() wrote, which holds only literals, operators, keywords and function names.
SETUP_SQL = r"""
CREATE SCHEMA IF NOT EXISTS fuzz;
CREATE OR REPLACE FUNCTION fuzz.relu(x float8) RETURNS float8 LANGUAGE sql IMMUTABLE
    AS $$ SELECT greatest(x, 0) $$;
-- sigmoid: 1/(1 + e^-x), from 40 on exactly 1 in float8; below -745 e^x underflows (an error in PostgreSQL), 0
CREATE OR REPLACE FUNCTION fuzz.sigmoid(x float8) RETURNS float8 LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN x >= 0 THEN 1 / (1 + exp(greatest(-x, -40))) WHEN x > -745 THEN exp(x) / (1 + exp(x))
                ELSE 0 END $$;
-- softplus: ln(1 + e^x) = max(x, 0) + log1p(e^-|x|), log1p(e) = 2 atanh(e / (2 + e)) (PostgreSQL has no log1p)
CREATE OR REPLACE FUNCTION fuzz.softplus(x float8) RETURNS float8 LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN x >= -709 THEN greatest(x, 0) + 2 * atanh(1 / (1 + 2 * exp(least(abs(x), 709))))
                WHEN x > -745 THEN exp(x) ELSE 0 END $$;
CREATE OR REPLACE FUNCTION fuzz.log(x float8) RETURNS float8 LANGUAGE sql IMMUTABLE
    AS $$ SELECT pg_catalog.log(x) $$;
-- log(b, x): PostgreSQL has it for numeric only (and the shortest text of a subnormal float8 is not its value);
-- docs/sql.md defines it for float8 as ln(x) / ln(b)
CREATE OR REPLACE FUNCTION fuzz.log(b float8, x float8) RETURNS float8 LANGUAGE sql IMMUTABLE
    AS $$ SELECT ln(x) / ln(b) $$;
CREATE OR REPLACE FUNCTION fuzz.evaluate(expression text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    value float8;
BEGIN
    EXECUTE 'SELECT (' || expression || E'\n)::float8' INTO value;
    RETURN value::text;
EXCEPTION WHEN OTHERS THEN
    RETURN 'ERROR ' || SQLSTATE || ' ' || SQLERRM;
END $$;
"""


def postgres_values(conn, expressions):
    """PostgreSQL's value (a float) or ('error', SQLSTATE, message) of each expression, in one query."""
    rows = conn.execute('SELECT fuzz.evaluate(e) FROM unnest(%s::text[]) WITH ORDINALITY AS t(e, k) ORDER BY k',
                        (list(expressions),)).fetchall()
    out = []
    for (value,) in rows:
        if value.startswith('ERROR '):
            out.append(('error', value[6:11], value[12:]))
        else:
            out.append(float(value))
    return out


def compare(ours, theirs, not_finite_on_the_way):
    """None where pgad's primal value agrees with PostgreSQL's, else the kind of disagreement.

    Agreement: the same value (POSTGRES_RTOL, NaN = NaN, inf = inf); an error in PostgreSQL where pgad's value is
    not finite (PostgreSQL raises for ln(0), 1/0, overflow, where IEEE arithmetic gives ±inf or NaN); an underflow
    error in PostgreSQL (exp(-746), 1e-200 * 1e-200: PostgreSQL refuses, IEEE gives 0 or a subnormal, docs/sql.md).
    Where pgad carried a value that was not finite on the way to a finite result (sigmoid(exp(1000)) = 1, NaN < 1 is
    false) and PostgreSQL raised an error there, the kind is 'absorbed' — counted, not a failure."""
    if isinstance(theirs, tuple):
        _, sqlstate, message = theirs
        if not math.isfinite(ours) or 'underflow' in message:
            return None
        if 'memory exhausted' in message or sqlstate == '54001':  # nesting deeper than PostgreSQL's parser takes
            return 'too deep for PostgreSQL'
        if not_finite_on_the_way and sqlstate[:2] == '22':
            return 'absorbed'
        return f'PostgreSQL {sqlstate}, pgad a value'
    if close(ours, theirs, POSTGRES_RTOL):
        return None
    return 'another value'


def compare_with_postgres(conn, results):
    """Each accepted Result's primal values against PostgreSQL's (one query for all): failures are added to the
    Results; returns {kind of difference: count}, agreements included as None."""
    pending = [(result, sql, ours, on_the_way) for result in results for sql, ours, on_the_way in result.postgres]
    counts = {}
    for (result, sql, ours, on_the_way), theirs in zip(pending, postgres_values(conn, [p[1] for p in pending])):
        kind = compare(ours, theirs, on_the_way)
        counts[kind] = counts.get(kind, 0) + 1
        if kind not in (None, 'absorbed', 'too deep for PostgreSQL'):
            result.fail(f'PostgreSQL: {kind}', f'{sql}: pgad {ours!r}, PostgreSQL {theirs!r}')
    return counts


# --- the same inputs through SQL, on a real server -----------------------------------------------------------------
SERVER_SETUP_SQL = """
CREATE TABLE IF NOT EXISTS fuzz_data (x float8, y float8);
INSERT INTO fuzz_data SELECT * FROM (VALUES (0.3::float8, -1.7::float8), (2.5, 0.75), (-0.4, 1.2)) AS v
    WHERE NOT EXISTS (SELECT FROM fuzz_data);
"""
PYTHON_NAMES = re.compile(r'Traceback|\b[A-Z][A-Za-z]*(Error|Exception)\b|\bplpy\.')


def sendable(text):
    """Can a client send this text to PostgreSQL? (no NUL, no lone surrogate)"""
    return '\x00' not in text and not any('\ud800' <= c <= '\udfff' for c in text)


def server_calls(text, weights, values=None):
    """The SQL calls one input goes through on the server: (name, sql, params)."""
    w = json_weights(weights, values)
    return [('derivatives', 'SELECT weight, derivative FROM pgad.derivatives(%s)', (text,)),
            ('loss', "SELECT pgad.loss(%s, 'fuzz_data', %s)", (text, w)),
            ('gradient forward', "SELECT pgad.gradient(%s, 'fuzz_data', %s, 'forward', 'python')", (text, w)),
            ('gradient reverse', "SELECT pgad.gradient(%s, 'fuzz_data', %s, 'reverse')", (text, w))]


def json_weights(names, values=None):
    """The weights as jsonb: `values`, or 0.5, -0.3, then 0.25 for the rest."""
    return json.dumps(values or dict(zip(names or ['a', 'b'], [0.5, -0.3] + [0.25] * len(names))))


def through_sql(conn, text, weights, started_at, values=None):
    """Run one input through pgad's SQL functions: a list of (kind, detail) failures, and the SQLSTATEs of errors.
    Every error must carry a SQLSTATE that is not internal_error (XX000) or PL/Python's for an uncaught Python
    exception (38000), and name no Python exception; the server must not have restarted."""
    import psycopg
    failures, states = [], []
    for name, sql, params in server_calls(text, weights, values):
        try:
            conn.execute(sql, params).fetchall()
        except psycopg.errors.QueryCanceled:
            failures.append(('server: timeout', f'{name}'))
        except psycopg.Error as e:
            if conn.broken or conn.closed:  # the connection is gone: the backend died
                failures.append(('server: connection lost', f'{name}: {e}'))
                return failures, states
            diag = e.diag
            states.append(diag.sqlstate)
            words = ' '.join(filter(None, (diag.message_primary, diag.message_detail, diag.message_hint)))
            if not (diag.sqlstate and SQLSTATE.fullmatch(diag.sqlstate)):
                failures.append(('server: no SQLSTATE', f'{name}: {words}'))
            elif diag.sqlstate in ('XX000', '38000'):
                failures.append((f'server: {diag.sqlstate}', f'{name}: {words}'[:300]))
            elif PYTHON_NAMES.search(words):
                failures.append(('server: a Python exception in the message', f'{name}: {words}'[:300]))
    now = conn.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
    if now != started_at:
        failures.append(('server: restarted', str(now)))
    return failures, states
