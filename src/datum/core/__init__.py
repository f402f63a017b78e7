"""The pure core: vocabulary, diffing, item memory, breaker, Converge and rollups. No I/O here."""
