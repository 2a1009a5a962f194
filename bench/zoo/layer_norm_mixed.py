"""PyTorch's CPU layer_norm with a bf16 input and an fp32 weight and bias (what CPU autocast hands it):
its fp32 weight and bias gradients against float64, and a bf16 serial sum of the bias gradient
(bench/studies/clean_dumps.md, bert_amp).   python bench/zoo/layer_norm_mixed.py"""
import torch, torch.nn.functional as F
torch.manual_seed(0)
N, C = 32, 48
x = torch.randn(N, C).bfloat16().requires_grad_()
w = (torch.randn(C)*0.1+1).requires_grad_()
b = torch.randn(C).requires_grad_()
g = torch.randn(N, C).bfloat16()
y = F.layer_norm(x, (C,), w, b, 1e-12)
print("out", y.dtype)
y.backward(g)
x64 = x.detach().double().requires_grad_(); w64 = w.detach().double().requires_grad_(); b64 = b.detach().double().requires_grad_()
y64 = F.layer_norm(x64, (C,), w64, b64, 1e-12); y64.backward(g.double())
def rel(a, r): return ((a.double()-r).abs().max()/r.abs().max()).item()
print("dw", rel(w.grad, w64.grad), "db", rel(b.grad, b64.grad))
print("dw is bf16 representable:", torch.equal(w.grad, w.grad.bfloat16().float()), "db:", torch.equal(b.grad, b.grad.bfloat16().float()))
print("db vs round(bf16(sum))", rel(b64.grad.bfloat16(), b64.grad))
# hypothesis: bf16 accumulation of g over rows
acc = torch.zeros(C, dtype=torch.bfloat16)
for i in range(N): acc = acc + g[i]
print("db bf16 serial acc", rel(acc, b64.grad), "equal to kernel?", torch.equal(acc.float(), b.grad))
print(b.grad[:6], b64.grad[:6])
