"""Domain value types, enums and errors with stable codes, shared by every layer.

May import: the standard library only.
Must not import: anything with I/O, pydantic, sqlalchemy, fastapi, numpy, or any other gpupool package.
"""
