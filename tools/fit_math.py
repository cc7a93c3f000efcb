"""Fit again the polynomials of the kernels' inline exp and log1p (pgad/jit/codegen.py's EXP_Q and LOG_R), with
mpmath at 200 bits: Chebyshev fits (mpmath.chebyfit, near-minimax) on the ranges the range reductions leave.

    .venv/bin/python tools/fit_math.py
"""
import mpmath as mp

mp.mp.prec = 200


def exp_q(r):  # (exp(r) − 1 − r)/r², on |r| ≤ ln2/2
    return mp.mpf(1) / 2 if abs(r) < mp.mpf('1e-30') else (mp.exp(r) - 1 - r) / r ** 2


def log_r(z):  # R(z)/z of log(1 + f) = f − f²/2 + s·(f²/2 + R(z)), s = f/(2 + f), z = s² ≤ 0.04
    if z < mp.mpf('1e-40'):
        return mp.mpf(2) / 3
    s = mp.sqrt(z)
    return 2 * (mp.atanh(s) / s - 1) / z


def main():
    half_ln2 = mp.log(2) / 2
    for name, f, interval, terms, scale in (
            ('EXP_Q', exp_q, [-half_ln2 * 1.0001, half_ln2 * 1.0001], 11, half_ln2 ** 2 / mp.exp(-half_ln2)),
            ('LOG_R', log_r, [0, mp.mpf('0.04') * 1.0001], 8, mp.mpf('0.04') / 2)):
        coefficients, error = mp.chebyfit(f, interval, terms, error=True)
        print(f'{name} = {tuple(float(c) for c in coefficients)}  # highest degree first')
        print(f'# its error: {mp.nstr(error, 3)}, {mp.nstr(error * scale / mp.mpf(2) ** -53, 2)} ulp of the result')


if __name__ == '__main__':
    main()
