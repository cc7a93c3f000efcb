"""The classes of a classifier: a 'softmax' model's label, and a 'logistic' model's text, enum or integer label.

A label of classes is read as a categorical column is (categorical.py): its classes are the column's distinct
non-NULL values in the data, in its type's order, found once over all the data by the load itself
(categorical.preload; where the load is not native, by a query first, categorical.LEVELS) (with group_by, every
group shares them: a group without rows of a class still has its logit), and the loader reads the column as
each row's class code 1 … K (loader.category_code). Integer, text/varchar, enum and boolean labels; a domain as its
base type; a type that another role owns is refused, as a group column's is (catalog.group_types: the functions
that give the class compare and return it as its type). The model stores them in pgad.models.options:
"classes" (the classes as text, in order) and "label_type" (the base type, schema-qualified).

Under 'softmax' the prediction is a vector of K logits; the loss of a row is logsumexp(p) - p[d.y]. A weight whose
start is {} and that no column indexes is class-sized (sized): K rows, `w.W @ v` a K × len(v) matrix, any other use a
K-vector, starting at 0. The logits are invariant to adding one number to every class's logit, so after the fit such
weights are centred over the classes (centre: scikit-learn's symmetric parameterisation) where the model's structure
shows that centring shifts every logit alike (shifts_alike).

Under 'logistic' a label of two classes that is not boolean or a number 0/1 (text, an enum, an integer such as 1/2)
is read as its code less 1: the second class in order is 1, the positive class, as true is of a boolean.
"""
from dataclasses import dataclass

import numpy as np

from .. import categorical, loader, program, server
from ..errors import PgadError
from ..lang import vectors
from ..lang.rules import describe
from ..lang.printer import quote_ident, quote_literal
from . import catalog

LOSSES = ('softmax', 'logistic')  # the named losses whose label may be a column of classes
TOO_MANY = categorical.TOO_MANY
CLASSES_PER_NODES = categorical.NODES_PER_CATEGORY  # at most pgad.max_lambda_nodes / this many classes


@dataclass(frozen=True)
class Classes:
    label: str     # the label column
    keys: list     # the classes as text, in the label type's order
    type: str      # the label's (base) type, schema-qualified: what the class function returns

    @property
    def codes(self):
        """{label: its classes}: what the loader codes the label by (loader.category_code)."""
        return {self.label: self.keys}


def label_type(loss, label, data):
    """(the label's type oid, its base type's schema-qualified name) where the label column of a 'softmax' or
    'logistic' model on the data may be a label of classes; None for a 'logistic' label that is boolean or a number
    (read as today: 0/1). Its type is checked, by the data query's description, not its rows."""
    if loss not in LOSSES:
        return None
    query = loader.as_query(data)
    names, types = loader.check_columns(query, [])
    if label not in names:
        raise loader.missing(label, names)  # which pgad.train says is the label (objective.without_label)
    oid = types[names.index(label)]
    base = server.query(categorical.BASE, [oid], ['pg_catalog.oid'])[0]
    if loss == 'logistic' and base['oid'] not in categorical.INTEGERS and base['category'] in ('N', 'B'):
        return None  # a number or a boolean (or a domain over one): as the loader reads (or refuses) it
    if base['oid'] not in categorical.INTEGERS and base['category'] not in categorical.KINDS:
        shown = quote_ident(label)
        raise PgadError('42804', f'the label column "{label}" is of type {base["name"]}, which cannot be a class',
                        hint=f"loss '{loss}' takes a label of classes: text, varchar, an enum, boolean or an integer; "
                             f'cast it in the data query ({shown}::text AS {shown})'
                             + (", or use loss 'squared' for a number." if loss == 'softmax' else '.'))
    kind, = catalog.group_types([label], [base['name']], 'the label')
    return oid, kind


def find(loss, label, data, limits, memory_limit=None, table=None):
    """The Classes of the label column of a 'softmax' or 'logistic' model on the data; None for a 'logistic' label
    that is boolean or a number (read as today: 0/1). The classes are those the load found (table: a
    categorical.preload that coded the label, which a 'logistic' label of 0 and 1 then holds as numbers again), or
    where there is none, read first by a query of their own (LEVELS)."""
    typed = label_type(loss, label, data)
    if typed is None:
        return None
    oid, kind = typed
    query = loader.as_query(data)
    most = max(2, limits.lambda_nodes // CLASSES_PER_NODES)

    def too_many():
        return PgadError(TOO_MANY, f'the label column "{label}" has more than {most} classes, the most a model takes',
                         detail=f'The limit is pgad.max_lambda_nodes / {CLASSES_PER_NODES}.',
                         hint='Group rare classes into one in the data query, or have a superuser raise '
                              'pgad.max_lambda_nodes.')
    keys = categorical.preloaded_keys(table, label, kind, most, too_many) if table is not None else \
        [r['v'] for r in server.query(categorical.LEVELS.format(c=quote_ident(label), query=query, limit=most + 1))]
    if len(keys) > most:
        raise too_many()
    if memory_limit is not None and len(keys) * 1024 > memory_limit:
        raise PgadError(loader.OUT_OF_MEMORY, f'the classes of the label column "{label}" need '
                                              f'{loader.megabytes(len(keys) * 1024)}, more than pgad.memory_limit '
                                              f'({loader.megabytes(memory_limit)})',
                        hint='Group rare classes into one in the data query, or have a superuser raise '
                             'pgad.memory_limit.')
    if loss == 'logistic':
        if oid in categorical.INTEGERS and set(keys) <= {'0', '1'}:
            if table is not None:  # the codes back to the numbers they stand for
                at = table.names.index(label)
                table.columns[at] = np.array([np.nan] + [float(k) for k in keys])[table.columns[at].astype(np.intp)]
            return None  # 0/1: read as a number, as before
        if len(keys) != 2:
            raise PgadError('22023', f'loss "logistic" takes a label of two classes, but column "{label}" has '
                                     f'{len(keys)}',
                            detail='Its classes: ' + ', '.join(quote_literal(k) for k in keys[:10])
                                   + (', …' if len(keys) > 10 else '') + '.',
                            hint="Use loss => 'softmax' for a model of many classes (its prediction a vector of a "
                                 "logit per class, as 'λ(d, w) w.w @ [d.x1, d.x2] + w.b' with "
                                 "'{\"w\": {}, \"b\": {}}')."
                            if len(keys) > 2 else 'Give data with rows of both classes.')
    elif len(keys) < 2:
        raise PgadError('22023', f'loss "softmax" needs two classes or more, but the label column "{label}" has '
                                 f'{len(keys)}',
                        detail='Its classes: ' + (quote_literal(keys[0]) if keys else 'none (NULL in every row)') + '.',
                        hint='Give data with rows of at least two classes.')
    return Classes(label, keys, kind)


def options(found):
    """What pgad.models.options holds of the classes: {"classes": [...], "label_type": "..."}."""
    return {'classes': list(found.keys), 'label_type': found.type}


def class_sized(w, lam):
    """The names of the weights of w (as arguments.weights gives them) that are class-sized under 'softmax': a JSON
    object as their start ({}), and read other than indexed by a column (which makes a weight categorical)."""
    nodes, indexed = lam.graph.nodes, set()
    for i in lam.graph.ancestors([lam.root]):
        node = nodes[i]
        if node.op == 'index' and nodes[node.args[0]].op == 'weight' and nodes[node.args[1]].op == 'column':
            indexed.add(nodes[node.args[0]].value)
    found = [n for n, v in w.items() if isinstance(v, dict) and n in lam.weights and n not in indexed]
    for name in found:
        if w[name]:
            raise PgadError('22023', f'weight "{name}" is class-sized and starts at {{}} only',
                            detail='Under loss \'softmax\' a weight that starts as a JSON object and is not indexed by '
                                   'a column has a row per class, each starting at 0.',
                            hint=f'Write "{name}": {{}}, or give its start as an array of its shape (a row per class).')
    return found


def placeholders(w, names, k):
    """w with each class-sized weight (names) a K-vector of 0, until sized() knows its shape."""
    return {n: np.zeros(k) if n in names else v for n, v in w.items()}


def sized(w, names, lam, k, shapes):
    """w with each class-sized weight (names) 0 in its shape: K × len(v) where the model reads it as w.W @ v, else K;
    shapes: the call's vectors.Shapes with the class-sized weights as K-vectors (placeholders)."""
    nodes, out = lam.graph.nodes, dict(w)
    for name in names:
        right = [node.args[1] for node in (nodes[i] for i in lam.graph.ancestors([lam.root]))
                 if node.op == 'matmul' and nodes[node.args[0]].op == 'weight' and nodes[node.args[0]].value == name]
        out[name] = np.zeros((k, *vectors.shape_of(lam, shapes, right[0])[:1]) if right else (k,))
    return out


def check_prediction(lam, shapes, found):
    """The error unless the model lam predicts a vector of a logit per class (found) at these Shapes."""
    shape = vectors.shape_of(lam, shapes, lam.root)
    if shape != (len(found.keys),):
        raise PgadError('22023', f'loss "softmax" takes a prediction of {len(found.keys)} logits, a number per class '
                                 f'of the label column "{found.label}", but the model predicts '
                                 f'{describe(shape)}',
                        detail='The classes: ' + ', '.join(quote_literal(k) for k in found.keys[:10])
                               + (', …' if len(found.keys) > 10 else '') + '.',
                        hint='Start the weights that make the logits at {} to size them by the classes: '
                             '\'λ(d, w) w.w @ [d.x1, d.x2] + w.b\' with \'{"w": {}, "b": {}}\'.')


def centred(lam, shapes, sized, k):
    """The weights to centre over the classes after the fit: those of K rows (shapes: a Program's ((name, shape), …))
    whose centring shifts every logit alike (shifts_alike) — every weight of K rows where that holds of them all (an
    explicit start too, as pgad.init_weights gives), else the class-sized ones (sized) where it holds of them (a
    hidden layer of K units is no class's), else none."""
    rows = [n for n, shape in shapes if shape and shape[0] == k]
    for names in (rows, list(sized)):
        if names and shifts_alike(lam, set(names)):
            return names
    return []


def shifts_alike(lam, names):
    """Does adding one vector c to each class-sized weight's classes (names) (W → W + 1·cᵀ, b → b + c) add one number
    to every logit of lam's prediction? True where the prediction is a sum or difference of terms each a class-sized
    weight, a class-sized weight @ an expression without one, a number times one of these, or an expression without a
    class-sized weight: then centring changes no probability. Checked on the structure, not numerically."""
    nodes = lam.graph.nodes

    def free(i):  # no class-sized weight under node i
        return not any(nodes[j].op == 'weight' and nodes[j].value in names for j in lam.graph.ancestors([i]))

    def term(i):
        node = nodes[i]
        if free(i) or node.op == 'weight':
            return True
        if node.op in ('add', 'sub'):
            return all(term(a) for a in node.args)
        if node.op == 'neg':
            return term(node.args[0])
        if node.op == 'mul':  # the DAG puts a constant factor first (dag.simplify)
            a, b = node.args
            return nodes[a].op == 'const' and term(b)
        if node.op == 'matmul':
            a, b = node.args
            return nodes[a].op == 'weight' and nodes[a].value in names and free(b)
        return False
    return term(lam.root)


def centre(vector, shapes, names):
    """vector (the fitted weights, in the order of a Program's shapes: ((name, shape), …)) with each class-sized
    weight (names) less its mean over the classes, its first axis."""
    out = np.array(vector, dtype=np.float64)
    for name, shape, at in program.spans(shapes):
        if name in names:
            value = out[at].reshape(shape)
            out[at] = (value - value.mean(axis=0)).ravel()
    return out


def seen(table, at, where, notice):
    """table (a loader.Table of held-out rows, loaded with unseen=True) without the rows whose label, column `at`,
    is a class the training never saw (code 0: no logit for it), counted in a NOTICE."""
    if table is None:
        return None
    known = table.columns[at] != 0
    dropped = int(table.rows - known.sum())
    if not dropped:
        return table
    notice(f'{where}: skipped {dropped} of {table.rows} validation rows whose label is a class the training data '
           'does not have')
    return loader.Table([np.ascontiguousarray(c[known]) for c in table.columns], int(known.sum()),
                        table.skipped + dropped)
