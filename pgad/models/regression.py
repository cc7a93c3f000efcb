"""Regression families by name (issue 47): pgad.train's model given as 'linear', 'logistic', 'softmax', 'poisson',
'gamma' or 'mlp(h, …)' is generated here as the lambda a user would write over the data's columns, every column but
the label, the group_by columns and a named table's primary key: a number column x a term w.x*d.x, a text, varchar,
enum or boolean column c a categorical weight w.c[d.c], and an intercept (a model of classes, or an mlp, reads
numbers only, as one vector: w.coef @ [d.x1, …]). pgad.train then trains that lambda as any
(standardised, and its weights stored in the columns' own units), and stores it, so that the model shows the lambda
it stands for and can be copied and edited.

  family          the lambda                                            loss        its weights start at
  'linear'        w.x1*d.x1 + … + w.intercept, or with a category       'squared'   0 ({} a category's)
                  column w.x1*d.x1 + … + w.c[d.c] (its weight the
                  intercept of each category, unpenalised)
  'logistic'      the same; 'softmax''s past two classes (multinomial,   'logistic'  0
                  as scikit-learn's LogisticRegression), with a NOTICE
  'poisson'       the same (the log of the mean)                        'poisson'   0
  'gamma'         the same (the log of the mean)                        'gamma'     0
  'softmax'       w.coef @ [d.x1, …] + w.intercept: a row of coef and   'softmax'   {} (class-sized, 0)
                  an intercept per class
  'mlp(h1, h2)'   w.output @ tanh(w.layer2 @ tanh(w.layer1 @ [d.x1, …]  'squared' for a number label, 'softmax'
                  + w.bias1) + w.bias2) + w.intercept                   for any other; random (seed), N(0, 1/fan-in)
                                                                        on the standardised columns

The penalty (l1, l2) falls on every weight but the intercepts and biases, as scikit-learn's and glmnet's does, on the
standardised columns, as a scikit-learn pipeline of StandardScaler and LogisticRegression puts it: l2 = 1/(2·C·n) is
its C. A family's loss may be given where it fits the family ('linear' with 'huber(1.35)', 'mlp(16)' with 'softmax'
for an integer label); a family that is its loss takes no other.
"""
import re
from dataclasses import dataclass

import numpy as np

from .. import categorical, loader, server
from ..errors import PgadError
from ..lang.printer import identifier, quote_ident
from . import families, objective

LOSS_OF = {'linear': 'squared', 'logistic': 'logistic', 'softmax': 'softmax', 'poisson': 'poisson', 'gamma': 'gamma'}
FAMILY = re.compile(r'\s*(linear|logistic|softmax|poisson|gamma)\s*(?:\(\s*\))?\s*', re.IGNORECASE)
MLP = re.compile(r'\s*mlp\s*\(\s*(\d+(?:\s*,\s*\d+)*)\s*\)\s*', re.IGNORECASE)
NAMED = re.compile(r'\s*(linear|logistic|softmax|poisson|gamma|mlp)\b', re.IGNORECASE)
MAX_UNITS = 1024         # a hidden layer's units at most
MAX_LAYERS = 4
NUMBERS = ('N',)         # typcategory of a number column: a feature
CATEGORIES = ('S', 'E', 'B')  # of a category column: a categorical weight (integers are numbers here)
INTERCEPT = 'intercept'
WEIGHT_BYTES = 64  # what an mlp's random starting weight costs while it is drawn, written as JSON and parsed again
EXAMPLES = "'linear', 'logistic', 'softmax', 'poisson', 'gamma' or 'mlp(16)'"
# The primary key's columns of a table named as the data: an identifier, no feature.
PRIMARY_KEY = ("SELECT a.attname::pg_catalog.text AS name FROM pg_catalog.pg_index AS i JOIN pg_catalog.pg_attribute "
               "AS a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid AND a.attnum OPERATOR(pg_catalog.=) "
               "ANY (i.indkey) WHERE i.indrelid OPERATOR(pg_catalog.=) $1::pg_catalog.regclass AND i.indisprimary")


@dataclass
class Generated:
    family: str       # canonical: 'softmax', 'mlp(16, 8)'
    model: str        # the lambda
    loss: str
    weights: dict     # the starting weights
    regularize: list  # the weights the penalty falls on: all but the intercepts and biases
    scaled_start: bool  # whether the starting weights are the standardised columns' (an mlp's random ones)


def named(text):
    """Whether a model text names a regression family rather than writes a lambda."""
    return text is not None and NAMED.match(text) is not None and not text.lstrip().startswith(('λ', 'lambda'))


def arranged(model, loss, data):
    """(loss, data) as pgad.train and pgad.tune take them: where the model is a family's name (a regression's or a
    sequence's) and the fourth argument is not given, a third that is no loss's name is the data,
    pgad.train(name, family, data)."""
    if (named(model) or families.named(model)) and data is None and loss is not None and not objective.named(loss):
        return None, loss
    return loss, data


def canonical(text):
    """'softmax', 'mlp(16, 8)': the family a text names, written as pgad.models.options stores it; 22023 for one
    pgad lacks."""
    found = FAMILY.fullmatch(text)
    if found:
        return found.group(1).lower()
    found = MLP.fullmatch(text)
    if found:
        units = [int(u) for u in found.group(1).split(',')]
        if len(units) > MAX_LAYERS or not all(1 <= u <= MAX_UNITS for u in units):
            raise PgadError('22023', f'model "{text}" has {len(units)} layers of {", ".join(map(str, units))} '
                                     'units', detail=f'An mlp has 1 to {MAX_LAYERS} hidden layers of 1 to {MAX_UNITS} '
                                                     'units each.', hint="Write 'mlp(16)' or 'mlp(32, 16)'.")
        return 'mlp(' + ', '.join(map(str, units)) + ')'
    raise PgadError('22023', f'model "{text.strip()}" is no family pgad has',
                    hint=f'Name one of {EXAMPLES}, or write the model as a lambda, λ(d, w) w.a*d.x + w.b.')


def loss_of(family, loss, label_kind):
    """The loss a family trains with: its own, or the one given where it fits the family ('linear' takes any but
    'softmax'; a family that is its loss, only that one); label_kind the label column's typcategory (an mlp's
    default: 'squared' for a number, 'softmax' for classes)."""
    if loss is None:
        return LOSS_OF.get(family) or ('squared' if label_kind in NUMBERS else 'softmax')
    base = objective.base(loss) if objective.named(loss) else None
    if family.startswith('mlp') or family == 'linear' and base != 'softmax' or base == LOSS_OF[family]:
        return loss
    raise PgadError('22023', f'model "{family}" trains with loss "{LOSS_OF[family]}", not "{loss}"',
                    hint="Leave loss out" + (f", or use model 'linear' with loss '{loss}'." if base != 'softmax'
                                             else ", or use model 'softmax' for many classes."))


def generate(text, loss, data, label, group_by, seed, memory_limit=None):
    """The Generated lambda of family text over the data's columns, its label column label; an mlp's random start
    bounded by memory_limit (bytes, pgad.memory_limit) before it is drawn."""
    family = canonical(text)
    query = loader.as_query(data)
    names, types = loader.check_columns(query, [])
    if label not in names:
        raise objective.label_missing(label, loss or LOSS_OF.get(family, family), loader.missing(label, names))
    left_out = {label, *(group_by or ())} | _primary_key(data, query)
    kinds = {n: _kind(oid) for n, oid in zip(names, types) if n not in left_out or n == label}
    if family == 'logistic' and loss is None and kinds[label][1] != 'B' and _more_than_two(query, label):
        family = 'softmax'  # scikit-learn's LogisticRegression, BigQuery ML's logistic_reg: multinomial past two
        server.notice(f'model "logistic" over a label of more than two classes ("{label}") is multinomial: it trains '
                      "as model 'softmax'")
    loss = loss_of(family, loss, kinds[label][1])
    features = [n for n in names if n not in left_out]
    if not features:
        raise PgadError('22023', f'model "{family}" has no column to read: the data has only the label'
                                 + (', the group_by columns' if group_by else '')
                                 + (' and its primary key' if left_out - {label, *(group_by or ())} else ''),
                        hint='Give data with feature columns beside the label.')
    numbers, categories = [], []
    for n in features:
        kind, category = kinds[n]
        if category in NUMBERS and not kind.endswith('[]'):
            numbers.append(n)
        elif category in CATEGORIES and objective.base(loss) != 'softmax' and not family.startswith('mlp'):
            categories.append(n)
        else:
            raise PgadError('42804', f'model "{family}" reads every column of the data but the label, and column '
                                     f'"{n}" is of type {kind}',
                            detail='A family reads each number column as a feature, and each text, enum or boolean '
                                   'column as a category where its prediction is one number (not an mlp\'s, nor one '
                                   'of many classes).',
                            hint='Leave it out of the data query (SELECT the columns to read), or code it there as '
                                 'numbers (a column per category: (city = \'oslo\')::int AS oslo).')
    terms, weights = [], {}
    taken = {*numbers, *categories}
    intercept = _free(INTERCEPT, taken)
    if family.startswith('mlp'):
        units = [int(u) for u in family[4:-1].split(',')]
        count = sum(a * b for a, b in zip(units, [len(numbers), *units[:-1]])) + sum(units) + units[-1] + 1
        if memory_limit is not None and count * WEIGHT_BYTES > memory_limit:
            raise PgadError(loader.OUT_OF_MEMORY, f'model "{family}" over {len(numbers)} columns has {count} weights, '
                                                  f'{loader.megabytes(count * WEIGHT_BYTES)}, more than '
                                                  f'pgad.memory_limit ({loader.megabytes(memory_limit)})',
                            hint='Give fewer or smaller layers, or have a superuser raise pgad.memory_limit.')
        rng = np.random.default_rng(0 if seed is None else seed)
        biases = [_free(f'bias{k + 1}', taken) for k in range(len(units))]
        layers = [_free(f'layer{k + 1}', taken) for k in range(1, len(units))]  # the first's below
        output = _free('output', taken)
        first = _free('layer1', taken)
        weights[first] = (rng.standard_normal((units[0], len(numbers))) / np.sqrt(len(numbers))).tolist()
        weights[biases[0]] = [0.0] * units[0]
        hidden = f'tanh(w.{first} @ {_vector(numbers)} + w.{biases[0]})'
        for k, layer in enumerate(layers):
            weights[layer] = (rng.standard_normal((units[k + 1], units[k])) / np.sqrt(units[k])).tolist()
            weights[biases[k + 1]] = [0.0] * units[k + 1]
            hidden = f'tanh(w.{layer} @ {hidden} + w.{biases[k + 1]})'
        classes = objective.base(loss) == 'softmax'
        weights[output] = {} if classes else (rng.standard_normal(units[-1]) / np.sqrt(units[-1])).tolist()
        weights[intercept] = {} if classes else 0.0
        model = f'λ(d, w) w.{output} @ {hidden} + w.{intercept}'
        regularize = [n for n in weights if n not in (*biases, intercept)]
        return Generated(family, model, loss, weights, regularize, True)
    if objective.base(loss) == 'softmax':  # a row of coefficients per class: one product, as scikit-learn's coef_
        coefficients = _free('coef', taken)
        weights = {coefficients: {}, intercept: {}}
        model = f'λ(d, w) w.{coefficients} @ {_vector(numbers)} + w.{intercept}'
        return Generated(family, model, loss, weights, [coefficients], False)
    for n in features:
        if n in categories:
            terms.append(f'w.{identifier(n)}[d.{identifier(n)}]')
            weights[n] = {}
        else:
            terms.append(f'w.{identifier(n)}*d.{identifier(n)}')
            weights[n] = 0.0
    if categories:  # a weight per category is an intercept per category: beside another, the model is not identified
        model = 'λ(d, w) ' + ' + '.join(terms)
        return Generated(family, model, loss, weights, [n for n in weights if n != categories[0]], False)
    weights[intercept] = 0.0
    model = 'λ(d, w) ' + ' + '.join([*terms, f'w.{intercept}'])
    return Generated(family, model, loss, weights, [n for n in weights if n != intercept], False)


def _vector(columns):
    return '[' + ', '.join(f'd.{identifier(n)}' for n in columns) + ']'


def _more_than_two(query, label):
    """Whether the label column holds more than two distinct values (NULL aside): three read at most."""
    return len(server.query(categorical.LEVELS.format(c=quote_ident(label), query=query, limit=3))) > 2


def _free(name, taken):
    """name, or name_2, name_3 … where a column has it: a weight of the family's own beside the features'."""
    found, k = name, 1
    while found in taken:
        k += 1
        found = f'{name}_{k}'
    taken.add(found)
    return found


def _kind(oid):
    """(the type's name, its typcategory) of a column, a domain followed down to its base type."""
    base = server.query(categorical.BASE, [oid], ['pg_catalog.oid'])[0]
    return base['name'] + ('[]' if base['category'] == 'A' else ''), base['category']


def _primary_key(data, query):
    """The primary key's columns of the table data names (none for a query): an identifier of rows, no feature."""
    if query == data.strip() or loader.QUERY_START.match(data):
        return set()
    return {r['name'] for r in server.query(PRIMARY_KEY, [loader.relation(data)], ['pg_catalog.text'])}
