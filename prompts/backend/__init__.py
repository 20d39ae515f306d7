"""Backend function generation: retrieve, prompt or fork-and-adapt, gate, repair (``generate``),
skill-guided generation from a mined lineage (``skills``), and the prompt templates
(``generate.md``, ``skills.md``, ``repair.md``)."""
