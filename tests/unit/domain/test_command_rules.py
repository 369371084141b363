"""The rules a command must pass before any node runs it (the API applies them at the door, the agent again)."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InputError
from gpupool.domain.workload import MAX_ARG_BYTES, MAX_ARGS, MAX_COMMAND_BYTES, check_command


@pytest.mark.parametrize(
    ("argv", "env", "where", "why"),
    [
        ([], {}, "command", "at least the program"),
        ([""], {}, "command[0]", "program name is empty"),
        (["echo", "a\x00b"], {}, "command[1]", "NUL"),
        (["echo", "\ud800"], {}, "command[1]", "lone surrogate"),
        (["x"] * (MAX_ARGS + 1), {}, "command", "arguments"),
        (["echo", "a" * MAX_ARG_BYTES], {}, "command[1]", "bytes"),
        (["echo"], {"A=B": "1"}, "env", "not a variable name"),
        (["echo"], {"": "1"}, "env", "not a variable name"),
        (["echo"], {"1A": "1"}, "env", "not a variable name"),
        (["echo"], {"A\x00": "1"}, "env", "NUL"),
        (["echo"], {"A": "x\x00"}, "env.A", "NUL"),
        (["echo"], {f"V{i}": "" for i in range(257)}, "env", "variables"),
        (["echo", *(["a" * 100_000] * 11)], {}, "command", "bytes"),
    ],
)
def test_a_command_execve_cannot_take_is_refused_naming_the_field(
    argv: list[str], env: dict[str, str], where: str, why: str
) -> None:
    with pytest.raises(InputError) as e:
        check_command(argv, env)
    assert e.value.source == where and why in e.value.reason


def test_ordinary_commands_pass() -> None:
    check_command(["python", "-c", "print('héllo')", ""], {"_X": "", "PATH": "/usr/bin", "NCCL_DEBUG": "INFO"})
    # Just under the total: a command as large as the rules allow still runs.
    arg = "a" * (MAX_ARG_BYTES - 1)
    check_command(["x", *[arg] * (MAX_COMMAND_BYTES // MAX_ARG_BYTES - 1)], {})
