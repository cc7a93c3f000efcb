"""A model and a loss → the objective of one row, as a lambda: pgad.train's stage before the program.

The model is a prediction lambda `λ(d, w) <expr>`; the loss is a lambda `λ(p, d) <expr>` of the prediction p and
the row d, or one of the named losses below over the label column. The objective of a row is loss(model(d, w), d),
built in the model's DAG (parser.parse_loss) and printed back as a lambda `λ(d, w) …` (printer.to_lambda): the text
the program, the kernel cache and every backend take, as for pgad.gradient_descent. Nothing of the user's text is
pasted: the objective is printed from its DAG.
"""
import math
import re
from dataclasses import dataclass, replace

import numpy as np

from ..errors import PgadError
from ..lang import parser, printer, vectors
from ..lang.rules import call

abs_, exp, least, relu, softplus = call('abs'), call('exp'), call('least'), call('relu'), call('softplus')
logsumexp, index = call('logsumexp'), call('index')

# name → the loss of prediction p and label y (and the loss's parameter, PARAMETERS), as a DAG expression
LOSSES = {
    'squared': lambda p, y: (p - y) ** 2,
    'absolute': lambda p, y: abs_(p - y),
    'logistic': lambda p, y: softplus(p) - y * p,  # labels 0/1: −(y·ln σ(p) + (1−y)·ln(1−σ(p))), stable for any p
    'hinge': lambda p, y: relu(1 - y * p),          # labels −1/1
    'poisson': lambda p, y: exp(p) - y * p,         # log link, mean exp(p): −ln P(y; exp(p)) but for ln y!
    'gamma': lambda p, y: y * exp(-p) + p,          # log link, mean exp(p): −ln of the gamma density, shape aside
    'huber': lambda p, y, delta: (0.5 * least(abs_(p - y), delta) ** 2  # ½r² where |r| ≤ δ, δ·|r| − ½δ² beyond
                                  + delta * relu(abs_(p - y) - delta)),
    'quantile': lambda p, y, tau: tau * relu(y - p) + (1 - tau) * relu(p - y),  # the pinball loss of quantile τ
    'softmax': lambda p, y: logsumexp(p) - index(p, y),  # p the K logits, y the class's code 1 … K (classes.py)
}

# name → (its parameter, the value where none is given, whether a value is in range, the range in words): a loss
# written name or name(number), stored as name(number) (canonical)
PARAMETERS = {
    'huber': ('δ', 1.0, lambda v: v > 0, 'greater than 0'),
    'quantile': ('τ', 0.5, lambda v: 0 < v < 1, 'between 0 and 1, both excluded'),
}
NUMBER = r'[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?'
PARAMETERISED = re.compile(rf'({"|".join(PARAMETERS)})\s*\(\s*({NUMBER})\s*\)', re.ASCII)
NAMES = "'squared', 'absolute', 'logistic', 'hinge', 'poisson', 'gamma', 'huber' ('huber(1.35)'), 'quantile' " \
        "('quantile(0.9)'), 'softmax'"


def named(loss):
    """(name, parameter or None) of a named loss, written as pgad.train takes it ('huber', 'huber(1.35)'); None for
    a lambda or an unknown name; 22023 for a parameter out of its range."""
    if loss in PARAMETERS:
        return loss, PARAMETERS[loss][1]
    if loss in LOSSES:
        return loss, None
    found = PARAMETERISED.fullmatch(loss)
    if found is None:
        written = re.match(rf'({"|".join(PARAMETERS)})\s*\(', loss)
        if written:
            symbol, default, _, said = PARAMETERS[written.group(1)]
            raise PgadError('22023', f'loss "{loss}" is not {written.group(1)}(number)',
                            hint=f"Write loss => '{written.group(1)}' for {symbol} = {default:g}, or "
                                 f"'{written.group(1)}(x)' with x a number {said}, as '{written.group(1)}(0.9)'.")
        return None
    name, value = found.group(1), float(found.group(2))
    symbol, _, fits, said = PARAMETERS[name]
    if not (math.isfinite(value) and fits(value)):
        raise PgadError('22023', f'loss "{loss}" has {symbol} = {found.group(2)}, but {symbol} must be {said}',
                        hint=f"Write loss => '{name}' for {symbol} = {PARAMETERS[name][1]:g}, or '{name}(x)' with x "
                             f'{said}.')
    return name, value


def base(loss):
    """The name of a named loss ('huber' for 'huber(1.35)'), or None for a lambda."""
    found = named(loss) if isinstance(loss, str) else None
    return None if found is None else found[0]


def canonical(loss):
    """loss as pgad.models stores it: a parameterised loss as name(number), its parameter as Python writes the
    float ('huber' → 'huber(1.0)'); any other text as it is."""
    found = named(loss)
    if found is None or found[1] is None:
        return loss
    return f'{found[0]}({found[1]!r})'


# name → (whether each of a column's values is a label it takes, the labels in words, the hint of the error)
LABELS = {
    'logistic': (lambda v: np.isin(v, (0.0, 1.0)), '0 or 1',
                 "Map the labels in the data query ((y + 1) / 2 AS y, for −1/1 labels), or use loss 'hinge', which "
                 "takes −1/1."),
    'hinge': (lambda v: np.isin(v, (-1.0, 1.0)), '-1 or 1',
              "Map the labels in the data query (2 * y - 1 AS y, for 0/1 labels), or use loss 'logistic', which "
              "takes 0/1."),
    'poisson': (lambda v: np.isfinite(v) & (v >= 0), '0 or more',
                "A count or a rate is at least 0: filter the rows in the data query (WHERE y >= 0), or use loss "
                "'squared'."),
    'gamma': (lambda v: np.isfinite(v) & (v > 0), 'greater than 0',
              "The gamma loss is the deviance of positive amounts: filter the rows in the data query (WHERE y > 0), "
              "or use loss 'poisson', which takes 0."),
}
NUMBER_LABELS = ('squared', 'absolute', 'huber', 'quantile')  # the named losses of any number, unchecked
BOOLEAN_LABELS = ('logistic',)  # the named losses that take a boolean label column, read as 1 (true) or 0 (false)


class NumberLabel(str):
    """The label column of a named loss, as the loader reads it: a number; a column of another type, a text or an
    enum of classes most likely, is refused with a hint for labels (not_a_number), not a feature's."""
    loss = None

    def __new__(cls, name, loss=None):
        column = super().__new__(cls, name)
        column.loss = base(loss)
        return column

    def not_a_number(self, kind):
        """The error for this label in a column of type kind (its name), which is not a number."""
        said = LABELS[self.loss][1] if self.loss in LABELS else 'that are numbers'
        return PgadError('42804', f'loss "{self.loss}" takes labels {said}, but column "{self}" is of type {kind}',
                         hint="For classes, train with loss 'softmax' (many classes: a text, enum or integer label) "
                              "or 'logistic' (two classes); or map the labels to numbers in the data query (CASE "
                              f"{printer.identifier(self)} WHEN … THEN 1 … END AS {printer.identifier(self)}).")


class Label(NumberLabel):
    """The label column of a named loss in LABELS, as the loader reads it: a number, or a boolean column, packed as
    1 (true) or 0 (false) where the loss takes one (BOOLEAN_LABELS) and refused where it does not (refusal)."""

    def refusal(self):
        """None where a boolean column may be this label; else the error that says how to map it."""
        if self.loss in BOOLEAN_LABELS:
            return None
        name = printer.identifier(self)
        return PgadError('42804', f'loss "{self.loss}" takes labels {LABELS[self.loss][1]}, but column "{self}" is of '
                                  'type boolean',
                         hint=f'Map it in the data query (CASE WHEN {name} THEN 1 ELSE '
                              f'{-1 if self.loss == "hinge" else 0} END AS {name}), or use loss '
                              "'logistic', which takes a boolean label.")


def labelled(lam, goal, loss):
    """lam (goal's objective, parsed or unrolled) as the loader reads it: every column goal's texts read (reads), one
    that the objective's DAG folded away among them, so that a NULL there skips the row in training as in pgad.loss;
    and its label column a Label under a named loss that checks its labels (a NumberLabel under one in
    NUMBER_LABELS), as it is under any other loss or where the model reads the label too (a number there)."""
    read = vectors.with_folded(lam.columns, goal.reads)
    kind = Label if base(loss) in LABELS else NumberLabel if base(loss) in NUMBER_LABELS else None
    if kind is None or set(goal.loss_columns) & set(goal.columns):
        return replace(lam, columns=read)
    return replace(lam, columns=[kind(c, loss) if c in goal.loss_columns else c for c in read])


LAMBDA = re.compile(r'\s*(λ|lambda\b)', re.IGNORECASE)


@dataclass(frozen=True)
class Objective:
    model: parser.Lambda   # the prediction lambda, parsed (its graph also holds the loss)
    text: str              # the objective of one row, λ(d, w) loss(model(d, w), d)
    columns: tuple         # the columns the model reads, in order of first use (the scoring function's arguments)
    loss_columns: tuple    # the columns the loss reads itself (the label)
    reads: tuple           # the columns the model's and the loss's texts read, the objective's DAG whatever it folded:
                           # a row with NULL in one is skipped (docs/sql.md), as pgad.loss skips it


def without_label(error, goal, loss):
    """error, or for a column missing from the data that is the label of a named loss, the error that says so."""
    missing = re.match(r'column "(.*)" does not exist in the data$', error.message)
    if base(loss) is None or not missing or missing.group(1) not in goal.loss_columns:
        return error
    return label_missing(missing.group(1), loss, error)


def label_missing(label, loss, error):
    """The error of a label column the data lacks, from loader.missing's (error, which holds the data's columns):
    that label defaults to y (the hint names the data's last column), or the data's column of that name in another
    case where it has one."""
    listed, detail = error.names, error.detail
    near = [n for n in listed if n.lower() == label.lower() and n != label]
    if near:
        hint = f"label => '{near[0]}': a label is named as the data spells it."
    elif label == 'y':
        shown = listed[-1] if listed else 'price'  # the data's last column, where a label often is
        hint = f"label is 'y' unless given: label => '{shown}' names the column the loss '{loss}' compares the " \
               'prediction with.'
    else:
        hint = f"label => '{label}' names the column the loss '{loss}' compares the prediction with: give one of " \
               'the data\'s columns (as it is spelt there, "Price" and price are two).'
    return PgadError('42703', f'the label column "{label}" is not in the data', detail=detail, hint=hint)


def build(model_text, loss, label, limits, coded=False):
    """The Objective of the model lambda under loss (a lambda text or a name in LOSSES), label naming the label
    column of a named loss; coded: a 'logistic' label of two classes read as its class's code 1 or 2 (classes.py),
    which the loss takes less 1."""
    model = parser.parse(model_text, limits)
    lam = objective_lambda(model, loss, label, limits, coded)
    text = f'λ({printer.parameter(model.row)}, {printer.parameter(model.params)}) ' + printer.to_lambda(lam, lam.root, printer.budget(limits))
    return Objective(model, text, tuple(model.columns), tuple(lam.own), tuple(lam.columns))


def objective_lambda(model, loss, label, limits, coded=False):
    """The objective of one row as a Lambda in the model's graph: loss (a name in LOSSES, or a lambda λ(p, d)) of
    the model's prediction; coded as build() takes it."""
    found = named(loss)
    if found is not None:
        graph, (kind, parameter) = model.graph, found
        given = () if parameter is None else (parameter,)
        y = graph.column(label) - 1 if coded and kind == 'logistic' else graph.column(label)
        body = LOSSES[kind](graph.expr(model.root), y, *given).id
        return parser.Lambda(loss, graph, body, model.row, model.params,
                             list(dict.fromkeys([*model.columns, label])), list(model.weights), [label])
    if LAMBDA.match(loss):
        return parser.parse_loss(loss, model, limits)
    raise PgadError('22023', f'unknown loss "{loss}"',
                    hint=f"loss is {NAMES} or a lambda λ(p, d) of the prediction p and the row d, for example "
                         "'λ(p, d) (p - d.y)^2'.")


# The smoothing of a piecewise-linear loss (piecewise.continued): each kink of the loss (not of the model), its width μ
# read from column SMOOTHING, replaced by a softplus that lies within μ·ln 2 above it (2μ·ln 2 for abs)
SMOOTHING = 'pgad μ'
SMOOTH = {
    'relu': lambda mu, z: mu * softplus(z / mu),
    'abs': lambda mu, z: z + 2 * mu * softplus(-z / mu),
    'greatest': lambda mu, a, b: a + mu * softplus((b - a) / mu),
    'least': lambda mu, a, b: a - mu * softplus((a - b) / mu),
}


def _loss_part(model_text, loss, label, limits):
    """(the model parsed, its objective's lambda, the nodes of the model's own prediction): the objective's other
    nodes are the loss's, whose kinks kinked and smoothed look at."""
    model = parser.parse(model_text, limits)
    return model, objective_lambda(model, loss, label, limits), set(model.graph.ancestors([model.root]))


def kinked(model_text, loss, label, limits):
    """Has the loss (not the model) a kink that SMOOTH smooths: relu, abs, greatest or least? False where the model
    or the loss reads a column named SMOOTHING, which the smoothing takes for its width."""
    model, lam, keep = _loss_part(model_text, loss, label, limits)
    if SMOOTHING in lam.columns:
        return False
    return any(model.graph.nodes[i].op in SMOOTH for i in model.graph.ancestors([lam.root]) if i not in keep)


def smoothed(model_text, loss, label, limits):
    """The text of the objective of model_text under loss with each relu, abs, greatest and least of the loss
    smoothed (SMOOTH) by the width the column SMOOTHING gives (a column neither reads: kinked); those of the model
    are left as they are."""
    model, lam, keep = _loss_part(model_text, loss, label, limits)
    graph = model.graph
    mu = graph.column(SMOOTHING)
    new = {}
    for i in graph.ancestors([lam.root]):
        node = graph.nodes[i]
        if i in keep or not node.args:
            new[i] = graph.expr(i)
            continue
        args = [new[a] for a in node.args]
        new[i] = SMOOTH[node.op](mu, *args) if node.op in SMOOTH else graph.apply(node.op, *args)
    root = new[lam.root].id
    return f'λ({printer.parameter(model.row)}, {printer.parameter(model.params)}) ' + \
        printer.to_lambda(replace(lam, root=root), root, printer.budget(limits))


def check_labels(loss, label, values, where=''):
    """22023 unless the label column's values (a loaded column) are ones the named loss takes (LABELS): the first
    value it does not take, and how many rows have one. where ('model "m", group {…}: ') starts the message."""
    if base(loss) not in LABELS:
        return
    takes, said, hint = LABELS[base(loss)]
    values = np.asarray(values, dtype=np.float64)
    bad = ~takes(values)
    if not bad.any():
        return
    first = float(values[int(np.argmax(bad))])
    other = f'other than {said}' if base(loss) in ('logistic', 'hinge') else f'that is not {said}'
    raise PgadError('22023', f'{where}loss "{loss}" takes labels {said}, but column "{label}" is {first:g}',
                    detail=f'{int(bad.sum())} of {len(values)} rows have a label {other}.', hint=hint)
