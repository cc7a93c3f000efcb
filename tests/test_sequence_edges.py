"""Ordered data at its edges, through SQL (docs/sql.md, "Sequences"): ties named with the group and the value as
its type prints it, NULLs skipped with the NOTICE, groups of one row and of very different lengths, and every
argument a sequence model refuses, each a clear SQLSTATE that leaves the catalog as it was; and the threats of
docs/security.md that concern sequences."""
import dataclasses
import json
import math
import re
import threading
import time
import warnings

import numpy as np
import psycopg
import pytest

from conftest import error_of
from pgad import limits, sequences
from pgad.errors import PgadError
from pgad.models import sequence

SES = '{"level": {"start": "w.l0", "next": "s.level + w.alpha*(d.y - s.level)"}}'
W = '{"alpha": 0.5, "l0": 0}'
MODEL = 'λ(d, w, s) s.level'


@pytest.fixture
def edges(db):
    db.execute('DROP TABLE IF EXISTS e')
    db.execute("CREATE TABLE e (g int, day date, ts timestamp, tz timestamptz, i int, n numeric, y float8, x float8)")
    # two groups of ten rows, each day once per group; y and x never NULL
    db.execute("INSERT INTO e SELECT k % 2, '2024-01-01'::date + k/2, '2024-01-01'::timestamp + (k/2) * interval "
               "'1 hour', '2024-01-01 00:00+00'::timestamptz + (k/2) * interval '90 minutes', k/2, (k/2) * 1.5, "
               "sin(k), cos(k) FROM generate_series(0, 19) k")
    return db


def catalog(db):
    return db.execute("SELECT (SELECT count(*) FROM pgad.models), (SELECT count(*) FROM pg_proc p JOIN "
                      "pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'pgad_models')").fetchone()


def refused(db, sql, params=None):
    """The error of sql, after which the catalog is as it was."""
    before = catalog(db)
    diag = error_of(db, sql, params)
    assert diag.sqlstate != 'XX000' and catalog(db) == before
    return diag


def train(data, order_by='day', state=SES, model=MODEL, weights=W, extra=''):
    return (f"SELECT name, group_key, rows FROM pgad.train('edge', %s, 'squared', %s, %s, order_by => %s, "
            f"state => %s{extra})", [model, data, weights, order_by, state])


@pytest.mark.parametrize('column, shown', [
    ('day', '2024-01-03'), ('ts', '2024-01-01 02:00:00'), ('tz', '2024-01-01 03:00:00+00'), ('i', '2'),
    ('n', '3')])
def test_a_tie_names_the_group_and_the_value_as_its_type_prints_it(edges, column, shown):
    edges.execute("SET TimeZone = 'UTC'")
    # group 1 has two rows at the third value of the order column
    data = f'SELECT g, {column}, y FROM e UNION ALL SELECT g, {column}, y FROM e WHERE g = 1 AND i = 2'
    diag = refused(edges, *train(data, column, extra=", group_by => 'g'"))
    assert diag.sqlstate == '21000'
    assert diag.message_primary == f'order_by "{column}" has more than one row at {shown} in group {{"g": 1}}'


def test_a_timestamptz_tie_is_shown_in_the_session_time_zone(edges):
    edges.execute("SET TimeZone = 'Asia/Tokyo'")
    diag = refused(edges, *train('SELECT tz, y FROM e', 'tz'))
    assert diag.message_primary == 'order_by "tz" has more than one row at 2024-01-01 09:00:00+09'


@pytest.mark.parametrize('data, named', [
    ("SELECT day, CASE WHEN i = 3 THEN NULL ELSE y END AS y FROM e WHERE g = 0", '"y"'),
    ("SELECT CASE WHEN i = 3 THEN NULL ELSE day END AS day, y FROM e WHERE g = 0", '"day"'),
])
def test_a_row_with_null_is_skipped_with_the_notice(edges, data, named):
    notices = []
    edges.add_notice_handler(lambda d: notices.append(d.message_primary))
    name, key, rows = edges.execute(*train(data)).fetchone()
    assert rows == 9
    assert f'skipped 1 of 10 rows with NULL in {named} (1 row)' in notices


def test_an_exogenous_null_skips_the_row(edges):
    model = 'λ(d, w, s) s.level + w.b*d.x'
    rows = edges.execute(*train("SELECT day, y, CASE WHEN i = 4 THEN NULL ELSE x END AS x FROM e WHERE g = 0",
                                model=model, weights='{"alpha": 0.5, "l0": 0, "b": 0}')).fetchone()[2]
    assert rows == 9


def test_groups_of_one_row_and_of_many(edges):
    edges.execute("INSERT INTO e (g, day, y) SELECT 2, '2024-01-01'::date + k, sin(k) FROM generate_series(0, 499) k")
    edges.execute("INSERT INTO e (g, day, y) VALUES (3, '2024-01-01', 1.5)")
    found = {key['g']: rows for _, key, rows in
             edges.execute(*train('SELECT g, day, y FROM e', extra=", group_by => 'g'")).fetchall()}
    assert found == {0: 10, 1: 10, 2: 500, 3: 1}
    one = edges.execute("SELECT weights, options FROM pgad.models WHERE name = 'edge' AND group_key->>'g' = '3'"
                        ).fetchone()
    # one row: the level's start is fitted to it, and the state after it is the smoothed row
    assert one[0]['l0'] == pytest.approx(1.5, rel=1e-6)
    assert one[1]['last_state']['level'] == pytest.approx(1.5, rel=1e-6)


@pytest.mark.parametrize('case, sql, sqlstate, message', [
    ('reads its order column', train('SELECT i, y FROM e WHERE g = 0', 'i', model='λ(d, w, s) s.level + 0*d.i'),
     '0A000', 'the model reads its order column "i"'),
    ('order column missing', train('SELECT day, y FROM e', 'dayz'), '42703',
     'column "dayz" of order_by does not exist in the data'),
    ('two order columns', train('SELECT day, i, y FROM e', 'day, i'), '22023', 'order_by names one column'),
    ('order column of text', train('SELECT day::text AS day, y FROM e WHERE g = 0'), '42804',
     'column "day" of order_by is of type text'),
    ('order_by is group_by', train('SELECT g, day, y FROM e', 'g', extra=", group_by => 'g'"), '22023',
     'column "g" is both order_by and group_by'),
    ('state without order_by', ("SELECT pgad.train('edge', %s, 'squared', 'SELECT day, y FROM e', %s, state => %s)",
                                [MODEL, W, SES]), '22023',
     'state needs order_by: a sequence model carries a state along ordered rows'),
    ('order_by without state', ("SELECT pgad.train('edge', %s, 'squared', 'SELECT day, y FROM e', %s, "
                                "order_by => 'day')", [MODEL, W]), '22023',
     'order_by needs state: a sequence model carries a state along ordered rows'),
    ('a field read, not declared', train('SELECT day, y FROM e WHERE g = 0', model='λ(d, w, s) s.level + s.trend'),
     '42703', 'state field "trend" is not in the state'),
    ('a start that reads the state', train('SELECT day, y FROM e WHERE g = 0',
                                           state='{"level": {"start": "s.level", "next": "s.level"}}'),
     '42P01', '"s" is neither the data row "d" nor the weights "w"'),
    ('an empty state', train('SELECT day, y FROM e WHERE g = 0', state='{}'), '22023',
     'state must be a JSON object of at least one field'),
    ('too many fields', train('SELECT day, y FROM e WHERE g = 0', state=json.dumps(
        {f'f{k}': {'start': '0', 'next': f's.f{k}'} for k in range(10001)})), '54000',
     'the state has 10001 fields, more than pgad.max_lambda_nodes / 10 (10000)'),
    ('a weight named state.x', train('SELECT day, y FROM e WHERE g = 0', model='λ(d, w, s) s.level + w."state.x"',
                                     weights='{"alpha": 0.5, "l0": 0, "state.x": 1}'), '42P08',
     'weight "state.x" is named as pgad names a state field'),
    ('sgd', train('SELECT day, y FROM e WHERE g = 0', extra=", optimizer => 'sgd'"), '0A000',
     'optimizer "sgd" cannot train a sequence model'),
    ('softmax', ("SELECT pgad.train('edge', %s, 'softmax', 'SELECT day, y FROM e WHERE g = 0', %s, "
                 "order_by => 'day', state => %s)", [MODEL, W, SES]), '0A000',
     "a sequence model takes no loss 'softmax'"),
    ('standardize', train('SELECT day, y FROM e WHERE g = 0', extra=', standardize => true'), '0A000',
     'pgad.train takes no validation or standardize for a sequence model'),
    ('validation', train('SELECT day, y FROM e WHERE g = 0', extra=', validation => 0.2'), '0A000',
     'pgad.train takes no validation or standardize for a sequence model'),
    ('pgad.loss of a state', ("SELECT pgad.loss('λ(d, w, s) (s.level - d.y)^2', 'SELECT day, y FROM e', %s)", [W]),
     '42601', "a lambda of a state, λ(d, w, s), is a sequence model's"),
    ('pgad.train without state', ("SELECT pgad.train('edge', %s, 'squared', 'SELECT day, y FROM e', %s)",
                                  [MODEL, W]), '42601', "a lambda of a state, λ(d, w, s), is a sequence model's"),
])
def test_a_refused_argument_is_a_clear_error_that_changes_nothing(edges, case, sql, sqlstate, message):
    before = edges.execute("SELECT weights, options FROM pgad.models WHERE name = 'edge'").fetchall()
    diag = refused(edges, *sql)
    assert (diag.sqlstate, diag.message_primary) == (sqlstate, message), case
    assert edges.execute("SELECT weights, options FROM pgad.models WHERE name = 'edge'").fetchall() == before
    if case.startswith('pgad'):
        assert 'order_by' in diag.message_hint and 'state' in diag.message_hint


# --- threats (docs/security.md) ---

def test_state_text_is_never_spliced_into_sql_or_python(edges):
    """A field and a column named like an injection are names: the model trains, its scoring function takes the
    field as an argument, and the table is still there."""
    field = "x'); DROP TABLE e; --"
    column = "y'); DROP TABLE e; --"
    state = json.dumps({field: {'start': 'w.l0', 'next': f's."{field}" + w.alpha*(d."{column}" - s."{field}")'}})
    sql, params = train(f'SELECT day, y AS "{column}" FROM e WHERE g = 0', state=state,
                        model=f'λ(d, w, s) s."{field}"', extra=', label => %s')
    edges.execute(sql, params + [column])
    assert edges.execute("SELECT count(*) FROM e").fetchone()[0] == 20
    argument = edges.execute("SELECT pg_get_function_arguments('pgad_models.edge'::regproc)").fetchone()[0]
    assert "state_x'); DROP TABLE e; --" in argument
    value = edges.execute('SELECT pgad_models.edge(%s)', [2.5]).fetchone()[0]
    assert value == 2.5
    # a start or next that tries to run SQL is not a lambda: a syntax error, nothing run
    for bad in ('(SELECT 1)', "pg_sleep(10)", 'd.y; DROP TABLE e'):
        diag = refused(edges, *train('SELECT day, y FROM e WHERE g = 0',
                                     state=json.dumps({'level': {'start': bad, 'next': 's.level'}})))
        assert diag.sqlstate in ('42601', '42703', '42883')  # not a lambda: nothing of it runs
    assert edges.execute("SELECT count(*) FROM e").fetchone()[0] == 20


def test_a_data_query_of_another_roles_table_is_refused(cluster, dbname, edges):
    edges.execute('DROP TABLE IF EXISTS secret_series')
    edges.execute("CREATE TABLE secret_series AS SELECT '2024-01-01'::date + k AS day, k::float8 AS y "
                  "FROM generate_series(0, 9) k")
    edges.execute('DROP ROLE IF EXISTS seq_mallory')
    edges.execute('CREATE ROLE seq_mallory LOGIN')
    edges.execute('GRANT USAGE ON SCHEMA pgad, pgad_models TO seq_mallory')
    with psycopg.connect(cluster.conninfo(dbname, user='seq_mallory'), autocommit=True) as mallory:
        diag = error_of(mallory, *train('SELECT day, y FROM secret_series'))
        assert diag.sqlstate == '42501' and 'secret_series' in diag.message_primary


def test_an_order_column_of_another_roles_type_is_refused_as_a_number_would_be(cluster, dbname, edges):
    """A domain over a number another role owns: the loader names its type; the order column must be a date, a
    timestamp or a number, so it is 42804 before any of the type's functions runs."""
    edges.execute('DROP TABLE IF EXISTS owned_order')
    edges.execute('DROP DOMAIN IF EXISTS seq_tick CASCADE')
    edges.execute('CREATE DOMAIN seq_tick AS int CHECK (VALUE >= 0)')
    edges.execute('DROP ROLE IF EXISTS seq_alice')
    edges.execute('CREATE ROLE seq_alice')
    edges.execute('ALTER DOMAIN seq_tick OWNER TO seq_alice')
    edges.execute("CREATE TABLE owned_order AS SELECT k::seq_tick AS t, sin(k) AS y FROM generate_series(0, 9) k")
    diag = refused(edges, *train('SELECT t, y FROM owned_order', 't'))
    assert diag.sqlstate == '42804' and diag.message_primary.startswith('column "t" of order_by is of type')


def test_a_sequence_past_memory_limit_is_refused_before_it_is_allocated(edges):
    """The tape check (sequences.check_tape): data that fits pgad.memory_limit, checkpoints that do not (a thousand
    sequences of 100 rows, 200 state fields: 2·10 states of 200 numbers a sequence, 32 MB)."""
    edges.execute('DROP TABLE IF EXISTS many_series')
    edges.execute("CREATE TABLE many_series AS SELECT k / 100 AS g, k % 100 AS t, sin(k)::float8 AS y "
                  "FROM generate_series(0, 99999) k")
    edges.execute("SET pgad.memory_limit = '16MB'")
    try:
        state = json.dumps({f'f{k}': {'start': '0', 'next': f's.f{k} + w.alpha*(d.y - s.f{k})'} for k in range(200)})
        diag = refused(edges, *train('SELECT g, t, y FROM many_series', 't', state=state,
                                     model='λ(d, w, s) ' + ' + '.join(f's.f{k}' for k in range(200)),
                                     weights='{"alpha": 0.5}', extra=", group_by => 'g'"))
    finally:
        edges.execute('RESET pgad.memory_limit')
    assert diag.sqlstate == '54000'
    assert diag.message_primary == 'the states of the backward pass need 30 MB, more than pgad.memory_limit (16 MB)'
    assert diag.message_detail == '1000 sequences of up to 100 rows, 200 state fields: a checkpoint every 10 rows.'
    assert diag.message_hint == ("Train on shorter sequences, or with mode => 'forward' (no tape), or have a "
                                 "superuser raise pgad.memory_limit.")


def test_a_long_training_is_cancelled_within_about_a_second(cluster, dbname, edges):
    edges.execute('DROP TABLE IF EXISTS cancel_series')
    edges.execute("CREATE TABLE cancel_series AS SELECT k AS t, sin(k)::float8 AS y FROM generate_series(1, 200000) k")
    pid = edges.execute('SELECT pg_backend_pid()').fetchone()[0]
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as other:
        timer = threading.Timer(3.0, lambda: other.execute('SELECT pg_cancel_backend(%s)', [pid]))
        timer.start()
        started = time.monotonic()
        diag = error_of(edges, *train('SELECT t, y FROM cancel_series', 't', extra=', iterations => 100000'))
        elapsed = time.monotonic() - started
        timer.join()
    assert diag.sqlstate == '57014'
    assert elapsed < 3.0 + 2.0  # cancelled within about a second (generous: a loaded 2-core machine)


def test_the_fields_of_the_state_argument():
    """sequences.fields, in process: the fields in the order given, a number taken as its float's text; each refusal
    a 22023 (54000 past pgad.max_lambda_nodes / 10 fields, at least 1) with the spec's hint."""
    hint = sequences.SPEC_HINT
    assert sequences.fields('{"b": {"start": 2, "next": "s.b"}, "a": {"start": "0", "next": -1.5}}') == [
        ('b', '2.0', 's.b'), ('a', '0', '-1.5')]

    def refused(state, bounds=limits.DEFAULT):
        with pytest.raises(PgadError) as caught:
            sequences.fields(state, bounds)
        return caught.value.sqlstate, caught.value.message, caught.value.detail, caught.value.hint
    assert refused('{"level": ') == ('22023', 'state must be a JSON object', None, hint)
    for state in ('[1]', '{}', '"x"'):
        assert refused(state) == ('22023', 'state must be a JSON object of at least one field', None, hint)
    for spec in ('1', '{"start": "0"}', '{"start": "0", "next": "s.a", "step": "1"}'):
        assert refused(f'{{"a": {spec}}}') == ('22023', 'state field "a" must be an object of "start" and "next"',
                                               f'It is {json.dumps(json.loads(spec))}.', hint)
    assert refused('{"a": "' + 'x' * 300 + '"}')[2] == 'It is "' + 'x' * 199 + '.'
    for key, spec in (('start', '{"start": true, "next": "0"}'), ('next', '{"start": "0", "next": null}'),
                      ('next', '{"start": "0", "next": ["s.a"]}')):
        assert refused(f'{{"a": {spec}}}') == (
            '22023', f'the {key} of state field "a" must be an expression (a JSON string) or a number', None, hint)
    many = json.dumps({f'f{k}': {'start': '0', 'next': '0'} for k in range(4)})
    assert len(sequences.fields(many, dataclasses.replace(limits.DEFAULT, lambda_nodes=40))) == 4
    assert refused(many, dataclasses.replace(limits.DEFAULT, lambda_nodes=39)) == (
        '54000', 'the state has 4 fields, more than pgad.max_lambda_nodes / 10 (3)', None,
        'Carry fewer fields, or have a superuser raise pgad.max_lambda_nodes.')
    one = json.dumps({'f': {'start': '0', 'next': '0'}})
    assert len(sequences.fields(one, dataclasses.replace(limits.DEFAULT, lambda_nodes=5))) == 1
    assert refused(json.dumps({**json.loads(one), 'g': {'start': '0', 'next': '0'}}),
                   dataclasses.replace(limits.DEFAULT, lambda_nodes=5))[1] == (
        'the state has 2 fields, more than pgad.max_lambda_nodes / 10 (1)')


def test_a_state_expressions_errors_name_it_and_its_bounds_are_the_callers():
    """In process: an empty next value or start is 42601 naming it; each is held to the caller's
    pgad.max_lambda_bytes (54001); a field read and not declared names the fields there are and how to give one."""
    def refused(state, bounds=limits.DEFAULT, model='λ(d, w, s) s.level', weights='{"a": 0.5}'):
        with pytest.raises(PgadError) as caught:
            sequence.step_of(model, 'squared', 'y', json.dumps(state), weights, bounds, 1 << 30)
        return caught.value
    for state, what in (({'level': {'start': '0', 'next': ''}}, 'the next value of state "level"'),
                        ({'level': {'start': '', 'next': 's.level'}}, 'the start of state "level"')):
        assert (refused(state).sqlstate, refused(state).message) == ('42601', f'{what} is empty')
    small, long = dataclasses.replace(limits.DEFAULT, lambda_bytes=40), ' + '.join(['w.a'] * 12)
    for state in ({'level': {'start': '0', 'next': long}}, {'level': {'start': long, 'next': 's.level'}}):
        caught = refused(state, small)
        assert (caught.sqlstate, caught.message) == ('54001', f'lambda is too long: {len(long)} bytes')
    caught = refused({'level': {'start': '0', 'next': 's.level'}, 'x': {'start': '0', 'next': '0'}},
                     model='λ(d, w, s) s.level + s.trend')
    assert (caught.sqlstate, caught.message, caught.detail, caught.hint) == (
        '42703', 'state field "trend" is not in the state', 'The state has: "level", "x".',
        'Give it a start and a next value in state, or read one of those as s.<field>.')
    caught = refused({'level': {'start': 'w.l0', 'next': 's.level'}})
    assert (caught.sqlstate, caught.message, caught.hint) == (
        '22023', 'weight "l0" is not in the weights',
        'Give every weight the model and its state read a starting value: {"a": 0, "l0": 0}.')
    caught = refused({'level': {'start': '0', 'next': 's.level'}}, model='λ(d, w, s) s.level + w."state.x"',
                     weights='{"state.x": 0.5}')
    assert (caught.sqlstate, caught.hint) == ('42P08', 'Rename the weights that start with "state.".')
    # vectors of one length (of several, [...] refuses them: 2202E)
    caught = refused({'level': {'start': 'w.v', 'next': 'w.v'}}, model='λ(d, w, s) w.v', weights='{"v": [1, 2]}')
    assert (caught.sqlstate, caught.message, caught.hint) == (
        '42804', "the prediction, each state's start and next value must be numbers, not vectors",
        'Keep a vector\'s elements as fields of their own: {"h1": …, "h2": …}.')


def test_not_finite_names_a_row_of_the_first_sequence_and_the_states_before_it():
    """sequences.not_finite, in process, of the first of two sequences (rows 5 … 8 of the columns; the second's rows
    0 … 4 would overflow at once): level 0, 2, 2e², 2e^(2e²) ≈ 5.2e6, then exp overflows at row 3, with numpy
    warning nothing; a start not finite at row 0, with the state of no row."""
    def step_of(state):
        return sequence.step_of('λ(d, w, s) s.level', 'squared', 'y', json.dumps(state), '{"a": 0.5}',
                                limits.DEFAULT, 1 << 30)[0]
    y = np.array([800.0] * 5 + [1.0, 0.0, 0.0, 0.0])
    seqs = sequences.Sequences({'y': y}, np.array([5, 0]), np.array([4, 5]))
    step = step_of({'level': {'start': 'ln(d.y)', 'next': 'exp(s.level)*2 + 0*w.a'}})
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        t, node, states = sequences.not_finite(step, seqs, np.array([0.5]))
    levels = [0.0, 2.0, 2 * math.exp(2), 2 * math.exp(2 * math.exp(2))]
    assert (t, node, states.shape) == (3, step.next[0], (1, 4)) and np.allclose(states[0], levels, rtol=1e-12)
    step = step_of({'level': {'start': 'ln(d.y - 2)', 'next': 's.level + 0*w.a'}})
    t, node, states = sequences.not_finite(step, seqs, np.array([0.5]))
    assert (t, node) == (0, step.start[0]) and np.array_equal(states, np.zeros((1, 1)))
    assert sequences.not_finite(step, sequences.Sequences({'y': y}, np.array([0]), np.array([5])), np.array([0.5])) \
        is None


def test_a_loss_not_finite_names_the_operation_and_the_state_of_its_row(edges):
    """A sequence whose loss is not finite at the starting weights: the error names the first operation that left
    the finite numbers, with what it read at its row — the state the row before left, and the row's columns (the
    rows of group 0, y = sin(2j) at row j: sequences.not_finite)."""
    hint = 'Keep the data and the starting weights inside the domain of every function, or guard the expression ' \
           'with CASE WHEN.'
    # a next value: level 0, 2, 2e², 2e^(2e²) ≈ 5.2e6, then exp overflows at row 3
    level = 0.0
    for _ in range(3):
        level = 2 * math.exp(level)
    diag = refused(edges, *train('SELECT day, y FROM e WHERE g = 0', weights='{"alpha": 0.5}',
                                 state='{"level": {"start": "d.y", "next": "exp(s.level)*2"}}'))
    assert (diag.sqlstate, diag.message_primary, diag.message_hint) == ('22003', 'value out of range: overflow', hint)
    shown = re.fullmatch(r'The lambda computes exp\(s\.level\) = Infinity where s\.level = (\S+), at the starting '
                         r'weights\.', diag.message_detail)
    assert shown and math.isclose(float(shown.group(1)), level, rel_tol=1e-3), diag.message_detail
    # a start, at the first row (y = 0)
    diag = refused(edges, *train('SELECT day, y FROM e WHERE g = 0', weights='{"alpha": 0.5}',
                                 state='{"level": {"start": "ln(d.y - 5)", "next": "s.level"}}'))
    assert (diag.sqlstate, diag.message_detail) == (
        '2201E', 'The lambda computes ln(d.y - 5) = NaN where d.y = 0, at the starting weights.')
    # the loss, at row 3: level 3 - j, 3 - 3 + sin(6) < 0
    diag = refused(edges, *train('SELECT day, y FROM e WHERE g = 0', weights='{"alpha": 0.5}',
                                 model='λ(d, w, s) sqrt(s.level + d.y)',
                                 state='{"level": {"start": "3", "next": "s.level - 1"}}'))
    assert (diag.sqlstate, diag.message_detail) == (
        '2201F', f'The lambda computes sqrt(s.level + d.y) = NaN where s.level = 0, d.y = {math.sin(6):g}, at the '
                 'starting weights.')
