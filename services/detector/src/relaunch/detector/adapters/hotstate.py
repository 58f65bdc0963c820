"""The detector's hot state in Redis (the only redis importer): followed jobs, file offsets,
the attempt each job is on, and which attempts already have an anomaly.

Nothing here is needed by another replica that Redis does not hold; a restarted detector resumes
from these keys. Keys: rl:follow:<c> (set of job ids), rl:job:<c>:<job> (hash: attempt, stdout,
stderr, nodes, options, progress_seen, off:<path>), rl:anomaly:<c>:<job>:<attempt>:<kind>,
rl:candidate:<c>:<job>:<attempt>, rl:prog:<c>:<job> (the attempt's hang and straggler state: the
token of the write that made it, a space, then the state (domain/track.py's compact form, or JSON); a reader that holds the state of that very write
decoded already need not read it again), rl:progd:<c>:<job> (the token of that state's write, a space,
then the plain reports applied since, one line each (track.report_delta), appended by the replica that
holds the state; a whole state written deletes them, and lines behind another write's token (an older
release's replica wrote the state) are not applied), rl:followv:<c> (a counter that changes with rl:follow), rl:hangdl:<c> (sorted set: job -> hang deadline, swept by any detector replica) and rl:built:<c>
(present while this Redis holds rebuilt state; its absence means the data was lost), rl:heard:<c>
(hash: node -> the time its probe's last NodeHealth was published and its heartbeat interval) and
rl:silent:<c>:<node> (the silence of that node already reported).
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Mapping

import orjson
from redis import asyncio as aioredis

from relaunch.common.redis_outage import DOWN, redis_outage

from ..domain.track import decode_with_deltas
from .hotstate_lua import FOLLOW_LUA, HEARD_LUA, READ_PROGRESS_LUA, SAVE_PROGRESS_LUA, TRACK_LUA

ANOMALY_TTL_S = 14 * 86400
MAX_CONNECTIONS = 64
PROGRESS_FIELDS = ("attempt", "options", "progress_seen")
EXPLAINED_BY = ("crash", "hang")
"""The anomaly kinds that explain an attempt's failure (has_anomaly's default)."""
# Progress states are JSON of a few hundred floats, read and written for every report: orjson does
# that 3-8 times faster than json (the same text, so states written by either read back alike).
"""The fields of a job's hash that progress tracking reads (HMGET: not its file offsets and paths)."""


class HotState:
    def __init__(self, url: str) -> None:
        # A blocking pool: when every connection is busy (many jobs handled at once) a command waits for
        # one instead of failing with "Too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=5,
                                                        decode_responses=True, socket_timeout=5,
                                                        socket_connect_timeout=3)
        self.r = aioredis.Redis.from_pool(pool)
        # Progress states are bytes (domain/track.py's compact form: raw doubles), read and written on a
        # client of their own that decodes nothing.
        raw_pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS // 4, timeout=5,
                                                            socket_timeout=5, socket_connect_timeout=3)
        self.raw = aioredis.Redis.from_pool(raw_pool)
        self._read_progress = self.raw.register_script(READ_PROGRESS_LUA)
        self._save_progress = self.raw.register_script(SAVE_PROGRESS_LUA)
        self._follow = self.r.register_script(FOLLOW_LUA)
        self._track = self.r.register_script(TRACK_LUA)
        self._heard = self.r.register_script(HEARD_LUA)
        # Tokens of progress-state writes: unique to this client (a random writer id and a counter), so a
        # token held by a reader can only ever match the very write it read (even after Redis lost its data).
        self._writer, self._writes = secrets.token_hex(6), itertools.count(1)

    def _token(self) -> str:
        return f"{self._writer}.{next(self._writes)}"

    async def ping(self) -> bool:
        try:
            return bool(await self.r.ping())
        except DOWN:
            return False

    async def close(self) -> None:
        await self.r.aclose()
        await self.raw.aclose()

    async def _call(self, coro):
        with redis_outage():
            return await coro

    async def followed(self, cluster: str) -> list[str]:
        return sorted(await self._call(self.r.smembers(f"rl:follow:{cluster}")))

    async def paths_many(self, cluster: str, job_ids: list[str]) -> dict[str, tuple[str, ...]]:
        """Each job's log files (stdout, stderr; distinct, non-empty), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(f"rl:job:{cluster}:{job_id}", ("stdout", "stderr"))
        replies = await self._call(pipe.execute())
        return {job_id: tuple(dict.fromkeys(p for p in paths if p)) for job_id, paths in zip(job_ids, replies)}

    async def fields_many(self, cluster: str, job_ids: list[str], fields: tuple[str, ...]) -> dict[str, tuple]:
        """The given fields of each job's hash (None where absent), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(f"rl:job:{cluster}:{job_id}", fields)
        return dict(zip(job_ids, map(tuple, await self._call(pipe.execute()))))

    async def heard(self, cluster: str, node: str, at: float, interval_s: float) -> None:
        """A node's probe was heard (its NodeHealth published at `at`); only a later time replaces one."""
        await self._call(self._heard(keys=[f"rl:heard:{cluster}"], args=[node, f"{at:.3f}", f"{interval_s:g}"]))

    async def heard_all(self, cluster: str) -> dict[str, tuple[float, float]]:
        """node -> (last heard at, heartbeat interval)."""
        raw = await self._call(self.r.hgetall(f"rl:heard:{cluster}"))
        out = {}
        for node, value in raw.items():
            at, _, interval = value.partition(" ")
            try:
                out[node] = (float(at), float(interval))
            except ValueError:
                continue  # not ours
        return out

    async def first_report(self, cluster: str, node: str, since: float) -> bool:
        """True once per silence of `node` (the silence that began at `since`): a report is made once."""
        before = await self._call(self.r.set(f"rl:silent:{cluster}:{node}", f"{since:.3f}", get=True))
        return before != f"{since:.3f}"

    async def job(self, cluster: str, job_id: str) -> dict[str, str]:
        return await self._call(self.r.hgetall(f"rl:job:{cluster}:{job_id}"))

    async def track(self, cluster: str, job_id: str, fields: dict[str, str], forget_progress: bool = False) -> None:
        """Write `fields` into the job's hash and follow the job; with `forget_progress`, also drop its
        progress state and hang deadline (a finished attempt: `forget_progress`). One script call, one
        round trip (a MULTI with a script in it was two: redis-py asks SCRIPT EXISTS first)."""
        args = [job_id, "1" if forget_progress else "0"]
        for name, value in fields.items():
            args += (name, value)
        await self._call(self._track(keys=[f"rl:job:{cluster}:{job_id}", f"rl:follow:{cluster}", f"rl:followv:{cluster}",
                                           f"rl:prog:{cluster}:{job_id}", f"rl:hangdl:{cluster}",
                                           f"rl:progd:{cluster}:{job_id}"], args=args))

    async def untrack(self, cluster: str, job_id: str) -> None:
        await self._call(self._follow(keys=[f"rl:follow:{cluster}", f"rl:followv:{cluster}"], args=["SREM", job_id]))

    async def followed_version(self, cluster: str) -> str | None:
        """Changes whenever a job is added to or removed from the followed set (by any replica): the
        follower reads the set again only then."""
        return await self._call(self.r.get(f"rl:followv:{cluster}"))

    async def note(self, cluster: str, job_id: str, name: str, value: str) -> None:
        """One field of the job's hash, without following the job (track follows it)."""
        await self._call(self.r.hset(f"rl:job:{cluster}:{job_id}", name, value))

    async def set_offset(self, cluster: str, job_id: str, path: str, offset: int) -> None:
        await self._call(self.r.hset(f"rl:job:{cluster}:{job_id}", f"off:{path}", offset))

    async def has_anomaly(self, cluster: str, job_id: str, attempt: int,
                          kinds: tuple[str, ...] = EXPLAINED_BY) -> bool:
        """Whether the attempt already has an anomaly of one of `kinds` (a crash or a hang explains it)."""
        return bool(await self._call(self.r.exists(*_anomaly_keys(cluster, job_id, attempt, kinds))))

    async def job_unless_anomaly(self, cluster: str, job_id: str, attempt: int,
                                 kinds: tuple[str, ...] = EXPLAINED_BY) -> tuple[dict[str, str], bool]:
        """`job` and `has_anomaly` together, in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(f"rl:job:{cluster}:{job_id}")
        pipe.exists(*_anomaly_keys(cluster, job_id, attempt, kinds))
        info, found = await self._call(pipe.execute())
        return info, bool(found)

    async def crash_context(self, cluster: str, job_id: str, attempt: int) -> tuple[dict[str, str], bool, dict | None]:
        """What a failure found in a log needs, in one round trip: `job`, `has_anomaly` (a crash or a
        hang) and `progress` (the stored state, for the attempt's last step)."""
        pipe = self.raw.pipeline(transaction=False)  # the progress state is bytes: the raw client
        pipe.hgetall(f"rl:job:{cluster}:{job_id}")
        pipe.exists(*_anomaly_keys(cluster, job_id, attempt, EXPLAINED_BY))
        pipe.mget(f"rl:prog:{cluster}:{job_id}", f"rl:progd:{cluster}:{job_id}")
        info, found, progress = await self._call(pipe.execute())
        return {k.decode(): v.decode() for k, v in info.items()}, bool(found), _state(*progress)[1]

    async def mark_anomaly(self, cluster: str, job_id: str, attempt: int, kind: str, signature_id: str) -> None:
        await self._call(self.r.set(_anomaly_keys(cluster, job_id, attempt, (kind,))[0], signature_id,
                                    ex=ANOMALY_TTL_S))

    async def progress(self, cluster: str, job_id: str) -> dict | None:
        return _state(*await self._call(self.raw.mget(f"rl:prog:{cluster}:{job_id}", f"rl:progd:{cluster}:{job_id}")))[1]

    async def save_progress(self, cluster: str, job_id: str, data: bytes | dict, deadline: float | None) -> str:
        """Store the attempt's progress state (as stored: ProgressTrack.encode, or a record as JSON) and
        (re)arm or disarm its hang deadline, atomically; returns the write's token."""
        token = self._token()
        pipe = self.r.pipeline(transaction=True)
        stored = data if isinstance(data, bytes) else orjson.dumps(data)
        pipe.set(f"rl:prog:{cluster}:{job_id}", token.encode() + b" " + stored, ex=ANOMALY_TTL_S)
        pipe.delete(f"rl:progd:{cluster}:{job_id}")  # (its reports are in `data`, or of an older state)
        if deadline is None:
            pipe.zrem(f"rl:hangdl:{cluster}", job_id)
        else:
            pipe.zadd(f"rl:hangdl:{cluster}", {job_id: deadline})
        await self._call(pipe.execute())
        return token + "+0"

    async def progress_many(self, cluster: str, job_ids: list[str], held: Mapping[str, str] | None = None,
                            ) -> dict[str, tuple[dict[str, str], str | None, dict | None | Held]]:
        """For each job, what progress tracking reads (its attempt, options and progress_seen fields), the
        token of its progress state and the state itself: one command for all of them (a script;
        per-command client work, not Redis, is what costs at thousands of jobs a second).

        `held`: job -> the token of the state the caller holds decoded already (save_progress_many's,
        which names the state's write and the length of the report lines after it). Where Redis still
        holds that very state, it is not sent again and HELD stands for it (decoding a state costs more
        than everything else a report needs)."""
        if not job_ids:
            return {}
        held = held or {}
        # Key names are made in the script from the cluster and the job ids, and the ids and tokens
        # travel as one argument each: at 10,000 reports a second the client's packing of arguments
        # costs more than Redis' splitting of them. (Job ids are digits and underscores; tokens hex,
        # digits and dots.)
        args = [cluster, " ".join(PROGRESS_FIELDS), " ".join(job_ids),
                " ".join(held.get(job_id, "-") for job_id in job_ids)]
        replies = await self._call(self._read_progress(keys=[], args=args))
        out: dict[str, tuple[dict[str, str], str | None, dict | None | Held]] = {}
        for i, job_id in enumerate(job_ids):
            fields, raw = replies[3 * i], replies[3 * i + 1]
            fields = {k: v.decode("utf-8", "replace") for k, v in zip(PROGRESS_FIELDS, fields) if v is not None}
            if raw == b"=":  # the state of the very write the caller holds
                out[job_id] = (fields, held[job_id], HELD)
            else:
                out[job_id] = (fields, *_state(raw, replies[3 * i + 2]))
        return out

    async def save_progress_many(self, cluster: str, saves: list[tuple[str, bytes, float | None, bool, str | None]],
                                 ) -> list[str | None]:
        """save_progress for many jobs at once, atomically (one script): (job, data, deadline, first
        progress seen (marks the job's progress_seen), after). With `after` None, `data` is the whole
        state (ProgressTrack.encode: no newline) and replaces what was stored; otherwise it is report
        lines (track.report_delta) appended to the state whose token `after` is, the caller's own.

        Returns each job's new token, in order (a whole state is stored as '<token> <state>'; a token
        names the write and the length of the report lines after it). None where the state stored is no
        longer the one `after` names (another replica wrote meanwhile): nothing was written for that
        job, and the caller writes its whole state instead."""
        if not saves:
            return []
        # One argument for every job's id, deadline, progress_seen mark, stored length and state it
        # extends, one for the data one after another (bytes: the script cuts them by length): see
        # progress_many. Whole states are joined once, each behind its token, with no copy made first.
        heads, parts, tokens = [], [], []
        for job_id, data, deadline, first, after in saves:
            if after is None:
                token = self._token()
                tokens.append(token + "+0")
                prefix = token.encode() + b" "
                size = len(prefix) + len(data)
                parts += (prefix, data)
            else:
                token, length = after.partition("+")[0], lines_length(after)
                size = len(data)
                # (the first lines after a state go behind its token: the script writes it)
                tokens.append(f"{token}+{length + size + (0 if length else len(token) + 1)}")
                parts.append(data)
            heads.append(f"{job_id} {'-' if deadline is None else repr(deadline)} {'1' if first else '0'} "
                         f"{size} {after or '-'}")
        refused = await self._call(self._save_progress(keys=[], args=[str(ANOMALY_TTL_S), cluster, "\n".join(heads),
                                                                        b"".join(parts)]))
        for index in refused:
            tokens[int(index) - 1] = None
        return tokens

    async def forget_progress(self, cluster: str, job_id: str) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(f"rl:prog:{cluster}:{job_id}", f"rl:progd:{cluster}:{job_id}")
        pipe.zrem(f"rl:hangdl:{cluster}", job_id)
        await self._call(pipe.execute())

    async def due_hangs(self, cluster: str, now: float, limit: int = 500) -> list[str]:
        return await self._call(self.r.zrangebyscore(f"rl:hangdl:{cluster}", "-inf", now, start=0, num=limit))

    async def claim_hang(self, cluster: str, job_id: str) -> bool:
        """Take a due deadline off the set; only the replica whose ZREM removed it handles it."""
        return bool(await self._call(self.r.zrem(f"rl:hangdl:{cluster}", job_id)))

    async def set_candidate(self, cluster: str, job_id: str, attempt: int, anomaly_json: str) -> None:
        """Keep the first cascade-only finding; it is published if nothing better shows up."""
        await self._call(self.r.set(f"rl:candidate:{cluster}:{job_id}:{attempt}", anomaly_json, nx=True,
                                    ex=ANOMALY_TTL_S))

    async def candidate(self, cluster: str, job_id: str, attempt: int) -> str | None:
        return await self._call(self.r.get(f"rl:candidate:{cluster}:{job_id}:{attempt}"))

    async def claim_rebuild(self, cluster: str) -> bool:
        """True once per loss of this Redis's data: the marker rl:built:<c> was missing and is now ours
        (relaunch.detector.rebuilding follows every job again)."""
        return bool(await self._call(self.r.set(f"rl:built:{cluster}", "1", nx=True)))

    async def release_rebuild(self, cluster: str) -> None:
        await self._call(self.r.delete(f"rl:built:{cluster}"))


class Held:
    """progress_many's stand-in for a state the caller holds already (see there)."""

    def __repr__(self) -> str:
        return "HELD"


HELD = Held()

def lines_length(token: str) -> int:
    """The length of the report lines after the state a holder's token names (save_progress_many's)."""
    return int(token.rpartition("+")[2])


def _state(raw: bytes | None, deltas: bytes | None = None) -> tuple[str | None, dict | None]:
    """A stored progress state and the report lines after it as (the token a holder gives back to
    progress_many, the state with the lines applied); (None, None) when there is none or it cannot be
    read (the attempt's tracking starts afresh)."""
    if not raw:
        return None, None
    token, _, body = raw.partition(b" ") if not raw.startswith(b"{") else (b"", b"", raw)
    lines = b""
    if deltas:
        follows, _, lines = deltas.partition(b" ")
        if follows != token:  # lines after another state (one an older release's replica wrote whole)
            lines, token = b"", b""  # not applied, and no token: the holder writes its whole state
    try:
        data = decode_with_deltas(body, lines)  # the compact form (domain/track.py) or JSON
    except ValueError:
        return None, None
    return (f"{token.decode('ascii', 'replace')}+{len(deltas or b'')}" if token else None), data


def _anomaly_keys(cluster: str, job_id: str, attempt: int, kinds: tuple[str, ...]) -> list[str]:
    return [f"rl:anomaly:{cluster}:{job_id}:{attempt}:{kind}" for kind in kinds]


def nodes_field(nodes: list[str]) -> str:
    return json.dumps(nodes)


def parse_nodes(value: str | None) -> list[str]:
    try:
        nodes = json.loads(value or "[]")
    except ValueError:
        return []
    return [n for n in nodes if isinstance(n, str)]
