"""standardize => true: training on centred and scaled columns, the weights returned in the original units.

A column x can be replaced by z = (x − m)/s for training when the model reads it only through affine forms: sums
(of +, − and unary −) whose terms are w.a*d.x, each coefficient a weight that appears nowhere else, and which may
hold an intercept, a weight of its own standing alone as a term. For such a form
    Σ ±a·(x − m)/s + ±c  =  Σ ±(a/s)·x + ±(c ∓ Σ ±a·m/s),
so a fit in z's units is a fit in x's with a → a/s and the intercept taking up the means (back()), and starting
weights move the other way (forward()). A column is centred (m its mean) only when every form it appears in has an
intercept to take the mean up; otherwise it is only scaled (m = 0). s is the population standard deviation, 1 for
a column that does not vary. Linear and logistic regression are one form; a layer of tanh(...) is one form a unit.
"""
from dataclasses import dataclass

import numpy as np

from ..errors import PgadError

ADDITIVE = ('add', 'sub', 'neg')


@dataclass(frozen=True)
class Form:
    terms: tuple     # (coefficient weight, column, sign ±1.0) of each term w.a*d.x
    intercept: str   # the intercept weight, or None
    sign: float      # the intercept's sign in the form


@dataclass(frozen=True)
class Plan:
    forms: tuple
    columns: tuple   # the columns standardised: every column the model reads
    centred: frozenset


def plan(model):
    """The Plan of the model lambda: its affine forms; 0A000 naming a column it reads in any other way."""
    graph = model.graph
    nodes = graph.nodes
    users = {}
    for i in graph.ancestors([model.root]):
        for a in nodes[i].args:
            users.setdefault(a, []).append(i)
    column_of = {}  # term node → its (weight, column)
    for i in graph.ancestors([model.root]):
        node = nodes[i]
        if node.op == 'column':
            for user in users.get(i, []) or [None]:
                term = _term(nodes, user, users) if user is not None else None
                if term is None:
                    raise PgadError('0A000', f'standardize => true needs a model linear in column "{node.value}"',
                                    detail='With standardize, every column the model reads must enter it only as '
                                           'w.a*d.column, a weight of its own for each term, in sums that may hold '
                                           'an intercept weight.',
                                    hint='Train without standardize, or scale the column in the data query.')
                column_of[user] = term
    forms, seen = [], set()
    for term in column_of:
        top = term
        while len(users.get(top, [])) == 1 and nodes[users[top][0]].op in ADDITIVE:
            top = users[top][0]
        if top in seen:
            continue
        seen.add(top)
        terms, intercept, sign = [], None, 1.0
        for leaf, leaf_sign in _leaves(nodes, users, top):
            if leaf in column_of:
                terms.append((*column_of[leaf], leaf_sign))
            elif intercept is None and nodes[leaf].op == 'weight' and len(users[leaf]) == 1:
                intercept, sign = nodes[leaf].value, leaf_sign
        forms.append(Form(tuple(terms), intercept, sign))
    uncentred = {column for form in forms if form.intercept is None for _, column, _ in form.terms}
    return Plan(tuple(forms), tuple(model.columns), frozenset(model.columns) - uncentred)


def _term(nodes, i, users):
    """(weight, column) of node i when it is w.a*d.x (or d.x*w.a) with w.a used there alone, else None."""
    node = nodes[i]
    if node.op != 'mul':
        return None
    kinds = {nodes[a].op: nodes[a] for a in node.args}
    if set(kinds) != {'weight', 'column'}:
        return None
    weight = next(a for a in node.args if nodes[a].op == 'weight')
    return (kinds['weight'].value, kinds['column'].value) if len(users[weight]) == 1 else None


def _leaves(nodes, users, top):
    """The terms of the sum at node top, with their signs: it and the +, −, unary − below it used only there."""
    out, stack = [], [(top, 1.0)]
    while stack:
        i, sign = stack.pop()
        node = nodes[i]
        if node.op in ADDITIVE and (i == top or len(users[i]) == 1):
            signs = (-1.0,) if node.op == 'neg' else (1.0, -1.0) if node.op == 'sub' else (1.0, 1.0)
            stack.extend((a, sign * s) for a, s in zip(node.args, signs))
        else:
            out.append((i, sign))
    return out


def moments(plan, columns):
    """({column: mean}, {column: standard deviation}) of columns ({name: array}): mean 0 where not centred."""
    mean = {c: float(np.mean(columns[c])) if c in plan.centred else 0.0 for c in plan.columns}
    std = {c: float(np.std(columns[c] - mean[c])) for c in plan.columns}
    return mean, {c: s if s > 0 and np.isfinite(s) else 1.0 for c, s in std.items()}


def scale(column, mean, std):
    return (column - mean) / std


def forward(plan, weights, mean, std):
    """Weights in the original units → the same model's weights over the standardised columns."""
    w = dict(weights)
    for form in plan.forms:
        for a, x, sign in form.terms:
            w[a] = weights[a] * std[x]
        if form.intercept is not None:
            w[form.intercept] += form.sign * sum(sign * weights[a] * mean[x] for a, x, sign in form.terms)
    return w


def back(plan, weights, mean, std):
    """Weights over the standardised columns → the same model's weights in the original units."""
    w = dict(weights)
    for form in plan.forms:
        for a, x, sign in form.terms:
            w[a] = weights[a] / std[x]
        if form.intercept is not None:
            w[form.intercept] -= form.sign * sum(sign * weights[a] * mean[x] / std[x] for a, x, sign in form.terms)
    return w
