"""word2vec (skip-gram, negative sampling) on Debian's fortunes, three ways to synchronise.

    batonrun -n 2 .venv/bin/python examples/python/word2vec.py          # baton and gloo
    .venv/bin/torchrun --nproc-per-node 2 examples/python/word2vec.py --quick    # a short run

The case study the seeds close with: an embedding model whose step touches a
small part of its rows (about 2100 of 14 250 here). Each configuration trains its own model
from the same initial weights on the same batches, the steps of all of them
interleaved, over "baton" and over "gloo":
  dense   the full gradient of both embedding tables in one allreduce (what DDP does);
  sparse  each rank's touched rows and their indices (nn.Embedding(sparse=True)'s
          gradient, coalesced) to every rank by one variable-size allgather
          (torch's all_gather with per-rank sizes, which "baton" runs as
          batonAllGatherV; gloo refuses uneven sizes, so there the rows are
          padded to the largest rank's count);
  ps      a parameter server sharded over the ranks (row r lives on rank r % n):
          each step pulls the rows the batch touches from their owners and
          pushes their gradients back (all_to_all_single with split sizes), and
          the owners apply the update; no rank holds the whole model.
All three apply plain SGD to the same averaged gradient, so they train the same
model up to the rounding of different summation orders; the end of the run
says by how much they differ. Prints a Markdown table (bytes and time per step,
held-out loss, nearest neighbours) and writes OUT.png, OUT.md and OUT.json.
"""

import argparse
import collections
import json
import re
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import cases_common as cc

MODES = ["dense", "sparse", "ps"]
PROBES = ["money", "love", "computer", "god", "war", "woman"]


def build_corpus(args):
    """(vocab, train ids, held-out ids, doc ids of each, unigram counts): every rank alike."""
    docs = cc.fortunes(args.corpus)
    tok = [re.findall(r"[a-z]+(?:'[a-z]+)?", d.lower()) for d in docs]
    held = [t for i, t in enumerate(tok) if i % 10 == 0]  # every tenth fortune held out
    train = [t for i, t in enumerate(tok) if i % 10 != 0]
    counts = collections.Counter(w for t in train for w in t)
    words = [w for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))
             if c >= args.min_count][:args.vocab]
    index = {w: i for i, w in enumerate(words)}
    freq = np.array([counts[w] for w in words], dtype=np.float64)
    rng = np.random.default_rng(args.seed)
    keep_p = np.minimum(1.0, np.sqrt(args.subsample / (freq / freq.sum())) +
                        args.subsample / (freq / freq.sum()))

    def ids(texts):  # in-vocabulary ids, frequent words subsampled (word2vec's rule)
        flat, doc = [], []
        for d, t in enumerate(texts):
            for w in t:
                i = index.get(w)
                if i is not None and rng.random() < keep_p[i]:
                    flat.append(i)
                    doc.append(d)
        return np.array(flat, dtype=np.int64), np.array(doc, dtype=np.int64)

    return words, ids(train), ids(held), freq


def pairs(flat, doc, window):
    """(center, context) for every offset 1..window either side, within one fortune."""
    cs, os_ = [], []
    for off in range(1, window + 1):
        same = doc[off:] == doc[:-off]
        cs += [flat[off:][same], flat[:-off][same]]
        os_ += [flat[:-off][same], flat[off:][same]]
    return np.concatenate(cs), np.concatenate(os_)


def sgns_loss(v, u, un):
    """Mean over the batch of -log s(u.v) - sum_k log s(-u_k.v)."""
    pos = F.logsigmoid((v * u).sum(-1))
    neg = F.logsigmoid(-torch.bmm(un, v.unsqueeze(-1)).squeeze(-1)).sum(-1)
    return -(pos + neg).mean()


class Model:
    """Both tables in one (2V, D) tensor: rows 0..V-1 the input vectors, V..2V-1 the output ones."""

    def __init__(self, init, sparse):
        self.w = torch.nn.Parameter(init.clone())
        self.sparse = sparse
        self.opt = None

    def loss(self, c, o, n, vocab):
        emb = lambda i: F.embedding(i, self.w, sparse=self.sparse)  # noqa: E731
        return sgns_loss(emb(c), emb(o + vocab), emb(n + vocab))


class Stats:
    def __init__(self):
        self.step, self.sync, self.sent, self.recv, self.rows = [], [], [], [], []
        self.curve = []


def step_dense(m, g, size, batch, vocab, lr, st):
    c, o, n = batch
    m.w.grad = None
    loss = m.loss(c, o, n, vocab)
    loss.backward()
    t = time.perf_counter()
    dist.all_reduce(m.w.grad, group=g)  # one bucket, as DDP would send it
    st.sync.append(time.perf_counter() - t)
    nbytes = m.w.grad.numel() * 4
    st.sent.append(nbytes)
    st.recv.append(nbytes)
    st.rows.append(m.w.shape[0])
    with torch.no_grad():
        m.w -= lr / size * m.w.grad
    return loss


def gather_uneven(part, group, backend, size):
    """Every rank's 1-D part (sizes may differ) in rank order: one all_gather of the sizes, then
    the parts themselves, unevenly on baton (batonAllGatherV), padded to the largest on gloo."""
    n = torch.tensor([part.numel()], dtype=torch.int64)
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(counts, n, group=group)
    counts = [int(x) for x in counts]
    if backend == "baton":
        outs = [torch.empty(k, dtype=part.dtype) for k in counts]
        dist.all_gather(outs, part, group=group)
        return outs, 8 * size + sum(counts) * part.element_size()
    top = max(counts)
    padded = torch.zeros(top, dtype=part.dtype)
    padded[:part.numel()] = part
    outs = [torch.empty(top, dtype=part.dtype) for _ in range(size)]
    dist.all_gather(outs, padded, group=group)
    return [o[:k] for o, k in zip(outs, counts)], 8 * size + top * size * part.element_size()


def step_sparse(m, g, backend, size, batch, vocab, lr, st):
    c, o, n = batch
    m.w.grad = None
    loss = m.loss(c, o, n, vocab)
    loss.backward()
    grad = m.w.grad.coalesce()  # this rank's touched rows, duplicates summed
    idx, rows = grad.indices()[0], grad.values()
    dim = rows.shape[1]
    t = time.perf_counter()
    # Indices and rows travel as the bytes of one buffer: one variable-size allgather.
    part = torch.cat([idx.contiguous().view(torch.uint8),
                      rows.contiguous().view(-1).view(torch.uint8)])
    parts, got = gather_uneven(part, g, backend, size)
    st.sync.append(time.perf_counter() - t)
    st.sent.append(8 + part.numel())
    st.recv.append(got)
    st.rows.append(idx.numel())
    all_idx, all_rows = [], []
    for p in parts:
        k = p.numel() // (8 + 4 * dim)
        all_idx.append(p[:8 * k].view(torch.int64))
        all_rows.append(p[8 * k:].view(torch.float32).view(k, dim))
    total = torch.sparse_coo_tensor(torch.cat(all_idx).unsqueeze(0), torch.cat(all_rows), m.w.shape,
                                    check_invariants=False).coalesce()
    with torch.no_grad():
        m.w.index_add_(0, total.indices()[0], total.values(), alpha=-lr / size)
    return loss


class ParamServer:
    """The (2V, D) table sharded over the ranks: global row r at local row r // n of rank r % n."""

    def __init__(self, init, rank, size):
        self.shard = init[rank::size].clone()
        self.rows = init.shape[0]
        self.rank, self.size = rank, size

    def full(self, group):
        """The whole table on every rank (for evaluation: not part of training)."""
        full = torch.zeros(self.rows, self.shard.shape[1])
        full[self.rank::self.size] = self.shard
        dist.all_reduce(full, group=group)
        return full

    def step(self, g, batch, vocab, lr, st):
        c, o, n = batch
        size, dim = self.size, self.shard.shape[1]
        wanted = torch.unique(torch.cat([c, o + vocab, n.reshape(-1) + vocab]))  # sorted
        owner = wanted % size
        order = torch.argsort(owner, stable=True)
        req = wanted[order]
        send_counts = torch.bincount(owner, minlength=size)
        t = time.perf_counter()
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=g)
        sc, rc = send_counts.tolist(), recv_counts.tolist()
        asked = torch.empty(sum(rc), dtype=torch.int64)
        dist.all_to_all_single(asked, req, rc, sc, group=g)  # pull: which rows
        local = asked // size
        got = torch.empty(req.numel(), dim)
        dist.all_to_all_single(got, self.shard[local], sc, rc, group=g)  # pull: the rows
        pull = time.perf_counter() - t
        w = torch.empty(wanted.numel(), dim)
        w[order] = got
        w.requires_grad_(True)
        pos = lambda i: torch.searchsorted(wanted, i)  # noqa: E731
        loss = sgns_loss(w[pos(c)], w[pos(o + vocab)], w[pos(n + vocab)])
        loss.backward()
        t = time.perf_counter()
        pushed = torch.empty(local.numel(), dim)
        dist.all_to_all_single(pushed, w.grad[order], rc, sc, group=g)  # push the gradients
        st.sync.append(pull + time.perf_counter() - t)
        with torch.no_grad():  # the owner's update, the sum over ranks in rank order
            grad = torch.zeros_like(self.shard).index_add_(0, local, pushed)
            self.shard -= lr / size * grad
        st.sent.append(8 * size + 8 * req.numel() + 4 * dim * (asked.numel() + req.numel()))
        st.recv.append(8 * size + 8 * asked.numel() + 4 * dim * (req.numel() + asked.numel()))
        st.rows.append(wanted.numel())
        return loss


def held_out_loss(w, held, vocab):
    c, o, n = held
    with torch.no_grad():
        return sgns_loss(w[c], w[o + vocab], w[n + vocab]).item()


def neighbours(w, words, vocab, k=4):
    index = {x: i for i, x in enumerate(words)}
    emb = F.normalize(w[:vocab], dim=1)
    out = {}
    for p in PROBES:
        if p in index:
            sim = emb @ emb[index[p]]
            sim[index[p]] = -2
            out[p] = [words[i] for i in torch.topk(sim, k).indices.tolist()]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="baton,gloo")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--corpus", default=cc.FORTUNES)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=512,
                   help="(center, context) pairs per rank per step")
    p.add_argument("--dim", type=int, default=50)
    p.add_argument("--vocab", type=int, default=20000, help="at most this many words")
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--window", type=int, default=3)
    p.add_argument("--negatives", type=int, default=5)
    p.add_argument("--subsample", type=float, default=1e-3)
    p.add_argument("--lr", type=float, default=None, help="SGD step on the mean gradient "
                   "(default 100 x the global batch / 1024), decaying linearly to 0")
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="word2vec", help="writes OUT.md, OUT.json, OUT.png")
    p.add_argument("--quick", action="store_true", help="a short run (the test's)")
    if p.parse_args().quick:  # smaller defaults; options given still win
        p.set_defaults(steps=60, vocab=3000, dim=32, eval_every=10)
    args = p.parse_args()
    backends, modes = args.backends.split(","), args.modes.split(",")
    rank, size, groups = cc.init_groups(backends)
    if args.lr is None:
        args.lr = 100.0 * args.batch * size / 1024

    t0 = time.perf_counter()
    words, (tr_flat, tr_doc), (he_flat, he_doc), freq = build_corpus(args)
    vocab = len(words)
    centers, contexts = pairs(tr_flat, tr_doc, args.window)
    perm = np.random.default_rng(args.seed + 1).permutation(len(centers))
    centers, contexts = torch.from_numpy(centers[perm]), torch.from_numpy(contexts[perm])
    noise = torch.from_numpy(np.cumsum(freq ** 0.75) / np.sum(freq ** 0.75))

    def negatives(gen, count):
        return torch.searchsorted(noise, torch.rand(count, generator=gen, dtype=torch.float64)
                                  ).clamp_(max=vocab - 1)

    hc, ho = pairs(he_flat, he_doc, args.window)
    take = np.random.default_rng(args.seed + 2).permutation(len(hc))[:20000]
    hgen = torch.Generator().manual_seed(args.seed + 3)
    held = (torch.from_numpy(hc[take]), torch.from_numpy(ho[take]),
            negatives(hgen, len(take) * args.negatives).view(len(take), args.negatives))
    if rank == 0:
        print(f"corpus: {vocab} words, {len(tr_flat)} training tokens after subsampling, "
              f"{len(centers)} training pairs, {len(take)} held-out pairs; "
              f"prepared in {time.perf_counter() - t0:.1f} s", flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    init = torch.cat([(torch.rand(vocab, args.dim, generator=gen) - 0.5) / args.dim,
                      torch.zeros(vocab, args.dim)])
    configs = [(b, m) for b in backends for m in modes]
    models = {cfg: (ParamServer(init, rank, size) if cfg[1] == "ps" else
                    Model(init, sparse=cfg[1] == "sparse")) for cfg in configs}
    stats = {cfg: Stats() for cfg in configs}

    def weights(cfg):
        m = models[cfg]
        return m.full(groups[cfg[0]]) if cfg[1] == "ps" else m.w.detach()

    glob = args.batch * size
    for step in range(args.steps):
        start = (step * glob) % (len(centers) - glob)
        sl = slice(start + rank * args.batch, start + (rank + 1) * args.batch)
        ngen = torch.Generator().manual_seed(args.seed * 1000003 + step * 101 + rank)
        batch = (centers[sl], contexts[sl],
                 negatives(ngen, args.batch * args.negatives).view(args.batch, args.negatives))
        lr = args.lr * (1 - step / args.steps)  # word2vec's linear decay
        # Interleaved, in an order that turns each step, so no configuration always goes first.
        for k in range(len(configs)):
            cfg = configs[(step + k) % len(configs)]
            b, m = cfg
            g = groups[b]
            dist.barrier(group=groups[backends[0]])
            t = time.perf_counter()
            if m == "dense":
                loss = step_dense(models[cfg], g, size, batch, vocab, lr, stats[cfg])
            elif m == "sparse":
                loss = step_sparse(models[cfg], g, b, size, batch, vocab, lr, stats[cfg])
            else:
                loss = models[cfg].step(g, batch, vocab, lr, stats[cfg])
            stats[cfg].step.append(time.perf_counter() - t)
            if (step + 1) % args.eval_every == 0 or step == 0:
                stats[cfg].curve.append((step + 1, loss.item(),
                                         held_out_loss(weights(cfg), held, vocab)))
        if rank == 0 and (step + 1) % max(args.steps // 6, 1) == 0:
            print(f"step {step + 1}: held-out loss " + ", ".join(
                f"{b}/{m} {stats[(b, m)].curve[-1][2]:.4f}" for b, m in configs), flush=True)

    final = {cfg: weights(cfg).clone() for cfg in configs}
    ref = final[configs[0]]
    scale = ref.abs().max().item()
    diffs = {f"{b}/{m}": (final[(b, m)] - ref).abs().max().item() for b, m in configs}
    # Every rank's replica: a digest of each model compared over the ranks.
    digest = torch.tensor([final[cfg].double().sum().item() for cfg in configs],
                          dtype=torch.float64)
    everyone = [torch.empty_like(digest) for _ in range(size)]
    dist.all_gather(everyone, digest)
    agree = all(torch.equal(e, everyone[0]) for e in everyone)
    if rank != 0:
        dist.destroy_process_group()
        return

    kib = lambda xs: sum(xs) / len(xs) / 1024  # noqa: E731
    headers = ["backend", "sync", "rows/step", "sent KiB/step", "recv KiB/step", "sync ms",
               "step ms", "held-out loss", "max |w - " + "/".join(configs[0]) + "|"]
    rows = []
    for cfg in configs:
        s = stats[cfg]
        rows.append([cfg[0], cfg[1], f"{sum(s.rows) / len(s.rows):.0f}", f"{kib(s.sent):.1f}",
                     f"{kib(s.recv):.1f}", f"{cc.median_ms(s.sync):.2f}",
                     f"{cc.median_ms(s.step):.2f}",
                     f"{s.curve[-1][2]:.4f}", f"{diffs[cfg[0] + '/' + cfg[1]]:.2e}"])
    nn_words = neighbours(final[configs[0]], words, vocab)
    text = (f"word2vec on fortunes: {size} ranks, {args.steps} steps of {args.batch} pairs per "
            f"rank, "
            f"vocabulary {vocab}, dimension {args.dim}, {args.negatives} negatives, lr {args.lr:g} "
            f"(medians over steps {args.steps // 10 + 1}..{args.steps}; sent/recv: bytes handed "
            f"to / returned by the collectives per rank)\n\n" + cc.table(headers, rows) +
            f"\n\nlargest weight {scale:.3f}; replicas agree on every rank: {agree}\n\n"
            "nearest neighbours (cosine, input vectors, " + "/".join(configs[0]) + "):\n" +
            "\n".join(f"- {w}: {', '.join(v)}" for w, v in nn_words.items()))
    print(text, flush=True)
    with open(args.out + ".md", "w", encoding="utf-8") as f:
        f.write(text + "\n")
    result = {"ranks": size, "args": vars(args), "agree": agree, "max_abs_diff": diffs,
              "scale": scale, "neighbours": nn_words,
              "configs": {f"{b}/{m}": {"curve": stats[(b, m)].curve,
                                       "step_ms": cc.median_ms(stats[(b, m)].step),
                                       "sync_ms": cc.median_ms(stats[(b, m)].sync),
                                       "sent_kib": kib(stats[(b, m)].sent),
                                       "recv_kib": kib(stats[(b, m)].recv)}
                          for b, m in configs}}
    with open(args.out + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    names = [f"{b}/{m}" for b, m in configs]
    spec = {"title": f"word2vec on fortunes, {size} ranks (dense allreduce vs sparse allgatherv "
                     f"vs parameter server)",
            "panels": [
                {"title": "held-out loss", "xlabel": "step", "ylabel": "loss",
                 "series": [{"label": nm, "x": [c[0] for c in stats[cfg].curve],
                             "y": [c[2] for c in stats[cfg].curve],
                             "style": "-" if cfg[0] == backends[0] else "--"}
                            for nm, cfg in zip(names, configs)]},
                {"title": "median step time (ms)", "kind": "bar",
                 "series": [{"x": names, "y": [cc.median_ms(stats[cfg].step) for cfg in configs]}]},
                {"title": "KiB per rank per step (sent + received)", "kind": "bar",
                 "series": [{"x": names, "y": [kib(stats[cfg].sent) + kib(stats[cfg].recv)
                                                for cfg in configs]}]}]}
    note = cc.plot(spec, args.out + ".png")
    print(note or f"wrote {args.out}.md, {args.out}.json and {args.out}.png", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
