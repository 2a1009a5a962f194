"""A statistics dump of a 24-layer decoder, written by msprobe 26.2.0: what `bench.filter.speed`
measures --msprobe-filter on (msprobe's `acc_check -f`).

    nice -n 10 /work/msprobe-venv/bin/python bench/filter/make_dump.py [--force]

Run it with the interpreter of msprobe's own virtual environment (../shared/dumps/README.md:
torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"); it does not import the
plugin. The dump lands in bench/filter/dumps/llama24/ (git-ignored: dump.json, stack.json,
construct.json as msprobe wrote them in step0/proc<PID>/, moved up); a second call finds it there and
writes nothing. It prints the time it took and the size of the dump.

The model: a LLaMA-style decoder as Hugging Face's LLaMA was written up to transformers 4.35, fp32, 24
layers of d_model 256, 4 heads of 64, SwiGLU MLP 688, vocabulary 1000, batch 2, sequence 64; one
training step (forward, cross-entropy, backward), no optimiser. RMSNorm written out (x.pow(2).mean(-1),
rsqrt, the weight's product); each layer's attention computes its rotary cos and sin from the position
ids (arange, outer product, cat, cos, sin: the same values in every layer), applies them with
rotate_half, and attends with an explicit causal mask built once (matmul, scale, add the mask, softmax
in fp32, matmul). Weights drawn as a real init does (normal, std 0.02; RMSNorm weights 1), token ids
and targets uniform over the vocabulary. msprobe dumps at level L1, task statistics, summary_mode
statistics, with no API list and its default risk level: what a user's config.json writes.
"""

from __future__ import annotations

import json
import os
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
NAME = "llama24"
LAYERS, D, HEADS, MLP, VOCAB, BATCH, SEQ = 24, 256, 4, 688, 1000, 2, 64
HD = D // HEADS


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class Rotary(nn.Module):
    """transformers' LlamaRotaryEmbedding before 4.36: cos and sin from the position ids, in every layer."""

    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)

    def forward(self, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.arange(seq_len, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.rotary = Rotary(HD)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, HEADS, HD).transpose(1, 2)
        k = self.k_proj(x).view(b, s, HEADS, HD).transpose(1, 2)
        v = self.v_proj(x).view(b, s, HEADS, HD).transpose(1, 2)
        cos, sin = self.rotary(s)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(2, 3)) / HD**0.5 + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, D)
        return self.o_proj(out)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_norm, self.post_norm = RMSNorm(D), RMSNorm(D)
        self.attn = Attention()
        self.gate, self.up = nn.Linear(D, MLP, bias=False), nn.Linear(D, MLP, bias=False)
        self.down = nn.Linear(MLP, D, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), mask)
        h = self.post_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        mask = torch.full((s, s), torch.finfo(torch.float32).min).triu(1)[None, None]
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.norm(x))


def write(target: Path) -> None:
    from msprobe.pytorch import PrecisionDebugger, seed_all

    seed_all(1234, mode=False)
    torch.manual_seed(0)
    model = Decoder()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    targets = torch.randint(0, VOCAB, (BATCH, SEQ))
    with tempfile.TemporaryDirectory() as work:
        config = {
            "task": "statistics",
            "dump_path": work,
            "rank": [],
            "step": [],
            "level": "L1",
            "async_dump": False,
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
        }
        config_path = Path(work) / "config.json"
        config_path.write_text(json.dumps(config))
        debugger = PrecisionDebugger(config_path=str(config_path))
        debugger.start()
        logits = model(ids)
        F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1)).backward()
        debugger.stop()
        debugger.step()
        written = next(Path(work).glob("step0/*/dump.json")).parent
        target.mkdir(parents=True)
        for name in ("dump.json", "stack.json", "construct.json"):
            if (written / name).is_file():
                shutil.copy(written / name, target / name)


def main() -> None:
    target = DUMPS / NAME
    if target.exists() and "--force" not in sys.argv:
        print(f"{target} exists: nothing written (--force writes it again)")
        return
    if target.exists():
        shutil.rmtree(target)
    start = time.perf_counter()
    write(target)
    entries = json.loads((target / "dump.json").read_text())["data"]
    forward = sum(1 for name in entries if name.endswith(".forward"))
    size = (target / "dump.json").stat().st_size / 2**20
    print(
        f"{target}: {len(entries)} entries ({forward} forward, {len(entries) - forward} backward), "
        f"dump.json {size:.1f} MiB, written in {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
