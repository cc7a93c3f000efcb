"""No data crosses roles through pgad's caches (docs/security.md), against a real server with unprivileged roles.

pgad.partial_sums keeps the columns it loaded for the rest of a REPEATABLE READ READ ONLY transaction (shards.py).
What it keeps is one role's reading of one set of relations: a SECURITY DEFINER function's load, a load before
SET ROLE, a load under another search path, or one under row-level security, is never what another reading gets;
and every call checks the current role's privileges again, so a REVOKE that commits meanwhile applies at once.
"""
import numpy as np
import psycopg
import pytest

from conftest import error_of

LINE = 'λ(d, w) (w.a*d.x + w.b - d.y)^2'
SUMS = "SELECT pgad.partial_sums(%s, %s, '{a,b}', '{1,2}')"
BEGIN = 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'
ROLES = ('pgad_cache_alice', 'pgad_cache_bob')
SECRET = [(float(k), 3.0 * k - 1) for k in range(1, 21)]           # the superuser's alone
OPEN = [(float(k), 2.0 * k + 1) for k in range(1, 6)]              # alice's own, in schema mine
OWNED = [(float(k), 5.0 * k, ROLES[k % 2]) for k in range(1, 31)]  # each role's own rows (row-level security)


def sums(rows):
    """[rows, loss sum, ∂/∂a, ∂/∂b] of LINE at a = 1, b = 2, as pgad.partial_sums gives them."""
    x, y = np.array([r[:2] for r in rows]).T
    r = x + 2 - y
    return [len(x), np.sum(r ** 2), np.sum(2 * r * x), np.sum(2 * r)]


@pytest.fixture(scope='module', autouse=True)
def tables(cluster, dbname):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        for role in ROLES:
            db.execute(f'DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$')
        db.execute('CREATE TABLE secret (x float8, y float8)')
        db.execute('INSERT INTO secret VALUES ' + ', '.join(f'({x}, {y})' for x, y in SECRET))
        db.execute('REVOKE ALL ON secret FROM PUBLIC')
        # The superuser's function, which alice may call: it trains on the secret table and tells her nothing of it.
        db.execute("CREATE FUNCTION secret_trained() RETURNS boolean LANGUAGE sql SECURITY DEFINER "
                   "SET search_path = public, pg_catalog "
                   f"AS $$ SELECT (pgad.partial_sums('{LINE}', 'SELECT x, y FROM secret', '{{a,b}}', '{{1,2}}'))[1] "
                   "> 0 $$")
        db.execute(f'GRANT EXECUTE ON FUNCTION secret_trained() TO {ROLES[0]}')
        # Two tables of one name in two schemas, one of them alice's.
        db.execute('CREATE SCHEMA mine')
        db.execute('CREATE TABLE mine.secret (x float8, y float8)')
        db.execute('INSERT INTO mine.secret VALUES ' + ', '.join(f'({x}, {y})' for x, y in OPEN))
        db.execute(f'GRANT USAGE ON SCHEMA mine TO {ROLES[0]}')
        db.execute(f'GRANT SELECT ON mine.secret TO {ROLES[0]}')
        # A table whose rows each role sees its own of, and one whose policy reads a setting.
        db.execute('CREATE TABLE owned (x float8, y float8, owner name)')
        db.execute('INSERT INTO owned VALUES ' + ', '.join(f'({x}, {y}, \'{o}\')' for x, y, o in OWNED))
        db.execute('ALTER TABLE owned ENABLE ROW LEVEL SECURITY')
        db.execute('CREATE POLICY own ON owned USING (owner = current_user)')
        db.execute('CREATE TABLE tenants AS SELECT x, y, owner AS tenant FROM owned')
        db.execute('ALTER TABLE tenants ENABLE ROW LEVEL SECURITY')
        db.execute("CREATE POLICY tenant ON tenants USING (tenant = current_setting('app.tenant'))")
        for role in ROLES:
            db.execute(f'GRANT SELECT ON owned, tenants TO {role}')
        # A table alice reads, and a function she may call that reads the secret table as its caller.
        db.execute('CREATE TABLE open_x AS SELECT x FROM secret')
        db.execute(f'GRANT SELECT ON open_x TO {ROLES[0]}')
        db.execute('CREATE FUNCTION secret_y(float8) RETURNS float8 LANGUAGE sql STABLE '
                   'AS $$ SELECT s.y FROM public.secret AS s WHERE s.x = $1 $$')


def as_role(cluster, dbname, role):
    return psycopg.connect(cluster.conninfo(dbname, user=role), autocommit=True)


def test_a_security_definer_functions_load_is_not_the_callers(cluster, dbname):
    """The issue's attack: after the superuser's SECURITY DEFINER function ran partial_sums over a table alice
    cannot read, alice, in the same REPEATABLE READ READ ONLY transaction, calls it with the same text: 42501."""
    with as_role(cluster, dbname, ROLES[0]) as alice:
        assert error_of(alice, SUMS, (LINE, 'SELECT x, y FROM secret')).sqlstate == '42501'  # the control
        alice.execute(BEGIN)
        assert alice.execute('SELECT secret_trained()').fetchone()[0] is True
        diag = error_of(alice, SUMS, (LINE, 'SELECT x, y FROM secret'))
        assert (diag.sqlstate, diag.message_primary) == ('42501', 'permission denied for table secret')
        alice.execute('ROLLBACK')


def test_set_role_reads_as_the_new_role(db):
    """A superuser's load, then SET ROLE alice in the same transaction: alice's own privileges apply."""
    db.execute(BEGIN)
    assert db.execute(SUMS, (LINE, 'SELECT x, y FROM secret')).fetchone()[0] == pytest.approx(sums(SECRET), rel=1e-12)
    db.execute(f'SET ROLE {ROLES[0]}')
    assert error_of(db, SUMS, (LINE, 'SELECT x, y FROM secret')).sqlstate == '42501'
    db.execute('ROLLBACK')


def test_a_function_in_the_data_query_reads_as_each_role(db):
    """The same relations, read by the same text: a function the query calls runs as the caller, so what the
    superuser's call kept is not alice's, even where her privileges on the query's own tables suffice."""
    data = 'SELECT x, public.secret_y(x) AS y FROM public.open_x'
    db.execute(BEGIN)
    assert db.execute(SUMS, (LINE, data)).fetchone()[0] == pytest.approx(sums(SECRET), rel=1e-12)
    db.execute(f'SET ROLE {ROLES[0]}')
    diag = error_of(db, SUMS, (LINE, data))
    assert (diag.sqlstate, diag.message_primary) == ('42501', 'permission denied for table secret')
    db.execute('ROLLBACK')


def test_a_name_resolved_elsewhere_is_another_table(db):
    """The same text under another search_path reads another table: its own sums, not the first one's."""
    db.execute(BEGIN)
    first = db.execute(SUMS, (LINE, 'SELECT x, y FROM secret')).fetchone()[0]
    db.execute('SET LOCAL search_path = mine, public')
    second = db.execute(SUMS, (LINE, 'SELECT x, y FROM secret')).fetchone()[0]
    db.execute('ROLLBACK')
    assert first == pytest.approx(sums(SECRET), rel=1e-12)
    assert second == pytest.approx(sums(OPEN), rel=1e-12)


def test_row_level_security_gives_each_role_its_own_rows(db):
    """Two roles that see different rows of one table, one after the other in one transaction: each its own sums."""
    db.execute(BEGIN)
    got = {}
    for role in ROLES + ROLES:
        db.execute(f'SET ROLE {role}')
        got.setdefault(role, []).append(db.execute(SUMS, (LINE, 'owned')).fetchone()[0])
    db.execute('ROLLBACK')
    for role in ROLES:
        expected = sums([r for r in OWNED if r[2] == role])
        assert got[role] == [pytest.approx(expected, rel=1e-12)] * 2, role


def test_row_level_security_by_a_setting_is_not_kept(cluster, dbname):
    """A policy that reads a setting: one role, two settings, two sets of rows (nothing is kept under RLS)."""
    with as_role(cluster, dbname, ROLES[1]) as bob:
        bob.execute(BEGIN)
        got = {}
        for tenant in ROLES:
            bob.execute("SELECT set_config('app.tenant', %s, true)", (tenant,))
            got[tenant] = bob.execute(SUMS, (LINE, 'tenants')).fetchone()[0]
        bob.execute('ROLLBACK')
    for tenant in ROLES:
        assert got[tenant] == pytest.approx(sums([r for r in OWNED if r[2] == tenant]), rel=1e-12)


def test_a_revoke_that_commits_meanwhile_applies_at_once(cluster, dbname, db):
    """Privileges are checked on every call, kept columns or not: a REVOKE committed by another session after
    alice's first call stops her second, in the same transaction."""
    db.execute(f'GRANT SELECT ON secret TO {ROLES[0]}')
    try:
        with as_role(cluster, dbname, ROLES[0]) as alice:
            alice.execute(BEGIN)
            assert alice.execute(SUMS, (LINE, 'SELECT x, y FROM public.secret')).fetchone()[0][0] == len(SECRET)
            db.execute(f'REVOKE SELECT ON secret FROM {ROLES[0]}')
            assert error_of(alice, SUMS, (LINE, 'SELECT x, y FROM public.secret')).sqlstate == '42501'
            alice.execute('ROLLBACK')
    finally:
        db.execute(f'REVOKE SELECT ON secret FROM {ROLES[0]}')


def test_a_temporary_table_written_in_the_transaction_is_read_again(db):
    """A READ ONLY transaction may write a temporary table: its rows are never kept."""
    db.execute('CREATE TEMPORARY TABLE scratch (x float8, y float8)')
    db.execute('INSERT INTO scratch VALUES ' + ', '.join(f'({x}, {y})' for x, y in OPEN[:2]))
    db.execute(BEGIN)
    first = db.execute(SUMS, (LINE, 'scratch')).fetchone()[0]
    db.execute('INSERT INTO scratch VALUES ' + ', '.join(f'({x}, {y})' for x, y in OPEN[2:]))
    second = db.execute(SUMS, (LINE, 'scratch')).fetchone()[0]
    db.execute('ROLLBACK')
    assert first == pytest.approx(sums(OPEN[:2]), rel=1e-12)
    assert second == pytest.approx(sums(OPEN), rel=1e-12)


def test_one_roles_columns_are_still_loaded_once_a_transaction(cluster, dbname):
    """What the cache is for: the same role's rounds in one transaction load the columns once."""
    messages = []
    with as_role(cluster, dbname, ROLES[0]) as alice:
        alice.add_notice_handler(lambda d: messages.append(d.message_primary))
        alice.execute('SET client_min_messages = debug2')
        alice.execute(BEGIN)
        first = alice.execute(SUMS, (LINE, 'mine.secret')).fetchone()[0]
        assert alice.execute(SUMS, (LINE, 'mine.secret')).fetchone()[0] == first
        alice.execute('COMMIT')
    assert sum(m.startswith('pgad: loaded') for m in messages) == 1
    assert first == pytest.approx(sums(OPEN), rel=1e-12)
