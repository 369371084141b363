"""Wire formats (pydantic) of the REST API and the agent protocol, versioned: what crosses a socket.

May import: ``gpupool.domain``, pydantic, the standard library.
Must not: hold behaviour (no I/O, no decisions); convert to and from domain values and validate, nothing more.
"""
