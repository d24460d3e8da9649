"""Docs generated from the repository's own files, each with a test that the page in
docs/ equals its generator's output (so a page cannot drift from what it describes)."""
