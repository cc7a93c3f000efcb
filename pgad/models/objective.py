"""A model and a loss → the objective of one row, as a lambda: pgad.train's stage before the program.

The model is a prediction lambda `λ(d, w) <expr>`; the loss is a lambda `λ(p, d) <expr>` of the prediction p and
the row d, or one of the named losses below over the label column. The objective of a row is loss(model(d, w), d),
built in the model's DAG (parser.parse_loss) and printed back as a lambda `λ(d, w) …` (printer.to_lambda): the text
the program, the kernel cache and every backend take, as for pgad.gradient_descent. Nothing of the user's text is
pasted: the objective is printed from its DAG.
"""
import re
from dataclasses import dataclass, replace

import numpy as np

from ..errors import PgadError
from ..lang import parser, printer
from ..lang.rules import call

abs_, relu, softplus = call('abs'), call('relu'), call('softplus')

# name → the loss of prediction p and label y, as a DAG expression
LOSSES = {
    'squared': lambda p, y: (p - y) ** 2,
    'absolute': lambda p, y: abs_(p - y),
    'logistic': lambda p, y: softplus(p) - y * p,  # labels 0/1: −(y·ln σ(p) + (1−y)·ln(1−σ(p))), stable for any p
    'hinge': lambda p, y: relu(1 - y * p),          # labels −1/1
}


# name → the labels it takes, and how the error says so
LABELS = {'logistic': ((0.0, 1.0), '0 or 1'), 'hinge': ((-1.0, 1.0), '-1 or 1')}
BOOLEAN_LABELS = ('logistic',)  # the named losses that take a boolean label column, read as 1 (true) or 0 (false)


class Label(str):
    """The label column of a named loss in LABELS, as the loader reads it: a number, or a boolean column, packed as
    1 (true) or 0 (false) where the loss takes one (BOOLEAN_LABELS) and refused where it does not (refusal)."""
    loss = None

    def __new__(cls, name, loss=None):
        column = super().__new__(cls, name)
        column.loss = loss
        return column

    def refusal(self):
        """None where a boolean column may be this label; else the error that says how to map it."""
        if self.loss in BOOLEAN_LABELS:
            return None
        name = printer.identifier(self)
        return PgadError('42804', f'loss "{self.loss}" takes labels {LABELS[self.loss][1]}, but column "{self}" is of '
                                  'type boolean',
                         hint=f'Map it in the data query (CASE WHEN {name} THEN 1 ELSE -1 END AS {name}), or use loss '
                              "'logistic', which takes a boolean label.")


def labelled(lam, goal, loss):
    """lam (goal's objective, parsed) with its label column a Label, for the loader, under a named loss that checks
    its labels; as it is under any other loss, or where the model reads the label too (a number there)."""
    if loss not in LABELS or set(goal.loss_columns) & set(goal.columns):
        return lam
    return replace(lam, columns=[Label(c, loss) if c in goal.loss_columns else c for c in lam.columns])


LAMBDA = re.compile(r'\s*(λ|lambda\b)', re.IGNORECASE)


@dataclass(frozen=True)
class Objective:
    model: parser.Lambda   # the prediction lambda, parsed (its graph also holds the loss)
    text: str              # the objective of one row, λ(d, w) loss(model(d, w), d)
    columns: tuple         # the columns the model reads, in order of first use (the scoring function's arguments)
    loss_columns: tuple    # the columns the loss reads itself (the label)


def without_label(error, goal, loss):
    """error, or for a column missing from the data that is the label of a named loss, the error that says so."""
    missing = re.match(r'column "(.*)" does not exist in the data$', error.message)
    if loss not in LOSSES or not missing or missing.group(1) not in goal.loss_columns:
        return error
    label = missing.group(1)
    return PgadError('42703', f'the label column "{label}" is not in the data', detail=error.detail,
                     hint=(f"label is 'y' unless given: label => 'price' names the column the loss '{loss}' compares "
                           'the prediction with.' if label == 'y' else
                           f"label => '{label}' names the column the loss '{loss}' compares the prediction with: "
                           'give one of the data\'s columns (as it is spelt there, "Price" and price are two).'))


def build(model_text, loss, label, limits):
    """The Objective of the model lambda under loss (a lambda text or a name in LOSSES), label naming the label
    column of a named loss."""
    model = parser.parse(model_text, limits)
    if loss in LOSSES:
        graph = model.graph
        body = LOSSES[loss](graph.expr(model.root), graph.column(label)).id
        lam = parser.Lambda(loss, graph, body, model.row, model.params, list(dict.fromkeys([*model.columns, label])),
                            list(model.weights), [label])
    elif LAMBDA.match(loss):
        lam = parser.parse_loss(loss, model, limits)
    else:
        raise PgadError('22023', f'unknown loss "{loss}"',
                        hint="loss is 'squared', 'absolute', 'logistic', 'hinge' or a lambda λ(p, d) of the "
                             "prediction p and the row d, for example 'λ(p, d) (p - d.y)^2'.")
    text = f'λ({printer.parameter(model.row)}, {printer.parameter(model.params)}) ' + printer.to_lambda(lam, lam.root, printer.budget(limits))
    return Objective(model, text, tuple(model.columns), tuple(lam.own))


def check_labels(loss, label, values, where=''):
    """22023 unless the label column's values (a loaded column) are ones the named loss takes (LABELS): the first
    value it does not take, and how many rows have one. where ('model "m", group {…}: ') starts the message."""
    if loss not in LABELS:
        return
    taken, said = LABELS[loss]
    values = np.asarray(values)
    bad = ~np.isin(values, taken)
    if not bad.any():
        return
    first = float(values[int(np.argmax(bad))])
    raise PgadError('22023', f'{where}loss "{loss}" takes labels {said}, but column "{label}" is {first:g}',
                    detail=f'{int(bad.sum())} of {len(values)} rows have a label other than {said}.',
                    hint=("Map the labels in the data query ((y + 1) / 2 AS y, for −1/1 labels), or use loss 'hinge', "
                          "which takes −1/1." if loss == 'logistic' else
                          "Map the labels in the data query (2 * y - 1 AS y, for 0/1 labels), or use loss 'logistic', "
                          "which takes 0/1."))
