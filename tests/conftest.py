"""Fixtures for the tiers above unit tests: a private test stack under .run/test (ports 24xxx).

`test_stack` starts NATS, Redis, Postgres and the 4-node Slurm cluster once per session and stops
them at the end; `services` starts the relaunch services on top (for end-to-end tests).
Nothing here uses a server the suite did not start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# RELAUNCH_TEST_SLURM picks the Slurm release of the test stack (22.05, the host's, by default; 24.11
# and 26.05 from their release roots, docs/slurm-versions.md); each release has a stack of its own.
SLURM = os.environ.get("RELAUNCH_TEST_SLURM") or "22.05"
_DEFAULT_RUN = {"22.05": "test", "24.11": "test-24.11", "26.05": "test-26.05"}
_DEFAULT_PORTS = {"22.05": "24000", "24.11": "25000", "26.05": "26000"}
if SLURM not in _DEFAULT_RUN:
    raise pytest.UsageError(f"RELAUNCH_TEST_SLURM={SLURM!r}: use one of {', '.join(_DEFAULT_RUN)}")
# RELAUNCH_TEST_RUN_DIR / RELAUNCH_TEST_PORT_BASE let two checkouts run their suites side by side.
# Set here for the release when not given, so that every test module reading it sees the same.
os.environ.setdefault("RELAUNCH_TEST_PORT_BASE", _DEFAULT_PORTS[SLURM])
RUN = Path(os.environ.get("RELAUNCH_TEST_RUN_DIR") or REPO / ".run" / _DEFAULT_RUN[SLURM]).resolve()
STACK_ENV = {
    "RELAUNCH_RUN_DIR": str(RUN), "RELAUNCH_PORT_BASE": os.environ["RELAUNCH_TEST_PORT_BASE"],
    "RELAUNCH_CLUSTER": "reltest", "RELAUNCH_SLURM": SLURM,
    # Longer than a restarted actuator's wait for the old lease (<= 8 s), so that the watchdog only
    # steps in when every actuator is really gone; short enough for a test.
    "RELAUNCH_WATCHDOG_BOUND_S": "15", "RELAUNCH_WATCHDOG_INTERVAL_S": "1",
    # The test stack's hang floor (a cluster's default is 10 minutes): the tests' jobs step every second or
    # less, and the tests wait for the hangs they cause. tests/e2e/test_healthy_pause.py pauses 3x as long.
    "RELAUNCH_DETECTOR_HANG_FLOOR_S": "10",
    # Slurm's scheduling passes at most 1 s apart instead of 3 (docs/operator-guide.md, "Faster restarts"):
    # every job the suite submits or relaunch restarts starts up to 2 s sooner.
    "RELAUNCH_SLURM_SCHEDULER_PARAMETERS": os.environ.get("RELAUNCH_SLURM_SCHEDULER_PARAMETERS",
                                                          "batch_sched_delay=1"),
}


# The 24.11 and 26.05 test stacks also run slurmrestd (auth/jwt on, scripts/stack.sh), so that the
# tests taking the `slurm_api` fixture run through both Slurm adapters on one stack; the services
# start with the CLI adapter, and switch for the tests of the rest form only.
REST_RELEASES = ("24.11", "26.05")
INFRA_API = "rest" if SLURM in REST_RELEASES else "cli"
_api_in_use = {"api": "cli"}


class StackFailed(Exception):
    """scripts/stack.sh failed: the message holds what it printed and the end of the stack's newest logs, so that
    a failure read from CI's tail (where only pytest's report survives) says which server did not come up and why."""


def _log_tails(lines: int = 15, newest: int = 4) -> str:
    logs = [p for d in (RUN / "log", RUN / "slurm" / "log") if d.is_dir() for p in d.iterdir() if p.is_file()]
    logs.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    parts = []
    for log in logs[:newest]:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(parts)


def _stack(*args: str) -> None:
    infra = {"RELAUNCH_SLURM_API": INFRA_API} if args[:1] == ("infra-up",) else {}
    try:
        done = subprocess.run(["bash", str(REPO / "scripts" / "stack.sh"), *args], timeout=300,
                              env={**os.environ, **STACK_ENV, **infra}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace")
    except subprocess.TimeoutExpired as e:
        out = e.output.decode(errors="replace") if isinstance(e.output, bytes) else (e.output or "")
        raise StackFailed(f"stack.sh {' '.join(args)} ran past 300 s; it printed:\n{out[-4000:]}\n{_log_tails()}") from None
    print(done.stdout, end="")
    if done.returncode:
        raise StackFailed(f"stack.sh {' '.join(args)} exited {done.returncode} (run dir {RUN}); it printed:\n"
                          f"{done.stdout[-4000:]}\n{_log_tails()}")


def _stop(service: str) -> None:
    """A clean stop (SIGTERM: the actuator hands its lease back), SIGKILL after 20 s."""
    pid_file = RUN / "pids" / f"{service}.pid"
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGTERM)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return
    end = time.monotonic() + 20
    while time.monotonic() < end and Path(f"/proc/{pid}").exists():
        if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
            break
        time.sleep(0.1)
    else:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def use_slurm_api(api: str) -> None:
    """Run the actuator and the watchdog with this Slurm adapter (restarting them when it changes).
    Later `stack.sh services-up` calls (a test restarting a killed actuator) keep it."""
    os.environ["RELAUNCH_SLURM_API"] = api
    if _api_in_use["api"] == api:
        return
    log = RUN / "log" / "actuator.log"
    seen = log.stat().st_size if log.exists() else 0
    for service in ("actuator", "watchdog"):
        _stop(service)
    _stack("services-up")
    _api_in_use["api"] = api
    if api == "rest":  # the new actuator really talks to slurmrestd (it logs the version it found)
        end = time.monotonic() + 30
        while "data_parser v0.0.4" not in log.read_text(errors="replace")[seen:]:
            assert time.monotonic() < end, f"the actuator did not reach slurmrestd (see {log})"
            time.sleep(0.2)


def _read_env(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = value
    env.pop("PATH", None)
    if SLURM != "22.05":  # the release's Slurm clients (wrappers in $RUN/slurm/bin) first, for the tests too
        env["PATH"] = f"{RUN / 'slurm' / 'bin'}:{os.environ.get('PATH', '')}"
    # Tests that need an API token set it themselves; leaking the stack's into the process would
    # change what unit tests of the API see.
    env.pop("RELAUNCH_API_TOKEN_FILE", None)
    env["RELAUNCH_SLURM_API"] = "cli"  # the services' default here; `slurm_api` switches it
    # The suite acts as the operator: NATS user admin (every subject). The services run as their own
    # users; tests/reliability/test_permissions_*.py prove what those may not do.
    env["RELAUNCH_NATS_USER"] = "admin"
    env["RELAUNCH_NATS_PASSWORD_FILE"] = str(path.parent / "creds" / "admin.pass")
    return env


@pytest.fixture(scope="session")
def test_stack():
    """The test stack's environment (SLURM_CONF, RELAUNCH_*), fresh for this session."""
    if RUN.exists():
        _stack("down")
        shutil.rmtree(RUN)
    try:
        _stack("infra-up")
    except StackFailed:
        try:  # what did start (NATS, Redis, Postgres, munged...) must not outlive the failed session
            _stack("down")
        except StackFailed:
            pass
        raise
    env = _read_env(RUN / "env")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _stack("down")


@pytest.fixture(scope="session")
def services(test_stack):
    """The relaunch services running against the test stack (stopped at the end of the session)."""
    os.environ["RELAUNCH_SLURM_API"] = _api_in_use["api"] = "cli"
    _stack("services-up")
    yield test_stack
    _stack("services-down")


@pytest.fixture(scope="session", params=["cli", "rest"])
def slurm_api(request, services):
    """One contract, two adapters: a test taking this fixture runs with the actuator and watchdog on
    Slurm's commands (cli) and on slurmrestd (rest; 24.11 and 26.05 stacks). Session-scoped, so pytest
    runs each adapter's tests together and the services restart about twice per session."""
    if request.param == "rest" and SLURM not in REST_RELEASES:
        pytest.skip(f"slurmrestd runs on the {' and '.join(REST_RELEASES)} test stacks (relaunch reads data_parser "
                    "v0.0.40 and later; Slurm 22.05 has v0.0.38)")
    use_slurm_api(request.param)
    return request.param


def one_release_owners(modules: dict[str, float], releases: list[str]) -> dict[str, str]:
    """The release of the matrix that runs each module marked one_release (module -> its rough seconds, the
    marker's `seconds`): the longest first, each to the release with the least so far, so that each release's
    tier carries an even share of them. Every tier computes the same from the same collection."""
    load = dict.fromkeys(releases, 0.0)
    owners = {}
    for module, seconds in sorted(modules.items(), key=lambda kv: (-kv[1], kv[0])):
        owner = min(releases, key=lambda r: (load[r], releases.index(r)))
        owners[module] = owner
        load[owner] += seconds
    return owners


def pytest_collection_modifyitems(config, items):
    """A test marked rest_on_one_release runs its rest form on the newest release of the matrix only: the
    adapter's requests for it are the same on each release, and the recovery and chaos tests still run the
    rest form on every release that has slurmrestd (this keeps the matrix inside CI's time).

    A test marked one_release checks relaunch's own behaviour, which no Slurm release changes (a custom consumer,
    a healthy pause, the pictures): when the matrix runs several releases (RELAUNCH_TEST_RELEASES, set by
    scripts/test_matrix.py), it runs on one of them (`one_release_of`); run alone, it runs."""
    matrix = os.environ.get("RELAUNCH_TEST_RELEASES", "").split()
    marked = {}
    for item in items:
        if mark := item.get_closest_marker("one_release"):
            module = item.nodeid.split("::", 1)[0]
            marked[module] = max(marked.get(module, 0.0), float(mark.kwargs.get("seconds", 10)))
    owners = one_release_owners(marked, matrix) if SLURM in matrix else {}
    for item in items:
        owner = owners.get(item.nodeid.split("::", 1)[0], SLURM)
        if owner != SLURM:
            item.add_marker(pytest.mark.skip(reason=f"one_release: runs on Slurm {owner} in this matrix"))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if SLURM != REST_RELEASES[-1] and params.get("slurm_api") == "rest" \
                and item.get_closest_marker("rest_on_one_release"):
            item.add_marker(pytest.mark.skip(
                reason=f"its rest form runs on Slurm {REST_RELEASES[-1]} only (rest_on_one_release)"))


@pytest.fixture(autouse=True)
def _services_on_cli_unless_asked(request):
    """A test that uses the services without asking for an adapter gets the default one (cli)."""
    if "services" in request.fixturenames and "slurm_api" not in request.fixturenames:
        use_slurm_api("cli")


@pytest.fixture
async def fresh_ledger(test_stack, unique):
    """A decider Ledger on a Postgres database of its own (not migrated; dropped afterwards)."""
    import asyncpg

    from relaunch.decider.adapters.ledger import Ledger

    base = test_stack["RELAUNCH_DATABASE_URL"]
    admin = await asyncpg.connect(base)
    await admin.execute(f"CREATE DATABASE itest_{unique}")
    ledger = await Ledger.connect(base.rsplit("/", 1)[0] + f"/itest_{unique}")
    yield ledger
    await ledger.close()
    await admin.execute(f"DROP DATABASE itest_{unique}")
    await admin.close()


@pytest.fixture
async def ledger(fresh_ledger):
    """`fresh_ledger` with every migration applied."""
    await fresh_ledger.migrate()
    return fresh_ledger


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]
