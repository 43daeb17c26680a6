"""The encoder's forward pass in torch, for the embedding pass when torch is installed
(`[semantic] backend`): the same weights and the same float32 arithmetic as the numpy pass in
memctl.recall.embeddings.encoder (vectors equal within 1e-5), with torch's fused kernels (exact GELU,
layer norm, attention). `bfloat16` runs the products in bfloat16 instead (twice as fast again
on CPUs with AMX or AVX-512 BF16; cosine to the float32 vectors >= 0.9999, measured in
bench/RESULTS.md). A search never uses it: importing torch costs seconds, the query's one short
forward pass milliseconds.
"""

from __future__ import annotations

import numpy as np
import torch


class TorchForward:
    """Callable like Encoder._forward: (ids, mask) numpy arrays -> unit vectors (numpy float32)."""

    def __init__(self, encoder, bfloat16: bool = False, threads: int = 1):
        self.torch = torch
        torch.set_num_threads(max(1, int(threads)))  # a background pass on a shared machine: one core
        self.word_embeddings = encoder.w["embeddings.word_embeddings.weight"]  # mapped: gathered in numpy
        kind = torch.bfloat16 if bfloat16 else torch.float32
        self.autocast = bfloat16
        self.w = {name: torch.from_numpy(value).to(kind) for name, value in encoder.w.items()
                  if name != "embeddings.word_embeddings.weight"}
        self.layers, self.heads, self.eps, self.dim = encoder.layers, encoder.heads, encoder.eps, encoder.dim

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if not self.autocast:
            return self._forward(ids, mask)
        with self.torch.autocast("cpu", dtype=self.torch.bfloat16):
            return self._forward(ids, mask)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        torch = self.torch
        functional = torch.nn.functional
        w = self.w
        with torch.inference_mode():
            mask_t = torch.from_numpy(mask)
            batch, width = ids.shape
            x = (torch.from_numpy(self.word_embeddings[ids]).to(w["embeddings.position_embeddings.weight"].dtype)
                 + w["embeddings.position_embeddings.weight"][:width] + w["embeddings.token_type_embeddings.weight"][0])
            x = functional.layer_norm(x, (self.dim,), w["embeddings.LayerNorm.weight"],
                                      w["embeddings.LayerNorm.bias"], self.eps)
            blocked = ((1.0 - mask_t) * -1e9)[:, None, None, :]
            head = self.dim // self.heads
            for n in range(self.layers):
                p = f"encoder.layer.{n}."

                def dense(h, name):  # weights are stored transposed (x @ W), as the numpy pass reads them
                    return torch.addmm(w[p + name + ".bias"], h.reshape(-1, h.shape[-1]),
                                       w[p + name + ".weight"]).reshape(batch, width, -1)

                def split(h):
                    return h.reshape(batch, width, self.heads, head).transpose(1, 2)

                q, k, v = (split(dense(x, f"attention.self.{name}")) for name in ("query", "key", "value"))
                context = functional.scaled_dot_product_attention(q, k, v, attn_mask=blocked)
                context = context.transpose(1, 2).reshape(batch, width, self.dim)
                x = functional.layer_norm(x + dense(context, "attention.output.dense"), (self.dim,),
                                          w[p + "attention.output.LayerNorm.weight"],
                                          w[p + "attention.output.LayerNorm.bias"], self.eps)
                inner = functional.gelu(dense(x, "intermediate.dense"))
                x = functional.layer_norm(x + dense(inner, "output.dense"), (self.dim,),
                                          w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
            pooled = (x * mask_t[:, :, None]).sum(1) / mask_t.sum(1, keepdim=True).clamp_min(1e-9)
            return functional.normalize(pooled.float(), dim=1, eps=1e-12).numpy()
