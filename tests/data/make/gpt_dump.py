"""A small GPT of realistic width for tests/data/gpt_<dtype>: d_model 256, 4 heads of 64, MLP 1024,
one block, vocabulary 64, learnt positions. Trained first (fp32, AdamW, a synthetic copy task) so that
attention is no longer uniform, then cast to the dump's dtype and dumped for one step (forward and
backward, no optimiser) by msprobe 26.2.0 at level L1 with an API list (gpt_tensor_L1.json): every API of the
step that the default risk level keeps (views, transposes and casts left out) except the fused q/k/v linear,
Functional.linear.0, whose 256x768 weight would take 4 MB over the three dtypes and which is a K=256
linear like proj (linear.1) and fc1 (linear.2).

    DTYPE=fp32|bf16|fp16 SEQ=48 python gpt_dump.py gpt_tensor_L1.json      # the whole step
    DTYPE=bf16 SEQ=512 python gpt_dump.py gpt_tensor_L1_512.json           # last chunk's attention only

bf16 and fp16 are the model cast (model.to(dtype)): every API runs in that dtype on the CPU, whose
kernels accumulate in fp32. Attention runs over query chunks of CHUNK rows (a memory-saving causal
attention; with SEQ=48 one chunk of 48): at SEQ=512 each chunk's softmax rows run up to 512 keys, and
the 512 config's list keeps only the last chunk's softmax (16 rows of 497 to 512 keys per head), to keep
the dump small.
"""
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger, seed_all

t0 = time.time()
cfg = sys.argv[1]
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[os.environ.get("DTYPE", "fp32")]
SEQ = int(os.environ.get("SEQ", "48"))
BATCH = int(os.environ.get("BATCH", "1"))
CHUNK = int(os.environ.get("CHUNK", str(SEQ if SEQ <= 64 else 16)))
VOCAB, D, HEADS, MLP, MAXLEN = 64, 256, 4, 1024, 512
seed_all(1234, mode=False)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, MLP), nn.Linear(MLP, D)

    def attention(self, x, B, chunk):
        T = x.shape[0] // B
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)  # (B*T, D) each
        q, k, v = (t.view(B, T, HEADS, D // HEADS).transpose(1, 2).reshape(B * HEADS, T, D // HEADS)
                   for t in (q, k, v))
        outs = []
        for start in range(0, T, chunk):  # causal: a query chunk sees the keys up to its end
            end = min(start + chunk, T)
            scores = torch.matmul(q[:, start:end], k[:, :end].transpose(-2, -1)) * (D // HEADS) ** -0.5
            future = torch.ones(end - start, end, dtype=torch.bool).triu(start + 1)
            weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
            outs.append(torch.matmul(weights, v[:, :end]))
        y = torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]
        return self.proj(y.view(B, HEADS, T, D // HEADS).transpose(1, 2).reshape(B * T, D))

    def forward(self, x, B, chunk):
        x = x + self.attention(x, B, chunk)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(MAXLEN, D)
        self.block, self.ln_f, self.head = Block(), nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx, targets, chunk):
        B, T = idx.shape
        # Token-major 2-D activations (B*T, D), as Megatron lays them out: linear runs as one addmm,
        # whose input, weight and bias gradients msprobe records (3-D inputs record an inner node).
        x = (self.tok(idx) + self.pos(torch.arange(T))).view(B * T, D)
        logits = self.head(self.ln_f(self.block(x, B, chunk)))
        return F.cross_entropy(logits, targets.view(-1))


def batch(generator, B, T):
    """A copy task: a random stretch of 16 tokens repeated, shifted by one for the targets."""
    pattern = torch.randint(0, VOCAB, (B, 16), generator=generator)
    seq = pattern.repeat(1, (T + 1) // 16 + 1)[:, : T + 1]
    noise = torch.rand(seq.shape, generator=generator) < 0.1
    seq = torch.where(noise, torch.randint(0, VOCAB, seq.shape, generator=generator), seq)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


model = GPT()
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(200):
    idx, targets = batch(g, 8, 48 if step % 4 else 128)
    loss = model(idx, targets, 128)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained, loss %.3f" % float(loss))

if SEQ < MAXLEN:  # a model of context SEQ: its position table stops there (and the dump stays small)
    model.pos = nn.Embedding.from_pretrained(model.pos.weight[:SEQ].detach().clone(), freeze=False)
model = model.to(DTYPE)
model.zero_grad()
debugger = PrecisionDebugger(config_path=cfg)
idx, targets = batch(g, BATCH, SEQ)
debugger.start(model=model)
loss = model(idx, targets, CHUNK)
loss.backward()
debugger.stop()
debugger.step()
print(os.environ.get("DTYPE", "fp32"), "seq", SEQ, "loss %.3f" % float(loss), "done in %.1fs" % (time.time() - t0))
