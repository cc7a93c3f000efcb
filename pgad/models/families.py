"""Named model families (issue 46, item 2): pgad.train's model given as a family's name — 'ets(A,Ad,M,12)',
'arima(2,1,1)', 'arima(1,0,0)(1,1,0)12', 'drift' — is generated here as a sequence model: the prediction's lambda,
the state (each field's start and next), the starting weights and the bounds, exactly what a user would write by
hand. pgad.train then trains it as any sequence model (sequence.py) and stores the generated lambda and state, so
the stored model shows its recurrence and can be copied and edited as a lambda.

ETS, additive error (Hyndman et al.'s error-correction form, statsmodels' ETSModel's parameters): with P the level
and trend part (l, l + b, or l + φ·b) and the prediction ŷ = P, P + s₁ or P·s₁ (the season of the row), e = y − ŷ,
  l' = P + α·e            (a multiplicative season: P + α·e/s₁)
  b' = b + β·e, φ·b + β·e (a multiplicative season: β·e/s₁)
  the seasons shift, s₁ … s_{m−1} ← s₂ … s_m, and s_m' = s₁ + γ·e (multiplicative: s₁ + γ·e/P).
The level starts at the first row's label plus the weight l0, the trend at b0, the seasons at i1 … im (1 + ik for a
multiplicative season). α, β, γ are bounded to [0, 1], φ to [0.8, 0.98] (R's ets()).

ETS, multiplicative error: the same recurrence — written in the label, the state equations of ETS(M,·,·) are those of
ETS(A,·,·) (Hyndman et al., 2008, §2.5: l' = P(1 + α·ε) = P + α·e/s₁ …, ε = e/ŷ the relative error), and so are
the point forecasts — fitted by its likelihood rather than by least squares: the concentrated −2 log L,
n·ln(Σ ε²/n) + 2·Σ ln|ŷ| (plus n·(ln 2π + 1)), of the rows' relative errors; its σ² that of ε, its intervals
simulated with errors ŷ·σ·z. The labels must all be above 0.

ARIMA(p,d,q)(P,D,Q)m by conditional least squares (CSS): w = (1 − B)^d (1 − B^m)^D y, the differenced label, is
predicted from its last p + m·P values and the last q + m·Q errors by the expanded polynomials
(1 − Σφᵢ Bⁱ)(1 − ΣΦⱼ B^{mj}) w = c + (1 + Σθᵢ Bⁱ)(1 + ΣΘⱼ B^{mj}) e, and y's prediction is w's plus what the
differencing took from the past values. The first d + m·D + p + m·P rows, which have too few values before them,
predict their own label (the state's counter n guards them: a loss of 0, and errors of 0 before the first
prediction), as AutoReg and CSS condition on them. The constant c only where nothing is differenced.

'drift': a local level with drift (the Theta method's model, Hyndman and Billah): ŷ = l + c, l' = l + c + α·e.
"""
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import PgadError

ETS = re.compile(r'\s*ets\s*\(\s*([AM])\s*,\s*(N|A|Ad)\s*,\s*(N|A|M)\s*(?:,\s*(\d+)\s*)?\)\s*', re.IGNORECASE)
ARIMA = re.compile(r'\s*arima\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)'
                   r'(?:\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)\s*(\d+))?\s*', re.IGNORECASE)
DRIFT = re.compile(r'\s*drift\s*(?:\(\s*\))?\s*', re.IGNORECASE)
AUTO = re.compile(r'\s*auto\s*(?:\(\s*(?:(\d+)(?:\s*,\s*([AZ]))?|([AZ]))?\s*\))?\s*', re.IGNORECASE)
NAMED = re.compile(r'\s*(ets|arima|drift|auto)\b', re.IGNORECASE)
SMOOTHING = [0.0, 1.0]
DAMPING = [0.8, 0.98]           # R's ets(): φ within [0.8, 0.98]
MAX_SEASON = 400                # a season's fields (m) at most: a year of days and more
MAX_ORDER = 60                  # p + m·P, q + m·Q and d + m·D each at most (the state holds as many lags)
EXAMPLES = "'ets(A,N,N)', 'ets(A,Ad,M,12)', 'arima(2,1,1)', 'arima(1,0,0)(1,1,0)12' or 'drift'"


@dataclass
class Family:
    name: str      # canonical: 'ets(A,Ad,M,12)'
    model: str     # the prediction, λ(d, w, s) …
    state: str     # the state's JSON: {field: {"start": …, "next": …}}
    weights: dict  # the starting weights
    bounds: dict   # {weight: [lower, upper]}
    candidates: list = None  # 'auto': the Candidates each group's fit chooses among
    components: tuple = None  # an ETS's (trend, season, m): each group's starting states from its rows (initial)
    error: str = 'A'         # an ETS's error: 'A' (least squares) or 'M' (its likelihood, of relative errors)


@dataclass
class Candidate:
    name: str         # the family it is: 'ets(A,Ad,N)'
    fixed: dict       # the weights that make the unified recurrence this family, and those it does not read, {name: value}
    bounds: dict      # the bounds of its weights beyond the family's: φ's where the trend is damped
    parameters: int   # what it fits (σ² too), for the AICc
    positive: bool    # whether it needs a label above 0 (a multiplicative season or error)
    components: tuple = None  # (trend, season, m), as Family's
    error: str = 'A'  # as Family's


def season_of(text):
    """The season length an 'auto(m)' gives, or None; 0 for a text that is no 'auto'."""
    found = AUTO.fullmatch(text)
    return 0 if found is None else None if found.group(1) is None else int(found.group(1))


def errors_of(text):
    """The errors an 'auto(…)' text's candidates take: 'A' (additive alone: 'auto(7,A)', 'auto(A)') or 'Z' (both)."""
    found = AUTO.fullmatch(text)
    return (found.group(2) or found.group(3) or 'Z').upper() if found else 'Z'


def season(name):
    """The season's length of a stored family's name ('ets(A,A,A,7)': 7, 'arima(1,0,0)(1,1,0)12': 12), 1 for any
    other."""
    found = ETS.fullmatch(name or '')
    if found:
        return int(found.group(4)) if found.group(4) else 1
    found = ARIMA.fullmatch(name or '')
    return int(found.group(7)) if found and found.group(7) else 1


def relative(name):
    """Whether a stored family's name is an ETS of multiplicative error ('ets(M,A,M,12)'), whose one-step errors are
    relative (σ of ε = e/ŷ)."""
    found = ETS.fullmatch(name or '')
    return bool(found) and found.group(1).upper() == 'M'


def named(text):
    """Whether a model text names a family rather than writes a lambda."""
    return text is not None and NAMED.match(text) is not None and not text.lstrip().startswith(('λ', 'lambda'))


def generate(text, label):
    """The Family a model text names, its label column label; an error naming what is wrong where it names none
    pgad has."""
    found = ETS.fullmatch(text)
    if found:
        error, trend, season, m = found.group(1).upper(), found.group(2).capitalize(), found.group(3).upper(), \
            found.group(4)
        return ets(error, trend, season, None if m is None else int(m), label)
    found = ARIMA.fullmatch(text)
    if found:
        p, d, q = (int(v) for v in found.group(1, 2, 3))
        seasonal = (0, 0, 0, 1) if found.group(4) is None else tuple(int(v) for v in found.group(4, 5, 6, 7))
        return arima(p, d, q, *seasonal, label)
    if DRIFT.fullmatch(text):
        return drift(label)
    if AUTO.fullmatch(text):
        return auto(season_of(text) or 1, label, errors_of(text))
    raise PgadError('22023', f'model "{text.strip()}" is no family pgad knows',
                    hint=f'Name a family, {EXAMPLES}, or write the model as a lambda with order_by and state.')


def column(label):
    """The label column as the lambda reads it: d.y, or d."Units" where it needs quotes."""
    if re.fullmatch(r'[a-z_][a-z0-9_]*', label):
        return f'd.{label}'
    return 'd."' + label.replace('"', '""') + '"'


def ets(error, trend, season, m, label):
    """The Family of ETS(error, trend, season, m): one recurrence, whichever the error (the module's docstring)."""
    shown = f'ets({error},{trend},{season}' + (f',{m})' if season != 'N' and m is not None else ')')
    if season != 'N' and m is None:
        raise PgadError('22023', f'family "{shown}" needs its season\'s length',
                        hint=f'Give it last: ets({error},{trend},{season},7) for days of a week, 12 for months.')
    if season != 'N' and not 2 <= m <= MAX_SEASON:
        raise PgadError('22023', f'the season of family "{shown}" has {m} periods, not between 2 and {MAX_SEASON}',
                        hint='Give a season of 2 periods or more: 7 for days of a week, 12 for months of a year.')
    y = column(label)
    part = {'N': 's.level', 'A': '(s.level + s.trend)', 'Ad': '(s.level + w.phi*s.trend)'}[trend]
    prediction = {'N': part, 'A': f'{part} + s.s1', 'M': f'{part}*s.s1'}[season]
    e = f'({y} - {"(" + prediction + ")" if season != "N" else prediction})'
    per = '/s.s1' if season == 'M' else ''
    state = {'level': {'start': f'{y} + w.l0', 'next': f'{part} + w.alpha*{e}{per}'}}
    weights, bounds = {'alpha': 0.3, 'l0': 0.0}, {'alpha': SMOOTHING}
    if trend != 'N':
        damped = 'w.phi*s.trend' if trend == 'Ad' else 's.trend'
        state['trend'] = {'start': 'w.b0', 'next': f'{damped} + w.beta*{e}{per}'}
        weights.update(beta=0.05, b0=0.0)
        bounds['beta'] = SMOOTHING
        if trend == 'Ad':
            weights['phi'], bounds['phi'] = 0.95, DAMPING
    if season != 'N':
        for k in range(1, m):
            state[f's{k}'] = {'start': f'1 + w.i{k}' if season == 'M' else f'w.i{k}', 'next': f's.s{k + 1}'}
        state[f's{m}'] = {'start': f'1 + w.i{m}' if season == 'M' else f'w.i{m}',
                          'next': f's.s1 + w.gamma*{e}' + (f'/{part}' if season == 'M' else '')}
        weights['gamma'], bounds['gamma'] = 0.1, SMOOTHING
        weights.update({f'i{k}': 0.0 for k in range(1, m + 1)})
    return Family(shown, f'λ(d, w, s) {prediction}', json.dumps(state), weights, bounds,
                  components=(trend, season, m or 1), error=error)


def initial(components, y):
    """An ETS's starting weights for one series y (its label in order), by the classical heuristic (Hyndman et
    al., 2008): with a season of m and two seasons' rows, the level the first season's mean, the trend the change of
    the means over a season, the seasons the first season's rows less (over) the level; else the first row and the
    first change. Relative to the first row, as the generated starts read it: l0 = level − y₁."""
    trend, season, m = components
    out = {}
    if season != 'N' and len(y) >= 2 * m:
        level = float(np.mean(y[:m]))
        slope = float(np.mean(y[m:2 * m]) - level) / m
        if season == 'M' and level > 0 and np.all(y[:m] > 0):
            ratios = y[:m] / level
            out.update({f'i{k + 1}': float(v) - 1.0 for k, v in enumerate(ratios / np.mean(ratios))})
        elif season != 'M':
            out.update({f'i{k + 1}': float(v) for k, v in enumerate(y[:m] - np.mean(y[:m]))})
        level -= slope * (m - 1) / 2  # the mean sits mid-season: the level before the first row
    else:
        level = float(y[0])
        slope = float(np.mean(np.diff(y[:min(len(y), 6)]))) if len(y) > 1 else 0.0
    out['l0'] = level - float(y[0])
    if trend != 'N':
        out['b0'] = slope
    return out


def _product(regular, seasonal, m, sign):
    """{lag: [(coefficient weights, their sign)]} of (1 + sign·Σ rᵢ Bⁱ)(1 + sign·Σ Sⱼ B^{mj}) less its 1: the terms
    of the expanded polynomial, regular and seasonal the weights' names."""
    terms = {}
    for i, r in enumerate(regular, 1):
        terms.setdefault(i, []).append(([r], 1))
    for j, s in enumerate(seasonal, 1):
        terms.setdefault(m * j, []).append(([s], 1))
        for i, r in enumerate(regular, 1):
            terms.setdefault(i + m * j, []).append(([r, s], sign))
    return terms


def arima(p, d, q, sp, sd, sq, m, label):
    """The Family of ARIMA(p,d,q)(P,D,Q)m by conditional least squares."""
    shown = f'arima({p},{d},{q})' + (f'({sp},{sd},{sq}){m}' if (sp, sd, sq) != (0, 0, 0) else '')
    if (sp or sd or sq) and m < 2:
        raise PgadError('22023', f'the season of family "{shown}" has {m} periods, not 2 or more',
                        hint='Give the season\'s length after its orders: arima(1,0,0)(1,1,0)12.')
    if d > 2 or sd > 1:
        raise PgadError('22023', f'family "{shown}" differences more than pgad fits (d at most 2, D at most 1)',
                        hint='Difference the label in the data query, or use a smaller d.')
    ar, ma, diff = p + m * sp, q + m * sq, d + m * sd
    if max(ar, ma, diff) > MAX_ORDER:
        raise PgadError('22023', f'family "{shown}" reaches {max(ar, ma, diff)} rows back, more than {MAX_ORDER}',
                        hint='Use smaller orders, or a shorter season (an ETS season of any length: ets(A,N,A,m)).')
    y = column(label)
    delta = np.array([1.0])  # (1 − B)^d (1 − B^m)^D's coefficients
    for _ in range(d):
        delta = np.convolve(delta, [1.0, -1.0])
    for _ in range(sd):
        delta = np.convolve(delta, np.r_[1.0, np.zeros(m - 1), -1.0])
    lags_y = len(delta) - 1
    w_now = f'({_sum([(1.0, y)] + [(c, f"s.y{j}") for j, c in enumerate(delta[1:], 1)])})' if lags_y else y
    names_ar = [f'ar{i}' for i in range(1, p + 1)]
    names_sar = [f'sar{j}' for j in range(1, sp + 1)]
    names_ma = [f'ma{i}' for i in range(1, q + 1)]
    names_sma = [f'sma{j}' for j in range(1, sq + 1)]
    terms = []
    if not lags_y:
        terms.append('w.c')
    for lag, found in sorted(_product(names_ar, names_sar, m, -1).items()):
        terms += [('-' if sign < 0 else '') + '*'.join(f'w.{n}' for n in names) + f'*s.w{lag}' for names, sign in found]
    for lag, found in sorted(_product(names_ma, names_sma, m, 1).items()):
        terms += ['*'.join(f'w.{n}' for n in names) + f'*s.e{lag}' for names, _ in found]
    w_hat = '(' + (' + '.join(terms).replace('+ -', '- ') if terms else '0') + ')'
    # y's prediction: w's, plus what the differencing took from the past values
    past = _sum([(-c, f's.y{j}') for j, c in enumerate(delta[1:], 1)])
    warm = lags_y + ar
    prediction = f'{w_hat} + {past}'.replace('+ -', '- ') if past else w_hat
    guarded = f'CASE WHEN s.n < {warm} THEN {y} ELSE {prediction} END' if warm else prediction
    state = {'n': {'start': '0', 'next': 's.n + 1'}} if warm else {}
    for j in range(1, lags_y + 1):
        state[f'y{j}'] = {'start': '0', 'next': y if j == 1 else f's.y{j - 1}'}
    for j in range(1, ar + 1):
        state[f'w{j}'] = {'start': '0', 'next': w_now if j == 1 else f's.w{j - 1}'}
    for j in range(1, ma + 1):
        error = f'{w_now} - {w_hat}'
        state[f'e{j}'] = {'start': '0', 'next': (f'CASE WHEN s.n < {warm} THEN 0 ELSE {error} END' if warm else
                                                 error) if j == 1 else f's.e{j - 1}'}
    if not state:  # white noise about a constant: a state of one field that no prediction reads
        state['n'] = {'start': '0', 'next': 's.n + 1'}
    weights = {**({'c': 0.0} if not lags_y else {}), **{n: 0.0 for n in names_ar + names_sar + names_ma + names_sma}}
    return Family(shown, f'λ(d, w, s) {guarded}', json.dumps(state), weights, {})


def _sum(terms):
    """The text of Σ coefficient·term over (coefficient, term) pairs, 0s left out: 'd.y - 2*s.y1 + s.y2'."""
    out = ''
    for c, term in terms:
        if not c:
            continue
        factor = term if abs(c) == 1 else f'{abs(c):g}*{term}'
        out += (' - ' if c < 0 else ' + ') + factor if out else ('-' if c < 0 else '') + factor
    return out


def auto(m, label, errors='Z'):
    """The Family of 'auto': ETS with every trend (none, additive, damped) and season (none, additive,
    multiplicative, of length m where m ≥ 2) as one recurrence, whose weights tau, sa and sm (and phi, 1 but for the
    damped trend) choose the components — fixed by bounds of one value for each Candidate, which sequence.py fits in
    turn, all the groups at once, keeping each group's of least AICc (aicc) — and each error errors takes: 'Z' an
    additive error (least squares) but with a multiplicative season (R's ets() leaves that out as unstable) and a
    multiplicative one (its likelihood) for groups whose labels are all above 0; 'A' the additive error alone, with
    every season (nine candidates, each one run of the recurrence a step: the fast choice)."""
    y = column(label)
    part = '(s.level + w.phi*w.tau*s.trend)'
    seasonal = m >= 2
    scale = '(1 + w.sm*(s.s1 - 1))' if seasonal else ''  # the season that divides the error: s₁ where it multiplies
    prediction = f'{part}*{scale} + w.sa*s.s1' if seasonal else part
    e = f'({y} - ({prediction}))'
    per = f'/{scale}' if seasonal else ''
    state = {'level': {'start': f'{y} + w.l0', 'next': f'{part} + w.alpha*{e}{per}'},
             'trend': {'start': 'w.b0', 'next': f'w.phi*s.trend + w.beta*{e}{per}'}}
    weights = {'alpha': 0.3, 'l0': 0.0, 'beta': 0.05, 'b0': 0.0, 'phi': 0.95, 'tau': 0.0}
    if seasonal:
        for k in range(1, m):
            state[f's{k}'] = {'start': f'w.sm + w.i{k}', 'next': f's.s{k + 1}'}
        state[f's{m}'] = {'start': f'w.sm + w.i{m}', 'next': f's.s1 + w.gamma*{e}/(1 + w.sm*({part} - 1))'}
        weights.update(sa=0.0, sm=0.0, gamma=0.1, **{f'i{k}': 0.0 for k in range(1, m + 1)})
    bounds = {'alpha': SMOOTHING, 'beta': SMOOTHING, **({'gamma': SMOOTHING} if m >= 2 else {})}
    candidates = []
    for error, trend, season in ((e, t, s) for e in ('A', 'M') if errors == 'Z' or e == errors
                                 for t in ('N', 'A', 'Ad') for s in (('N', 'A', 'M') if m >= 2 else ('N',))
                                 if e == 'M' or s != 'M' or errors == 'A'):
        fixed = {'tau': float(trend != 'N'), **({'phi': 1.0} if trend != 'Ad' else {}),
                 **({'beta': 0.0, 'b0': 0.0} if trend == 'N' else {})}
        if seasonal:
            fixed.update(sa=float(season == 'A'), sm=float(season == 'M'))
            if season == 'N':
                fixed.update(gamma=0.0, **{f'i{k}': 0.0 for k in range(1, m + 1)})
        count = 2 + 2 * (trend != 'N') + (trend == 'Ad') + (m if season != 'N' else 0) + 1
        candidates.append(Candidate(f'ets({error},{trend},{season}' + (f',{m})' if season != 'N' else ')'),
                                    fixed, {'phi': DAMPING} if trend == 'Ad' else {}, count,
                                    season == 'M' or error == 'M', (trend, season, m), error))
    shown = ','.join(([str(m)] if m >= 2 else []) + (['A'] if errors == 'A' else []))
    return Family(f'auto({shown})' if shown else 'auto', f'λ(d, w, s) {prediction}', json.dumps(state), weights,
                  bounds, candidates)


def aicc(sse, n, k):
    """The AICc of a Gaussian fit of n rows whose squared errors sum to sse, k parameters (σ² among them):
    −2·log L + 2k + 2k(k + 1)/(n − k − 1), log L = −n/2·(ln(2π·sse/n) + 1); infinite where n ≤ k + 1."""
    if n <= k + 1 or not sse > 0:
        return math.inf if n <= k + 1 else -math.inf
    return n * (math.log(2 * math.pi * sse / n) + 1) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


# The season length of an order column stepped by about this much: days → a week, months → a year, quarters → a
# year; hours → a day (the step in the loader's units: days for a date, seconds for a timestamp).
SEASONS = {'date': ((1, 7), (7, 52), (28, 12), (29, 12), (30, 12), (31, 12), (90, 4), (91, 4), (92, 4)),
           'timestamp': ((3600, 24), (86400, 7), (604800, 52))}


def season_length(kind, order):
    """The season length of an order column's values (sorted, a float8 array) of type kind, by its most common
    step; 1 (none) where the step is none of SEASONS' (a number column, or irregular)."""
    if len(order) < 2:
        return 1
    steps, counts = np.unique(np.round(np.diff(order), 6), return_counts=True)
    step = float(steps[np.argmax(counts)])
    table = SEASONS['date' if kind == 'date' else 'timestamp' if kind.startswith('timestamp') else 'number'] \
        if kind == 'date' or kind.startswith('timestamp') else ()
    return next((m for at, m in table if step == at), 1)


def drift(label):
    """The Family of a local level with drift."""
    y = column(label)
    state = {'level': {'start': f'{y} + w.l0', 'next': f's.level + w.c + w.alpha*({y} - s.level - w.c)'}}
    return Family('drift', 'λ(d, w, s) s.level + w.c', json.dumps(state), {'alpha': 0.3, 'l0': 0.0, 'c': 0.0},
                  {'alpha': SMOOTHING})
