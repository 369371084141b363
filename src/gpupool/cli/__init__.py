"""The ``gpupool`` command: typer commands, tables and colour for people, JSON for scripts.

May import: every gpupool package except ``store`` (it talks to a server through the client instead).
Must not: hold business rules; a command parses arguments, calls one function below it, and formats the answer.
"""
