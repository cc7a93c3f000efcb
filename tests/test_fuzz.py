"""The lambda-language fuzzer (tests/fuzzing.py) on a small fixed sample: in process, against PostgreSQL, through SQL.

`make fuzz` (bench/fuzz.py) runs the same generator and oracles over a million inputs; here a few thousand, seed
SEED, without the deep bursts (their cost is what REGRESSIONS below pin down). A failure prints the input's seed
and index (fuzzing.generate(seed, i) writes it again), the text, and what went wrong.

REGRESSIONS are inputs the fuzzer found: each must pass check() (and, where it has a PostgreSQL value, agree with
PostgreSQL). Those marked xfail are open bugs; the mark goes when the bug is fixed.
"""
import collections

import psycopg
import pytest

import fuzzing

SEED = 20261124
IN_PROCESS = 2500     # inputs in process; every one accepted is compared with PostgreSQL at its three rows
THROUGH_SQL = 150     # of them, through pgad's SQL functions


@pytest.fixture(scope='module')
def fuzz_db(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as conn:
        conn.execute(fuzzing.SETUP_SQL)
        conn.execute(fuzzing.SERVER_SETUP_SQL)
        conn.execute("SET statement_timeout = '20s'")
        yield conn


def report(results):
    lines = []
    for r in results:
        for kind, detail in r.failures:
            lines.append(f'[{kind}] seed {r.seed}: {r.text!r}\n    {detail}')
    return '\n'.join(lines[:30]) + (f'\n… and {len(lines) - 30} more' if len(lines) > 30 else '')


@pytest.fixture(scope='module')
def sample(fuzz_db):
    results = [fuzzing.check(fuzzing.generate(SEED, i, bursts=False), SEED, i, for_postgres=True)
               for i in range(IN_PROCESS)]
    counts = fuzzing.compare_with_postgres(fuzz_db, results)
    return results, counts


def test_every_input_is_a_sqlstate_or_a_value_that_both_modes_and_postgres_agree_on(sample):
    results, counts = sample
    failed = [r for r in results if r.failures]
    assert not failed, report(failed)
    # the sample is worth something: both outcomes, many SQLSTATEs, thousands of values compared with PostgreSQL
    outcomes = collections.Counter(r.outcome for r in results)
    states = {r.sqlstate for r in results if r.outcome == 'rejected'}
    assert outcomes['accepted'] > IN_PROCESS / 4 and outcomes['rejected'] > IN_PROCESS / 4, outcomes
    assert {'42601', '42883', '42703', '42804', '42P01', '22003'} <= states, states
    assert counts.get(None, 0) > IN_PROCESS / 2, counts


def test_the_generator_is_reproducible():
    assert [fuzzing.generate(SEED, i) for i in range(50)] == [fuzzing.generate(SEED, i) for i in range(50)]
    assert len({fuzzing.generate(SEED, i) for i in range(50)}) == 50


def test_through_sql_the_server_stays_up_and_every_error_has_a_sqlstate(fuzz_db, sample):
    results, _ = sample
    started = fuzz_db.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
    failures, states = [], collections.Counter()
    sent = [r for r in results[:THROUGH_SQL * 2] if fuzzing.sendable(r.text)][:THROUGH_SQL]
    for r in sent:
        found, errors = fuzzing.through_sql(fuzz_db, r.text, r.weights, started)
        states.update(errors)
        failures += [f'[{kind}] seed {r.seed}: {r.text!r}\n    {detail}' for kind, detail in found]
    assert not failures, '\n'.join(failures[:30])
    assert len(sent) == THROUGH_SQL and states['42601'] > 0, states


# --- what the oracles catch: each must fail on a wrong answer ---------------------------------------------------
def test_the_oracles_see_a_wrong_value():
    assert fuzzing.compare(1.0, 1.0 + 1e-6, False) == 'another value'
    assert fuzzing.compare(1.0, ('error', '22012', 'division by zero'), False) == 'PostgreSQL 22012, pgad a value'
    assert fuzzing.compare(float('inf'), ('error', '22012', 'division by zero'), False) is None
    assert fuzzing.compare(0.0, ('error', '22003', 'value out of range: underflow'), False) is None
    assert fuzzing.compare(float('nan'), float('nan'), False) is None


def test_the_translation_to_sql_is_the_users_text():
    sql = fuzzing.postgres_sql('λ("D", w) -"D".x^2 + "exp"(w."A b") -- c\n + log(2, sigmoid(1e-320))',
                               {'x': 3.0}, {'A b': -1.5})
    assert sql == ("- '3.0'::float8 ^ '2'::float8 + pg_catalog.exp ( '-1.5'::float8 ) + fuzz.log ( '2'::float8 , "
                   "fuzz.sigmoid ( '1e-320'::float8 ) )")


def test_a_crash_is_reported_with_its_kind(monkeypatch):
    monkeypatch.setattr(fuzzing.lang, 'parse', lambda text, limits: {}['boom'])
    result = fuzzing.check('λ(d, w) w.a')
    assert result.outcome == 'crash' and result.failures[0][0] == 'KeyError'


# --- inputs the fuzzer found -------------------------------------------------------------------------------------
def regression(text, at=None, reason=None):
    """An input and the point it failed at (({column: three values}, {weight: value}); 0.5 where not given)."""
    marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
    return pytest.param(text, at, marks=marks, id=text[:60])


REGRESSIONS = [
    regression('λ(d, w) ln(w.a)*0', ({}, {'a': -1.0})),
    regression('λ(d, w) atan2(-0, -1)*w.a', ({}, {'a': 1.0})),  # the user's -0 keeps its sign
    regression('λ(d, w) exp(1000)*w.a', ({}, {'a': 1.0})),  # printed 'Infinity', which the language reads now
    regression('λ(d, w) 0/0*w.a + 1', ({}, {'a': 1.0})),
    regression('λ("D", w) "D".y*w.a', ({}, {})),  # the printer quotes the parameter names
    regression('λ(d, w) log(ln(d.y), 1)*w.a', ({'y': [-2.0] * 3}, {})),  # 0/x kept while parsing: x may be NaN
    regression('λ(d, w) 00 * d.y^(w.a)', ({'y': [3.0] * 3}, {'a': 1e154})),
    regression('lambda(d,w) ((d.y) + w.b*log(w.a)*0) + 2', ({'y': [0.3] * 3}, {'a': -1.7, 'b': 0.75})),
]


@pytest.mark.parametrize('text, at', REGRESSIONS)
def test_regression(fuzz_db, text, at):
    result = fuzzing.check(text, for_postgres=True, at=at)
    fuzzing.compare_with_postgres(fuzz_db, [result])
    assert not result.failures, report([result])


SERVER_REGRESSIONS = [
    # domain._origin reads a CASE's condition with np.broadcast_to(values, (row + 1,)): a ValueError (SQLSTATE
    # 38000, 'operands could not be broadcast together') when the condition differs per row and the loss is NaN
    pytest.param('λ(d, w) CASE WHEN d.x > 0 THEN sqrt(w.a) ELSE 1 END', {'a': -1.0}),
]


@pytest.mark.parametrize('text, weights', SERVER_REGRESSIONS)
def test_server_regression(fuzz_db, text, weights):
    started = fuzz_db.execute('SELECT pg_postmaster_start_time()').fetchone()[0]
    failures, _ = fuzzing.through_sql(fuzz_db, text, weights, started, values=weights)
    assert not failures, failures
