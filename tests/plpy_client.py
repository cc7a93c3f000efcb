"""plpy over psycopg: pgad's server-side Python (pgad/server.py and what calls it) run in the test process against
a real PostgreSQL.

pgad/loader.py and pgad/api.py reach the database only through `import plpy`, which exists only inside the
server, so no test in the pytest process (where mutation testing runs) could reach them. Plpy(conninfo), put in
sys.modules['plpy'], answers what server.py asks of plpy, on one psycopg connection in one transaction, as
PL/Python would inside a function:
- execute(sql) and execute(plan, args): a list of dict rows with .colnames() and .coltypes() (type oids);
- prepare(sql, types): a server-side PREPARE, so $1 placeholders and type names are the server's;
- cursor(sql): a server-side cursor (DECLARE: one SELECT only), .fetch(n) and .close();
- subtransaction(): a SAVEPOINT; every call above runs in one too, as PL/Python runs each SPI call, so a failed
  query leaves the transaction usable;
- SPIError: any psycopg error, with .sqlstate, .detail, .hint and the message as args[0];
- debug/log/info/notice/warning: recorded in .messages as (level, text), with the server's own NOTICEs (a HINT or
  DETAIL keyword is taken and not recorded);
- error(): raises Error, carrying sqlstate, detail and hint, where PL/Python would raise the ERROR.
Only the plpy API is adapted: every query runs on the real server. `queries` records [sql, rows returned] for
every statement a caller ran, rows fetched through a cursor included.
"""
import contextlib
import itertools

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import dict_row


class SPIError(Exception):
    """As PL/Python's plpy.SPIError: .sqlstate, and DETAIL and HINT only in .spidata (sqlerrcode, detail, hint,
    query, position, schema, table, column, datatype, constraint)."""
    def __init__(self, message, sqlstate=None, detail=None, hint=None):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.spidata = (0, detail, hint, None, 0, None, None, None, None, None)


class Error(Exception):
    """What plpy.error raises: the ERROR the function would end with."""
    def __init__(self, message, sqlstate=None, detail=None, hint=None):
        super().__init__(message)
        self.message, self.sqlstate, self.detail, self.hint = message, sqlstate, detail, hint


class Result(list):
    def __init__(self, rows, description):
        super().__init__(rows)
        self._description = description or []

    def colnames(self):
        return [c.name for c in self._description]

    def coltypes(self):
        return [c.type_code for c in self._description]


class Plan:
    def __init__(self, name, types):
        self.name, self.types = name, types


class Cursor:
    def __init__(self, plpy, name, record):
        self._plpy, self._name, self._record = plpy, name, record

    def fetch(self, n):
        result = self._plpy._run(f'FETCH FORWARD {int(n)} FROM {self._name}')
        self._record[1] += len(result)
        return result

    def close(self):
        self._plpy._run(f'CLOSE {self._name}')


class Plpy:
    SPIError = SPIError
    Error = Error

    def __init__(self, conninfo):
        self.conn = psycopg.connect(conninfo, row_factory=dict_row)  # not autocommit: one transaction, as a call
        self.conn.add_notice_handler(lambda d: self.messages.append((d.severity_nonlocalized, d.message_primary)))
        self.messages, self.queries = [], []
        self._names = itertools.count()

    def close(self):
        self.conn.rollback()
        self.conn.close()

    def notices(self):
        return [text for level, text in self.messages if level == 'NOTICE']

    @contextlib.contextmanager
    def subtransaction(self):
        name = f'plpy_{next(self._names)}'
        self.conn.execute(f'SAVEPOINT {name}')
        try:
            yield
        except BaseException:
            self.conn.execute(f'ROLLBACK TO SAVEPOINT {name}')
            self.conn.execute(f'RELEASE SAVEPOINT {name}')
            raise
        self.conn.execute(f'RELEASE SAVEPOINT {name}')

    @contextlib.contextmanager
    def _spi(self):
        """One SPI call: in a subtransaction, its errors as SPIError."""
        try:
            with self.subtransaction():
                yield
        except psycopg.Error as e:
            raise SPIError(e.diag.message_primary or str(e), e.sqlstate, e.diag.message_detail,
                           e.diag.message_hint) from None

    def _run(self, text):
        with self._spi():
            cur = self.conn.execute(text)
            while cur.nextset():  # several statements: the last one's rows, as SPI_execute returns
                pass
            return Result(cur.fetchall() if cur.description else [], cur.description)

    def execute(self, query, args=()):
        if isinstance(query, Plan):
            values = [pgsql.Literal(a) for a in args]
            query = pgsql.SQL('EXECUTE {}').format(pgsql.Identifier(query.name)) + (
                pgsql.SQL('({})').format(pgsql.SQL(', ').join(values)) if values else pgsql.SQL(''))
            text = query.as_string(self.conn)
        else:
            text = query
        result = self._run(text)
        self.queries.append([text, len(result)])
        return result

    def prepare(self, query, types=()):
        name = f'plpy_plan_{next(self._names)}'
        with self._spi():
            self.conn.execute(pgsql.SQL('PREPARE {} {} AS ').format(
                pgsql.Identifier(name), pgsql.SQL(f'({", ".join(types)})' if types else '')).as_string(self.conn) +
                query)
        return Plan(name, list(types))

    def cursor(self, query):
        record, name = [query, 0], f'plpy_cursor_{next(self._names)}'
        self.queries.append(record)
        with self._spi():  # binary=True: the extended protocol, one statement only (as SPI_cursor_open)
            self.conn.execute(f'DECLARE {name} NO SCROLL CURSOR FOR {query}', binary=True)
        return Cursor(self, name, record)

    def _message(level):
        return lambda self, message, **fields: self.messages.append((level, str(message)))

    debug, log, info, notice, warning = _message('DEBUG'), _message('LOG'), _message('INFO'), _message('NOTICE'), \
        _message('WARNING')

    def error(self, message, sqlstate=None, detail=None, hint=None):
        raise Error(str(message), sqlstate, detail, hint)
