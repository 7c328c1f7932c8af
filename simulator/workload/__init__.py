"""Request streams: synthetic arrivals and lengths, trace files, and the context-window check."""
