"""The exception pgad raises for bad input, and the one for an interrupt; the SQL shim turns them into ERRORs.

Messages follow PostgreSQL's style: lower case, the offending name in double quotes, a DETAIL where the
context helps and a HINT where there is something to do. An error that points into the lambda (a syntax error, a
shape that does not fit) carries the lambda's text and the place, as PostgreSQL's syntax errors carry the query
and the position: the server gives them to the client as the ERROR's internal query and position (psql draws the
line and a caret under the place), and in Python its DETAIL is that line with the caret (Caret).
"""


class Caret(str):
    """A DETAIL that is the lambda's line at pos (0-based, in characters) with a caret under the place, and that
    knows the whole text and the place: a PgadError given one as its detail takes them as its query and position."""

    def __new__(cls, text, pos):
        line = text.split('\n')[text[:pos].count('\n')]
        self = super().__new__(cls, line + '\n' + ' ' * len(text[:pos].split('\n')[-1]) + '^')
        self.text, self.pos = text, pos
        return self


class PgadError(Exception):
    def __init__(self, sqlstate, message, detail=None, hint=None):
        super().__init__(message)
        self.sqlstate, self.message, self.detail, self.hint = sqlstate, message, detail, hint
        self.query = detail.text if isinstance(detail, Caret) else None  # the lambda text position points into
        self.position = detail.pos + 1 if isinstance(detail, Caret) else None  # 1-based character in query

    def __str__(self):
        return self.message


class Interrupted(Exception):
    """A cancel, a statement_timeout: the server's own error, caught in C (server.check_interrupts) and raised again
    as it was. Not a PgadError, so that no handler of bad input takes it for one."""
    def __init__(self, sqlstate, message):
        super().__init__(message)
        self.sqlstate, self.message, self.detail, self.hint = sqlstate, message, None, None
        self.query = self.position = None
