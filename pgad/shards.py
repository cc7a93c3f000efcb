"""Data-parallel training over shards: the gradient goes to the data, not the rows to the gradient.

A table whose partitions are postgres_fdw foreign tables (local partitions mixed in or not), or a postgres_fdw
foreign table itself, is trained on where its rows are. Batch gradient descent needs only sums over rows, and sums
combine: every round (one evaluation of the loss and gradient at one set of weights), the coordinator sends every
shard server, at once, one call of pgad.partial_sums on the shard's own tables, adds its local partitions' sums
computed meanwhile, and gets back [rows, loss sum, gradient sums] from each: P + 2 numbers a server, not its rows.

    layout(data, columns)   which leaves of the data's relation are local and which on which server (or None:
                            not sharded, load the rows as usual)
    Shards(layout, job)     the training's connections (dblink, by the foreign server's name and user mapping):
                            opened with a check of every shard's pgad version, one REPEATABLE READ READ ONLY
                            transaction each (one snapshot for the whole training, as postgres_fdw's own), a
                            statement prepared once; round(w) sends w and collects the sums; close() cancels what
                            still runs and disconnects, which ends the remote transactions and sessions
    Sharded(kernel, table, shards)  a kernel over all the rows: the local partitions' through the local kernel,
                            the shards' through Shards.round, in the same round
    loaded(data, columns, config)   the shard's side: its columns, loaded once per REPEATABLE READ READ ONLY
                            transaction (the coordinator's), kept for that transaction, that role, that search
                            path and those relations only, each call checking the role's privileges again

dblink sends text only. The weights travel as the argument of the prepared statement, an array literal written from
float8 values alone (digits, '.', 'e', '-', '+', ','); the lambda and the table names are in the PREPARE as
literals that pg_catalog.format('%L') quotes on the coordinator, so no user text is ever spliced into SQL.
"""
import time
from dataclasses import dataclass

import numpy as np

from . import __version__, loader, server
from .models import descent
from .errors import PgadError
from .lang.printer import quote_ident

# The leaves of the data's relation: every partition at the bottom of its tree (the relation itself when it is not
# partitioned), with its foreign server and that server's wrapper where it is a foreign table; whether the caller
# may read it, and whether row-level security is on for it.
LEAVES = ('SELECT c.oid AS oid, pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) \'.\' '
          'OPERATOR(pg_catalog.||) pg_catalog.quote_ident(c.relname) AS relation, n.nspname AS schema, '
          'c.relname AS name, c.relkind AS kind, c.relrowsecurity AS secured, '
          'pg_catalog.has_table_privilege(c.oid, \'SELECT\') AS readable, s.srvname AS server, w.fdwname AS wrapper, '
          'f.ftoptions AS options '
          'FROM (SELECT p.relid FROM pg_catalog.pg_partition_tree($1::pg_catalog.regclass) AS p WHERE p.isleaf '
          'UNION ALL SELECT $1::pg_catalog.regclass WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_partition_tree('
          '$1::pg_catalog.regclass))) AS leaf '
          'JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) leaf.relid '
          'JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace '
          'LEFT JOIN pg_catalog.pg_foreign_table AS f ON f.ftrelid OPERATOR(pg_catalog.=) c.oid '
          'LEFT JOIN pg_catalog.pg_foreign_server AS s ON s.oid OPERATOR(pg_catalog.=) f.ftserver '
          'LEFT JOIN pg_catalog.pg_foreign_data_wrapper AS w ON w.oid OPERATOR(pg_catalog.=) s.srvfdw '
          'ORDER BY s.srvname NULLS FIRST, n.nspname, c.relname')
PARENT = ('SELECT c.relrowsecurity AS secured FROM pg_catalog.pg_class AS c '
          'WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)')
# A foreign table's columns and their options (postgres_fdw's column_name: the remote column's name).
ATTRIBUTES = ('SELECT a.attname AS name, a.attfdwoptions AS options FROM pg_catalog.pg_attribute AS a '
              'WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped')
DBLINK = ('SELECT pg_catalog.quote_ident(n.nspname) AS schema FROM pg_catalog.pg_extension AS e '
          'JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace '
          'WHERE e.extname OPERATOR(pg_catalog.=) \'dblink\'')
WRAPPER = 'postgres_fdw'
SELECT = 'SELECT {} FROM {}'


@dataclass(frozen=True)
class Server:
    name: str          # the foreign server (pg_foreign_server.srvname): dblink connects by it and its user mapping
    partitions: tuple  # the foreign tables on it, schema-qualified as the coordinator names them
    query: str         # the data query the shard runs: its tables by their remote names, quoted


@dataclass(frozen=True)
class Layout:
    local: tuple       # the leaves read here (tables, and foreign tables of another wrapper), schema-qualified
    local_query: str   # the data query over them (None when there are none)
    servers: tuple     # Server, one per foreign server, in name order
    dblink: str        # dblink's schema, quoted


def foreign(data):
    """Does the data name a relation with a postgres_fdw foreign table among its leaves (whose rows layout() may
    leave on their servers)?"""
    return _foreign_leaves(data) is not None


def _foreign_leaves(data):
    """The leaves (LEAVES' rows) of the relation the data names, where a postgres_fdw foreign table is among them;
    None for a query or a relation without one."""
    if loader.QUERY_START.match(data):
        return None
    leaves = server.query(LEAVES, [loader.relation(data)], ['pg_catalog.text'])
    return leaves if any(leaf['wrapper'] == WRAPPER for leaf in leaves) else None


def layout(data, columns):
    """Where the rows of the data are, when the data names a relation with a postgres_fdw foreign table among its
    leaves: its Layout. None (the rows are loaded here, as for any data) when the data is a query, a relation
    without one, or one that this path would read differently from the caller's own query (a NOTICE says why)."""
    leaves = _foreign_leaves(data)
    if leaves is None:
        return None
    why = _pulled(loader.relation(data), leaves)
    found = server.query(DBLINK)
    if why is None and not found:
        why = 'the dblink extension is not installed here (CREATE EXTENSION dblink)'
    if why is not None:
        server.notice(f'relation "{data}" has postgres_fdw partitions, but {why}: their rows are pulled here')
        return None
    local = [leaf for leaf in leaves if leaf['wrapper'] != WRAPPER]
    names = ', '.join(quote_ident(c) for c in columns) or 'NULL AS pgad_none'
    servers = {}
    for leaf in leaves:
        if leaf['wrapper'] == WRAPPER:
            servers.setdefault(leaf['server'], []).append(leaf)
    return Layout(tuple(leaf['relation'] for leaf in local),
                  ' UNION ALL '.join(SELECT.format(names, leaf['relation']) for leaf in local) or None,
                  tuple(Server(name, tuple(leaf['relation'] for leaf in on),
                               ' UNION ALL '.join(_remote_select(leaf, columns) for leaf in on))
                        for name, on in servers.items()),
                  found[0]['schema'])


def _pulled(relation, leaves):
    """Why the rows must be read here after all, or None: row-level security (the shard's user reads other rows
    than the caller would), a local partition the caller may not read directly (the parent's privilege covers its
    partitions only when read through it)."""
    if server.query(PARENT, [relation], ['pg_catalog.text'])[0]['secured'] or any(leaf['secured'] for leaf in leaves):
        return 'row-level security is enabled on it'
    for leaf in leaves:
        if leaf['wrapper'] != WRAPPER and not leaf['readable']:
            return f'its local partition {leaf["relation"]} is not readable by the current user'
    return None


def _options(options):
    """A catalog options array, {schema_name=s,table_name=t}, as a dict."""
    return dict(option.split('=', 1) for option in options or ())


def _remote_select(leaf, columns):
    """SELECT <remote column> AS <column>, … FROM <remote schema>.<remote table>: a foreign table's rows as the
    shard names them (postgres_fdw's schema_name, table_name and column_name options; by default the local names)."""
    table = _options(leaf['options'])
    remote = {a['name']: _options(a['options']).get('column_name', a['name'])
              for a in server.query(ATTRIBUTES, [leaf['oid']], ['pg_catalog.oid'])}
    names = ', '.join(f'{quote_ident(remote[c])} AS {quote_ident(c)}' for c in columns) or 'NULL AS pgad_none'
    return SELECT.format(names, quote_ident(table.get('schema_name', leaf['schema'])) + '.' +
                         quote_ident(table.get('table_name', leaf['name'])))


FLOAT_CHARS = 24  # the longest text of a float8, -2.2250738585072014e-308


def round_bytes(weights):
    """(at most the bytes of text a round sends a shard, at most the bytes it receives) for `weights` weights: the
    EXECUTE with the weight vector, and the sums' array (rows, loss, gradient): O(weights), whatever the rows."""
    sent = len(EXECUTE.format('{}')) + weights * (FLOAT_CHARS + 1)
    return sent, 2 + (weights + 2) * (FLOAT_CHARS + 1)


def describe(data, columns, weights):
    """pgad.explain's data row: where the rows of the data are computed, and what a round moves."""
    found = layout(data, columns)
    if found is None:
        return 'here: the rows are loaded into this backend (the data is not a table with postgres_fdw partitions)'
    sent, received = round_bytes(weights)
    lines = [f'here: {", ".join(found.local)}' if found.local else 'here: no partition']
    lines += [f'shard server "{s.name}": {", ".join(s.partitions)}, as {s.query}' for s in found.servers]
    lines.append(f'a round: one pgad.partial_sums call on each of {len(found.servers)} shard server'
                 f'{"s" * (len(found.servers) != 1)}, at most {sent} bytes sent to each and {received} received '
                 f'from each ({weights} weights and {weights + 2} sums), whatever the rows; the local partitions '
                 'meanwhile here')
    return '\n'.join(lines)


@dataclass(frozen=True)
class Job:
    """What every shard computes its part of: the lambda (the objective's, for pgad.train), the weights' names in
    the order of the weight vector, how to differentiate and where to run."""
    text: str
    names: tuple
    mode: str
    backend: str
    dtype: str


STATEMENT = 'pgad_sums'
EXECUTE = 'EXECUTE ' + STATEMENT + "('{}')"  # a round's text: its one argument, the weights' array literal
PREPARE = ('SELECT pg_catalog.format(\'PREPARE ' + STATEMENT + '(pg_catalog.float8[]) AS SELECT pgad.partial_sums(%L, '
           '%L, %L::pg_catalog.text[], $1, %L, %L, %L)\', $1::pg_catalog.text, $2::pg_catalog.text, '
           '$3::pg_catalog.text[], $4::pg_catalog.text, $5::pg_catalog.text, $6::pg_catalog.text) AS sql')
VERSION = ('SELECT v.version FROM {0}.dblink($1, \'SELECT e.extversion FROM pg_catalog.pg_extension AS e '
           'WHERE e.extname OPERATOR(pg_catalog.=) \'\'pgad\'\'\') AS v(version pg_catalog.text)')
BEGIN = 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY'
PAUSE = 0.00002, 0.0002  # how long the wait for a shard sleeps between polls: first, and at most (doubling)


def array(w):
    """The float8[] literal of a weight vector: written from the numbers alone, so it holds only digits, '.', 'e',
    '+', '-', ',' and the braces (and NaN or Infinity, which PostgreSQL's float8 reads)."""
    return '{' + ','.join('NaN' if v != v else repr(float(v)).replace('inf', 'Infinity') for v in w) + '}'


class ShardFailure(PgadError):
    """A shard server's error, with the server's name; the iteration is added where the training knows it."""


class Shards:
    """The connections of one training to its shard servers. Used as a context manager: entering connects, checks
    pgad's version on every server and starts their transactions before any training; leaving (also on an error or
    a cancel) cancels what still runs and disconnects."""

    def __init__(self, layout, job):
        self.layout, self.job = layout, job
        self.connections = [f'pgad_shard_{k}' for k in range(len(layout.servers))]
        self.rounds = self.opened = 0
        self.bytes_sent = self.bytes_received = 0
        self.iteration = None  # a callable giving the iteration running (descent's Clock), for the errors
        d = layout.dblink
        self.send_sql = f'SELECT {d}.dblink_send_query($1, $2) AS sent'
        self.busy_sql = f'SELECT {d}.dblink_is_busy($1) AS busy'
        self.result_sql = f'SELECT r.sums FROM {d}.dblink_get_result($1) AS r(sums pg_catalog.float8[])'

    def _call(self, k, sql, args=(), what=None):
        """sql with args (the first, connection k's name), as a shard server's failure where it fails."""
        try:
            return server.repeated(sql, [self.connections[k], *args], ['pg_catalog.text'] * (1 + len(args)))
        except server.SPIError as e:
            if server.interrupted(e) and not self._remote(k, e):
                raise  # this statement's own cancel or timeout, as it is
            raise self._failure(k, e, what) from None

    def _remote(self, k, error):
        """Is this error the shard's (its server shutting down, its own timeout), which dblink raises here with
        the shard's SQLSTATE, rather than an interrupt of this backend's? The connection's last error says."""
        try:
            last = server.query(f'SELECT {self.layout.dblink}.dblink_error_message($1) AS m', [self.connections[k]],
                                ['pg_catalog.text'])[0]['m']
        except server.SPIError:
            return False
        return bool(error.args) and error.args[0] in (last or '')

    def _failure(self, k, error, what=None):
        if what is None:
            at = self.iteration() if self.iteration else self.rounds
            what = f'at iteration {at}'
        message = error.args[0] if error.args else str(error)
        return ShardFailure(getattr(error, 'sqlstate', None) or '08006',
                            f'shard server "{self.layout.servers[k].name}" failed {what}', detail=message,
                            hint=server.hint_of(error))

    def __enter__(self):
        d = self.layout.dblink
        try:
            open_names = server.query(f'SELECT pg_catalog.unnest({d}.dblink_get_connections()) AS name')
            for row in open_names:  # left by a call that could not close them (none should): ours to reuse
                if row['name'] in self.connections:
                    server.query(f'SELECT {d}.dblink_disconnect($1)', [row['name']], ['pg_catalog.text'])
            for k, srv in enumerate(self.layout.servers):
                self.opened = k + 1
                self._call(k, f'SELECT {d}.dblink_connect($1, $2)', [srv.name], what='to connect')
                found = self._call(k, VERSION.format(d), what='to report its pgad version')
                if not found:
                    raise PgadError('42704', f'pgad is not installed on shard server "{srv.name}"',
                                    detail=f'Its partitions here: {", ".join(srv.partitions)}.',
                                    hint=f'Run CREATE EXTENSION pgad CASCADE in the database server "{srv.name}" '
                                         f'connects to: pgad {__version__}, as here.')
                if found[0]['version'] != __version__:
                    raise PgadError('0A000', f'shard server "{srv.name}" runs pgad {found[0]["version"]}, not '
                                             f'{__version__} as here',
                                    hint=f'Run ALTER EXTENSION pgad UPDATE in the database server "{srv.name}" '
                                         'connects to (and install the same pgad on its machine).')
                self._call(k, f'SELECT {d}.dblink_exec($1, $2)', [BEGIN], what='to start its transaction')
                job = self.job
                sql = server.query(PREPARE, [job.text, srv.query, list(job.names), job.mode, job.backend, job.dtype],
                                   ['pg_catalog.text', 'pg_catalog.text', 'pg_catalog.text[]', 'pg_catalog.text',
                                    'pg_catalog.text', 'pg_catalog.text'])[0]['sql']
                self._call(k, f'SELECT {d}.dblink_exec($1, $2)', [sql], what='to prepare its statement')
        except BaseException:
            self.close()
            raise
        server.debug(f'pgad: training on {len(self.layout.servers)} shard server'
                     f'{"s" * (len(self.layout.servers) != 1)}: ' +
                     '; '.join(f'{s.name} ({", ".join(s.partitions)})' for s in self.layout.servers) +
                     (f'; here: {", ".join(self.layout.local)}' if self.layout.local else ''))
        return self

    def __exit__(self, failed, *exc):
        if failed is None:
            self.report()
        self.close()

    def send(self, w):
        """Start a round at the weights w on every shard (they compute at once)."""
        self.rounds += 1
        statement = EXECUTE.format(array(w))
        for k in range(len(self.connections)):
            self._call(k, self.send_sql, [statement])
            self.bytes_sent += len(statement)

    def collect(self):
        """The round's sums from every shard, added up: [rows, loss sum, gradient sums …]. Waits for each in turn,
        letting the server act on a cancel or a timeout between polls."""
        total = None
        for k in range(len(self.connections)):
            pause = PAUSE[0]
            while self._call(k, self.busy_sql)[0]['busy']:
                server.check_interrupts()
                time.sleep(pause)
                pause = min(2 * pause, PAUSE[1])
            rows = self._call(k, self.result_sql)
            if not rows or rows[0]['sums'] is None:
                raise self._failure(k, PgadError('XX000', 'pgad.partial_sums returned no sums'))
            self._call(k, self.result_sql)  # dblink's end of the result: the connection is free again
            sums = np.array(rows[0]['sums'], dtype=np.float64)
            self.bytes_received += len(array(sums))
            total = sums if total is None else total + sums
        return total

    def report(self):
        """A DEBUG message of what the rounds moved."""
        servers = len(self.layout.servers)
        if self.rounds and servers:
            server.debug(f'pgad: {self.rounds} rounds on {servers} shard server{"s" * (servers != 1)}: '
                         f'{self.bytes_sent} bytes of SQL sent, {self.bytes_received} bytes of sums received '
                         f'({(self.bytes_sent + self.bytes_received) / self.rounds / servers:.0f} a round a server)')

    def close(self):
        """Cancel what still runs, and disconnect: the shards roll their transactions back and end their sessions
        (and with them the columns they held). Errors here are not reported: the training's own error is."""
        d = self.layout.dblink
        for name in self.connections[:getattr(self, 'opened', 0)]:
            try:
                connected = server.query(f'SELECT $1 OPERATOR(pg_catalog.=) ANY ({d}.dblink_get_connections()) AS c',
                                         [name], ['pg_catalog.text'])[0]['c']
                if connected:
                    if server.query(self.busy_sql, [name], ['pg_catalog.text'])[0]['busy']:
                        server.query(f'SELECT {d}.dblink_cancel_query($1)', [name], ['pg_catalog.text'])
                    server.query(f'SELECT {d}.dblink_disconnect($1)', [name], ['pg_catalog.text'])
            except server.SPIError:
                pass
        self.opened = 0


class Sharded:
    """kernel(columns, rows, w) over all the rows of a sharded table, in one round: the shards start, the local
    partitions' rows (table) run through the local kernel meanwhile, and the shards' sums are added. descent gives it
    the whole table in one call (whole); watch(clock) lets a shard's error name the iteration."""
    whole = True

    def __init__(self, kernel, table, shards, outputs, interrupts):
        self.kernel, self.table, self.shards, self.interrupts = kernel, table, shards, interrupts
        self.outputs = outputs  # the local kernel's: the shards always send the gradient too (pgad.loss needs none)
        self.first = None  # (w, sums) of the round that counted the rows: the training's first evaluation

    def place(self, columns):
        self.table = descent.place(self.kernel, self.table)
        return columns

    def watch(self, clock):
        self.shards.iteration = lambda: clock.at

    def round(self, w):
        """[rows, loss sum, gradient sums …] over every row, local and remote, at the weights w."""
        if self.first is not None and np.array_equal(self.first[0], w):
            return self.first[1]
        self.shards.send(w)
        here = descent.evaluate(self.kernel, self.table, w, self.interrupts) if self.table.rows else 0.0
        sums = self.shards.collect()[:1 + self.outputs]
        sums[1:] += here
        sums[0] += self.table.rows
        if self.first is None:
            self.first = (np.array(w, dtype=np.float64), sums)
        return sums

    def __call__(self, columns, rows, w):
        return self.round(w)[1:]


# --- the shard's side: pgad.partial_sums ------------------------------------------------------------------------
# The transaction, and who reads in it: the current role (a SECURITY DEFINER function's owner inside it, the role
# SET ROLE chose) and the schemas that names resolve in.
TRANSACTION = ('SELECT l.virtualtransaction AS id, pg_catalog.current_setting(\'transaction_isolation\') AS isolation, '
               'pg_catalog.current_setting(\'transaction_read_only\') AS read_only, '
               '(SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) '
               'AS role, pg_catalog.current_schemas(true)::pg_catalog.text AS path FROM pg_catalog.pg_locks AS l '
               'WHERE l.locktype OPERATOR(pg_catalog.=) \'virtualxid\' '
               'AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()')
KEPT = ('repeatable read', 'serializable')
# The relations this transaction holds a lock on, tables, views and foreign tables, pg_catalog's apart: after the data
# query is planned, among them every relation it reads (PostgreSQL locks each as it resolves its name, views'
# relations too); with whether its rows may change within the transaction for this reader: row-level security
# applies to the current role's reading of it (a policy may read a setting), or it is a temporary table (which a
# READ ONLY transaction may write).
LOCKED = ('SELECT DISTINCT c.oid AS oid, (pg_catalog.row_security_active(c.oid) OR c.relpersistence OPERATOR(pg_catalog.=) '
          '\'t\') AS varies FROM pg_catalog.pg_locks AS l '
          'JOIN pg_catalog.pg_class AS c ON c.oid OPERATOR(pg_catalog.=) l.relation '
          'WHERE l.locktype OPERATOR(pg_catalog.=) \'relation\' '
          'AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() '
          'AND c.relkind OPERATOR(pg_catalog.=) ANY (\'{r,v,m,f,p}\'::pg_catalog."char"[]) '
          'AND c.relnamespace OPERATOR(pg_catalog.<>) \'pg_catalog\'::pg_catalog.regnamespace '
          'ORDER BY c.oid')
_held = {}  # at most one entry: (transaction, role, search path, relations, data, columns) → Table


def loaded(data, columns, chunk_rows=0, memory_limit=None):
    """The Table of `columns` of the data, loaded once per REPEATABLE READ (or SERIALIZABLE) READ ONLY transaction,
    whose snapshot and whose rows (nothing in it writes) stay the same to its end: each round of a training
    computes on the columns that its first round loaded. At READ COMMITTED, or in a transaction that may write, every
    call loads the rows again. A later transaction drops what an earlier one kept.

    What is kept is one role's reading: it is kept under the current role, the search path and the relations the
    transaction has read, the data query's among them (resolved: a name that comes to mean another relation locks
    that one too), and every call first checks the current role's privileges on what the query reads, as running it
    does (docs/security.md: no data crosses roles through caches). Where row-level security applies to one of those
    relations, whose rows may depend on more than the role (a setting a policy reads), or one is a temporary table,
    which the transaction may write, nothing is kept."""
    now = server.query(TRANSACTION)
    query = loader.as_query(data)
    relations, varies = reading(query, columns)
    kept = now and now[0]['isolation'] in KEPT and now[0]['read_only'] == 'on' and not varies
    key = (now[0]['id'], now[0]['role'], now[0]['path'], relations, data, tuple(columns)) if kept else None
    if key is not None and key in _held:
        return _held[key]
    _held.clear()
    table = loader.load(data, columns, chunk_rows, memory_limit)
    if key is not None:
        _held[key] = table
    return table


def reading(query, columns):
    """(the oids of the relations this transaction has read, the data query's among them; whether the rows of one
    may change for this reader within the transaction) for the current role, after the data query is planned and
    started with LIMIT 0, which checks the role's privileges on what it reads, as running it would (42501, as the
    loader gives it)."""
    loader.check_columns(query, columns)
    found = server.query(LOCKED)
    return tuple(row['oid'] for row in found), any(row['varies'] for row in found)
