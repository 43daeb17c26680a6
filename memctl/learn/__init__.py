"""The write link (design.md §9a): a session's turns in, typed memories out, with provenance.

It owns the session buffers (`turn`, `compact`, `dispose`), the extraction of candidate
memories from messages (deterministic and bilingual by default, a model optionally), the routing
of candidates into L5 by their type's write policy, L2 short-term (the last sessions'
summaries), the tool-usage collector and `learn` over archived sessions.
"""
