"""`fingerprint` backend: MaverIQ-style depth extrapolation (standard library only).

A decoder's step time and memory are a fixed part (embedding, final norm, LM head, runtime,
the activation peak) plus `layers` identical per-layer parts. Measuring copies of a1 and a2
layers (default 1 and 2, as MaverIQ does on GPUs) at the same point gives both:

    per_layer = (m(a2) - m(a1)) / (a2 - a1),   fixed = m(a1) - a1 * per_layer,
    m(L) = fixed + L * per_layer

for ttft_s, tpot_s, weights_gb and kv_gb. The activation peak does not grow with depth (one
layer's workspace is live at a time), so activation_gb is the 2-layer copy's and
mem_gb = weights + kv + activation; latency_s = ttft + (output - 1) * tpot. Per-layer costs below zero
(measurement noise on tiny models) are clamped to zero. The error against full-depth
measurements is reported by `python -m profiler validate --measured FP --reference FULL`.
"""

from __future__ import annotations

from typing import Iterable, Mapping

FINGERPRINT_LAYERS = (1, 2)  # MaverIQ's pair; a profile config may choose another
LINEAR = ("ttft_s", "tpot_s", "weights_gb", "kv_gb")
POINT = ("model", "gpu", "tp", "pp", "batch", "prompt_tokens", "output_tokens")


def extrapolate_row(one: Mapping, two: Mapping, layers: int,
                    pair: tuple[int, int] = FINGERPRINT_LAYERS) -> dict:
    """Full-depth row (`layers` layers) from the measurements of one point at the two depths
    of `pair` (`one` the shallower)."""
    if tuple(one[k] for k in POINT) != tuple(two[k] for k in POINT):
        raise ValueError("fingerprint rows must share the point (model, gpu, tp, pp, batch, ...)")
    if (one.get("layers"), two.get("layers")) != tuple(pair) or pair[0] >= pair[1]:
        raise ValueError(f"need rows with layers={tuple(pair)} (shallower first), got "
                         f"{one.get('layers')} and {two.get('layers')}")
    out = dict(two)
    a1, a2 = pair
    for k in LINEAR:
        per_layer = max(0.0, (float(two[k]) - float(one[k])) / (a2 - a1))
        fixed = max(0.0, float(one[k]) - a1 * per_layer)
        out[k] = fixed + layers * per_layer
    out["activation_gb"] = float(two["activation_gb"])  # the deeper copy's peak
    out["mem_gb"] = out["weights_gb"] + out["kv_gb"] + out["activation_gb"]
    out["latency_s"] = out["ttft_s"] + (int(out["output_tokens"]) - 1) * out["tpot_s"]
    out["layers"] = layers
    out["backend"] = "fingerprint"
    return out


def extrapolate(rows: Iterable[Mapping], layers_of: Mapping[str, int],
                pair: tuple[int, int] = FINGERPRINT_LAYERS) -> list[dict]:
    """Pair rows of the two depths of `pair` by point and extrapolate each model to
    `layers_of[model]`. Points with only one of the two depths are left out."""
    by_point: dict[tuple, dict[int, Mapping]] = {}
    for r in rows:
        by_point.setdefault(tuple(r[k] for k in POINT), {})[int(r["layers"])] = r
    out = []
    for key, depth in by_point.items():
        if all(n in depth for n in pair):
            out.append(extrapolate_row(depth[pair[0]], depth[pair[1]], layers_of[key[0]], pair))
    return out
