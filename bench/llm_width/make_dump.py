"""Statistics dumps of one decoder layer at LLM width, written by msprobe 26.2.0: what issues 27 and 32
measure the plugin on (the bare work in bare.py, the plugin's verdicts and time in results_plugin.md).

    nice -n 10 /work/msprobe-venv/bin/python bench/llm_width/make_dump.py llama7b|mixtral [--force]

Run it with the interpreter of msprobe's own virtual environment (../shared/dumps/README.md:
torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"); it does not import the
plugin. The dump lands in bench/llm_width/dumps/<name>/ (git-ignored: dump.json, stack.json,
construct.json as msprobe wrote them in step0/proc<PID>/, moved up); a second call finds it there and
writes nothing. It prints the time it took, the peak RSS and the size of the dump.

Both models: fp32, batch 1, seq 1024 (`SEQ=` to change), one step, forward and backward, no optimiser,
no training (a step at this width takes minutes on two cores): weights drawn as a real init does (normal,
std 0.02; RMSNorm weights 1), token ids and targets uniform over the vocabulary. msprobe dumps at level
L1, task statistics, with an API list and risk level ALL (as tests/data/make/llama_tensor_L1.json) so that
repeat_interleave, expand and gather are kept.

- llama7b: one LLaMA-7B-width layer: d_model 4096, 32 query heads / 8 key-value heads of 128 (LLaMA-2-70B
  and LLaMA-3's GQA ratio at 7B width), SwiGLU MLP 11008, vocabulary 32000. Embedding; RMSNorm written
  out (x.pow(2).mean(-1), rsqrt, the weight's product); RoPE with the angles computed in fp32 at positions
  4000..5023 (cos and sin of arguments in the thousands); q/k/v/o projections without bias on 3-D
  activations; GQA by repeat_interleave; F.scaled_dot_product_attention(is_causal=True); SwiGLU; the final
  RMSNorm; the LM head 4096 -> 32000; cross_entropy plus a z-loss (1e-4 * logsumexp(logits)^2).
  Attention is made non-uniform without training: the q and k projections are drawn with std 0.04
  instead of 0.02, so the scores q.k/sqrt(128) have a standard deviation of about 6.6 instead of 1.6
  (a random layer at std 0.02 attends almost uniformly); the score scale is the weights', no extra op.
- mixtral: the same attention and head, and a Mixtral-width MoE MLP in place of SwiGLU: a router
  4096 -> experts (softmax in fp32, topk 2, the routing weights picked by gather and renormalised), SwiGLU
  experts of width 14336, each expert's tokens picked by gather and its output put back by index_add_.
  Mixtral has 8 experts: 1.4 G parameters in fp32, 5.6 GB and as much again for their gradients, too
  much for this machine's 24 GiB shared by several processes, so this layer has **4 experts** (top-2
  of 4: each expert sees about half the tokens; the shapes of every expert's GEMMs stay Mixtral's).

Measured here (2 shared cores, one step each, 2026-11-28): llama7b, 439 M parameters, 103 entries (55
forward, 48 backward), 57 s wall, peak RSS 4.7 GiB, dump.json 0.1 MiB; mixtral, 1009 M parameters, 172
entries (92 / 80), 123 s wall, peak RSS 9.7 GiB, 0.2 MiB.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
DUMPS = HERE / "dumps"

SEQ = int(os.environ.get("SEQ", "1024"))
VOCAB, D, HEADS, KV_HEADS, HD = 32000, 4096, 32, 8, 128
POS0 = 4000  # RoPE positions offset into the thousands (a long context's tail)
STD, QK_STD = 0.02, 0.04
MODELS = {"llama7b": {"mlp": 11008, "experts": 0}, "mixtral": {"mlp": 14336, "experts": 4, "top": 2}}

APIS = [
    "embedding", "linear", "__mul__", "__rmul__", "__add__", "__truediv__", "__neg__", "outer", "cos", "sin",
    "pow", "mean", "rsqrt", "cat", "repeat_interleave", "expand", "scaled_dot_product_attention", "matmul",
    "softmax", "silu", "cross_entropy", "logsumexp", "topk", "gather", "sum", "index_add_",
]  # fmt: skip


def config(dump_path: Path) -> dict:
    return {
        "task": "statistics",
        "dump_path": str(dump_path),
        "rank": [],
        "step": [],
        "level": "L1",
        "async_dump": False,
        "statistics": {"scope": [], "list": APIS, "data_mode": ["all"], "summary_mode": "statistics"},
        "risk_level": "ALL",
    }


def linear(n_in: int, n_out: int, std: float = STD) -> nn.Linear:
    layer = nn.Linear(n_in, n_out, bias=False)
    nn.init.normal_(layer.weight, std=std)
    return layer


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


def rope(T: int):
    """cos and sin at positions POS0.., the angles in fp32 (as HF computes them)."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    angles = torch.outer(torch.arange(POS0, POS0 + T, dtype=torch.float32), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = linear(D, D, QK_STD), linear(D, KV_HEADS * HD, QK_STD)
        self.v, self.o = linear(D, KV_HEADS * HD), linear(D, D)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, HEADS, HD).transpose(1, 2)
        k = self.k(x).view(B, T, KV_HEADS, HD).transpose(1, 2)
        v = self.v(x).view(B, T, KV_HEADS, HD).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = HEADS // KV_HEADS
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.gate, self.up, self.down = linear(D, width), linear(D, width), linear(width, D)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    """Top-k of n SwiGLU experts, Mixtral's routing: softmax in fp32, topk, renormalised."""

    def __init__(self, width: int, experts: int, top: int) -> None:
        super().__init__()
        self.top = top
        self.router = linear(D, experts)
        self.experts = nn.ModuleList(SwiGLU(width) for _ in range(experts))

    def forward(self, x):
        B, T, _ = x.shape
        h = x.reshape(B * T, D)
        probs = F.softmax(self.router(h), dim=-1, dtype=torch.float32)
        _, chosen = torch.topk(probs, self.top, dim=-1)
        weights = probs.gather(-1, chosen)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            if token.numel() == 0:
                continue
            tokens = h.gather(0, token[:, None].expand(-1, D))
            out.index_add_(0, token, expert(tokens) * weights[token, slot, None])
        return out.view(B, T, D)


class Layer(nn.Module):
    """Embedding, one decoder block, the final norm, the LM head and the loss."""

    def __init__(self, mlp: int, experts: int, top: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        nn.init.normal_(self.tok.weight, std=STD)
        self.norm1, self.norm2, self.norm = RMSNorm(), RMSNorm(), RMSNorm()
        self.attn = Attention()
        self.mlp = MoE(mlp, experts, top) if experts else SwiGLU(mlp)
        self.head = linear(D, VOCAB)

    def forward(self, idx, targets):
        x = self.tok(idx)
        cos, sin = rope(idx.shape[1])
        x = x + self.attn(self.norm1(x), cos, sin)
        x = x + self.mlp(self.norm2(x))
        logits = self.head(self.norm(x))
        ce = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        z = torch.logsumexp(logits, dim=-1)
        return ce + 1e-4 * z.pow(2).mean()


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def make(name: str) -> Path:
    from msprobe.pytorch import PrecisionDebugger, seed_all

    t0, cpu0 = time.time(), time.process_time()
    seed_all(1234, mode=False)
    torch.manual_seed(0)
    model = Layer(**MODELS[name])
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (1, SEQ), generator=g)
    targets = torch.randint(0, VOCAB, (1, SEQ), generator=g)
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params / 1e6:.0f} M parameters, seq {SEQ}, built in {time.time() - t0:.1f}s", flush=True)
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=DUMPS))
    cfg = work / "config.json"
    cfg.write_text(json.dumps(config(work / "out"), indent=2))
    debugger = PrecisionDebugger(config_path=str(cfg))
    debugger.start(model=model)
    loss = model(idx, targets)
    loss.backward()
    debugger.stop()
    debugger.step()
    (proc,) = (work / "out" / "step0").glob("proc*")
    target = DUMPS / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.move(str(proc), str(target))
    shutil.rmtree(work)
    entries = json.loads((target / "dump.json").read_text())["data"]
    wall, cpu = time.time() - t0, time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"{name}: loss {float(loss.detach()):.3f} (log vocab {math.log(VOCAB):.3f}); {len(entries)} entries; "
        f"{wall:.0f}s wall, {cpu:.0f}s CPU, peak RSS {peak:.1f} GiB, dump {folder_size(target) / 2**20:.1f} MiB"
    )
    return target / "dump.json"


def main(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("--")]
    if not names or any(n not in MODELS for n in names):
        print(f"usage: make_dump.py {'|'.join(MODELS)} [--force]", file=sys.stderr)
        return 2
    DUMPS.mkdir(exist_ok=True)
    for name in names:
        found = DUMPS / name / "dump.json"
        if found.is_file() and "--force" not in argv:
            print(f"{name}: reused {found} ({folder_size(found.parent) / 2**20:.1f} MiB); --force writes it again")
            continue
        print(make(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
