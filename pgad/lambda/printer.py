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
from .parser import KEYWORDS, STATE

# op → (symbol, precedence); all binary operators are left-associative, as in PostgreSQL
INFIX = {'or': ('OR', 1), 'and': ('AND', 2),
         'lt': ('<', 5), 'le': ('<=', 5), 'gt': ('>', 5), 'ge': ('>=', 5), 'eq': ('=', 5), 'ne': ('<>', 5),
         'iff': ('=', 5), 'xor': ('<>', 5),
         'add': ('+', 7), 'sub': ('-', 7), 'mul': ('*', 8), 'div': ('/', 8), 'mod': ('%', 8), 'matmul': ('@', 8),
         'pow': ('^', 9)}
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
    return to_lambdas(lam, [i], max_chars)[0]


def to_lambdas(lam, roots, max_chars=budget(bounds.DEFAULT)):
    """Each of the nodes roots as to_lambda prints it, max_chars the budget of all of them together (pgad.derivatives
    prints a derivative per weight: each may repeat the same long subexpression)."""
    return _Printer(lam, max_chars).texts(roots)


def to_listing(graph, roots):
    """The DAG under roots, one node a line in topological order: `%7 = mul(%3, %5)`."""
    lines = []
    for i in graph.ancestors(roots):
        bounds.tick()
        node = graph.nodes[i]
        what = (_number(node.value) if node.op == 'const' else f'{node.op} {identifier(node.value)}'
                if node.op in ('column', 'weight') else f'{node.op}({", ".join(f"%{a}" for a in node.args)})')
        lines.append(f'%{i} = {what}' + ('   ← output' if i in roots else ''))
    return '\n'.join(lines)


def quote_ident(name):
    """PostgreSQL's quote_ident: always quoted, so any name is safe to splice into SQL."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text):
    """PostgreSQL's quote_literal: quotes doubled, and backslashes too behind E when there are any."""
    quoted = "'" + text.replace("'", "''").replace('\\', '\\\\') + "'"
    return 'E' + quoted if '\\' in text else quoted


def identifier(name):
    """A name as the lambda language writes it: bare where it folds to itself (lower case, a letter or _ first),
    else quoted."""
    plain = name.isidentifier() and name == name.lower() and name.isascii()
    return name if plain else quote_ident(name)


def parameter(name):
    """A lambda's parameter name as the parser reads it back: quoted where it is not a plain name, or a keyword."""
    return quote_ident(name) if name in KEYWORDS else identifier(name)


def _number(value):
    if isinstance(value, bool):
        return 'TRUE' if value else 'FALSE'
    if math.isinf(value) or math.isnan(value):
        return {math.inf: "'Infinity'", -math.inf: "-'Infinity'"}.get(value, "'NaN'")
    text = repr(value)
    return text[:-2] if text.endswith('.0') else text


class _Printer:
    """Prints in two passes, neither recursive, both linear: in topological order, each node's template (its text
    with its arguments' places, the parentheses decided from their precedence) and its length; then the text spelt
    out from the root. A long chain of + is as deep as it is long, and building each node's text from its arguments'
    would copy that chain quadratically."""

    def __init__(self, lam, max_chars):
        self.lam, self.graph, self.max_chars = lam, lam.graph, max_chars

    def texts(self, roots):
        templates, precedence, length = {}, {}, {}
        for i in self.graph.ancestors(roots):
            bounds.tick()
            templates[i], precedence[i] = self._template(i, precedence)
            length[i] = sum(len(p) if isinstance(p, str) else length[p] for p in templates[i])
            if length[i] > self.max_chars:
                raise self.too_long()
        if sum(length[i] for i in roots) > self.max_chars:
            raise self.too_long()
        return spell(templates, roots)

    def too_long(self):
        return PgadError('54001', f'expression is too long to print: more than {self.max_chars} characters',
                         detail=f'pgad prints at most {PRINTED_PER_BYTE} times pgad.max_lambda_bytes characters in '
                                'one call; the DAG shares subexpressions that the text repeats.',
                         hint='Write a smaller lambda, or have a superuser raise pgad.max_lambda_bytes.')

    def _template(self, i, precedence):
        """(node i's text as a list of strings and its arguments' ids, its precedence)."""
        node = self.graph.nodes[i]
        if node.op == 'const':
            text = _number(node.value)
            return [text], PREFIX['neg'][1] if text.startswith('-') else ATOM
        if node.op == 'column':
            return [f'{parameter(self.lam.row)}.{identifier(node.value)}'], ATOM
        if node.op == 'weight' and self.lam.state is not None and node.value.startswith(STATE):  # s.level
            return [f'{parameter(self.lam.state)}.{identifier(node.value[len(STATE):])}'], ATOM
        if node.op == 'weight':
            return [f'{parameter(self.lam.params)}.{identifier(node.value)}'], ATOM
        if node.op == 'truth':  # a boolean column reads as itself
            column, = node.args
            return [column], precedence[column]
        if node.op in INFIX:
            symbol, prec = INFIX[node.op]
            left, right = node.args
            lp, rp = precedence[left], precedence[right]
            comparison = prec == INFIX['eq'][1]  # comparisons do not chain: (a > b) = (c > d) keeps both
            left = (['(', left, ')'] if lp < prec or (comparison and lp == prec) or
                    (node.op == 'pow' and lp == PREFIX['neg'][1]) else [left])
            right = ['(', right, ')'] if rp <= prec or rp == PREFIX['neg'][1] else [right]
            space = ' ' if prec < 8 or node.op == 'matmul' else ''
            return [*left, f'{space}{symbol}{space}', *right], prec
        if node.op in PREFIX:
            symbol, prec = PREFIX[node.op]
            arg, = node.args
            ap = precedence[arg]
            return ([f'{symbol}(', arg, ')'] if ap < prec or ap == PREFIX['neg'][1] and symbol == '-' else
                    [symbol, arg]), prec
        if node.op == 'case':
            condition, then, other = node.args
            return ['CASE WHEN ', condition, ' THEN ', then, ' ELSE ', other, ' END'], ATOM
        if node.op == 'index':  # v[i], v parenthesised unless an atom
            v, k = node.args
            return [*([v] if precedence[v] == ATOM else ['(', v, ')']), '[', k, ']'], ATOM
        if node.op == 'stack':  # [a, b, c]
            parts = ['[']
            for k, a in enumerate(node.args):
                parts += [', ', a] if k else [a]
            return [*parts, ']'], ATOM
        parts = [f'{LAMBDA_NAMES.get(node.op, node.op)}(']
        for k, a in enumerate(node.args):
            parts += [', ', a] if k else [a]
        return [*parts, ')'], ATOM


def spell(templates, roots):
    """The text of each node of roots: its template with each argument's id replaced by that argument's text, depth
    first without recursion. The text of a node that several templates (or roots) hold is joined once and then
    reused: each such text is part of a result, so this costs the results' length again at most, and copies it in C,
    not part by part."""
    uses = {}
    for part in [*roots, *(p for template in templates.values() for p in template)]:
        if not isinstance(part, str):
            uses[part] = uses.get(part, 0) + 1
    done = {}
    for root in roots:
        if root in done:
            continue
        out, stack = [], [(root, 0, 0)]
        while stack:
            i, k, start = stack.pop()
            template = templates[i]
            if k == len(template):
                if uses[i] > 1:
                    done[i] = ''.join(out[start:])
                    del out[start:]
                    out.append(done[i])
                continue
            stack.append((i, k + 1, start))
            part = template[k]
            if isinstance(part, str):
                out.append(part)
            elif part in done:
                out.append(done[part])
            else:
                bounds.tick()
                stack.append((part, 0, len(out)))
        done[root] = ''.join(out)
    return [done[root] for root in roots]
