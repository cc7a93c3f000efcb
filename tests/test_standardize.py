"""standardize.py on its own (no server): which models it can standardise, and that the weights it moves between
units give the same model. The model's value at the original weights over the original columns must equal its value
at forward()'s weights over the standardised columns, to 1e-12 relative, and back() must undo forward()."""
import numpy as np
import pytest

from pgad import backends, program
from pgad.models import standardize
from pgad.errors import PgadError
from pgad.lang import parse

MODELS = {
    'linear': 'λ(d, w) w.a*d.x + w.b*d.y + w.c',
    'written backwards, with minus signs': 'λ(d, w) w.c - (d.x*w.a - w.b*d.y)',
    'logistic': 'λ(d, w) sigmoid(w.a*d.x + w.b*d.y + w.c)',
    'a layer of tanh': 'λ(d, w) w.o1*tanh(w.a1*d.x + w.b1*d.y + w.c1) + w.o2*tanh(w.a2*d.x + w.b2*d.y + w.c2) + w.o',
    'no intercept': 'λ(d, w) w.a*d.x + w.b*d.y',
    'one form shared': 'λ(d, w) (w.a*d.x + w.b*d.y + w.c) * sigmoid(w.a*d.x + w.b*d.y + w.c)',
    'a unary minus': 'λ(d, w) -(w.a*d.x) + w.b*d.y - (-w.c)',
    'a term without a column': 'λ(d, w) w.d*sin(w.e) + w.a*d.x + w.f*cos(w.g) + w.b*d.y + w.c',
}


def values(text, columns, weights):
    lam = parse(text)
    names = tuple(lam.weights)
    kernel = backends.compile(program.build(text, names, gradient=False), 'python')
    return np.array([kernel([c[k:k + 1] for c in columns], 1, np.array([weights[n] for n in names]))[0]
                     for k in range(len(columns[0]))])


@pytest.mark.parametrize('name', MODELS)
def test_forward_weights_over_standardised_columns_are_the_same_model(name):
    text = MODELS[name]
    lam = parse(text)
    rng = np.random.default_rng(0)
    columns = {'x': 1000 + 300 * rng.random(20), 'y': 0.001 * rng.random(20)}
    weights = {w: float(v) for w, v in zip(lam.weights, rng.normal(0, 1, len(lam.weights)))}
    plan = standardize.plan(lam)
    mean, std = standardize.moments(plan, columns)
    scaled = [standardize.scale(columns[c], mean[c], std[c]) for c in lam.columns]
    moved = standardize.forward(plan, weights, mean, std)
    np.testing.assert_allclose(values(text, scaled, moved), values(text, [columns[c] for c in lam.columns], weights),
                               rtol=1e-12)
    back = standardize.back(plan, moved, mean, std)
    assert back == pytest.approx(weights, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize('name', MODELS)
def test_every_column_is_centred_where_its_forms_have_an_intercept(name):
    assert standardize.plan(parse(MODELS[name])).centred == (set() if name == 'no intercept' else {'x', 'y'})


def test_the_scaled_columns_have_mean_0_and_deviation_1_where_an_intercept_takes_the_mean():
    lam = parse(MODELS['linear'])
    columns = {'x': np.array([0.25, 0.5, 0.75, 1.5]), 'y': np.array([5.0, 5.0, 5.0, 5.0])}
    plan = standardize.plan(lam)
    mean, std = standardize.moments(plan, columns)
    assert plan.centred == {'x', 'y'} and mean == {'x': 0.75, 'y': 5.0}
    assert std == {'x': pytest.approx(np.std(columns['x'])), 'y': 1.0}  # a constant column is not divided by 0
    z = standardize.scale(columns['x'], mean['x'], std['x'])
    assert np.mean(z) == pytest.approx(0, abs=1e-15) and np.std(z) == pytest.approx(1)


def test_a_column_in_a_form_without_intercept_is_scaled_but_not_centred():
    lam = parse('λ(d, w) w.a*d.x + w.b*d.y + w.c + w.d*tanh(w.e*d.y)')
    plan = standardize.plan(lam)
    assert plan.centred == {'x'}
    mean, _ = standardize.moments(plan, {'x': np.array([1.0, 3.0]), 'y': np.array([2.0, 4.0])})
    assert mean == {'x': 2.0, 'y': 0.0}


def test_the_plan_names_each_form_its_terms_and_intercept():
    plan = standardize.plan(parse('λ(d, w) w.k - w.a*d.x + d.y*w.b'))
    assert plan.forms == (standardize.Form((('a', 'x', -1.0), ('b', 'y', 1.0)), 'k', 1.0),) or \
        plan.forms == (standardize.Form((('b', 'y', 1.0), ('a', 'x', -1.0)), 'k', 1.0),)


@pytest.mark.parametrize('text, column', [
    ('λ(d, w) w.a*d.x^2 + w.c', 'x'),              # a power of the column
    ('λ(d, w) 2*w.a*d.x + w.c', 'x'),              # a coefficient that is not a weight alone
    ('λ(d, w) w.a*d.x + w.a*d.y + w.c', 'x'),      # one weight for two columns
    ('λ(d, w) w.a*d.x*d.y + w.c', 'y'),            # a column times a term (w.a*d.x alone is one)
    ('λ(d, w) w.a*d.x + w.b*d.y + d.y + w.c', 'y'),  # a column outside a term
    ('λ(d, w) w.a*d.x + w.b*ln(d.y) + w.c', 'y'),  # a function of the column
    ('λ(d, w) w.a*(d.x + 1) + w.c', 'x'),
    ('λ(d, w) d.x', 'x'),                          # the column alone, with no weight
])
def test_a_model_not_linear_in_a_column_is_refused_naming_it(text, column):
    with pytest.raises(PgadError) as caught:
        standardize.plan(parse(text))
    assert (caught.value.sqlstate, caught.value.message) == (
        '0A000', f'standardize => true needs a model linear in column "{column}"')
    assert caught.value.hint == 'Train without standardize, or scale the column in the data query.'
    assert caught.value.detail == ('With standardize, every column the model reads must enter it only as '
                                   'w.a*d.column or w.W @ [d.column, …], a weight of its own for each term, in sums '
                                   'that may hold an intercept weight.')


# (lambda, the weights' shapes): forms of vectors, written out by element (standardize.at); a vector is summed with
# weights of its own per element (sin(…) @ [1, 2, 3]), so that a wrong element's intercept changes the value
VECTOR_MODELS = {
    'a matrix @ columns, a row of intercepts': ('λ(d, w) sin(w.w @ [d.x, d.y] + w.b) @ [1, 2, 3]',
                                                {'w': (3, 2), 'b': (3,)}),
    'class-sized vectors a column each': ('λ(d, w) sin(w.a*d.x + w.c*d.y + w.b) @ [1, 2, 3]',
                                          {'a': (3,), 'c': (3,), 'b': (3,)}),
    'a hidden layer of a matrix': ('λ(d, w) w.o @ tanh(w.h @ [d.x, d.y] + w.c) + w.e',
                                   {'o': (2,), 'h': (2, 2), 'c': (2,)}),
    'a matrix without an intercept': ('λ(d, w) sin(w.w @ [d.x, d.y]) @ [1, 2]', {'w': (2, 2)}),
}


@pytest.mark.parametrize('name', VECTOR_MODELS)
def test_forms_of_vectors_are_standardised_element_by_element(name):
    """The model's value (every element of a vector prediction) at the original weights over the original columns
    equals its value at forward()'s weights over the standardised ones, and back() undoes forward()."""
    from pgad import calls
    from pgad.lang import vectors
    text, shapes = VECTOR_MODELS[name]
    lam = parse(text)
    rng = np.random.default_rng(1)
    x, y = 1000 + 300 * rng.random(20), 0.001 * rng.random(20)
    weights = {n: rng.normal(0, 1, shapes.get(n, ())) for n in lam.weights}
    shape = vectors.Shapes(tuple((n, s) for n, s in shapes.items()))
    names = tuple(lam.weights)
    prog = program.build(text, names, gradient=False, shapes=shape)
    flat = dict(zip(prog.weights, calls.vector_of(weights)))
    plan = standardize.at(standardize.plan(lam), dict(prog.shapes))
    mean, std = standardize.moments(plan, {'x': x, 'y': y})
    moved = standardize.forward(plan, flat, mean, std)
    kernel = backends.compile(prog, 'python')

    def value(cols, w):
        return [kernel([c[k:k + 1] for c in cols], 1, np.array([w[n] for n in prog.weights]))
                for k in range(len(cols[0]))]
    order = {'x': x, 'y': y}
    scaled = {c: standardize.scale(v, mean[c], std[c]) for c, v in order.items()}
    assert np.allclose(value([order[c] for c in prog.columns], flat),
                       value([scaled[c] for c in prog.columns], moved), rtol=1e-10, atol=1e-10)
    back = standardize.back(plan, moved, mean, std)
    assert all(back[n] == pytest.approx(flat[n], rel=1e-12, abs=1e-12) for n in flat)
    assert any(moved[n] != flat[n] for n in flat)  # it moved something


def test_a_form_of_weights_of_two_shapes_is_refused():
    lam = parse('λ(d, w) w.a*d.x + w.b')
    with pytest.raises(PgadError) as caught:
        standardize.at(standardize.plan(lam), {'a': (3,)})
    assert (caught.value.sqlstate, caught.value.message) == (
        '0A000', "standardize => true needs each affine form's weights of one shape")


def test_a_categorical_term_leaves_its_column_alone():
    """w.c[d.k] is a term of the form, its column the categories' codes: not standardised, and no intercept."""
    plan = standardize.plan(parse('λ(d, w) w.a*d.x + w.c[d.k] + w.b'))
    assert plan.columns == ('x',) and plan.centred == frozenset({'x'})
    assert [(f.terms, f.intercept) for f in plan.forms] == [((('a', 'x', 1.0),), 'b')]
