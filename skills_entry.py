"""The `skills` console entry. Two kinds of command are answered without loading the CLI
framework (typer, and the pydantic it coerces options with: ~0.35 s of a read): `skills query`
through a running server (retrieval/query_client.py) and the reads `list`, `show`, `lineage`
(skills/read_views.py). Anything else, and any argument those do not parse, goes to cli.app."""
from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["query"]:
        from retrieval.query_client import fast_query

        rc = fast_query(argv[1:])
        if rc is not None:
            sys.exit(rc)
    elif argv[:1] in (["list"], ["show"], ["lineage"]):
        from skills.read_views import ReadError, run_read

        try:
            text = run_read(argv)
        except ReadError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        if text is not None:
            print(text)
            sys.exit(0)
    from cli import app

    app()


if __name__ == "__main__":  # pragma: no cover
    main()
