"""Explanations from the derivatives: each feature's contribution to one prediction, as SQL (a model's
pgad_models.<name>_explain) and over whole numpy columns (pgad.importance).

A feature is a column the model reads: a number, each element of a float8[] column ('pixels[3]'), or a categorical
weight's column. The contributions are integrated gradients (Sundararajan et al., 2017) along the straight path from
the baseline x̄, the training rows' means, to the row x:

    φᵢ(x) = (xᵢ − x̄ᵢ) · ∫₀¹ ∂f/∂xᵢ(x̄ + α(x − x̄)) dα  ≈  (xᵢ − x̄ᵢ) · Σₖ ωₖ ∂f/∂xᵢ(x̄ + αₖ(x − x̄)),

the integral by Gauss–Legendre quadrature with NODES nodes αₖ on [0, 1], weights ωₖ. They sum to f(x) − f(x̄)
(completeness), exactly but for the quadrature's error, which for a model analytic along the path (a tanh or sigmoid
layer, a polynomial of degree below 2·NODES) is at rounding's level; a model with kinks (relu, abs, greatest) has an
error of the order of the kink's jump in slope over NODES²; one with jumps (a CASE on a column, a comparison) has
a gradient of 0 almost everywhere and completeness does not hold across the jump. ∂f/∂xᵢ is pgad's own symbolic
derivative: the model's DAG differentiated by its columns in reverse mode (reverse.gradient by 'column'), written as
SQL by lang/sql.py's expression writer with the path point in place of each column. Where ∂f/∂xᵢ reads no column
(f linear in xᵢ: a linear or logistic model's score), it is a number and φᵢ = wᵢ·(xᵢ − x̄ᵢ) exactly, with no quadrature.

A categorical weight read as w.a[d.c] is a lookup: the CASE over the column's code that vectors._index unrolls. Each
lookup is made a leaf of its own (its value t = w.a[code] the feature's value, its baseline the training rows' mean of
t), and the column's contribution is the sum of its lookups' integrated gradients: for an additive model (∂f/∂t = 1)
exactly t(x) − mean(t), a category's weight less the mean weight over the training rows.
"""
import json
from dataclasses import dataclass

import numpy as np

from ..python_backend import values
from ..errors import PgadError
from ..lang import printer, reverse, sql
from ..lang.dag import Graph
from . import preprocess

NODES = 32  # Gauss–Legendre nodes: exact for polynomials of degree 63 along the path
_t, _w = np.polynomial.legendre.leggauss(NODES)
ALPHAS, OMEGAS = (_t + 1) / 2, _w / 2  # on [0, 1]


class Unexplained(Exception):
    """Why a model gets no explanation (said in a NOTICE by pgad.train)."""


@dataclass
class Explainer:
    """A model prepared for explanations: its graph with each categorical lookup a leaf ('column' node named
    ('lookup', column, k)), the prediction's elements, each feature's leaves, ∂output/∂leaf of each output."""
    source: object     # the model's (unrolled) Lambda, where the lookups' values are written from
    graph: Graph       # the model with the lookups as leaves, and the derivatives
    outputs: list      # node ids in graph of the prediction's elements (one for a number)
    features: list     # [(feature name, [its leaves])], in the order of the model's columns
    lookups: dict      # lookup leaf → its node in source's graph
    gradients: list    # per output, {leaf: node id in graph of ∂output/∂leaf}
    vector: bool       # is the prediction a vector (of one element or more)?

    @property
    def leaves(self):
        return [leaf for _, leaves in self.features for leaf in leaves]


def explainer(lam, prediction, categorical=()):
    """The Explainer of model lam (an unrolled Lambda) predicting prediction (an object array of its nodes, shape ()
    or (n,)), categorical its columns that index categorical weights; Unexplained where a categorical column is read
    other than through a lookup. 54001 (PgadError) where the derivatives pass pgad.max_lambda_nodes."""
    src, outputs = lam.graph, [e.id for e in prediction.flat]
    lookups = _lookups(src, outputs, set(categorical))
    graph = Graph(src.max_nodes)
    graph.exact = True  # the model as training read it: no rule that hides a NaN
    new, stack, order = {}, list(outputs), set()
    while stack:  # the ancestors of the outputs, a lookup a leaf
        i = stack.pop()
        if i not in order:
            order.add(i)
            if i not in lookups:
                stack.extend(src.nodes[i].args)
    leaf_of, counted = {}, {}
    for i in sorted(order):
        node = src.nodes[i]
        if i in lookups:
            counted[lookups[i]] = counted.get(lookups[i], 0) + 1
            leaf_of[i] = ('lookup', lookups[i], counted[lookups[i]])
            new[i] = graph.column(leaf_of[i]).id
        elif node.op == 'const':
            new[i] = graph.const(node.value).id
        elif node.op == 'column':
            if node.value in categorical:
                raise Unexplained(f'column "{node.value}" indexes a categorical weight and is read otherwise too')
            new[i] = graph.column(node.value).id
        elif node.op == 'weight':
            new[i] = graph.weight(node.value).id
        else:
            new[i] = graph.apply(node.op, *[graph.expr(new[a]) for a in node.args]).id
    roots = [new[i] for i in outputs]
    read = {graph.nodes[k].value for k in new.values() if graph.nodes[k].op == 'column'}
    features = []
    for column in lam.columns:  # the scalar and element columns, in order of first use
        leaves = [leaf_of[i] for i in sorted(leaf_of) if lookups[i] == column] if column in categorical else \
            [column] if column in read else []
        if leaves:
            features.append((str(column), leaves))
    leaves = [leaf for _, ls in features for leaf in ls]
    gradients = [reverse.gradient(graph, root, leaves, by='column') for root in roots]
    squared = _squares(graph, [i for g in gradients for i in g.values()])
    gradients = [{leaf: squared[i] for leaf, i in g.items()} for g in gradients]
    return Explainer(lam, graph, roots, features, {leaf: i for i, leaf in leaf_of.items()}, gradients,
                     prediction.ndim > 0)


def _squares(graph, roots):
    """{node: the node with each x^2 under it written x·x} of the roots (the derivatives' 1 − tanh², u'·2u…): the SQL
    writer's x^2 guards the underflow of power and writes x five times, x·x twice; the value is the same (numpy's x²
    is x·x), but for PostgreSQL's 22003 where |x| < 1.5e-154 and not 0, a gap of the writer's own products."""
    nodes, new = graph.nodes, {}
    for i in graph.ancestors(roots):
        node = nodes[i]
        args = [new.get(a, a) for a in node.args]
        if node.op == 'pow' and nodes[node.args[1]].op == 'const' and nodes[node.args[1]].value == 2.0:
            new[i] = graph.apply('mul', graph.expr(args[0]), graph.expr(args[0])).id
        elif args != list(node.args):
            new[i] = graph.apply(node.op, *[graph.expr(a) for a in args]).id
    return {i: new.get(i, i) for i in roots}


def _lookups(graph, outputs, categorical):
    """{node: column} of the categorical lookups under outputs: the top of each chain of CASEs testing a categorical
    column's code (vectors._index's case(c = K, a[K], case(c = K−1, …))), in the graph's order."""
    nodes, chain = graph.nodes, {}
    for i in graph.ancestors(outputs):
        node = nodes[i]
        if node.op == 'case':
            test = nodes[node.args[0]]
            if test.op == 'eq' and nodes[test.args[0]].op == 'column' and nodes[test.args[0]].value in categorical \
                    and nodes[test.args[1]].op == 'const':
                chain[i] = nodes[test.args[0]].value
    inner = {nodes[i].args[2] for i in chain if chain.get(nodes[i].args[2]) == chain[i]}
    return {i: c for i, c in chain.items() if i not in inner}


# The baseline: the training rows' means of the leaves, and the prediction there.

def leaf_values(ex, columns, weights, rows):
    """{leaf: its values over the rows} of columns ({column name: array}) and weights ({element: number})."""
    found = dict(zip(ex.lookups, values(ex.source.graph, list(ex.lookups.values()), columns, weights, rows)))
    return {leaf: found[leaf] if leaf in ex.lookups else np.asarray(columns[leaf], dtype=np.float64)
            for leaf in ex.leaves}


def baseline(ex, columns, weights, rows):
    """(options.baseline: {feature: the training rows' mean; a categorical column's, of its lookup's value (a list
    with more than one lookup)}, options.baseline_prediction: the prediction at the means, a number or a list)."""
    means = {leaf: preprocess.central(np.broadcast_to(v, (rows,)), np.mean)  # finite where a sum would overflow
             for leaf, v in leaf_values(ex, columns, weights, rows).items()}
    shown = {}
    for feature, leaves in ex.features:
        shown[feature] = means[leaves[0]] if len(leaves) == 1 else [means[leaf] for leaf in leaves]
    at = values(ex.graph, ex.outputs, {leaf: np.array([m]) for leaf, m in means.items()}, weights, 1)
    prediction = [float(v[0]) for v in at]
    return shown, prediction if ex.vector else prediction[0]


def means_of(ex, shown):
    """{leaf: mean} from options.baseline (baseline's first value)."""
    out = {}
    for feature, leaves in ex.features:
        value = shown[feature]
        for leaf, m in zip(leaves, value if isinstance(value, list) else [value]):
            out[leaf] = float(m)
    return out


# Over numpy columns: pgad.importance.

def contributions(ex, columns, weights, shown, rows):
    """[per output {feature: its contribution over the rows}] at the baseline shown (options.baseline). The server's
    interrupts are checked as values() evaluates each node (limits.tick)."""
    means = means_of(ex, shown)
    x = leaf_values(ex, columns, weights, rows)
    delta = {leaf: x[leaf] - means[leaf] for leaf in ex.leaves}
    per_row = ex.graph.depends_on_data()
    roots = [g[leaf] for g in ex.gradients for leaf in ex.leaves]
    varying = sorted({r for r in roots if per_row[r]})
    total = {r: np.zeros(rows) for r in varying}
    for alpha, omega in zip(ALPHAS, OMEGAS):
        point = {leaf: (means[leaf] - alpha * means[leaf]) + alpha * x[leaf] for leaf in ex.leaves}
        for r, v in zip(varying, values(ex.graph, varying, point, weights, rows)):
            total[r] += omega * v
    fixed = dict(zip([r for r in roots if not per_row[r]],
                     values(ex.graph, [r for r in roots if not per_row[r]], {}, weights, 1)))
    out = []
    for g in ex.gradients:
        out.append({feature: sum((total[g[leaf]] if per_row[g[leaf]] else fixed[g[leaf]][0]) * delta[leaf]
                                 for leaf in leaves) for feature, leaves in ex.features})
    return out


# As SQL: the body of <name>_explain.

def explanation_sql(ex, columns, weights, shown, keys, limit):
    """The jsonb expression of the contributions at a row, columns {column: its SQL} (a scoring function's), weights
    {element: number}, shown options.baseline; keys the names of a vector prediction's elements (options.classes),
    or None: an array of objects. 54001 (PgadError) where the text passes limit characters."""
    means = means_of(ex, shown)
    source_rows = ex.source.graph.depends_on_data()
    source = {leaf: sql.expression(ex.source, i, columns, weights, limit, source_rows)
              for leaf, i in ex.lookups.items()}
    value = {leaf: source[leaf] if leaf in source else sql._column(columns, leaf) for leaf in ex.leaves}
    delta = {leaf: sql.op(value[leaf], '-', sql.literal(means[leaf])) for leaf in ex.leaves}
    paths = [{leaf: sql.op(sql.literal(means[leaf] - alpha * means[leaf]), '+', sql.op(sql.literal(alpha), '*',
                                                                                   value[leaf]))
              for leaf in ex.leaves} for alpha in ALPHAS]  # x̄ + α(x − x̄) as (x̄ − αx̄) + αx: x written once
    lam = _Lam(ex.graph)
    per_row = ex.graph.depends_on_data()
    used = [0]

    def spend(text):
        used[0] += len(text)
        if used[0] > limit:
            raise PgadError('54001', f'expression is too long to write as SQL: more than {limit} characters')
        return text

    def contribution(g, leaf):
        if not per_row[g[leaf]]:  # the model is linear in the leaf: its weight times the difference, exactly
            return sql.op(sql.expression(lam, g[leaf], {}, weights, limit, per_row), '*', delta[leaf])
        total = None
        for omega, path in zip(OMEGAS, paths):
            term = sql.op(sql.literal(omega), '*', spend(sql.expression(lam, g[leaf], path, weights, limit, per_row)))
            total = term if total is None else sql.op(total, '+', term)
        return sql.op(delta[leaf], '*', total)

    objects = []
    for g in ex.gradients:
        pairs = []
        for feature, leaves in ex.features:
            text = None
            for leaf in leaves:
                part = contribution(g, leaf)
                text = part if text is None else sql.op(text, '+', part)
            pairs.append((feature, spend(text)))
        objects.append(_object(pairs))
    if not ex.vector:
        return _json(objects[0])
    if keys is not None and len(keys) == len(objects):
        return _json(_object_of([(str(k), o) for k, o in zip(keys, objects)]))
    return _json([printer.quote_literal('[') + '::pg_catalog.text'] + _joined(objects, ',') +
                 [printer.quote_literal(']') + '::pg_catalog.text'])


class _Lam:
    """What sql.expression reads of a Lambda: its graph."""
    def __init__(self, graph):
        self.graph = graph


# The jsonb is written as JSON text cast to jsonb: jsonb_build_object is STABLE, and a STABLE function in the body of
# an IMMUTABLE one keeps the planner from inlining it. A float8 as text is float8out's (the shortest text that reads
# back exactly, at the default extra_float_digits), NaN and ±Infinity quoted as strings as jsonb_build_object does.

def _number(text):
    return (f"pg_catalog.regexp_replace(({text})::pg_catalog.text, '^(-?Infinity|NaN)$', E'\"\\\\1\"')")


def _text(piece):
    return printer.quote_literal(piece) + '::pg_catalog.text'


def _object(pairs):
    """The parts (SQL texts) of a JSON object of {name: the float8 SQL}."""
    parts = []
    for k, (name, value) in enumerate(pairs):
        parts.append(_text(('{' if k == 0 else ',') + json.dumps(name) + ':'))
        parts.append(_number(value))
    parts.append(_text('}' if pairs else '{}'))
    return parts


def _object_of(named):
    parts = []
    for k, (name, inner) in enumerate(named):
        parts.append(_text(('{' if k == 0 else ',') + json.dumps(name) + ':'))
        parts.extend(inner)
    parts.append(_text('}'))
    return parts


def _joined(objects, separator):
    parts = []
    for k, o in enumerate(objects):
        if k:
            parts.append(_text(separator))
        parts.extend(o)
    return parts


def _json(parts):
    return '(' + ' OPERATOR(pg_catalog.||) '.join(parts) + ')::pg_catalog.jsonb'
