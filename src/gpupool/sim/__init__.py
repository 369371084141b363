"""Discrete-event simulator: replays traces through the production scheduler.
May import: gpupool.scheduler, gpupool.cluster, gpupool.fabric, gpupool.domain, NumPy, matplotlib.
Must not import: store, server, agent, HTTP.
"""
