"""Batch gradient descent on loaded columns: w ← w − learning_rate · ∇mean loss, for a number of iterations.

Every iteration is one call of the kernel (loss and gradient fused in one pass over the rows). Between iterations
the loop lets the server check for interrupts, so statement_timeout and pg_cancel_backend stop it, and reports
progress on long runs. NaN or infinity in the loss, the gradient or the weights stops it with an error.
"""
import time

import numpy as np

from .errors import PgadError

CHUNK_ROWS = 1 << 20  # rows per kernel call on big tables: between calls, the server may cancel


def run(kernel, table, weights, learning_rate, iterations, names, interrupts, progress, every=5.0, check=0.01,
        why=None):
    """(fitted weights, loss at them, iterations run); weights is a float64 vector in the order of names.

    interrupts() is called after an iteration once `check` seconds have passed since the last call (an SPI call
    costs ~10 µs, more than an iteration over a small table), progress(message) every `every` seconds; why(w, k),
    if given, explains a sum k that is not finite at the starting weights (check_finite)."""
    w = np.array(weights, dtype=np.float64)
    started = reported = checked = time.monotonic()
    for it in range(1, iterations + 1):
        sums = evaluate(kernel, table, w, interrupts)
        check_finite(sums, w, it, names, learning_rate, why)
        with np.errstate(over='ignore'):  # an overflow is divergence, found on the next check (w and sums are finite)
            w = w - learning_rate * (sums[1:] / table.rows)
        now = time.monotonic()
        if now - checked >= check:
            interrupts()
            checked = now
        if now - reported >= every:
            progress(f'iteration {it} of {iterations}, loss {sums[0] / table.rows:.6g}, {now - started:.1f} s')
            reported = now
    final = evaluate(kernel, table, w, interrupts)  # the loss at the weights of the last step: iteration n + 1's
    check_finite(final, w, iterations + 1, names, learning_rate, why)
    return w, final[0] / table.rows, iterations


def evaluate(kernel, table, w, interrupts, chunk=CHUNK_ROWS):
    """The kernel's sums over all rows, a chunk of rows at a time, checking for interrupts between chunks."""
    if table.rows <= chunk:
        return kernel(table.columns, table.rows, w)
    sums = 0
    for start in range(0, table.rows, chunk):
        end = min(start + chunk, table.rows)
        sums = sums + kernel([c[start:end] for c in table.columns], end - start, w)
        interrupts()
    return sums


def check_finite(sums, w, it, names, learning_rate, why=None):
    """An error unless the sums and the weights are finite; at the starting weights (it = 1), why(w, k) may name
    the operation that made sum k not finite (domain.diagnose)."""
    if np.all(np.isfinite(sums)) and np.all(np.isfinite(w)):
        return
    if it == 1 and why is not None and np.all(np.isfinite(w)):
        explained = why(w, int(np.argmin(np.isfinite(sums))))
        if explained is not None:
            raise explained
    what = ('the loss' if not np.isfinite(sums[0]) else
            f'the gradient by "{names[int(np.argmin(np.isfinite(sums[1:])))]}"' if not np.all(np.isfinite(sums[1:]))
            else f'weight "{names[int(np.argmin(np.isfinite(w)))]}"')
    value = 'NaN' if np.isnan(sums).any() or np.isnan(w).any() else 'infinite'
    if it == 1:
        raise PgadError('22003', f'{what} is {value} at the starting weights',
                        hint='Check that the lambda is defined on every row (ln and sqrt of the data, division).')
    raise PgadError('22003', f'training diverged at iteration {it}: {what} is {value}',
                    hint=f'Try a smaller learning_rate than {learning_rate:g}.')
