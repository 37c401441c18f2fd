"""weft's statuses as Python exceptions: one class per weft_status, all under WeftError, each also under the
built-in exception a Python caller would expect (a shape error is a ValueError, running out of memory a
MemoryError), so both `except weft.ShapeError` and `except ValueError` catch it."""



class WeftError(Exception):
    """An error reported by weft. `status` is the weft_status code, `status_name` its short description
    (weft_status_str), and str(error) is weft's own message, the one weft_fabric_last_error gives."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.message = message

    @property
    def status_name(self):
        from ._native import load

        return load().status_str(self.status) if self.status is not None else "unknown"


class InvalidArgumentError(WeftError, ValueError):
    """A NULL, an unknown name or value, a bad option: fix the call."""
    status = 1


class ShapeError(WeftError, ValueError):
    """Shapes or ranks do not agree, or a dimension is out of range."""
    status = 2


class SizeOverflowError(WeftError, OverflowError):
    """A size product does not fit: the tensor is too large to describe."""
    status = 3


class WrongFabricError(WeftError, ValueError):
    """A tensor of another fabric was passed."""
    status = 4


class OutOfMemoryError(WeftError, MemoryError):
    """Host or device memory ran out."""
    status = 5


class UnsupportedError(WeftError):
    """No lane honours this op under this contract (or the named lane does not)."""
    status = 6


class LaneFailedError(WeftError, RuntimeError):
    """A lane failed (device lost, driver error) and left the fabric."""
    status = 7


class NotFoundError(WeftError, LookupError):
    """A lane name or index that does not exist."""
    status = 8


class StateError(WeftError, RuntimeError):
    """The call is not valid now: no scope open, a tensor or fabric already closed."""
    status = 9


class WeftIOError(WeftError):
    """A file or socket could not be read or written."""
    status = 10


class InternalError(WeftError, RuntimeError):
    """A bug in weft: please report it with the message."""
    status = 11


_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, ShapeError, SizeOverflowError, WrongFabricError, OutOfMemoryError, UnsupportedError,
    LaneFailedError, NotFoundError, StateError, WeftIOError, InternalError)}


def error_for(status, message):
    """The exception for a weft_status, carrying `message` (weft's, or the status description if empty)."""
    if not message:
        from ._native import load

        message = load().status_str(status)
    cls = _BY_STATUS.get(status)
    if cls is None:
        return WeftError(message, status)
    return cls(message)
