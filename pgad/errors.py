"""The one exception pgad raises for bad input; the SQL shim turns it into a PostgreSQL ERROR.

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
