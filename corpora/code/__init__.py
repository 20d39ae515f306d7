"""The code layer, under every room: tree-sitter parsing of CUDA and C++ (``parse``). Nothing
here knows about problems, operators, skills or retrieval; everything above reads code through
it."""
