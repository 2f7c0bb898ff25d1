"""The rule for numeric tests: compare in float64, under two summation orders.

Two code paths that compute the same function (a batch and its rows alone, a KV cache and a full pass, a shared
prompt head and each prompt whole) agree in float32 only up to rounding, and the rounding depends on the order in
which the CPU's kernels sum: another machine (AVX2 or AVX-512 kernels) or another thread count gives another order.
A float32 tolerance picked on one machine is therefore a guess about the others (a 1e-4 bound on gradients held on
one CPU and failed 4 / 4 on another). In float64 the same function agrees to ~1e-13, in any order, while a real
defect (a shifted position, a pad token that leaks, a gradient that misses a row) moves results by more than 1e-6:
`SAME` sits between the two with three orders of magnitude of room each way.

A float64 model is not float64 throughout by itself: transformers computes RMSNorm and the rotary embedding in
float32 whatever the weights' dtype, so every layer rounds its input to float32 again, and a 1e-16 difference in
the order of a sum can flip one such rounding. Measured on SmolLM2 with random LoRA adapters (the shared-prompt
test's gradients, |g| ≤ 4): float32 paths differ by 2.3e-4 (and by 7.9e-5 between 1 and 2 threads), float64 weights
by 8.0e-7, `float64_throughout` by 8.4e-14.

`summation_order` runs a test once per thread count in `THREADS`, so an order-dependent check fails on this machine,
not on a user's.
"""

from __future__ import annotations

import pytest

SAME = {"rtol": 1e-9, "atol": 1e-9}
"""float64 tolerance for "the same function": float64's unit roundoff is 1.1e-16; sums of ~10^4 terms of size ≤ 10
(a 135M model's logits, its LoRA gradients) stay below 1e-11 in any order."""
THREADS = (1, 2)


@pytest.fixture(params=THREADS, ids=lambda n: f"{n}-thread")
def summation_order(request: pytest.FixtureRequest):
    """torch's intra-op thread count for one test: each count splits the reductions differently."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def float64_throughout(model):
    """`model` (float64 weights) with its RMSNorms and rotary embeddings computing in float64 as well, in place.

    Each such module gets a subclass of its own class whose `forward` stays in float64 (an instance attribute would
    not do: transformers drops those when the model switches between train and eval). Refuses a model where it
    finds neither kind: a renamed class must fail here, not loosen the checks silently."""
    torch = pytest.importorskip("torch")

    def norm(self, hidden):
        return self.weight * (hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rotary(self, x, position_ids):
        angles = position_ids[..., None].to(torch.float64) * self.inv_freq.to(torch.float64)
        both = torch.cat((angles, angles), dim=-1)
        return (both.cos() * self.attention_scaling).to(x.dtype), (both.sin() * self.attention_scaling).to(x.dtype)

    found = set()
    for module in model.modules():
        kind = type(module)
        for suffix, forward in (("RMSNorm", norm), ("RotaryEmbedding", rotary)):
            if kind.__name__.endswith(suffix):
                module.__class__ = _float64_classes.setdefault(kind, type(f"Float64{kind.__name__}", (kind,), {}))
                module.__class__.forward = forward
                found.add(suffix)
    if found != {"RMSNorm", "RotaryEmbedding"} or model.dtype != torch.float64:
        raise AssertionError(f"not a float64 Llama-like model: found {sorted(found)}, dtype {model.dtype}")
    return model


_float64_classes: dict[type, type] = {}
