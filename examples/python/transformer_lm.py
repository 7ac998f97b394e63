"""A small character-level Transformer language model on Debian's fortunes, DDP and FSDP
over "baton" and "gloo", warm-up or none, Adam or LAMB.

    batonrun -n 2 .venv/bin/python examples/python/transformer_lm.py --out transformer_n2
    batonrun -n 4 .venv/bin/python examples/python/transformer_lm.py --out transformer_n4
    .venv/bin/torchrun --nproc-per-node 2 examples/python/transformer_lm.py --quick

The seeds' second case study, and their advice for big batches (warm-up, a
per-layer normalised step: LAMB). Every configuration trains its own copy of
one initial model on the same batches, steps interleaved:
  baton/ddp, gloo/ddp     DistributedDataParallel (bucketed gradient allreduce);
  baton/fsdp, gloo/fsdp   FSDP2's fully_shard (parameters sharded, all-gathered
                          for forward and backward, gradients reduce-scattered);
all with Adam and warm-up; then, on the first backend with DDP, Adam without
warm-up and LAMB with and without it. Baton and gloo run the same arithmetic
on the same data, so their curves must coincide (up to the rounding of the
reduction order); DDP and FSDP likewise. Prints a Markdown table (step time,
tokens/s, held-out loss) and writes OUT.png, OUT.md and OUT.json.
"""

import argparse
import json
import math
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import cases_common as cc


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76
    minutes", ICLR 2020, Algorithm 2): Adam's bias-corrected step r, plus weight decay, scaled
    per parameter tensor by the trust ratio ||x|| / ||r + wd x|| (1 where either norm is 0)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["step"] += 1
                t, m, v = state["step"], state["m"], state["v"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                r = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + group["eps"])
                if group["weight_decay"]:
                    r.add_(p, alpha=group["weight_decay"])
                w_norm, r_norm = p.norm(), r.norm()
                trust = torch.where((w_norm > 0) & (r_norm > 0), w_norm / r_norm,
                                    torch.ones_like(w_norm))
                p.add_(r * trust, alpha=-group["lr"])
        return loss


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CharLM(nn.Module):
    def __init__(self, vocab, d, layers, heads, ctx):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1),
                             persistent=False)

    def forward(self, x, y):
        h = self.tok(x) + self.pos.weight[:x.shape[1]]
        for b in self.blocks:
            h = b(h, self.mask[:x.shape[1], :x.shape[1]])
        logits = self.head(self.ln(h))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def encode(docs):
    text = "\n".join(docs)
    chars = sorted({c for c in text if c.isprintable() or c == "\n"})
    return chars, {c: i for i, c in enumerate(chars)}


def schedule(step, steps, warmup):
    """Linear warm-up over `warmup` steps (none when 0), then linear decay to a tenth."""
    ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
    return ramp * (1 - 0.9 * step / steps)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="baton,gloo")
    p.add_argument("--corpus", default=cc.FORTUNES)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3, help="Adam's peak learning rate")
    p.add_argument("--lamb-lr", type=float, default=1e-2, help="LAMB's peak learning rate")
    p.add_argument("--warmup", type=int, default=0, help="warm-up steps (default: a tenth)")
    p.add_argument("--no-fsdp", action="store_true")
    p.add_argument("--no-optimizers", action="store_true", help="leave out the optimizer study")
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="transformer", help="writes OUT.md, OUT.json, OUT.png")
    p.add_argument("--quick", action="store_true", help="a short run (the test's)")
    if p.parse_args().quick:  # smaller defaults; options given still win
        p.set_defaults(steps=40, dim=64, layers=1, ctx=32, batch=8, eval_every=10)
    args = p.parse_args()
    args.warmup = args.warmup or max(args.steps // 10, 1)
    backends = args.backends.split(",")
    rank, size, groups = cc.init_groups(backends)

    docs = cc.fortunes(args.corpus)
    chars, index = encode(docs)
    unk = index.get("?", 0)
    def enc(ds):
        return torch.tensor([index.get(c, unk) for c in "\n".join(ds)], dtype=torch.long)
    train = enc([d for i, d in enumerate(docs) if i % 10 != 0])
    held = enc([d for i, d in enumerate(docs) if i % 10 == 0])
    hgen = torch.Generator().manual_seed(args.seed + 2)
    hstart = torch.randint(0, len(held) - args.ctx - 1, (64,), generator=hgen)
    hx = torch.stack([held[s:s + args.ctx] for s in hstart])
    hy = torch.stack([held[s + 1:s + args.ctx + 1] for s in hstart])

    # (label, backend, wrapper, optimizer, warm-up)
    configs = [(f"{b}/ddp adam warm-up", b, "ddp", "adam", True) for b in backends]
    if not args.no_fsdp:
        configs += [(f"{b}/fsdp adam warm-up", b, "fsdp", "adam", True) for b in backends]
    if not args.no_optimizers:
        b = backends[0]
        configs += [(f"{b}/ddp adam none", b, "ddp", "adam", False),
                    (f"{b}/ddp lamb warm-up", b, "ddp", "lamb", True),
                    (f"{b}/ddp lamb none", b, "ddp", "lamb", False)]
    torch.manual_seed(args.seed)
    base = CharLM(len(chars), args.dim, args.layers, args.heads, args.ctx)
    nparams = sum(q.numel() for q in base.parameters())
    runs = []
    for label, b, wrap, opt_name, warm in configs:
        model = CharLM(len(chars), args.dim, args.layers, args.heads, args.ctx)
        model.load_state_dict(base.state_dict())
        if wrap == "ddp":
            model = DDP(model, process_group=groups[b])
        else:
            from torch.distributed.device_mesh import DeviceMesh
            from torch.distributed.fsdp import fully_shard
            mesh = DeviceMesh.from_group(groups[b], "cpu")
            for blk in model.blocks:
                fully_shard(blk, mesh=mesh)
            fully_shard(model, mesh=mesh)
        lr = args.lamb_lr if opt_name == "lamb" else args.lr
        opt = Lamb(model.parameters(), lr=lr) if opt_name == "lamb" else \
            torch.optim.Adam(model.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s, w=warm: schedule(s, args.steps, args.warmup if w else 0))
        runs.append(dict(label=label, backend=b, model=model, opt=opt, sched=sched, times=[],
                         train=[], held=[]))
    if rank == 0:
        print(f"corpus: {len(train)} training characters, {len(held)} held out, {len(chars)} "
              f"symbols; model: {nparams} parameters ({args.layers} layers, d {args.dim}, "
              f"context {args.ctx}); {size} ranks x {args.batch} sequences per step", flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        starts = torch.randint(0, len(train) - args.ctx - 1, (size * args.batch,), generator=gen)
        mine = starts[rank * args.batch:(rank + 1) * args.batch]
        x = torch.stack([train[s:s + args.ctx] for s in mine])
        y = torch.stack([train[s + 1:s + args.ctx + 1] for s in mine])
        for k in range(len(runs)):
            r = runs[(step + k) % len(runs)]
            dist.barrier(group=groups[backends[0]])
            t = time.perf_counter()
            r["opt"].zero_grad()
            loss = r["model"](x, y)
            loss.backward()
            r["opt"].step()
            r["sched"].step()
            r["times"].append(time.perf_counter() - t)
            # The mean over ranks of this step's loss (outside the timed part).
            mean = loss.detach().clone()
            dist.all_reduce(mean, group=groups[r["backend"]])
            r["train"].append((step + 1, mean.item() / size))
            if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
                with torch.no_grad():
                    r["held"].append((step + 1, r["model"](hx, hy).item()))
        if rank == 0 and (step + 1) % max(args.steps // 5, 1) == 0:
            print(f"step {step + 1}: " + ", ".join(f"{r['label']} {r['train'][-1][1]:.3f}"
                                                  for r in runs), flush=True)

    # Every rank's replica of each DDP model (FSDP's shards differ by design).
    digests = torch.tensor([sum(q.detach().double().sum().item() for q in r["model"].parameters())
                            if "/ddp" in r["label"] else 0.0 for r in runs], dtype=torch.float64)
    everyone = [torch.empty_like(digests) for _ in range(size)]
    dist.all_gather(everyone, digests)
    agree = all(torch.equal(e, everyone[0]) for e in everyone)
    if rank != 0:
        dist.destroy_process_group()
        return

    tokens = size * args.batch * args.ctx
    ref = runs[0]
    headers = ["configuration", "step ms", "tokens/s", "train loss (last 10%)", "held-out loss",
               "max |loss - " + ref["label"] + "|"]
    rows = []
    tail = max(args.steps // 10, 1)
    for r in runs:
        ms = cc.median_ms(r["times"])
        last = sum(v for _, v in r["train"][-tail:]) / tail
        same = all(a[0] == b[0] for a, b in zip(r["train"], ref["train"]))
        diff = max(abs(a[1] - b[1]) for a, b in zip(r["train"], ref["train"])) if same else math.nan
        rows.append([r["label"], f"{ms:.1f}", f"{tokens / ms * 1e3:.0f}", f"{last:.4f}",
                     f"{r['held'][-1][1]:.4f}", f"{diff:.1e}"])
    text = (f"character-level Transformer LM on fortunes: {size} ranks, {args.steps} steps of "
            f"{size} x {args.batch} sequences of {args.ctx} characters ({tokens} tokens a step), "
            f"{nparams} parameters, warm-up {args.warmup} steps, peak lr Adam {args.lr:g} / "
            f"LAMB {args.lamb_lr:g} (step ms: median over steps {args.steps // 10 + 1}.."
            f"{args.steps})\n\n" + cc.table(headers, rows) +
            f"\n\nDDP replicas agree on every rank: {agree}")
    print(text, flush=True)
    with open(args.out + ".md", "w", encoding="utf-8") as f:
        f.write(text + "\n")
    with open(args.out + ".json", "w", encoding="utf-8") as f:
        json.dump({"ranks": size, "args": vars(args), "agree": agree, "tokens_per_step": tokens,
                   "runs": {r["label"]: {"train": r["train"], "held": r["held"],
                                         "step_ms": cc.median_ms(r["times"])} for r in runs}},
                  f, indent=1)
    backend_runs = [r for r in runs if r["label"].endswith("adam warm-up")]
    opt_runs = [r for r in runs if r["backend"] == backends[0] and "/ddp" in r["label"]]
    if len(opt_runs) < 2:  # no optimizer study: every configuration's held-out loss
        opt_runs = runs
    style = lambda r: "-" if r["backend"] == backends[0] else "--"  # noqa: E731
    spec = {"title": f"character-level Transformer LM on fortunes, {size} ranks",
            "panels": [
                {"title": "training loss: backends and wrappers", "xlabel": "step",
                 "ylabel": "loss",
                 "series": [{"label": r["label"], "x": [s for s, _ in r["train"]],
                             "y": [v for _, v in r["train"]], "style": style(r)}
                            for r in backend_runs]},
                {"title": "held-out loss" + (": warm-up and optimizer" if opt_runs is not runs
                                             else ""), "xlabel": "step",
                 "ylabel": "loss",
                 "series": [{"label": r["label"], "x": [s for s, _ in r["held"]],
                             "y": [v for _, v in r["held"]]} for r in opt_runs]},
                {"title": "tokens/s (median step)", "kind": "bar",
                 "series": [{"x": [r["label"] for r in backend_runs],
                             "y": [tokens / cc.median_ms(r["times"]) * 1e3
                                   for r in backend_runs]}]}]}
    note = cc.plot(spec, args.out + ".png")
    print(note or f"wrote {args.out}.md, {args.out}.json and {args.out}.png", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
