"""A fake NVML backend for machines without a GPU (the local stack and tests).

It has the shape the real adapter will have (issue 6): `read()` returns one reading per GPU.
Faults are injected later through the bus (`relaunch inject`); here every GPU reads healthy.
"""

from __future__ import annotations

from relaunch.common.schemas import GpuReading


class FakeNvml:
    backend = "fake"

    def __init__(self, gpu_count: int = 8) -> None:
        self.gpu_count = gpu_count

    def read(self) -> list[GpuReading]:
        return [GpuReading(index=i, temperature_c=40.0) for i in range(self.gpu_count)]
