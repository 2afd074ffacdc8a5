"""A mixture of experts as onnxruntime's MoE and QMoE schemas define it,
token by token in float64: the reference the MoE import tests compare
with where onnxruntime's CPU kernel refuses a form or departs from its
schema."""

import numpy as np


def moe_reference(x, logits, w, k, normalize, activation, fusion=0,
                  alpha=1.0, beta=0.0, limit=None):
    """`w`: the experts' float weights `fc1`, `fc2`, `fc3` ([E, out, in])
    and biases `fc1_b`, `fc2_b`, `fc3_b` ([E, out]) where the model has
    them; the router's softmax over `logits`, its top `k`, renormalized
    with `normalize`; `fusion` 1 pairs, 2 halves, 0 fc3 (swiglu)."""
    x = np.asarray(x, np.float64)
    logits = np.asarray(logits, np.float64)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)

    def bias(name, e):
        return w[name][e] if name in w else 0

    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        order = np.argsort(-p[t], kind="stable")[:k]
        weights = p[t, order]
        if normalize:
            weights = weights / weights.sum()
        for e, weight in zip(order, weights):
            h = w["fc1"][e] @ x[t] + bias("fc1_b", e)
            if activation == "swiglu":
                if fusion == 1:
                    g, u = h[0::2], h[1::2]
                elif fusion == 2:
                    g, u = np.split(h, 2)
                else:
                    g, u = h, w["fc3"][e] @ x[t] + bias("fc3_b", e)
                if limit is not None:
                    g, u = np.minimum(g, limit), np.clip(u, -limit, limit)
                a = g / (1 + np.exp(-alpha * g)) * (u + beta)
            elif activation == "relu":
                a = np.maximum(h, 0)
            elif activation == "silu":
                a = h / (1 + np.exp(-h))
            else:
                a = h
            y[t] += weight * (w["fc2"][e] @ a + bias("fc2_b", e))
    return y
