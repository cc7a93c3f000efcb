"""standardize => true: training on centred and scaled columns, the weights returned in the original units.

A column x can be replaced by z = (x − m)/s for training when the model reads it only through affine forms: sums
(of +, − and unary −) whose terms are w.a*d.x, or w.W @ [d.x1, …, d.xp], each weight appearing nowhere else, and
which may hold an intercept, a weight of its own standing alone as a term, and categorical terms w.c[d.k] (whose
column is no number, and is left alone). For such a form
    Σ ±a·(x − m)/s + ±c  =  Σ ±(a/s)·x + ±(c ∓ Σ ±a·m/s),
so a fit in z's units is a fit in x's with a → a/s and the intercept taking up the means (back()), and starting
weights move the other way (forward()). A form whose weights are vectors (a number per class, per hidden unit) is
that form element by element: a[i]·x + … + c[i], and w.W @ [x1, …, xp] + c is Σⱼ W[i, j]·xⱼ + c[i] for each row i
(at() writes a Plan's forms out by element, the weights' shapes known). A column is centred (m its mean) only when
every form it appears in has an intercept to take the mean up; otherwise it is only scaled (m = 0). s is the
population standard deviation, 1 for a column that does not vary. Linear, logistic and multinomial regression are
one form; a layer of tanh(...) is one form a unit.
"""
from dataclasses import dataclass, replace

import numpy as np

from ..errors import PgadError
from ..lang import vectors

ADDITIVE = ('add', 'sub', 'neg')


@dataclass(frozen=True)
class Form:
    terms: tuple     # (coefficient weight, column, sign ±1.0) of each term w.a*d.x; (W, (x1, …, xp), sign) of W @ […]
    intercept: str   # the intercept weight, or None
    sign: float      # the intercept's sign in the form


@dataclass(frozen=True)
class Plan:
    forms: tuple
    columns: tuple   # the columns standardised: every column the model reads as a number
    centred: frozenset


def plan(model):
    """The Plan of the model lambda: its affine forms; 0A000 naming a column it reads in any other way."""
    graph = model.graph
    nodes = graph.nodes
    users = {}
    for i in graph.ancestors([model.root]):
        for a in nodes[i].args:
            users.setdefault(a, []).append(i)
    column_of, categorical = {}, set()  # term node → its (weight, column or columns); the columns of categories
    for i in graph.ancestors([model.root]):
        node = nodes[i]
        if node.op == 'column':
            for user in users.get(i, []) or [None]:
                if user is not None and nodes[user].op == 'index' and nodes[user].args[1] == i:
                    categorical.add(node.value)  # w.c[d.k]: a category's weight, no number to scale
                    continue
                term = _term(nodes, user, users) if user is not None else None
                if term is None:
                    raise PgadError('0A000', f'standardize => true needs a model linear in column "{node.value}"',
                                    detail='With standardize, every column the model reads must enter it only as '
                                           'w.a*d.column or w.W @ [d.column, …], a weight of its own for each term, '
                                           'in sums that may hold an intercept weight.',
                                    hint='Train without standardize, or scale the column in the data query.')
                column_of[term[0]] = term[1:]
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
    numbers = tuple(c for c in model.columns if c not in categorical)
    uncentred = {column for form in forms if form.intercept is None for _, read, _ in form.terms
                 for column in _columns(read)}
    return Plan(tuple(forms), numbers, frozenset(numbers) - uncentred)


def _columns(read):
    return read if isinstance(read, tuple) else (read,)


def _term(nodes, i, users):
    """(node, weight, column) of the term a column's use i stands in when it is w.a*d.x (or d.x*w.a), or
    (node, W, (x1, …, xp)) when it is the [d.x1, …, d.xp] of w.W @ [...], each weight used there alone; else None."""
    node = nodes[i]
    if node.op == 'stack' and len(users.get(i, [])) == 1 and all(nodes[a].op == 'column' for a in node.args) and \
            len(set(node.args)) == len(node.args):
        product = users[i][0]
        weight = nodes[product].args[0]
        if nodes[product].op == 'matmul' and nodes[product].args[1] == i and nodes[weight].op == 'weight' and \
                len(users[weight]) == 1:
            return product, nodes[weight].value, tuple(nodes[a].value for a in node.args)
        return None
    if node.op != 'mul':
        return None
    kinds = {nodes[a].op: nodes[a] for a in node.args}
    if set(kinds) != {'weight', 'column'}:
        return None
    weight = next(a for a in node.args if nodes[a].op == 'weight')
    return (i, kinds['weight'].value, kinds['column'].value) if len(users[weight]) == 1 else None


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


def at(plan, shapes):
    """The plan with its forms written out by element, the weights' shapes known ({weight: shape}, a number's
    absent or ()): a form of vectors is a form per element, its terms and intercept named 'a[2]'; 0A000 where a
    form's terms and intercept are not of one shape, which no element-wise intercept could take up."""
    forms = []
    for form in plan.forms:
        outs = {_out(shapes.get(weight, ()), read) for weight, read, _ in form.terms}
        if form.intercept is not None:
            outs.add(tuple(shapes.get(form.intercept, ())))
        if len(outs) != 1 or None in outs:
            raise PgadError('0A000', 'standardize => true needs each affine form\'s weights of one shape',
                            detail='Terms ' + ', '.join(w for w, _, _ in form.terms) +
                                   (f' and intercept {form.intercept}' if form.intercept else '') +
                                   ' have different shapes, so no element of the intercept can take up a mean.',
                            hint='Give the terms and the intercept of a sum the same shape, or train without '
                                 'standardize.')
        out = outs.pop()
        for index in np.ndindex(*out):
            at_ = tuple(k + 1 for k in index)
            terms = []
            for weight, read, sign in form.terms:
                if isinstance(read, tuple):  # W @ [x1, …, xp]: row index of W, column j
                    terms.extend((vectors.element(weight, (*at_, j + 1)), x, sign) for j, x in enumerate(read))
                else:
                    terms.append((vectors.element(weight, at_), read, sign))
            forms.append(Form(tuple(terms), None if form.intercept is None else
                              vectors.element(form.intercept, at_), form.sign))
    return replace(plan, forms=tuple(forms))


def _out(shape, read):
    """The shape of a term's value: its weight's for w.a*d.x, a row per row of W for W @ [...] (None where W's
    columns are not the columns'), as the lambda's own shapes rule it."""
    shape = tuple(shape)
    if not isinstance(read, tuple):
        return shape
    return shape[:-1] if shape and shape[-1] == len(read) else None


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
