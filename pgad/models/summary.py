"""A trained model's coefficient table, from the exact Hessian of its objective: pgad.summary's statistics.

For an unregularised 'squared' model the table is ordinary least squares': with H the Hessian of the summed loss
Σ (model − y)² (2·XᵀX for a model linear in its weights), the covariance is σ²·(H/2)⁻¹ with σ² = RSS/(n − p), the
statistic t = estimate / std_error on n − p degrees of freedom, and the 95% interval estimate ± t₀.₉₇₅(n − p)·se.
For an unregularised 'logistic' model it is the Wald table: the covariance is H⁻¹ (H = Xᵀdiag(σ(1−σ))X, the Fisher
information), z = estimate / std_error against the normal distribution, the interval ± 1.96·se. These are what
statsmodels' OLS and Logit (and MADlib's linregr and logregr summaries) report. The distributions are the few lines
below (the normal's by math.erf; Student's t by the regularised incomplete beta function's continued fraction),
tested against scipy through statsmodels in tests/test_summary.py, so the server needs no scipy.

A 'softmax' model whose logits are affine in class-sized weights (w.W @ [d.x1, d.x2] + w.b: K rows each, K the
stored classes) gets multinomial logistic regression's Wald table in statsmodels MNLogit's parameterisation
(multinomial): the first class is the reference, and each other class k has the coefficients θ_k − θ_1. The softmax
is unchanged when every class's weights move together, so the Hessian of the full weights is singular along that
shift; the log-likelihood as a function of θ_2 − θ_1, …, θ_K − θ_1 is the full one at θ_1 = 0, so its Hessian and
gradient are the full ones' rows and columns of classes 2 … K, at the stored weights as they are (the full Hessian
is the same at any point along the shift).

A lambda loss the user declares a negative log-likelihood (pgad.train's likelihood => true) gets the Wald table too.
Each loss's row of LIKELIHOODS says how its covariance's scale and its statistic's distribution are found.

The statistics are computed in the equilibrated basis, Hs = D^-½·H·D^-½ with D = |diag H| (unit diagonal): a model
whose columns are at 1e-6 and 1e6 is as well identified as one with both at 1, and its covariance D^-½·Hs⁻¹·D^-½ is
exact to rounding. Identification is judged on Hs's eigenvalues (a singular model names the weights of its null
space); the table is given only at an optimum: where training recorded that it converged (pgad.models.converged),
and where a Newton step from the stored weights, −H⁻¹g over the data's rows now, is within OPTIMUM standard errors.
"""
import json
import math
from dataclasses import dataclass, replace

import numpy as np

from .. import arguments, calls, categorical, loader, program, server
from ..errors import PgadError
from ..lang import hessian as second, vectors
from . import catalog, evaluate, objective, preprocess, separation

LEVEL = 0.95
UNCONVERGED = ('error', 'warning')  # pgad.summary's unconverged: refuse a model not at its optimum, or warn
# A model is at its optimum where a Newton step from its weights moves none by more than this many standard errors.
OPTIMUM = 1e-3
# Hs (unit diagonal) is singular where an eigenvalue is below this fraction of its largest: past it, float64 keeps
# fewer than 4 digits of the inverse of a Hessian whose entries are sums exact to about 1e-16 relative.
SINGULAR = 1e-12
NOT_AT_OPTIMUM = '55000'  # object_not_in_prerequisite_state: the model is not at its optimum


@dataclass(frozen=True)
class Likelihood:
    """How a loss's coefficient table is found from the sums at the fitted weights: the covariance is
    scale(name, fit)·H⁻¹ with H the Hessian of the summed loss (fit a Fit), and the statistic estimate/std_error is
    Student's t on n − p degrees of freedom (t) or normal (Wald's z)."""
    scale: object
    t: bool


def _least_squares(name, fit):
    """2·RSS/(n − p): σ²·(H/2)⁻¹ is OLS's covariance, H/2 = XᵀX for a model linear in its weights."""
    rows, p = fit.rows, len(fit.names)
    if rows - p <= 0:
        raise PgadError('22000', f'model "{name}" has {p} weights and only {rows} rows: no residual degrees of '
                                 'freedom for its standard errors')
    return 2 * fit.loss_sum / (rows - p)


def _unit(name, fit):
    """1: the loss is the whole negative log-likelihood, H its observed information."""
    return 1.0


def _dispersion(name, fit):
    """φ of a log-link loss (EXPECTED): 1 for poisson, Pearson's χ²/(n − p) for gamma."""
    return fit.dispersion


# loss → its Likelihood; a named loss missing here has no summary (0A000)
LIKELIHOODS = {
    'squared': Likelihood(_least_squares, t=True),  # ordinary least squares
    'logistic': Likelihood(_unit, t=False),         # Wald: H = Xᵀdiag(σ(1−σ))X, the Fisher information
    'poisson': Likelihood(_dispersion, t=False),    # Wald on the expected information (GLM), φ = 1
    'gamma': Likelihood(_dispersion, t=False),      # Wald on the expected information (GLM), φ Pearson's
    'softmax': Likelihood(_unit, t=False),          # Wald, in MNLogit's reference-class parameterisation
}
DECLARED = Likelihood(_unit, t=False)  # a lambda loss trained with likelihood => true: Wald

# The log-link losses, by name: the dispersion φ from (labels y, fitted means μ̂ = exp(prediction), rows n, weights
# p). Their covariance is φ·I⁻¹ with I the expected (Fisher) information, what statsmodels' GLM inverts: the Hessian
# of the summed loss at the fitted weights with each label replaced by its fitted mean (expected), for any model —
# for a model linear in its weights Xᵀdiag(μ̂)X (poisson: the observed Hessian too, the log link being its canonical
# one) and XᵀX (gamma, whose observed Hessian Σ x·xᵀ·y/μ̂ is another). Gamma's φ is Pearson's χ²/(n − p).
EXPECTED = {
    'poisson': lambda y, mu, n, p: 1.0,
    'gamma': lambda y, mu, n, p: float(np.sum(((y - mu) / mu) ** 2)) / (n - p),
}


def coefficients(name, unconverged='error'):
    """pgad.summary's rows: (group_key, weight, estimate, std_error, statistic, p_value, ci_low, ci_high) of model
    name, from the exact Hessian of its objective at the fitted weights over its data query, run again as the caller;
    per group for a grouped model. Only the role that trained the model may: the data query is that role's SQL text,
    and running it as another role (a superuser above all) would run whatever functions it calls with that role's
    privileges."""
    if unconverged not in UNCONVERGED:
        raise PgadError('22023', f'unconverged must be \'error\' or \'warning\', not "{unconverged}"',
                        hint="unconverged => 'warning' gives the table of a model not at its optimum, with a WARNING.")
    config = calls.settings()
    found = catalog.rows(name)
    if 'order_by' in json.loads(found[0]['options']):
        raise PgadError('0A000', f'pgad.summary does not take sequence model "{name}"',
                        detail='Its objective is a sum along a recurrence: its rows are not independent, which the '
                               'standard errors assume.',
                        hint='Evaluate it with pgad.evaluate on later rows, and forecast with pgad.forecast.')
    me = catalog.current_user()
    for owner in {row['trained_by'] for row in found} - {me}:
        raise PgadError('42501', f'model "{name}" belongs to role "{owner}"',
                        detail='pgad.summary runs the model\'s data query again, and that query is the text of the '
                               'role that trained it: only that role may run it.',
                        hint='Ask that role for the summary, or train a model of your own on the data.')
    first = found[0]
    options = json.loads(first['options'])
    likelihood = check_model(name, first['loss'], options)
    classes = options.get('classes')  # 'softmax', or a 'logistic' label of two classes: coded 1 … K
    goal = objective.build(first['model'], first['loss'], options.get('label', 'y'), config.limits,
                           coded=bool(classes))
    lam = objective.labelled(program.parsed(goal.text, config.limits), goal, None if classes else first['loss'])
    w, unread = arguments.unread(arguments.weights(first['weights'], goal.model, config.memory_limit), lam)
    w, cats = categorical.stored(w, goal.model)  # the stored categories; a row of another category is skipped
    codes = cats.codes
    if classes:  # the label coded by the stored classes; a row of another class is skipped
        codes = {**codes, options.get('label', 'y'): classes}
    if first['loss'] == 'softmax':
        check_multinomial(name, goal.model, w, len(classes))
    shapes = calls.shapes_of(w, loader.lengths(first['data'], lam.columns, codes), cats)
    prog = program.build_hessian(goal.text, tuple(w), config.limits, shapes)
    logits = vectors.unrolled_value(goal.model, shapes, config.limits) if first['loss'] == 'softmax' else None
    prog = replace(prog, lam=objective.labelled(prog.lam, goal, first['loss']))
    names = categorical.element_names(prog, cats, goal.model)
    backend = options.get('backend', 'auto')
    groups = options.get('group_by') or []
    if groups:
        _, parts = loader.load_groups(first['data'], list(prog.columns), groups, config.memory_limit, codes)
        tables = {json.dumps(json.loads(part.key), sort_keys=True): part.table for part in parts}
    else:
        imputed = preprocess.of(options)  # NULLs replaced as training replaced them
        tables = {None: loader.some_rows(preprocess.fill(loader.load(
            first['data'], list(prog.columns), config.chunk_rows, config.memory_limit, dict(prog.columns_of), codes,
            missing=set(imputed)), list(map(str, prog.columns)), imputed, cats.codes))}
    out = []
    for row in found:
        key = None if row['group_key'] is None else json.dumps(json.loads(row['group_key']), sort_keys=True)
        part = tables.get(key)
        if part is None or part.rows == 0:
            continue  # the group is no longer in the data
        w, unread = arguments.unread(arguments.weights(row['weights'], goal.model, config.memory_limit), lam)
        w = categorical.as_vectors(w, cats)
        vector = calls.vector_of(w)
        group = '' if row['group_key'] is None else f', group {row["group_key"]}'
        part, dispersion = _at_the_fit(name, first['loss'], goal, prog, part, w, options.get('label', 'y'), group,
                                       bool(classes))
        kernel = calls.compiled(prog, backend, 'float64', config, part.rows)
        sums = calls.second_sums(calls.Call(prog, part, kernel, vector, unread))
        p = len(prog.weights)
        where = f'model "{name}"' + ('' if key is None else f', group {key}')
        fit = Fit(where, vector, sums[0], sums[1:1 + p], second.full(sums[1 + p:], p), part.rows, names,
                  dispersion)
        if first['loss'] == 'softmax':
            _check_classes(name, group, classes, logits, prog, part, w, options.get('label', 'y'))
            fit = multinomial(fit, prog.shapes, classes, vectors.multiplied_columns(goal.model))
        for line in table(name, likelihood, fit, row['converged'], unconverged):
            out.append((row['group_key'], *line))
    return out


@dataclass(frozen=True)
class Fit:
    """The sums of one model's (or group's) objective over its rows at its stored weights."""
    where: str          # 'model "m"', or 'model "m", group {"g": "east"}', as messages name it
    estimate: object    # the stored weights, a vector
    loss_sum: float
    gradient: object    # the gradient of the summed loss (p)
    hessian: object     # its Hessian (p × p)
    rows: int
    names: list         # the weight elements' names, as the table's rows name them
    dispersion: float = None  # a log-link loss's φ (EXPECTED), its Hessian then the expected information



def multinomial(fit, shapes, classes, features=None):
    """fit (a Fit of a 'softmax' model's weights, each of shapes ((name, shape), …) class-sized: K = len(classes)
    rows) in MNLogit's parameterisation: for each class k after the first, each weight's row k minus its row 1, and
    the gradient and Hessian at the rows and columns of classes 2 … K. Its rows are named by the class, JSON-quoted
    as pgad.evaluate's metrics write it, and the element's other indices: w["versicolor",2], b["versicolor"]; a
    column's name for the index of a weight that multiplies columns (features: vectors.multiplied_columns),
    w["versicolor",petal]."""
    blocks = [(name, shape, np.arange(at.start, at.stop).reshape(shape)) for name, shape, at in program.spans(shapes)]
    index, reference, names = [], [], []
    for k, label in enumerate(classes[1:], start=1):
        for name, shape, block in blocks:
            for rest in np.ndindex(*shape[1:]):
                index.append(block[(k, *rest)])
                reference.append(block[(0, *rest)])
                columns = (features or {}).get(name)
                written = [evaluate.class_name(label), *(columns[j] if columns and len(rest) == 1 and len(columns) == shape[1]
                                                         else str(j + 1) for j in rest)]
                names.append(f'{name}[{",".join(written)}]')
    index, reference = np.array(index, dtype=np.int64), np.array(reference, dtype=np.int64)
    estimate = np.asarray(fit.estimate)
    return replace(fit, estimate=estimate[index] - estimate[reference], gradient=np.asarray(fit.gradient)[index],
                   hessian=np.asarray(fit.hessian)[np.ix_(index, index)], names=names)


def _check_classes(name, where, keys, logits, prog, part, w, label):
    """22000 where a softmax model's fit separates a class from the others (separation.classes_separated: every row
    of it within 1e-6 of probability 1, every other within 1e-6 of 0), or where no row has a class: its weights then
    have no finite maximum-likelihood estimate."""
    flat = vectors.by_element(w)
    separated, absent = separation.classes_separated(*logits, dict(zip([str(c) for c in prog.columns], part.columns)),
                                                     label, flat, part.rows, server.check_interrupts)
    for found, why in ((separated, 'separated from the others'), (absent, 'without a row')):
        if found:
            named = ', '.join(f'"{keys[k]}"' for k in found)
            plural = len(found) > 1
            raise PgadError('22000', f'model "{name}"{where} has no standard errors: class{"es" if plural else ""} '
                                     f'{named} {"are" if plural else "is"} {why}',
                            detail='The loss falls without end along a direction of that class\'s weights: they have '
                                   'no maximum-likelihood estimate, and no standard errors.',
                            hint=separation.HINT)


def check_multinomial(name, model, weights, k):
    """0A000 unless the logits of model (a parsed 'softmax' model) are affine in class-sized weights, each of K rows
    (weights: {name: stored value}): a sum of terms, each a K-vector weight w.b or a K × F matrix weight times
    weights-free features, w.W @ [d.x1, d.x2], every weight in one term. Only there is the softmax's one singular
    direction (all classes moved together) the shift multinomial() removes."""
    nodes, shape = model.graph.nodes, {n: np.shape(v) for n, v in weights.items()}
    terms, stack, found = [], [model.root], []
    while stack:
        i = stack.pop()
        if nodes[i].op == 'add':
            stack.extend(nodes[i].args)
        else:
            terms.append(i)
    for i in terms:
        node = nodes[i]
        if node.op == 'weight' and len(shape.get(node.value, ())) == 1:
            found.append(node.value)
        elif node.op == 'matmul' and nodes[node.args[0]].op == 'weight' and \
                len(shape.get(nodes[node.args[0]].value, ())) == 2 and \
                all(nodes[j].op != 'weight' for j in model.graph.ancestors([node.args[1]])):
            found.append(nodes[node.args[0]].value)
        else:
            found = None
            break
    if found is None or len(set(found)) != len(found) or set(found) != set(model.weights) or \
            any(shape[n][0] != k for n in found):
        raise PgadError('0A000', f'pgad.summary takes a \'softmax\' model whose logits are affine in weights of one '
                                 f'row per class, not model "{name}"',
                        detail=f'Its table is multinomial logistic regression\'s: logits w.W @ [d.x1, d.x2] + w.b, '
                               f'each weight {k} rows (its {k} classes), the first class the reference.',
                        hint='Score the model with its functions and pgad.evaluate; or train the multinomial model '
                             "λ(d, w) w.w @ [d.x1, d.x2] + w.b with {\"w\": {}, \"b\": {}}.")


def _at_the_fit(name, loss, goal, prog, part, w, label, where, coded=False):
    """(the rows the Hessian is summed over, the dispersion or None) for a named likelihood loss at the fitted
    weights w: the labels checked (objective.check_labels; coded, a label of two classes read as 1 or 2, is 0 or 1
    less 1), a logistic model refused where its predictions separate its labels (separation.py), and for a log-link
    loss (EXPECTED) its rows with each label its fitted mean and φ."""
    names = [str(c) for c in prog.columns]
    if objective.base(loss) not in ('logistic', *EXPECTED) or label not in names:
        return part, None
    columns = dict(zip(names, part.columns))
    y = columns[label]
    if coded:
        y = y - 1
    else:
        objective.check_labels(loss, label, y, f'model "{name}"{where}: ')
    z = separation.predictions(goal.model, columns, w, part.rows, server.check_interrupts)
    separation.refuse(name, loss, y, z, where, separation.grams(goal.model, columns, w, part.rows,
                                                               server.check_interrupts))
    if loss not in EXPECTED:
        return part, None
    if label in goal.columns:
        raise PgadError('0A000', f'pgad.summary takes no \'{loss}\' model that reads its label column "{label}" too',
                        detail='Its expected information replaces each label with its fitted mean.',
                        hint='Give the model a copy of the column under another name in the data query.')
    p = len(prog.weights)
    if part.rows <= p and loss == 'gamma':
        raise PgadError('22000', f'model "{name}" has {p} weights and only {part.rows} rows: no residual degrees of '
                                 'freedom for its dispersion')
    with np.errstate(over='ignore'):
        mu = np.exp(z)
    if not np.all(np.isfinite(mu)):
        raise PgadError('22003', f'model "{name}"{where} predicts a mean past float64\'s range (exp of '
                                 f'{float(np.max(z)):g})', hint='Check the fit: its weights may have diverged.')
    rows = loader.Table([mu if c == label else v for c, v in zip(names, part.columns)], part.rows, part.skipped)
    return rows, EXPECTED[loss](y, mu, part.rows, p)


def check_model(name, loss, options):
    """The Likelihood of the model's loss (LIKELIHOODS; DECLARED for a lambda trained with likelihood => true), or
    SQLSTATE 0A000 where its loss or options give no summary: another loss, a penalty."""
    likelihood = LIKELIHOODS.get(loss)
    if likelihood is None and options.get('likelihood') and objective.base(loss) is None:
        likelihood = DECLARED
    if likelihood is None:
        raise PgadError('0A000', 'pgad.summary takes a \'squared\', \'logistic\', \'softmax\', \'poisson\' or '
                                 f'\'gamma\' model, not model "{name}" with loss {_loss_name(loss)}',
                        detail='Standard errors need the likelihood the loss is: least squares, the Bernoulli, '
                               'multinomial, Poisson or gamma log-likelihood, or a lambda loss declared a negative '
                               'log-likelihood.',
                        hint="Train the model with loss => 'squared', 'logistic', 'softmax', 'poisson' or 'gamma', or, "
                             'where a lambda loss is the negative log-likelihood of the rows, with likelihood => true.')
    for penalty in ('l1', 'l2'):
        if float(options.get(penalty) or 0) > 0:
            raise PgadError('0A000', f'pgad.summary takes an unregularised model, not model "{name}" with '
                                     f'{penalty} = {options[penalty]}',
                            detail='A penalised fit is not the maximum-likelihood estimate the standard errors are '
                                   'of.',
                            hint=f'Train the model again without {penalty}.')
    return likelihood


def check_likelihood(loss, likelihood):
    """pgad.train's likelihood option: true declares a lambda loss a negative log-likelihood; with a named loss it
    is redundant where the loss is one (LIKELIHOODS) and 22023 where it is not."""
    if likelihood and objective.base(loss) is not None and loss not in LIKELIHOODS:
        raise PgadError('22023', f'likelihood => true takes a loss that is a negative log-likelihood, not loss '
                                 f'"{loss}"',
                        hint='likelihood => true declares a lambda loss λ(p, d) the negative log-likelihood of a row, '
                             'for pgad.summary\'s Wald table; train without it.')


def _loss_name(loss):
    return f"'{loss}'" if objective.base(loss) is not None else 'a lambda'


def table(name, likelihood, fit, converged=None, unconverged='error'):
    """[(weight, estimate, std_error, statistic, p_value, ci_low, ci_high)] of each weight element of fit (a Fit) at
    its stored estimate, by likelihood (a Likelihood): 22000 where the weights are not identified, 55000 (or with
    unconverged 'warning', a WARNING) where the training did not converge (converged false) or the weights are not
    at the optimum of the objective over the rows."""
    p = len(fit.names)
    if p == 0:
        return []
    root, inverse = equilibrated_inverse(name, fit.hessian, fit.names)  # H⁻¹ = inverse / root / rootᵀ
    covariance = likelihood.scale(name, fit) * inverse / np.outer(root, root)
    se = np.sqrt(np.maximum(np.diag(covariance), 0.0))
    estimate = fit.estimate
    step = -(inverse @ (fit.gradient / root)) / root  # Newton's step −H⁻¹g to the optimum
    off = np.abs(step) / np.where(se > 0, se, math.inf)  # se = 0: a least-squares fit exact on every row
    worst = int(np.argmax(off))
    why, detail = [], []
    if converged is False:
        why.append('its training did not converge')
        detail.append('pgad.models records converged = false for it: its optimizer stopped before its criterion '
                      'held.')
    if not off[worst] <= OPTIMUM:
        why.append(f'a Newton step from its weights moves weight "{fit.names[worst]}" by {off[worst]:.3g} standard '
                   'errors')
        detail.append(f'Its statistics are those of the optimum, where a Newton step moves no weight by more than '
                      f'{OPTIMUM:g} standard errors: training stopped short of it, or the rows of the data query have '
                      'changed since.')
    if why:
        _not_at_optimum(fit.where, '; '.join(why), unconverged, ' '.join(detail))
    dof = fit.rows - p if likelihood.t else None
    out = []
    for k, weight in enumerate(fit.names):
        stat = estimate[k] / se[k] if se[k] > 0 else math.copysign(math.inf, estimate[k])
        if dof is None:
            pvalue, q = 2 * normal_sf(abs(stat)), normal_quantile(0.5 + LEVEL / 2)
        else:
            pvalue, q = 2 * t_sf(abs(stat), dof), t_quantile(0.5 + LEVEL / 2, dof)
        out.append((weight, float(estimate[k]), float(se[k]), float(stat), float(pvalue),
                    float(estimate[k] - q * se[k]), float(estimate[k] + q * se[k])))
    return out


def _not_at_optimum(where, why, unconverged, detail):
    """55000 for the model (or group) `where` that is not at its optimum, or with unconverged 'warning' a WARNING."""
    message = f'{where} is not at an optimum: {why}'
    hint = ("Train it again with more iterations or optimizer => 'newton', or give unconverged => 'warning' for the "
            'table at its weights as they are.')
    if unconverged == 'warning':
        server.warning(f'{message}; its statistics describe weights that are not the optimum', hint)
        return
    raise PgadError(NOT_AT_OPTIMUM, message, detail=detail, hint=hint)


def equilibrated_inverse(name, h, names):
    """(root, Hs⁻¹) with root = √|diag H| (1 where the diagonal is 0) and Hs = H/root/rootᵀ, the Hessian equilibrated
    to a unit diagonal, so H⁻¹ = Hs⁻¹/root/rootᵀ; SQLSTATE 22000 naming the weights where Hs is singular (an
    eigenvalue below SINGULAR of its largest), 55000 where it has a negative eigenvalue (not a minimum)."""
    h = np.asarray(h, dtype=np.float64)
    if not np.all(np.isfinite(h)):
        raise _singular(name, 'Its Hessian at the stored weights is not finite.')
    unmoved = [names[k] for k in np.flatnonzero(~np.any(h, axis=1))]
    if unmoved:
        raise _singular(name, f'The loss does not change with {_listed(unmoved)}: the data does not move '
                              f'{"it" if len(unmoved) == 1 else "them"}.')
    root, scaled = second.equilibrated(h)
    values, vectors_ = np.linalg.eigh((scaled + scaled.T) / 2)
    top = np.max(np.abs(values))
    if values[0] < -SINGULAR * top:
        raise PgadError(NOT_AT_OPTIMUM, f'model "{name}" is not at a minimum: the Hessian of its objective at its '
                                        'weights is not positive definite',
                        detail='Its statistics are those of a minimum of the loss, where the Hessian is positive '
                               'definite.',
                        hint="Train it again, with optimizer => 'newton' or from other starting weights.")
    null = vectors_[:, values <= SINGULAR * top]
    if null.shape[1]:
        # the weights the null space moves: an entry of a null vector of the unit-diagonal Hs above rounding
        moved = np.sqrt(np.sum(null ** 2, axis=1))
        collinear = [names[k] for k in np.flatnonzero(moved > 1e-6)]
        listed = _listed(collinear)
        raise _singular(name, f'{listed[0].upper()}{listed[1:]} {"is" if len(collinear) == 1 else "are"} '
                              'collinear: a combination of them leaves the loss unchanged to float64\'s precision '
                              f'(the Hessian, its diagonal scaled to 1, has condition number '
                              f'{top / max(values[0], 0.0) if values[0] > 0 else math.inf:.3g}).')
    return root, np.linalg.inv(scaled)


def _singular(name, detail):
    return PgadError('22000', f'the Hessian of model "{name}" is singular: its weights are not identified by the '
                              'data', detail=detail,
                     hint='Drop one of those weights, or the column that repeats another (with a categorical weight '
                          'beside an intercept, drop the intercept or one category); or add rows. A logistic model '
                          'that separates its labels perfectly is singular too.')


def _listed(names, most=10):
    """'weight "a"', 'weights "a", "b" and "c"', at most `most` names and how many more."""
    quoted = [f'"{n}"' for n in names[:most]]
    if len(names) > most:
        quoted.append(f'{len(names) - most} more')
    return ('weight ' if len(names) == 1 else 'weights ') + (
        quoted[0] if len(quoted) == 1 else ', '.join(quoted[:-1]) + ' and ' + quoted[-1])


# --- the normal and Student's t distributions ------------------------------------------------------------------------

def normal_sf(z):
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def normal_quantile(q):
    """z with P(Z ≤ z) = q, by bisection then Newton steps on the cdf (to float64's precision)."""
    return _solve(lambda z: 1 - normal_sf(z) - q, lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi))


def t_sf(t, dof):
    """P(T > t) for Student's t on dof degrees of freedom, t ≥ 0: ½·I_{dof/(dof+t²)}(dof/2, ½)."""
    return 0.5 * _incomplete_beta(dof / 2, 0.5, dof / (dof + t * t))


def t_quantile(q, dof):
    """t with P(T ≤ t) = q (q > ½)."""
    density = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(dof * math.pi)
    return _solve(lambda t: 1 - t_sf(t, dof) - q, lambda t: density * (1 + t * t / dof) ** (-(dof + 1) / 2))


def _solve(f, df, low=0.0, high=64.0):
    """The root of the increasing f on [low, high]: bisection to 1e-6, then Newton's steps."""
    while high - low > 1e-6:
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < 0 else (low, mid)
    x = (low + high) / 2
    for _ in range(8):
        x -= f(x) / df(x)
    return x


def _incomplete_beta(a, b, x):
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (Lentz's method)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1 - _incomplete_beta(b, a, 1 - x)
    tiny, c, d = 1e-300, 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1) < 1e-16:
            break
    return front * f / a
