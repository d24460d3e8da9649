"""Run history (docs/history.md): every run's rows in a SQLite store (store), read from a
run directory (ingest), the series of a scenario's paired degradations with their change
points (changes), the history gate (gate) and the trend page (page)."""
