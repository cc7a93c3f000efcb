"""The lambda language: text → DAG.

    λ(d, w) <expr>        or        lambda(d, w) <expr>

The body means what the same expression means in PostgreSQL, evaluated in float8: numeric literals are float8,
`d.col` reads a column of the data row and `w.name` a weight, identifiers fold to lower case unless double-quoted,
and the operators have PostgreSQL's precedence (lowest first):

    OR  <  AND  <  NOT  <  comparisons (< <= > >= = <> !=, non-associative)  <  + -  <  * / %  <  ^  <  unary minus

so -2^2 is 4 and 2^3^2 is 64, as psql shows. Operators are read as PostgreSQL's lexer reads them: a run of operator
characters is one operator, but for a trailing + or - that PostgreSQL splits off where the run has none of
~ ! @ # ^ & | ` ? %, so 2*-1 is 2 * (-1) while 2^-1 reads the operator ^-, which does not exist (SQLSTATE 42883,
as in psql). A column read where PostgreSQL takes a boolean (CASE WHEN d.flag, d.flag AND …, NOT d.flag,
d.flag = true) is a boolean column: Lambda.columns marks it (Column.boolean), and the loader checks that the data's
column is boolean and packs it as 1 or 0; anywhere else a column is a number.

A recursive-descent parser, one method per level, that does not recurse in Python: each method is a generator that
yields the generator of a sub-expression it needs and is sent that sub-expression's value back (`left = yield
self.power()`), and Parser.run drives them from a list, so the nesting depth costs a list entry, not an interpreter
frame. Nesting deeper than MAX_DEPTH levels (parentheses, function calls, CASE, prefix operators inside one another)
is SQLSTATE 54001, as PostgreSQL's own parser stops at its max_stack_depth.
"""
import math
import re
from dataclasses import dataclass, field, replace

from .. import limits as bounds
from ..errors import Caret, PgadError
from .dag import Expr, Graph
from .rules import OPERATIONS, PRIMITIVES

# name in the language → (primitive, number of arguments); None means any number ≥ 1 (folded pairwise from the left)
FUNCTIONS = {
    'exp': ('exp', 1), 'ln': ('ln', 1), 'log': ('log10', 1), 'sqrt': ('sqrt', 1), 'cbrt': ('cbrt', 1),
    'abs': ('abs', 1), 'sign': ('sign', 1), 'power': ('pow', 2),
    'sin': ('sin', 1), 'cos': ('cos', 1), 'tan': ('tan', 1), 'asin': ('asin', 1), 'acos': ('acos', 1),
    'atan': ('atan', 1), 'atan2': ('atan2', 2), 'sinh': ('sinh', 1), 'cosh': ('cosh', 1), 'tanh': ('tanh', 1),
    'greatest': ('greatest', None), 'least': ('least', None),
    'sigmoid': ('sigmoid', 1), 'relu': ('relu', 1), 'softplus': ('softplus', 1),
    'sum': ('sum', 1), 'dot': ('dot', 2), 'softmax': ('softmax', 1), 'logsumexp': ('logsumexp', 1),
    'transpose': ('transpose', 1), 'outer': ('outer', 2),
}
# log(b, x), the logarithm of x to base b, is ln(x) / ln(b)
KEYWORDS = {'case', 'when', 'then', 'else', 'end', 'and', 'or', 'not', 'true', 'false', 'lambda'}
TYPES = {'n': 'double precision', 'b': 'boolean'}
NAMEDATALEN = 64  # PostgreSQL's: a column name has at most 63 bytes
MULTIPLICATIVE = {'*': 'mul', '/': 'div', '%': 'mod', '@': 'matmul'}
COMPARISONS = {'<': 'lt', '<=': 'le', '>': 'gt', '>=': 'ge', '=': 'eq', '<>': 'ne', '!=': 'ne'}
BOOLEAN_COMPARISONS = {'eq': 'iff', 'ne': 'xor'}  # = and <> of two booleans
OPERATORS = {'+', '-', '^', *MULTIPLICATIVE, *COMPARISONS}
PUNCTUATION = {'(', ')', ',', '.', '[', ']'}
# PostgreSQL's lexer reads a run of operator characters (TOKEN's op) as one operator, but splits a trailing + or -
# off a run that has none of SIGNED: *- is * and -, while ^- is one operator
SIGNED = set('~!@#^&|`?%')

STATE = 'state.'  # a state field s.level reads the node weight('state.level'): sequences.py gives it its value
MAX_DEPTH = 10_000  # levels of parentheses, calls, CASE and prefix operators inside one another
TOKEN = re.compile(r'''
    (?:\s+|--[^\n]*)*                  # space and comments before a token, in the same match
    (?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
     | (?P<quoted>"(?:[^"]|"")*")
     | (?P<string>'(?:[^']|'')*')
     | (?P<name>[^\W\d]\w*)
     | (?P<op>(?:(?!--|/\*)[-~!@#^&|`?+*/%<>=])+|[(),.\[\]])
     | (?P<bad>.)
    )?
''', re.VERBOSE | re.DOTALL)
FLOAT8_TEXT = re.compile(r'\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)\s*', re.IGNORECASE)
NON_FINITE = {'inf', 'infinity', 'nan'}
MANTISSA = re.compile(r'[1-9]')  # a literal with a nonzero digit before its exponent is not zero


@dataclass
class Lambda:
    """A parsed loss: the graph, the node of its body, and what it reads."""
    text: str
    graph: Graph
    root: int
    row: str                                     # the name of the data parameter (d)
    params: str                                  # the name of the weights parameter (w)
    columns: list = field(default_factory=list)  # column names, in order of first use
    weights: list = field(default_factory=list)  # weight names, in order of first use
    own: list = None                             # a loss's: the columns it reads itself (parse_loss)
    places: dict = field(default_factory=dict)   # node id → offset in text of the operator that built it first
    state: str = None                            # the name of the state parameter (s) of λ(d, w, s), or None
    states: list = field(default_factory=list)   # the state's fields the lambda reads (s.level), in order of first use

    def copy(self):
        """The same Lambda over a copy of its graph, to add derivative nodes to."""
        return replace(self, graph=self.graph.copy(), columns=list(self.columns), weights=list(self.weights),
                       states=list(self.states))


class Column(str):
    """A column's name in Lambda.columns, and how the lambda reads it: boolean is true for a column read where
    PostgreSQL takes a boolean (the loader checks that the data's column is boolean, and packs it as 1 or 0)."""
    boolean = False

    def __new__(cls, name, boolean=False):
        column = super().__new__(cls, name)
        column.boolean = boolean
        return column


@dataclass
class Token:
    kind: str   # 'number', 'name', 'quoted', 'op', 'end'
    text: str
    pos: int    # 0-based offset in the lambda text
    value: object = None


def tokenize(text):
    tokens = []
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        if kind is None:  # space at the end
            continue
        word, pos = m.group(kind), m.start(kind)
        if kind == 'name':
            lower = fold(word)
            tokens.append(Token('keyword' if lower in KEYWORDS else 'ident', word, pos, lower))
        elif kind == 'op':
            tokens.extend(Token(kind, op, at, op) for op, at in operators(word, pos))
        elif kind == 'number':
            tokens.append(Token(kind, word, pos, number(text, word, pos)))
        elif kind == 'string':  # '1.5', 'Infinity', '-Infinity', 'NaN': a float8 as PostgreSQL reads one
            tokens.append(Token('number', word, pos, quoted_number(text, word, pos)))
        elif kind == 'quoted':
            if word == '""':
                raise PgadError('42601', 'zero-length delimited identifier in lambda', detail=caret(text, pos))
            tokens.append(Token('ident', word, pos, word[1:-1].replace('""', '"')))
        else:
            raise syntax_error(text, pos, word)
        if len(tokens) % bounds.TICKS == 0:
            bounds.tick(bounds.TICKS)
    tokens.append(Token('end', '', len(text)))
    return tokens


def operators(run, pos):
    """A run of operator characters at pos as PostgreSQL's lexer splits it: [(operator, its offset), …]."""
    found = []
    while run:
        end = len(run)
        if not SIGNED & set(run):
            while end > 1 and run[end - 1] in '+-':
                end -= 1
        found.append((run[:end], pos))
        run, pos = run[end:], pos + end
    return found


def quoted_number(text, word, pos):
    """A quoted literal as float8in reads it: a number, or Infinity, -Infinity, NaN (in any case, 'inf' too)."""
    inner = word[1:-1].replace("''", "'")
    if not FLOAT8_TEXT.fullmatch(inner):
        raise PgadError('22P02', f'invalid input syntax for type double precision: "{inner}"', detail=caret(text, pos))
    body = inner.strip()
    return float(body) if body.lstrip('+-').lower() in NON_FINITE else number(text, body.lstrip('+'), pos)


def number(text, word, pos):
    """A numeric literal's float8, or PostgreSQL's error for one that float8 cannot hold (1e400, 1e-400)."""
    value = float(word)
    if math.isinf(value) or value == 0.0 and MANTISSA.search(re.split('[eE]', word)[0]):
        raise PgadError('22003', f'"{word}" is out of range for type double precision', detail=caret(text, pos))
    return value


def fold(word):
    """PostgreSQL's identifier folding: ASCII letters to lower case, everything else as written."""
    if word.isascii():
        return word.lower()
    return ''.join(c.lower() if 'A' <= c <= 'Z' else c for c in word)


def syntax_error(text, pos, near):
    """PostgreSQL's 'syntax error at or near', with the lambda's line and a caret under the place as DETAIL."""
    message = f'syntax error at or near "{near}"' if near else 'syntax error at end of input'
    return PgadError('42601', message, detail=caret(text, pos))


def caret(text, pos):
    return Caret(text, pos)


def parse(text, limits=bounds.DEFAULT, state=False):
    """Parse a lambda into a Lambda: its DAG and the columns and weights it reads, within limits; with state, a
    sequence model's λ(d, w, s) too (sequences.py)."""
    bounds.check_text(text, limits)
    return Parser(text, limits.lambda_nodes).parse_lambda(state)


def parse_state(text, model, what, limits=bounds.DEFAULT, state=True):
    """Parse an expression of a sequence model's state (`what` names it in errors: 'the start of state "level"')
    into the model's graph, over its row, weights and (where state is true) state: its node id, and the columns
    and state fields it reads, in order (sequences.py). A bare expression: the lambda's parameters are the
    model's."""
    bounds.check_text(text, limits)
    return Parser(text, graph=model.graph).parse_state(model, what, state)


def parse_loss(text, model, limits=bounds.DEFAULT):
    """Parse a loss `λ(p, d) <expr>` of a model's prediction p and the data row d into the model's graph: a Lambda
    with the model's row, weights and graph whose body is the loss of one row (pgad.train's objective). The loss
    reads columns (d.y) but no weight; p is the model's body."""
    bounds.check_text(text, limits)
    return Parser(text, graph=model.graph).parse_loss(model)


class Parser:
    def __init__(self, text, max_nodes=bounds.DEFAULT.lambda_nodes, graph=None):
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.graph = Graph(max_nodes) if graph is None else graph
        self.value = None  # a loss's name for the prediction (p), read as a bare name
        self.reads = {}    # column → 'n' or 'b': whether the lambda reads it as a number or as a boolean
        self.places = {}   # node id → offset of the operator that built it first (vectors.py's shape errors)
        self.state, self.states = None, {}  # λ(d, w, s): the state's name, and its fields read

    def run(self, parsing):
        """The value of the generator `parsing`: every generator it yields runs first, and its value is sent back."""
        stack, value = [parsing], None
        while stack:
            try:
                inner = stack[-1].send(value)
            except StopIteration as done:
                stack.pop()
                value = done.value
            else:
                if type(inner) is Expr:  # operand() had the value at once: no generator to run
                    value = inner
                else:
                    stack.append(inner)
                    value = None
        return value

    def nest(self):
        """One more level of nesting at the current token: past MAX_DEPTH, SQLSTATE 54001."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail('54001', 'lambda expression is too deeply nested', self.tok,
                            hint=f'pgad parses at most {MAX_DEPTH} levels of parentheses, function calls, CASE and '
                                 'prefix operators inside one another; a long chain of + or * needs none.')

    # token helpers
    @property
    def tok(self):
        return self.tokens[self.i]

    def advance(self):
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at(self, *values):
        tok = self.tokens[self.i]
        return (tok.kind == 'op' or tok.kind == 'keyword') and tok.value in values

    def expect(self, value):
        if not self.at(value):
            raise self.error()
        return self.advance()

    def error(self):
        return syntax_error(self.text, self.tok.pos, self.tok.text)

    def fail(self, sqlstate, message, token, hint=None):
        return PgadError(sqlstate, message, detail=caret(self.text, token.pos), hint=hint)

    # λ(d, w) <expr>, or λ(d, w, s) <expr> of a sequence model (sequences.py)
    def parse_lambda(self, state=False):
        self.row, self.params, *state = self.head('a loss must start with λ(d, w) or lambda(d, w)',
                                                  "Write the loss as a lambda of a data row and the weights, "
                                                  "for example 'λ(d, w) (w.a*d.x + w.b - d.y)^2'.", 'weights',
                                                  state)
        self.state = state[0] if state else None
        self.columns, self.weights = {}, {}  # dicts as ordered sets: names in order of first use
        root = self.body().id
        return Lambda(self.text, self.graph, root, self.row, self.params, self.listed(self.columns),
                      list(self.weights), places=self.places, state=self.state, states=list(self.states))

    # a bare expression over a sequence model's row, weights and state
    def parse_state(self, model, what, state):
        self.row, self.params, self.state = model.row, model.params, model.state if state else None
        self.columns, self.weights = {}, {}
        self.reads = {c: 'b' if c.boolean else 'n' for c in model.columns}
        if self.tok.kind == 'end':
            raise self.fail('42601', f'{what} is empty', self.tok, hint='Write an expression, for example "0".')
        root = self.body().id
        return root, self.listed(self.columns), list(self.weights), list(self.states)

    # λ(p, d) <expr>, over a model's graph
    def parse_loss(self, model):
        self.value, self.row = self.head('a loss must start with λ(p, d) or lambda(p, d)',
                                         "Write the loss as a lambda of the prediction and a data row, for example "
                                         "'λ(p, d) (p - d.y)^2', or name one: 'squared', 'absolute', 'logistic', "
                                         "'hinge', 'poisson', 'gamma', 'huber' or 'quantile'.", 'prediction')
        self.params, self.prediction = None, model.root
        self.columns, self.weights = {}, dict.fromkeys(model.weights)
        self.reads = {c: 'b' if c.boolean else 'n' for c in model.columns}
        body = self.body()
        return Lambda(self.text, self.graph, body.id, model.row, model.params,
                      self.listed(dict.fromkeys([*model.columns, *self.columns])), list(self.weights),
                      self.listed(self.columns), {**model.places, **self.places})

    def listed(self, columns):
        """columns as Lambda.columns lists them: each a Column that says whether the lambda reads it as a boolean."""
        return [Column(c, self.reads.get(c) == 'b') for c in columns]

    def head(self, message, hint, second, state=False):
        """The names of the two parameters of `λ(a, b)`, or where state is true, of its three of `λ(a, b, c)`."""
        if not (self.at('lambda') or self.tok.kind == 'ident' and self.tok.value == 'λ'):
            raise self.fail('42601', message, self.tok, hint=hint)
        self.advance()
        self.expect('(')
        first = self.identifier()
        self.expect(',')
        other = self.identifier()
        if first == other:
            raise self.fail('42P08', f'the data row and the {second} have the same name "{first}"',
                            self.tokens[self.i - 1])
        if self.at(',') and not state:
            raise self.fail('42601', 'a lambda of a state, λ(d, w, s), is a sequence model\'s', self.tok,
                            hint="Train it with pgad.train(…, order_by => 'day', state => '{\"level\": {\"start\": …, "
                                 "\"next\": …}}'): docs/sql.md, \"Sequences\".")
        if state and self.at(','):
            self.advance()
            third = self.identifier()
            if third in (first, other):
                raise self.fail('42P08', f'the state has the name "{third}" of the '
                                         f'{"data row" if third == first else second}', self.tokens[self.i - 1])
            self.expect(')')
            return first, other, third
        self.expect(')')
        return first, other

    def body(self):
        exact, self.graph.exact = self.graph.exact, True  # the user's x*0 is NaN where x is: no rule hides it
        try:
            body = self.run(self.expression())
        finally:
            self.graph.exact = exact
        if self.tok.kind != 'end':
            raise self.error()
        token = self.tokens[self.i - 1]
        if self.graph.type_of(body.id) == 'b':  # at the operator that made it a boolean: d.x > 1 points at >
            token = self.made(body, token)
        return self.require(body, 'n', token, 'the body of a lambda must be a number, not a boolean')

    def identifier(self):
        if self.tok.kind != 'ident':
            raise self.error()
        return self.advance().value

    def made(self, expr, token):
        """The operator token that built expr (Lambda.places), where an error about expr points; else token."""
        pos = self.places.get(expr.id)
        return token if pos is None else next(t for t in self.tokens if t.pos == pos)

    def require(self, expr, kind, token, message=None):
        """expr, after checking that it is a number ('n') or a boolean ('b'); a column read as a boolean is its truth
        value (the loader packs a boolean column as 1 or 0)."""
        node = self.graph.nodes[expr.id]
        if node.op == 'column':
            read = self.reads.setdefault(node.value, kind)
            if read != kind:
                raise self.fail('42804', f'column "{node.value}" is read both as a number and as a boolean', token,
                                hint='A column has one type in the data: compare a number with a value (d.x > 0) '
                                     'where a boolean is needed.')
            if kind == 'b':
                return self.graph.apply('truth', expr)
        got = self.graph.type_of(expr.id)
        if got != kind:
            what = token.text.upper() if token.kind == 'keyword' else token.text
            raise self.fail('42804', message or f'argument of {what} must be {TYPES[kind]}, not {TYPES[got]}', token)
        return expr

    def apply(self, op, token, *args):
        kinds = (PRIMITIVES[op] if op in PRIMITIVES else OPERATIONS[op]).args
        args = [self.require(arg, kind, token) for arg, kind in zip(args, kinds if kinds != '*' else 'n' * len(args))]
        result = self.graph.apply(op, *args)
        self.places.setdefault(result.id, token.pos)
        return result

    # precedence levels, lowest first; each a generator that Parser.run drives
    def expression(self):
        left = yield self.conjunction()
        while self.at('or'):
            tok = self.advance()
            left = self.apply('or', tok, left, (yield self.conjunction()))
        return left

    def conjunction(self):
        left = yield self.negation()
        while self.at('and'):
            tok = self.advance()
            left = self.apply('and', tok, left, (yield self.negation()))
        return left

    def negation(self):
        if self.at('not'):
            tok = self.advance()
            self.nest()
            inner = yield self.negation()
            self.depth -= 1
            return self.apply('not', tok, inner)
        return (yield self.comparison())

    def comparison(self):
        left = yield self.other()
        if self.at(*COMPARISONS):
            tok = self.advance()
            left = self.compare(COMPARISONS[tok.value], tok, left, (yield self.other()))
            if self.at(*COMPARISONS):  # PostgreSQL's comparisons do not chain: a < b < c is an error
                raise self.error()
        return left

    def compare(self, op, tok, left, right):
        """left op right; = and <> also of two booleans, a column beside a boolean read as one (d.flag = true)."""
        kinds = [self.graph.type_of(e.id) for e in (left, right)]
        if op not in BOOLEAN_COMPARISONS or 'b' not in kinds:
            return self.apply(op, tok, left, right)
        left, right = (self.require(e, 'b', tok) if self.graph.nodes[e.id].op == 'column' else e for e in (left, right))
        kinds = [self.graph.type_of(e.id) for e in (left, right)]
        if kinds != ['b', 'b']:
            raise self.fail('42883', f'operator does not exist: {TYPES[kinds[0]]} {tok.text} {TYPES[kinds[1]]}', tok,
                            hint='= and <> compare two numbers or two booleans.')
        return self.apply(BOOLEAN_COMPARISONS[op], tok, left, right)

    def other(self):
        """PostgreSQL's level of any other operator, between + - and the comparisons: none exists in the lambda
        language, so an operator the lexer read that is not one of its own (2^-1 reads ^-) is SQLSTATE 42883."""
        left = yield self.additive()
        if self.at_unknown_operator():
            tok = self.advance()
            raise self.no_operator(tok, left, (yield self.additive()))
        return left

    def at_unknown_operator(self):
        tok = self.tokens[self.i]
        return tok.kind == 'op' and tok.value not in OPERATORS and tok.value not in PUNCTUATION

    def no_operator(self, tok, left, right):
        """PostgreSQL's error for an operator that does not exist, at the operator; left is None for a prefix one."""
        operands = [TYPES[self.graph.type_of(e.id)] for e in (left, right) if e is not None]
        signature = [operands[0], tok.text, operands[1]] if left is not None else [tok.text, operands[0]]
        if tok.value[-1] in '+-' and tok.value[:-1] in OPERATORS:
            hint = (f'PostgreSQL reads "{tok.value}" as one operator: write the sign in parentheses, as in '
                    f'2{tok.value[:-1]}({tok.value[-1]}1).')
        else:
            hint = 'The lambda language has the operators ' + ' '.join(sorted(OPERATORS)) + ', AND, OR and NOT.'
        return self.fail('42883', f'operator does not exist: {" ".join(signature)}', tok, hint=hint)

    def additive(self):
        left = yield self.multiplicative()
        while self.at('+', '-'):
            tok = self.advance()
            left = self.apply('add' if tok.value == '+' else 'sub', tok, left, (yield self.multiplicative()))
        return left

    def multiplicative(self):
        left = yield self.power()
        while self.at(*MULTIPLICATIVE):
            tok = self.advance()
            left = self.apply(MULTIPLICATIVE[tok.value], tok, left, (yield self.power()))
        return left

    def power(self):
        left = yield self.operand()
        while self.at('^'):
            tok = self.advance()
            left = self.apply('pow', tok, left, (yield self.operand()))
        return left

    def operand(self):
        """A number or a reference (d.x, w.a) at once, the commonest operands; anything else, the unary generator."""
        tok = self.tokens[self.i]
        if tok.kind == 'number':
            self.i += 1
            return self.graph.const(tok.value)
        following = self.tokens[self.i + 1] if tok.kind == 'ident' else None  # an ident is never the last token
        if following is not None and following.kind == 'op' and following.value == '.':
            self.i += 1
            found = self.reference(tok)
            return found if not self.at('[') else self.subscripts(found)
        return self.unary()

    def unary(self):
        if self.at('-', '+'):
            tok = self.advance()
            self.nest()
            inner = yield self.unary()
            self.depth -= 1
            return self.apply('neg', tok, inner) if tok.value == '-' else self.require(inner, 'n', tok)
        if self.at_unknown_operator():  # a prefix operator the lambda language lacks: ^- 1
            tok = self.advance()
            raise self.no_operator(tok, None, (yield self.unary()))
        return (yield self.primary())

    def primary(self):
        return (yield self.subscripts((yield self.atom())))

    def subscripts(self, value):
        """value[i][j]…: indexing, 1-based as in PostgreSQL arrays, binds tighter than any operator."""
        while self.at('['):
            tok = self.advance()
            self.nest()
            index = yield self.expression()
            self.expect(']')
            self.depth -= 1
            value = self.apply('index', tok, value, index)
        return value

    def atom(self):
        tok = self.tok
        if tok.kind == 'number':
            self.advance()
            return self.graph.const(tok.value)
        if tok.kind == 'ident':
            self.advance()
            if self.at('.'):
                return self.reference(tok)
            if self.at('('):
                return (yield self.call(tok))
            if tok.value == self.value:
                return self.graph.expr(self.prediction)
            raise self.fail('42703', f'column reference "{tok.value}" needs a row', tok,
                            hint=f'Write {self.row}.{tok.text} for a column of the data ' +
                                 (f'or {self.params}.{tok.text} for a weight.' if self.value is None else
                                  f'or {self.value} for the prediction.'))
        if self.at('('):
            self.advance()
            self.nest()
            inner = yield self.expression()
            self.expect(')')
            self.depth -= 1
            return inner
        if self.at('true', 'false'):
            self.advance()
            return self.graph.const(tok.value == 'true')
        if self.at('case'):
            return (yield self.case())
        if self.at('['):  # a vector [a, b, c]
            self.advance()
            self.nest()
            items = [(yield self.expression())]
            while self.at(','):
                self.advance()
                items.append((yield self.expression()))
            self.expect(']')
            self.depth -= 1
            return self.apply('stack', tok, *items)
        raise self.error()

    def reference(self, owner):
        self.advance()  # '.'
        if self.tok.kind not in ('ident', 'keyword'):
            raise self.error()
        tok = self.advance()
        name = tok.value
        if owner.value == self.row:
            if len(name.encode('utf-8', 'surrogatepass')) >= NAMEDATALEN:
                raise self.fail('42622', f'column name "{name}" is too long', tok,
                                hint=f'PostgreSQL column names have at most {NAMEDATALEN - 1} bytes: rename the '
                                     'column in the data query (SELECT … AS shorter) and in the lambda.')
            self.columns.setdefault(name)
            return self.graph.column(name)
        if owner.value == self.params:
            self.weights.setdefault(name)
            return self.graph.weight(name)
        if self.state is not None and owner.value == self.state:
            self.states.setdefault(name)
            return self.graph.weight(STATE + name)
        if owner.value == self.value:
            raise self.fail('42809', f'"{owner.value}" is the prediction, a number: it has no field "{name}"', owner,
                            hint=f'The loss is a λ(p, d) of the prediction p and the data row d, for example '
                                 f"'λ(p, d) (p - d.y)^2', or a named loss ('squared', 'absolute', 'logistic', "
                                 f"'hinge', 'poisson', 'gamma', 'huber', 'quantile'); the model λ(d, w) goes in model.")
        if self.value is not None:
            raise self.fail('42P01', f'"{owner.value}" is not the data row "{self.row}"', owner,
                            hint=f'A loss reads columns as {self.row}.column and the prediction as {self.value}; '
                                 'the weights are the model\'s.')
        raise self.fail('42P01', f'"{owner.value}" is neither the data row "{self.row}" nor the weights '
                                 f'"{self.params}"', owner,
                        hint=f'Columns are read as {self.row}.column and weights as {self.params}.name.')

    def call(self, name):
        self.advance()  # '('
        self.nest()
        args = []
        if not self.at(')'):
            args.append((yield self.expression()))
            while self.at(','):
                self.advance()
                args.append((yield self.expression()))
        self.expect(')')
        self.depth -= 1
        fn = name.value
        if fn == 'log' and len(args) == 2:  # log(b, x) = ln(x) / ln(b)
            base, x = args
            return self.apply('div', name, self.apply('ln', name, x), self.apply('ln', name, base))
        op, arity = FUNCTIONS.get(fn, (None, 0))
        if op is None or not args or arity not in (None, len(args)):
            types = ', '.join(TYPES[self.graph.type_of(a.id)] for a in args)
            takes = ('1 or 2 arguments' if fn == 'log' else  # log(x), log(b, x)
                     f'{arity or "one or more"} argument{"s" if arity != 1 else ""}')
            hint = (f'{fn} takes {takes}.' if op else
                    'The lambda language has the functions ' + ', '.join(sorted(FUNCTIONS)) + ', and log(b, x).')
            raise self.fail('42883', f'function {fn}({types}) does not exist', name, hint=hint)
        if arity is not None:
            return self.apply(op, name, *args)
        result = self.require(args[0], 'n', name)
        for extra in args[1:]:  # greatest(a, b, c) = greatest(greatest(a, b), c): the first extreme wins
            result = self.apply(op, name, result, extra)
        return result

    def case(self):
        """CASE WHEN c THEN a … ELSE b END, or the simple form CASE x WHEN v THEN a … ELSE b END (WHEN x = v)."""
        start = self.advance()  # CASE
        self.nest()
        operand = None if self.at('when') else self.require((yield self.expression()), 'n', start,
                                                            'CASE operand must be double precision')
        if not self.at('when'):
            raise self.error()
        arms = []
        while self.at('when'):
            when = self.advance()
            if operand is None:
                condition = self.require((yield self.expression()), 'b', when,
                                         'argument of CASE/WHEN must be type boolean')
            else:
                condition = self.apply('eq', when, operand, self.require((yield self.expression()), 'n', when,
                                                                         'CASE/WHEN value must be double precision'))
            self.expect('then')
            arms.append((condition, self.require((yield self.expression()), 'n', when,
                                                 'CASE results must be double precision')))
        if not self.at('else'):
            raise self.fail('42601', 'CASE needs an ELSE: every row must have a value', self.tok,
                            hint='Add ELSE 0 (or another value) before END.')
        self.advance()
        result = self.require((yield self.expression()), 'n', start, 'CASE results must be double precision')
        self.expect('end')
        self.depth -= 1
        for condition, value in reversed(arms):
            result = self.graph.apply('case', condition, value, result)
        return result
