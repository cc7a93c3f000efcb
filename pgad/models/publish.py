"""What a model's functions publish of its data, and the trainer's choice of it: pgad.publish_data_values.

The bodies of a model's functions are in pg_proc, which every role that may connect to the database reads
(docs/security.md, "What a scoring function publishes"). Beside the weights, a body holds values of the data itself:

    the group values of a grouped model          every function (its CASE over the groups)
    the categories of a categorical weight       every function (its CASE over the categories)
    the imputed value of a column (impute)       every function (coalesce($k, value))
    the class names of a label of classes        <name>_class (and a softmax model's <name>_explain, as its keys)
    the training means of the columns            <name>_explain (the baseline of its integrated gradients)

(a standardised model's means and scales are folded into its weights, and an array column's length is the shape of
the weights that read it: weights, both). Before a training stores anything (catalog.store: pgad.train and
pgad.tune, grouped, sequence, softmax and imputed models alike), check finds which of them the new functions' bodies
hold and whether a role that may not read the data could read them: whether some relation the training read (the
relations recorded as read_from) is not one PUBLIC may SELECT whole (no table privilege, or row-level security on).
If so, pgad.publish_data_values says what happens: 'warn' (the default) one WARNING naming them, 'on' nothing,
'off' 42501 before anything is stored. pgad.tune says its WARNING once, after its trials (once), and ends at a
trial's refusal (Refused).
"""
import contextlib

from .. import server
from ..errors import PgadError
from ..lang import printer, vectors

SETTING = "SELECT pg_catalog.current_setting('pgad.publish_data_values', true) AS v"  # NULL: not loaded, 'warn'
# The relations of read_from that PUBLIC may not SELECT whole: no SELECT on the table, or row-level security on it.
PRIVATE = ("SELECT c.oid::pg_catalog.regclass::pg_catalog.text AS shown FROM pg_catalog.pg_class AS c "
           "WHERE c.oid OPERATOR(pg_catalog.=) ANY ($1) AND (NOT pg_catalog.has_table_privilege('public', c.oid, "
           "'SELECT') OR c.relrowsecurity) ORDER BY c.oid")
WHO = 'pg_proc, where they are, is read by every role that may connect to the database'
WAYS = ("REVOKE CONNECT ON DATABASE from the roles that may not read the data, or code such columns as keys in the "
        "data query (docs/security.md)")


class Refused(PgadError):
    """pgad.publish_data_values = 'off' refused a training: pgad.tune ends at it rather than try the next trial."""


def held(scoring, made):
    """[(kind, columns, where)] of the values of the data that the bodies made (Scoring.functions' dict) hold: kind
    as the WARNING says it, the columns it is of, and which functions hold it."""
    name = scoring.name
    every = 'every function'
    found = []
    if scoring.group_by:
        found.append(('the group values', scoring.group_by, every))
    if scoring.categories:
        found.append(('the categories', list(scoring.categories), every))
    if scoring.imputed:
        found.append(('the imputed value' if len(scoring.imputed) == 1 else 'the imputed values',
                      [c for c in scoring.model.columns if c in scoring.imputed], every))
    if scoring.classes is not None and 'class' in made:  # and a softmax model's explanation's keys
        where = [f'{name}_class'] + ([f'{name}_explain'] if 'explain' in made and scoring.outputs.ndim else [])
        found.append(('the class names', [scoring.classes.label], ', '.join(map(printer.quote_ident, where))))
    if 'explain' in made:
        explainer = scoring.explanation[0]
        features = {feature for feature, _ in explainer.features}
        arrays = {column: n for column, _, n in scoring.lengths}
        means = [c for c in scoring.model.columns if c in features or
                 any(vectors.element(c, (k + 1,)) in features for k in range(arrays.get(c, 0)))]
        if means:
            found.append(('the training means', means, printer.quote_ident(f'{name}_explain')))
    return found


def phrases(found):
    """The values held as the WARNING lists them: 'the imputed value of "sqft" in every function', …"""
    return [f'{kind} of {", ".join(printer.quote_ident(str(c)) for c in columns)} in {where}'
            for kind, columns, where in found]


_gathered = []  # pgad.tune's: [[(model name, phrase list, private relations)]] while its trials run


def check(scoring, made, read):
    """What pgad.publish_data_values says of the functions made for model scoring.name, read the relations the
    training read (relations_read): nothing, a WARNING, or Refused (42501) before anything is stored."""
    setting = server.query(SETTING)[0]['v']
    if setting == 'on':
        return
    found = phrases(held(scoring, made))
    private = [r['shown'] for r in server.query(PRIVATE, [read], ['pg_catalog.oid[]'])] if found else []
    if not private:
        return
    if setting == 'off':
        raise Refused('42501', f'model "{scoring.name}" would publish values of the data in its functions\' '
                               f'bodies: {", ".join(found)}', detail=_who_reads(private),
                      hint=f"Set pgad.publish_data_values to 'on' to publish them; or {WAYS}.")
    if _gathered:
        _gathered[-1].append((scoring.name, found, private))
        return
    warn(scoring.name, found, private)


def _who_reads(private):
    """The DETAIL of the WARNING and of the refusal: who reads the bodies, and the relations PUBLIC may not read."""
    return f'{WHO}; the training read {", ".join(private)}, which PUBLIC may not read whole.'


def warn(name, found, private):
    server.warning(f'model "{name}" publishes values of the data in its functions\' bodies: {", ".join(found)}',
                   detail=_who_reads(private),
                   hint=f"Set pgad.publish_data_values to 'on' to publish them silently, or to 'off' to refuse such a "
                        f"training; or {WAYS}.")


@contextlib.contextmanager
def once():
    """pgad.tune's trials: their WARNINGs said once, as they end, of every value any trial's functions hold."""
    _gathered.append([])
    try:
        yield
        gathered = _gathered[-1]
    finally:
        _gathered.pop()
    if gathered:
        found = list(dict.fromkeys(p for _, each, _ in gathered for p in each))
        private = list(dict.fromkeys(r for _, _, each in gathered for r in each))
        warn(gathered[0][0], found, private)
