"""DAG → text: the lambda language for people (pgad.derivatives, pgad.explain), and a listing of the DAG.

Parentheses are written only where PostgreSQL's precedence needs them, plus around a negative left operand
of ^ (-x^2 means (-x)^2 in SQL, which reads the other way to most people).

A DAG shares subexpressions and text repeats them, so the text of a derivative can be far longer than the DAG
(exponentially, for a chain of shared nodes): printing stops past a budget of PRINTED_PER_BYTE times
pgad.max_lambda_bytes characters, with SQLSTATE 54001.
"""
import math

from .. import limits as bounds
from ..errors import PgadError

# op → (symbol, precedence); all binary operators are left-associative, as in PostgreSQL
INFIX = {'or': ('OR', 1), 'and': ('AND', 2),
         'lt': ('<', 5), 'le': ('<=', 5), 'gt': ('>', 5), 'ge': ('>=', 5), 'eq': ('=', 5), 'ne': ('<>', 5),
         'add': ('+', 7), 'sub': ('-', 7), 'mul': ('*', 8), 'div': ('/', 8), 'pow': ('^', 9)}
PREFIX = {'not': ('NOT ', 3), 'neg': ('-', 10)}
ATOM = 11
PRINTED_PER_BYTE = 16
# primitives the lambda language spells differently; the rest are functions of the same name
LAMBDA_NAMES = {'log10': 'log'}


def budget(limits):
    """The most characters one printed expression may have, under these limits."""
    return PRINTED_PER_BYTE * limits.lambda_bytes


def to_lambda(lam, i, max_chars=budget(bounds.DEFAULT)):
    """Node i as an expression in the lambda language, reading columns as d.x and weights as w.a."""
    return _Printer(lam, max_chars).text(i)


def to_listing(graph, roots):
    """The DAG under roots, one node a line in topological order: `%7 = mul(%3, %5)`."""
    lines = []
    for i in graph.ancestors(roots):
        bounds.tick()
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


class _Printer:
    def __init__(self, lam, max_chars):
        self.lam, self.graph, self.max_chars = lam, lam.graph, max_chars

    def text(self, i):
        return self.expr(i)[0]

    def expr(self, i):
        """(text, precedence) of node i."""
        bounds.tick()
        text, precedence = self._expr(i)
        if len(text) > self.max_chars:
            raise PgadError('54001', f'expression is too long to print: more than {self.max_chars} characters',
                            detail=f'pgad prints at most {PRINTED_PER_BYTE} times pgad.max_lambda_bytes characters '
                                   'for one expression; its DAG shares subexpressions that its text repeats.',
                            hint='Write a smaller lambda, or have a superuser raise pgad.max_lambda_bytes.')
        return text, precedence

    def _expr(self, i):
        node = self.graph.nodes[i]
        if node.op == 'const':
            text = _number(node.value)
            return text, PREFIX['neg'][1] if text.startswith('-') else ATOM
        if node.op == 'column':
            return f'{self.lam.row}.{_ident(node.value)}', ATOM
        if node.op == 'weight':
            return f'{self.lam.params}.{_ident(node.value)}', ATOM
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
        return f'{LAMBDA_NAMES.get(node.op, node.op)}({", ".join(a for a, _ in args)})', ATOM
