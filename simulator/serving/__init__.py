"""Serving simulation: request streams, scheduler, KV cache, replicas and routers."""
