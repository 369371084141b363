"""Errors with stable codes: the code is what clients and tests match on, the message is for people."""

from __future__ import annotations


class GpupoolError(Exception):
    """Base of every error gpupool raises on purpose."""

    code: str = "GPUPOOL_ERROR"
    retry_after_s: float | None = None  # set where retrying the same request later may succeed

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


class NodeNameTakenError(ConflictError):
    """A registration with a join token for the name of a live node: only its node token or an admin may."""

    code = "NODE_NAME_TAKEN"


class JoinTokenSpentError(ConflictError):
    """A join token that has registered as many new nodes as its admin allowed (or was revoked meanwhile)."""

    code = "JOIN_TOKEN_SPENT"


class StaleVersionError(ConflictError):
    """A guarded update whose expected version is not the stored one: someone else changed the record first."""

    code = "STALE_VERSION"


class AllocationConflictError(ConflictError):
    """An allocation refused by the store: a whole GPU already held, or shares of one GPU beyond 1000 milli."""

    code = "ALLOCATION_CONFLICT"


class NotFoundError(GpupoolError):
    """A record asked for by id or name that is not stored (a job, a node, a pool)."""

    code = "NOT_FOUND"


class UnstorableInputError(InputError):
    """Input the database cannot store as given (a NUL character in text, text that is not UTF-8)."""

    code = "UNSTORABLE_INPUT"


class StoreUnavailableError(GpupoolError):
    """The database cannot answer or take writes now: its server is unreachable or failing over, its disk is
    full, its file is read-only. ``reason`` is a stable sub-code (``unreachable``, ``busy``, ``read_only``,
    ``disk_full``, ``io_error``, ``corrupt``, ``replaced``); ``transient`` says whether retrying soon may succeed without an operator."""

    code = "STORE_UNAVAILABLE"
    retry_after_s = 1.0  # a failover or a busy database clears in seconds

    def __init__(self, message: str, *, reason: str, transient: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.transient = transient


class StaleLeaderError(ConflictError):
    """A write of the scheduling loop carried a leadership lease that is no longer the current one (another
    replica took over while this one was paused or cut off, or the lease ran out): the database refused it.
    The writer is no longer the leader; it drops what it assumed and becomes a standby."""

    code = "STALE_LEADER"


class OverloadedError(GpupoolError):
    """Work refused to keep the service responsive; the same request may succeed after ``retry_after_s``."""

    code = "OVERLOADED"
    retry_after_s = 1.0


class SubmitQueueFullError(OverloadedError):
    """The server's queue of submissions waiting for their commit is full (the database is slow or away)."""

    code = "SUBMIT_QUEUE_FULL"


class TenantPendingLimitError(OverloadedError):
    """The tenant already has as many pending jobs as a tenant may; more are taken as the queue drains."""

    code = "TENANT_PENDING_LIMIT"
    retry_after_s = 5.0
