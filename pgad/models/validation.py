"""validation => and early_stopping => of pgad.train: rows held out of the training, and the loss on them.

A fraction (validation => 0.2) holds out the rows whose hash falls below it: a hash of the row's values (the
columns the model and the loss read, as float8 bits) and the seed, so that the same seed gives the same split, in
any row order; two equal rows fall on the same side. A query (validation => 'SELECT …') gives the held-out rows
itself, with the same columns as the data. After each iteration (each epoch, for the mini-batch optimizers) the
optimizer hands its weights to a Watch, which evaluates the mean loss over the held-out rows (no regularisation):
the validation history. With early_stopping => k, a Watch stops the training (Stop) after k iterations without a
lower validation loss, and the model keeps the weights of the lowest one.
"""
import math
from decimal import Decimal

import numpy as np

from ..errors import PgadError
from ..loader import Table

MIX = np.uint64(0xbf58476d1ce4e5b9), np.uint64(0x94d049bb133111eb)  # splitmix64's finaliser


def option(value):
    """validation's value as given (a number, a query text, or None) → None, a fraction in (0, 1), or a query."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value  # a query: the loader's errors name what is wrong with it
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        if not 0 < float(value) < 1 or not math.isfinite(float(value)):
            raise PgadError('22023', f'validation must be a fraction between 0 and 1 or a query, not {value}',
                            hint="Write validation => 0.2 to hold out a fifth of the rows, or validation => 'SELECT …' "
                                 'with the columns of the data.')
        return float(value)
    raise PgadError('22023', f'validation must be a fraction between 0 and 1 or a query, not a {type(value).__name__}')


def early_stopping(value, validation):
    """early_stopping's k (None: no early stopping); it needs validation rows."""
    if value is None:
        return None
    if value <= 0:
        raise PgadError('22023', f'early_stopping must be a positive integer, not {value}')
    if validation is None:
        raise PgadError('22023', 'early_stopping needs validation rows',
                        hint="Give validation => 0.2 (a fraction of the rows held out) or validation => 'SELECT …'.")
    return int(value)


def split(table, fraction, seed):
    """(training rows, held-out rows) of table: a row is held out when the hash of its values and seed, as a number
    in [0, 1), is below fraction."""
    with np.errstate(over='ignore'):
        h = np.full(table.rows, np.uint64(seed or 0) * MIX[1] + np.uint64(0x9e3779b97f4a7c15), dtype=np.uint64)
        for column in table.columns:
            h = _mixed(h ^ np.ascontiguousarray(column, dtype=np.float64).view(np.uint64))
    held = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction
    return _rows(table, ~held), _rows(table, held)


def _mixed(h):
    h = (h ^ (h >> np.uint64(30))) * MIX[0]
    h = (h ^ (h >> np.uint64(27))) * MIX[1]
    return h ^ (h >> np.uint64(31))


def _rows(table, mask):
    return Table([np.ascontiguousarray(c[mask]) for c in table.columns], int(mask.sum()), 0)


class Stop(Exception):
    """Raised by a Watch to end a training early: the optimizer's loop unwinds to pgad.train, which keeps the best
    weights the Watch saw."""


class Watch:
    """The validation loss of each iteration's weights (history), the training objective beside it (training), the
    lowest validation loss's weights (best) and index (at); patience (early_stopping, or None) iterations without a
    lower one raise Stop."""
    def __init__(self, loss, patience):
        self.loss, self.patience = loss, patience
        self.history, self.training, self.best, self.at = [], [], None, None

    def __call__(self, w, objective):
        value = float(self.loss(w))
        self.history.append(value)
        self.training.append(float(objective))
        if self.at is None or value < self.history[self.at]:
            self.at, self.best = len(self.history) - 1, np.array(w, dtype=np.float64)
        if self.patience is not None and len(self.history) - 1 - self.at >= self.patience:
            raise Stop()
