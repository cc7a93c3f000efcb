"""An error that points into the lambda reads in psql as PostgreSQL's own syntax errors: the lambda is the ERROR's
internal query and the place its internal position (1-based, in characters), so psql prints the line with a caret
under the place and the whole lambda as QUERY (extension/call.c, pgad_error_query; pgad/server.py, entry)."""
import os
import subprocess

import pytest

from conftest import error_of

DATA = "SELECT 1 AS x, 2 AS y"
WEIGHTS = '{"a": 1, "v": [1, 2, 3]}'

# (lambda, the text from the start of its line up to and including the character the caret must sit under)
PLACES = [
    ('λ(d, w) w.a + * d.x', 'λ(d, w) w.a + *'),
    ('λ(d, w) (w.a*d.x - d.y)^2 + ln(λλ)', 'λ(d, w) (w.a*d.x - d.y)^2 + ln(λ'),  # λ before the place
    ('λ(d, w) w.a*d.x\n  + ) d.y', '  + )'),
    ('λ(d, w) w.a +', 'λ(d, w) w.a +'),  # at the end of input: one past the last character
    ('λ(d, w) w.v @ [1, 2] + w.a', 'λ(d, w) w.v @'),  # a shape error (lang.vectors)
    ('λ(d, w) w.a * d.z ; x', 'λ(d, w) w.a * d.z ;'),
]


def psql(cluster, dbname, sql):
    env = {**os.environ, 'PGCLIENTENCODING': 'UTF8'}
    result = subprocess.run(['psql', '-X', '-h', '127.0.0.1', '-p', str(cluster.settings['port']), '-U', 'postgres',
                             '-d', dbname, '-c', sql], capture_output=True, text=True, env=env)
    assert result.returncode != 0
    return result.stderr


def quoted(text):
    return "'" + text.replace("'", "''") + "'"


@pytest.mark.parametrize('lam, upto', PLACES)
def test_psql_puts_the_caret_under_the_place(cluster, dbname, lam, upto):
    shown = psql(cluster, dbname, f'SELECT pgad.loss({quoted(lam)}, {quoted(DATA)}, {quoted(WEIGHTS)})')
    lines = shown.splitlines()
    assert lines[0].startswith('ERROR:  '), shown
    assert not any(line.startswith('DETAIL:') for line in lines), shown  # the caret is no longer in a DETAIL
    line, under = lines[1], lines[2]
    prefix = line[:line.index(': ') + 2]  # 'LINE 1: '
    assert prefix.startswith('LINE '), shown
    assert under.strip() == '^', shown
    column = under.index('^')  # every character here is one column wide, λ too
    assert line[len(prefix):column + 1] == upto, shown
    assert shown[shown.index('QUERY:  ') + len('QUERY:  '):].rstrip('\n').startswith(lam), shown


def test_the_internal_query_and_position_count_characters(db):
    lam = 'λ(d, w) w.a + * d.x'
    diag = error_of(db, 'SELECT pgad.loss(%s, %s, %s)', (lam, DATA, WEIGHTS))
    assert (diag.sqlstate, diag.message_primary) == ('42601', 'syntax error at or near "*"')
    assert (diag.internal_query, diag.internal_position) == (lam, str(lam.index('*') + 1))
    assert diag.message_detail is None


def test_the_next_error_carries_no_query_of_the_last(db):
    error_of(db, 'SELECT pgad.loss(%s, %s, %s)', ('λ(d, w) w.a + * d.x', DATA, WEIGHTS))
    diag = error_of(db, "SELECT pgad.gradient('λ(d, w) w.a*d.x', %s, %s, mode => 'sideways')", (DATA, WEIGHTS))
    assert (diag.message_primary, diag.internal_query, diag.internal_position) == (
        'unknown mode "sideways"', None, None)
    diag = error_of(db, "SELECT pgad.loss('λ(d, w) w.a*d.x', 'SELECT x FROM nowhere', %s)", (WEIGHTS,))
    assert (diag.sqlstate, diag.internal_query, diag.internal_position) == ('42P01', None, None)


def test_an_aggregate_points_into_its_lambda_too(db):
    lam = 'λ(d, w) w.a + * d.x'
    diag = error_of(db, f'SELECT pgad.loss_agg({quoted(lam)}, {quoted(WEIGHTS)}, t) FROM ({DATA}) AS t')
    assert (diag.sqlstate, diag.internal_query, diag.internal_position) == ('42601', lam, str(lam.index('*') + 1))
