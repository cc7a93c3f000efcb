"""The exception pgad raises for bad input, and the one for an interrupt; the SQL shim turns them into ERRORs.

Messages follow PostgreSQL's style: lower case, the offending name in double quotes, a DETAIL where the
context helps (the lambda with a caret under a syntax error) and a HINT where there is something to do.
"""


class PgadError(Exception):
    def __init__(self, sqlstate, message, detail=None, hint=None, position=None):
        super().__init__(message)
        self.sqlstate, self.message, self.detail, self.hint = sqlstate, message, detail, hint
        self.position = position  # 1-based character in the lambda text, for syntax errors

    def __str__(self):
        return self.message


class Interrupted(Exception):
    """A cancel, a statement_timeout: the server's own error, caught in C (server.check_interrupts) and raised again
    as it was. Not a PgadError, so that no handler of bad input takes it for one."""
    def __init__(self, sqlstate, message):
        super().__init__(message)
        self.sqlstate, self.message, self.detail, self.hint = sqlstate, message, None, None
