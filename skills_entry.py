"""The `skills` console entry: `skills query` through a running server without loading the CLI
framework (retrieval/query_client.py), everything else through cli.app."""
from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["query"]:
        from retrieval.query_client import fast_query

        rc = fast_query(sys.argv[2:])
        if rc is not None:
            sys.exit(rc)
    from cli import app

    app()


if __name__ == "__main__":  # pragma: no cover
    main()
