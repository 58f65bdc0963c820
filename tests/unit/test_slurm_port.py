"""Both Slurm adapters fill the actuator's port (relaunch.actuator.slurm_port): every method of SlurmPort, with the
same parameters and both async, so that a handler typed with the port works with either (RELAUNCH_SLURM_API)."""

from __future__ import annotations

import inspect

import pytest

from relaunch.actuator.adapters.slurm import Slurm
from relaunch.actuator.adapters.slurmrest import SlurmRest
from relaunch.actuator.slurm_port import SlurmPort

METHODS = [name for name, _ in inspect.getmembers(SlurmPort, inspect.isfunction) if not name.startswith("_")]


def test_the_port_names_what_the_actuator_asks_of_slurm():
    assert {"observe", "accounting", "run_step", "run_command", "drain", "node_facts"} <= set(METHODS)


@pytest.mark.parametrize("adapter", [Slurm, SlurmRest])
@pytest.mark.parametrize("name", METHODS)
def test_each_adapter_fills_each_method_of_the_port(adapter, name):
    wanted = inspect.signature(getattr(SlurmPort, name))
    found = getattr(adapter, name, None)
    assert found is not None, f"{adapter.__name__} lacks {name}"
    assert inspect.iscoroutinefunction(found), f"{adapter.__name__}.{name} is not async"
    assert list(inspect.signature(found).parameters) == list(wanted.parameters), \
        f"{adapter.__name__}.{name}{inspect.signature(found)} differs from the port's {name}{wanted}"
