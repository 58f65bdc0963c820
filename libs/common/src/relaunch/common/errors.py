"""The two error kinds every handler may raise, and nothing in between.

The bus layer (`relaunch.common.bus`) maps them exactly once:
TemporaryError -> nak(delay) (look again later), PermanentError -> term() plus a DLQ entry.
Any other exception is a bug: it is nak'ed with a back-off and, on its last delivery, dead-lettered.
"""


class RelaunchError(Exception):
    """Base of relaunch's own errors."""


class TemporaryError(RelaunchError):
    """Retry later: the world is not ready yet (a server is down, a job is still completing)."""

    def __init__(self, message: str, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(RelaunchError):
    """Never retry: the message can not be accepted; it goes to the DLQ with this reason."""
