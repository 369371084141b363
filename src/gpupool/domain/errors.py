"""Errors with stable codes: the code is what clients and tests match on, the message is for people."""

from __future__ import annotations


class GpupoolError(Exception):
    """Base of every error gpupool raises on purpose."""

    code: str = "GPUPOOL_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InputError(GpupoolError):
    """Input from outside (a file, a tool's output, a request) that cannot be used as given.

    ``source`` names where it came from (a path, or a description such as ``<stdin>``) and ``line``
    the 1-based line number when the problem sits on one line, so the message can point at it.
    """

    code = "INPUT_ERROR"

    def __init__(self, message: str, *, source: str = "", line: int | None = None) -> None:
        self.source = source
        self.line = line
        where = source
        if line is not None:
            where = f"{source}:{line}" if source else f"line {line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.reason = message


class ParseError(InputError):
    """A tool's output that does not follow the format it claims to be in."""

    code = "PARSE_ERROR"


class FabricError(GpupoolError):
    """A fabric that is inconsistent (a link to an undeclared node, a duplicate name, ...)."""

    code = "FABRIC_INVALID"


class JobSpecError(InputError):
    """A job specification that cannot be scheduled as written (zero tasks, a fraction over one GPU, ...)."""

    code = "JOB_SPEC_INVALID"


class TransitionError(GpupoolError):
    """A state change that the job or node state machine does not allow (finishing a job that never ran)."""

    code = "INVALID_TRANSITION"


class UnknownNameError(GpupoolError):
    """A queue policy, placer or other registry entry asked for by a name that is not registered."""

    code = "UNKNOWN_NAME"


class CapacityConflictError(GpupoolError):
    """An allocation that does not fit the cluster as it is (a GPU already given, a host that is down)."""

    code = "CAPACITY_CONFLICT"


class ConflictError(GpupoolError):
    """A write refused because the stored state moved on or would break an invariant; retry after re-reading.

    Subclasses carry the precise stable code; clients that only need "retry or give up" match this class.
    """

    code = "CONFLICT"


class StaleVersionError(ConflictError):
    """A guarded update whose expected version is not the stored one: someone else changed the record first."""

    code = "STALE_VERSION"


class AllocationConflictError(ConflictError):
    """An allocation refused by the store: a whole GPU already held, or shares of one GPU beyond 1000 milli."""

    code = "ALLOCATION_CONFLICT"


class NotFoundError(GpupoolError):
    """A record asked for by id or name that is not stored (a job, a node, a pool)."""

    code = "NOT_FOUND"
