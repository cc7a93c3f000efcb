"""DAG → text: the lambda language for people (pgad.derivatives), and plain SQL for PostgreSQL to evaluate.

Parentheses are written only where PostgreSQL's precedence needs them, plus around a negative left operand
of ^ (-x^2 means (-x)^2 in SQL, which reads the other way to most people).
"""
import math

# op → (symbol, precedence); all binary operators are left-associative, as in PostgreSQL
INFIX = {'or': ('OR', 1), 'and': ('AND', 2),
         'lt': ('<', 5), 'le': ('<=', 5), 'gt': ('>', 5), 'ge': ('>=', 5), 'eq': ('=', 5), 'ne': ('<>', 5),
         'add': ('+', 7), 'sub': ('-', 7), 'mul': ('*', 8), 'div': ('/', 8), 'pow': ('^', 9)}
PREFIX = {'not': ('NOT ', 3), 'neg': ('-', 10)}
ATOM = 11
# primitives that SQL spells differently; the rest are SQL functions of the same name
LAMBDA_NAMES = {'log10': 'log'}
SQL_FORMS = {'log10': 'log({0})', 'sigmoid': '(1/(1 + exp(-({0}))))', 'relu': 'greatest({0}, 0::float8)',
             'softplus': 'ln(1 + exp({0}))'}


def to_lambda(lam, i):
    """Node i as an expression in the lambda language, reading columns as d.x and weights as w.a."""
    return _Printer(lam.graph, lambda node: f'{lam.row}.{_ident(node.value)}',
                    lambda node: f'{lam.params}.{_ident(node.value)}', _number, LAMBDA_NAMES, {}).text(i)


def to_sql(lam, i, weights, column_sql=lambda name: quote_ident(name)):
    """Node i as a float8 SQL expression over the data's columns, with the weights' values written in."""
    return _Printer(lam.graph, lambda node: column_sql(node.value),
                    lambda node: _sql_number(weights[node.value]), _sql_number, {}, SQL_FORMS).text(i)


def to_listing(graph, roots):
    """The DAG under roots, one node a line in topological order: `%7 = mul(%3, %5)`."""
    lines = []
    for i in graph.ancestors(roots):
        node = graph.nodes[i]
        what = (_number(node.value) if node.op == 'const' else f'{node.op} {_ident(node.value)}'
                if node.op in ('column', 'weight') else f'{node.op}({", ".join(f"%{a}" for a in node.args)})')
        lines.append(f'%{i} = {what}' + ('   ← output' if i in roots else ''))
    return '\n'.join(lines)


def quote_ident(name):
    """PostgreSQL's quote_ident: always quoted, so any name is safe to splice into SQL."""
    return '"' + name.replace('"', '""') + '"'


def _ident(name):
    plain = name.isidentifier() and name == name.lower() and name.isascii()
    return name if plain else quote_ident(name)


def _number(value):
    if isinstance(value, bool):
        return 'TRUE' if value else 'FALSE'
    if math.isinf(value) or math.isnan(value):
        return {math.inf: "'Infinity'", -math.inf: "-'Infinity'"}.get(value, "'NaN'")
    text = repr(value)
    return text[:-2] if text.endswith('.0') else text


def _sql_number(value):
    if isinstance(value, bool):
        return _number(value)
    return f"{_number(abs(value))}::float8" if value >= 0 else f"(-{_number(-value)}::float8)"


class _Printer:
    def __init__(self, graph, column, weight, number, names, forms):
        self.graph, self.column, self.weight, self.number = graph, column, weight, number
        self.names, self.forms = names, forms

    def text(self, i):
        return self.expr(i)[0]

    def expr(self, i):
        """(text, precedence) of node i."""
        node = self.graph.nodes[i]
        if node.op == 'const':
            text = self.number(node.value)
            return text, PREFIX['neg'][1] if text.startswith('-') else ATOM
        if node.op == 'column':
            return self.column(node), ATOM
        if node.op == 'weight':
            return self.weight(node), ATOM
        args = [self.expr(a) for a in node.args]
        if node.op in INFIX:
            symbol, prec = INFIX[node.op]
            (left, lp), (right, rp) = args
            if lp < prec or (node.op == 'pow' and lp == PREFIX['neg'][1]):
                left = f'({left})'
            if rp <= prec or rp == PREFIX['neg'][1]:
                right = f'({right})'
            space = ' ' if prec < 8 else ''
            return f'{left}{space}{symbol}{space}{right}', prec
        if node.op in PREFIX:
            symbol, prec = PREFIX[node.op]
            (arg, ap), = args
            return f'{symbol}({arg})' if ap < prec or ap == PREFIX['neg'][1] and symbol == '-' else symbol + arg, prec
        if node.op == 'case':
            (cond, _), (then, _), (other, _) = args
            return f'CASE WHEN {cond} THEN {then} ELSE {other} END', ATOM
        texts = [a for a, _ in args]
        if node.op in self.forms:
            return self.forms[node.op].format(*texts), ATOM
        return f'{self.names.get(node.op, node.op)}({", ".join(texts)})', ATOM
