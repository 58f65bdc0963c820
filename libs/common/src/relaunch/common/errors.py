"""The two error kinds every handler may raise, and nothing in between.

relaunch.common.outcomes maps them exactly once, for every consumer:
TemporaryError -> nak(delay) (look again later), PermanentError -> term() plus a DLQ entry.
Any other exception is a bug: it is nak'ed with a back-off and, on its last delivery, dead-lettered.
"""


class RelaunchError(Exception):
    """Base of relaunch's own errors."""


class TemporaryError(RelaunchError):
    """Retry later: the world is not ready yet (a server is down, a job is still completing)."""

    def __init__(self, message: str, delay: float = 1.0, backoff: bool = False) -> None:
        super().__init__(message)
        self.delay = delay
        self.backoff = backoff
        """An outage of unknown length: the delay doubles with each delivery (up to MAX_BACKOFF_S)."""

    def delay_for(self, delivery: int) -> float:
        """The nak delay for the message's `delivery`-th attempt (1 = first)."""
        if not self.backoff:
            return self.delay
        return min(self.delay * 2.0 ** max(delivery - 1, 0), max(self.delay, MAX_BACKOFF_S))


MAX_BACKOFF_S = 8.0
"""Longest nak delay of a backing-off TemporaryError: how late work resumes after an outage ends."""


class PermanentError(RelaunchError):
    """Never retry: the message can not be accepted; it goes to the DLQ with this reason."""
