"""Second derivatives: forward mode over the reverse-mode gradient, in the same DAG.

reverse.py gives ∂root/∂w_i as a node g_i of the graph; forward.py, run from g_i, gives ∂g_i/∂w_j for every j in
one sweep. So the Hessian of one row's loss is p forward sweeps over the gradient's nodes, each sharing every
subexpression the loss, the gradient and the other rows of the Hessian already built (the graph interns them).
The Hessian is symmetric: only the upper half (i ≤ j) is kept, p(p+1)/2 nodes, and read back as the full matrix.
Its size is bounded twice: at most MAX_WEIGHTS weights (the p² outputs a kernel sums), and pgad.max_lambda_nodes
on the graph as it grows (54001), as for the gradient.
"""
import numpy as np

from . import forward
from ..errors import PgadError

MAX_WEIGHTS = 300  # p(p+1)/2 = 45,150 sums a row at most


def check_size(count):
    """SQLSTATE 54000 where the Hessian of `count` weight elements has more than MAX_WEIGHTS rows: checked on the
    count, before their names are made (a weights jsonb within pgad.memory_limit may hold millions)."""
    if count > MAX_WEIGHTS:
        raise PgadError('54000', f'too many weights for second derivatives: {count}',
                        detail=f'The Hessian of p weights has p² entries; pgad computes it for at most '
                               f'{MAX_WEIGHTS} weight elements.',
                        hint="Use a model with fewer weights, or optimizer => 'lbfgs'.")


def upper(weights):
    """The (i, j) pairs with i ≤ j of the Hessian of `weights`, in the order of its outputs."""
    return tuple((i, j) for i in range(len(weights)) for j in range(i, len(weights)))


def hessian(graph, gradient, weights):
    """(node id of ∂²root/∂w_i∂w_j for each (i, j) of upper(weights)), given `gradient`, {w: node id of ∂root/∂w}."""
    check_size(len(weights))
    rows = [forward.gradient(graph, gradient[w], weights) for w in weights]
    return tuple(rows[i][weights[j]] for i, j in upper(weights))


def full(upper_values, p):
    """The symmetric p × p matrix (a float64 array) of the values of the upper half, in the order of upper() (row by
    row, numpy's triu_indices)."""
    matrix = np.zeros((p, p))
    matrix[np.triu_indices(p)] = upper_values
    return matrix + np.triu(matrix, 1).T


def equilibrated(h):
    """(root, H/root/rootᵀ): the Hessian h scaled to a unit diagonal, root = √|diag H|, 1 where that is 0 or not
    finite (a weight the sums do not move). Newton's direction is solved (models/descent.py) and pgad.summary judges
    and inverts the Hessian (models/summary.py) in this basis, so that the columns' units do not matter."""
    diagonal = np.abs(np.diag(h))
    root = np.sqrt(np.where(np.isfinite(diagonal) & (diagonal > 0), diagonal, 1.0))
    return root, h / np.outer(root, root)
