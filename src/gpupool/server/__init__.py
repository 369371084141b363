"""The control-plane server: FastAPI app, use cases, scheduling loop, agent gateway, auth, metrics — the imperative shell.
May import: store, schemas, scheduler, cluster, fabric, domain.
Must not import: agent, sim.
"""
