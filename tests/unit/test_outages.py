"""One outage mapping per store kind: a store that is away is a TemporaryError, anything else is not."""

import asyncpg
import pytest
from redis import exceptions as redis_errors

from relaunch.common.errors import TemporaryError
from relaunch.common.postgres_outage import postgres_outage
from relaunch.common.redis_outage import redis_outage


@pytest.mark.parametrize("error", [redis_errors.ConnectionError("refused"), redis_errors.TimeoutError("slow"),
                                   ConnectionResetError("reset")])
def test_redis_away_waits_with_backoff(error):
    seen = []
    with pytest.raises(TemporaryError, match="Redis unavailable") as caught:
        with redis_outage(also=seen.append):
            raise error
    assert caught.value.backoff and seen == [error]


@pytest.mark.parametrize("error", [asyncpg.exceptions.CannotConnectNowError("starting"),
                                   asyncpg.exceptions.ConnectionDoesNotExistError("gone"),
                                   asyncpg.exceptions.InterfaceError("pool closed"), OSError("refused"),
                                   asyncpg.exceptions.DeadlockDetectedError("deadlock")])
def test_postgres_away_waits_with_backoff(error):
    with pytest.raises(TemporaryError, match="Postgres unavailable") as caught:
        with postgres_outage():
            raise error
    assert caught.value.backoff


def test_a_bug_is_not_an_outage():
    with pytest.raises(asyncpg.exceptions.UniqueViolationError):
        with postgres_outage():
            raise asyncpg.exceptions.UniqueViolationError("duplicate")
    with pytest.raises(ValueError):
        with redis_outage():
            raise ValueError("bug")
