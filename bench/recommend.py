"""Weights at scale (issue 48): a matrix factorisation with biases by pgad.train against its peers, side by side.

    .venv/bin/python bench/recommend.py [--users 20000] [--items 5000] [--ratings 540000] [--rank 8] [--lam 5]

One throwaway cluster, one run. Ratings of log-normal activity and popularity with rank-`rank` structure and noise,
10 % held out. The objective is Σ(r − μ − b_u − b_i − p_u·q_i)² + λ(Σ|p|² + Σ|q|² + Σb²), μ unpenalised (pgad:
l2 => λ/n, regularize all but mu). Each contender's time includes reading the rows out of PostgreSQL (COPY) where it
runs outside it; pgad's includes its load. Printed, never asserted:
- pgad.train (block Newton, to its convergence criterion) on each of --backends (by default 'auto', which compiles
  its passes with LLVM, and 'python'): time, sweeps, the objective, held-out RMSE by its scoring function, the
  backend's peak resident memory (VmHWM), the fit's time a sweep (training_time over the sweeps);
- numpy's alternating least squares of the same objective (the reference), to the same objective or 100 sweeps;
- PyTorch: sparse embeddings (nn.Embedding(sparse=True)) and SparseAdam on the same objective (each batch's penalty
  its keys' unbiased share, as pgad's sparse optimizers), epochs until its held-out RMSE is within 1 % of pgad's;
- scikit-surprise's SVD (biased, its own SGD and defaults at this rank): time and held-out RMSE;
- the implicit library's ALS on the same pairs as implicit feedback: its time per sweep on one thread and on every
  core, against pgad's per sweep (on its default threads: pgad.threads 0, the cores up to
  max_parallel_workers_per_gather + 1);
- pgad.recommend's top 10 for 200 users over every item: item scores a second (its weights' read included).
"""
import argparse
import io
import os
import sys
import time

import numpy as np
import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pgad.throwaway import Cluster  # noqa: E402

MODEL = 'λ(d, w) w.mu + w.bu[d.user_id] + w.bi[d.item_id] + dot(w.p[d.user_id], w.q[d.item_id])'


def generate(users, items, count, rank, seed=7):
    rng = np.random.default_rng(seed)
    activity, popularity = rng.lognormal(0, 1, users), rng.lognormal(0, 1, items)
    u = rng.choice(users, count, p=activity / activity.sum())
    i = rng.choice(items, count, p=popularity / popularity.sum())
    pairs = np.unique(u.astype(np.int64) * items + i)
    rng.shuffle(pairs)
    u, i = pairs // items, pairs % items
    P, Q = rng.normal(0, 0.5, (users, rank)), rng.normal(0, 0.5, (items, rank))
    r = 3.5 + rng.normal(0, 0.3, users)[u] + rng.normal(0, 0.3, items)[i] + (P[u] * Q[i]).sum(1) + \
        rng.normal(0, 0.8, len(u))
    return u, i, r, rng.random(len(u)) < 0.1


def load(db, name, u, i, r):
    db.execute(f'CREATE TABLE {name} (user_id int4, item_id int4, rating float8)')
    with db.cursor().copy(f'COPY {name} FROM STDIN') as copy:
        text = io.StringIO()
        np.savetxt(text, np.c_[u, i, r], fmt=['%d', '%d', '%.17g'], delimiter='\t')
        copy.write(text.getvalue())
    db.execute(f'ANALYZE {name}')


def exported(db, name):
    with db.cursor().copy(f'COPY {name} TO STDOUT') as copy:
        text = b''.join(bytes(part) for part in copy)
    data = np.loadtxt(io.BytesIO(text), delimiter='\t')
    return data[:, 0].astype(np.int64), data[:, 1].astype(np.int64), data[:, 2]


def objective(u, i, r, mu, bu, bi, P, Q, lam):
    e = r - mu - bu[u] - bi[i] - (P[u] * Q[i]).sum(1)
    return e @ e + lam * ((P ** 2).sum() + (Q ** 2).sum() + (bu ** 2).sum() + (bi ** 2).sum())


def rmse(test, mu, bu, bi, P, Q):
    u, i, r = test
    return float(np.sqrt(np.mean((r - mu - bu[u] - bi[i] - (P[u] * Q[i]).sum(1)) ** 2)))


def als(u, i, r, users, items, rank, lam, target=None, sweeps=100):
    """numpy ALS: (seconds, sweeps, objective, (mu, bu, bi, P, Q))."""
    started = time.perf_counter()
    rng = np.random.default_rng(1)
    P, Q = rng.normal(0, 0.1, (users, rank)), rng.normal(0, 0.1, (items, rank))
    bu, bi, mu = np.zeros(users), np.zeros(items), r.mean()

    def solve(idx, other, y, n):
        X = np.c_[np.ones(len(idx)), other]
        A = np.zeros((n, rank + 1, rank + 1))
        for a in range(rank + 1):
            for b in range(a, rank + 1):
                A[:, a, b] = A[:, b, a] = np.bincount(idx, X[:, a] * X[:, b], n)
        rhs = np.stack([np.bincount(idx, X[:, a] * y, n) for a in range(rank + 1)], 1)
        return np.linalg.solve(A + lam * np.eye(rank + 1), rhs[..., None])[..., 0]
    f = np.inf
    for sweep in range(1, sweeps + 1):
        mu = (r - bu[u] - bi[i] - (P[u] * Q[i]).sum(1)).mean()
        x = solve(u, Q[i], r - mu - bi[i], users)
        bu, P = x[:, 0], x[:, 1:]
        x = solve(i, P[u], r - mu - bu[u], items)
        bi, Q = x[:, 0], x[:, 1:]
        f = objective(u, i, r, mu, bu, bi, P, Q, lam)
        if target is not None and f <= target * (1 + 1e-9):
            break
    return time.perf_counter() - started, sweep, f, (mu, bu, bi, P, Q)


def pgad_fit(cluster, dbname, n, lam, rank, backend='auto', sweeps=None):
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
        pid = db.execute('SELECT pg_backend_pid()').fetchone()[0]
        started = time.perf_counter()
        weights = ('{"mu": 0, "bu": {}, "bi": {}, "p": {"shape": [%d], "seed": 1}, "q": {"shape": [%d], "seed": 2}}'
                   % (rank, rank))
        final, sweeps, converged, fitting = db.execute(
            "SELECT final_loss, iterations, converged, training_time FROM pgad.train('mf', %s, 'squared', "
            "'mf_train', %s, label => 'rating', l2 => %s, regularize => '[\"bu\", \"bi\", \"p\", \"q\"]', "
            "backend => %s, iterations => %s)", [MODEL, weights, lam / n, backend, sweeps]).fetchone()
        seconds = time.perf_counter() - started
        peak = int(open(f'/proc/{pid}/status').read().split('VmHWM:')[1].split()[0]) * 1024
        error = db.execute('SELECT sqrt(avg((pgad_models.mf(user_id, item_id) - rating)^2)) FROM mf_test').fetchone()[0]
        started = time.perf_counter()
        users, items = db.execute("SELECT count(DISTINCT user_key), count(*) FROM pgad.recommend('mf', "
                                  "ARRAY(SELECT DISTINCT user_id::text FROM mf_train ORDER BY 1 LIMIT 200), 10)"
                                  ).fetchone()
        scored = users * db.execute('SELECT count(DISTINCT item_id) FROM mf_train').fetchone()[0]
        print(f'pgad.recommend: {users} users × all items, top 10: {time.perf_counter() - started:.2f} s, '
              f'{scored / (time.perf_counter() - started) / 1e6:.2f} M item scores a second')
    return seconds, sweeps, converged, final * n, error, peak, fitting.total_seconds() / sweeps


def torch_fit(train, test, users, items, rank, lam, goal, epochs=40, batch=1024):
    import torch
    torch.set_num_threads(1)
    u, i, r = (torch.tensor(a) for a in train)
    n = len(r)
    started = time.perf_counter()
    emb = {k: torch.nn.Embedding(m, d, sparse=True, dtype=torch.float64)
           for k, (m, d) in dict(p=(users, rank), q=(items, rank), bu=(users, 1), bi=(items, 1)).items()}
    torch.manual_seed(1)
    for k in ('p', 'q'):
        torch.nn.init.normal_(emb[k].weight, 0, 0.1)
    for k in ('bu', 'bi'):
        torch.nn.init.zeros_(emb[k].weight)
    mu = torch.nn.Parameter(torch.tensor(float(r.mean())))
    share_u = n / torch.bincount(u, minlength=users).clamp(min=1).double()
    share_i = n / torch.bincount(i, minlength=items).clamp(min=1).double()
    sparse = torch.optim.SparseAdam([e.weight for e in emb.values()], lr=0.01)
    dense = torch.optim.Adam([mu], lr=0.01)
    error = None
    for epoch in range(1, epochs + 1):
        order = torch.randperm(n)
        for start in range(0, n, batch):
            at = order[start:start + batch]
            uu, ii, rr = u[at], i[at], r[at]
            pu, qi, bu, bi = emb['p'](uu), emb['q'](ii), emb['bu'](uu)[:, 0], emb['bi'](ii)[:, 0]
            e = rr - mu - bu - bi - (pu * qi).sum(1)
            penalty = ((pu ** 2).sum(1) + bu ** 2) * share_u[uu] + ((qi ** 2).sum(1) + bi ** 2) * share_i[ii]
            loss = (e @ e + lam / n * penalty.sum()) / len(at)
            sparse.zero_grad()
            dense.zero_grad()
            loss.backward()
            sparse.step()
            dense.step()
        with torch.no_grad():
            P, Q = emb['p'].weight.numpy(), emb['q'].weight.numpy()
            error = rmse(test, float(mu), emb['bu'].weight.numpy()[:, 0], emb['bi'].weight.numpy()[:, 0], P, Q)
        if error <= goal * 1.01:
            break
    return time.perf_counter() - started, epoch, error


def surprise_fit(train, test, rank):
    import pandas
    from surprise import SVD, Dataset, Reader
    started = time.perf_counter()
    frame = pandas.DataFrame({'u': train[0], 'i': train[1], 'r': train[2]})
    data = Dataset.load_from_df(frame, Reader(rating_scale=(float(train[2].min()), float(train[2].max()))))
    model = SVD(n_factors=rank, random_state=1).fit(data.build_full_trainset())
    seconds = time.perf_counter() - started
    predicted = np.array([model.predict(a, b).est for a, b in zip(test[0], test[1])])
    return seconds, float(np.sqrt(np.mean((predicted - test[2]) ** 2)))


def implicit_sweep(train, users, items, rank, lam, sweeps=5, threads=1):
    import scipy.sparse
    import threadpoolctl
    from implicit.als import AlternatingLeastSquares
    threadpoolctl.threadpool_limits(1, 'blas')  # as implicit asks: its threads, not BLAS's
    u, i, r = train
    matrix = scipy.sparse.csr_matrix((1 + r, (u, i)), shape=(users, items))
    model = AlternatingLeastSquares(factors=rank, regularization=lam, iterations=sweeps, random_state=1,
                                    use_gpu=False, num_threads=threads)
    started = time.perf_counter()
    model.fit(matrix, show_progress=False)
    return (time.perf_counter() - started) / sweeps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--users', type=int, default=20000)
    parser.add_argument('--items', type=int, default=5000)
    parser.add_argument('--ratings', type=int, default=540000)
    parser.add_argument('--rank', type=int, default=8)
    parser.add_argument('--lam', type=float, default=5.0)
    parser.add_argument('--backends', nargs='+', default=['auto', 'python'], help="pgad.train's backends to time")
    parser.add_argument('--sweeps', type=int, default=None, help="pgad.train's iterations (default: to converge)")
    parser.add_argument('--peers', nargs='+', default=['als', 'torch', 'surprise', 'implicit'])
    args = parser.parse_args()
    u, i, r, held = generate(args.users, args.items, args.ratings, args.rank)
    with Cluster() as cluster:
        dbname = 'bench_recommend'
        with psycopg.connect(cluster.conninfo('postgres'), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE {dbname}')
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
            db.execute('CREATE EXTENSION pgad CASCADE')
            load(db, 'mf_train', u[~held], i[~held], r[~held])
            load(db, 'mf_test', u[held], i[held], r[held])
        n = int((~held).sum())
        print(f'{n} ratings of {args.users} users × {args.items} items (10 % more held out), rank {args.rank}, '
              f'λ {args.lam}')
        first = None  # the first backend's (seconds a sweep, objective, RMSE): what the peers are set against
        for backend in args.backends:
            seconds, sweeps, converged, f, error, peak, sweep_seconds = pgad_fit(cluster, dbname, n, args.lam,
                                                                                 args.rank, backend, args.sweeps)
            first = first or (sweep_seconds, f, error)
            print(f'pgad.train ({backend:6s})       {seconds:8.2f} s  {sweeps:4d} sweeps  converged {converged}  '
                  f'objective {f:.6f}  held-out RMSE {error:.4f}  peak {peak / 2 ** 20:.0f} MB  '
                  f'{sweep_seconds:.3f} s a sweep (the fit\'s time over its sweeps)')
        sweep_seconds, f, error = first
        with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as db:
            started = time.perf_counter()
            train, test = exported(db, 'mf_train'), exported(db, 'mf_test')
            export = time.perf_counter() - started
        if 'als' in args.peers:
            als_seconds, als_sweeps, als_f, weights = als(*train, args.users, args.items, args.rank, args.lam, f)
            print(f'numpy ALS (reference)       {export + als_seconds:8.2f} s  {als_sweeps:4d} sweeps  objective '
                  f'{als_f:.6f}  held-out RMSE {rmse(test, *weights):.4f}  (export {export:.2f} s)')
            print(f'  pgad / reference objective: {f / als_f:.9f}')
        if 'torch' in args.peers:
            t_seconds, epochs, t_error = torch_fit(train, test, args.users, args.items, args.rank, args.lam, error)
            print(f'PyTorch SparseAdam          {export + t_seconds:8.2f} s  {epochs:4d} epochs  held-out RMSE '
                  f'{t_error:.4f} (to within 1 % of pgad\'s, or 40 epochs)')
        if 'surprise' in args.peers:
            s_seconds, s_error = surprise_fit(train, test, args.rank)
            print(f'scikit-surprise SVD         {export + s_seconds:8.2f} s  20 epochs  held-out RMSE {s_error:.4f}')
        for threads in (1, os.cpu_count()) if 'implicit' in args.peers else ():
            sweep = implicit_sweep(train, args.users, args.items, args.rank, args.lam, threads=threads)
            print(f'implicit ALS, one sweep     {sweep:8.3f} s  on {threads} thread(s)  (pgad: {sweep_seconds:.3f} s a '
                  f'sweep on its default threads, {sweep_seconds / sweep:.1f}×)')


if __name__ == '__main__':
    main()
