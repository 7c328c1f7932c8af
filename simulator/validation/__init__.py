"""Published measurements expressed as scenarios, and the runner that scores predictions."""
