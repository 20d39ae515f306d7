"""Backend lineages: C++ simplification operators (``operators``), the clang-15 compile gate
(``gate``) and the walk of a target's function to its skeleton, lifted into backend skills
(``mine``)."""
