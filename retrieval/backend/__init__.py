"""Backend retrieval: ingest target trees into the store and build the indexes (``index``),
two-level search (``search``), fork-and-adapt's identifier mapping (``adapt``) and the learned
donor-selection ranker (``selection``)."""
