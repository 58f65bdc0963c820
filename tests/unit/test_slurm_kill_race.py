"""A Slurm command that times out and ends before it is killed (seen: the actuator stopped with SIGSTOP past the
timeout, its `scontrol ping` done meanwhile) is a TemporaryError, never a ProcessLookupError that ends the
actuator (adapters/slurm.py `_run`)."""

from __future__ import annotations

import asyncio

import pytest

from relaunch.actuator.adapters import slurm as slurm_module
from relaunch.actuator.adapters.slurm import Slurm
from relaunch.common.errors import TemporaryError


class GoneProcess:
    returncode = 0

    async def communicate(self):
        await asyncio.sleep(10)

    def kill(self):
        raise ProcessLookupError()

    async def wait(self):
        return 0


async def test_a_command_gone_before_its_kill_is_a_temporary_error(monkeypatch):
    async def spawn(*argv, **kwargs):
        return GoneProcess()

    monkeypatch.setattr(slurm_module.asyncio, "create_subprocess_exec", spawn)
    with pytest.raises(TemporaryError, match="timed out"):
        await Slurm(timeout_s=0.05)._run(["scontrol", "ping"])
    assert await Slurm(timeout_s=0.05).reachable() is False
