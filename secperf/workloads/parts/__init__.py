"""What several workload kinds share, below every kind: no module here imports a kind,
and no kind imports another (import-linter contracts in pyproject.toml).

flood (the flood keys, a flood's engine spec, a flood beside a measured test),
flood_beside (the keys and executor wrapper stream, rr and crr share), connections (how
a connection closes, one connection test on the client, a paced crr's summary), specs (a
TCP stream or rr as its kind would send it, for a kind measuring one beside its own),
latency (timestamped probes: the latency kind's model and executor, rfc2544's latency
test), http (fetches against nginx: the http kind's model and fetch test, http_capacity's
trials), delivery (what of a flood arrived), open_loop, search_method (the keys and
the one call of every threshold search: mlrsearch, RFC 9971, or search, the
bisection and its bracket), rate_search (RFC 3511's searches), sources (many
emulated sources), probe (the fail-closed check's real-traffic probes and echo server).
"""
