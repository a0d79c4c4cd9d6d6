"""GPU telemetry through NVML, against a fake NVML (two devices, one without the energy
counter, an NVML that fails to start) and against the real pynvml of this GPU-less host."""

from __future__ import annotations

from fake_nvml import FakeGpu, FakeNvml, NVMLError, NVMLError_LibraryNotFound, two_gpus
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fwbench.runtime.gpu import GpuCollector


def exposed(collector: GpuCollector) -> dict[str, dict[str, float]]:
    """{sample name: {gpu label: value}}, through a real registry and the text format."""
    registry = CollectorRegistry()
    registry.register(collector)
    body = generate_latest(registry).decode()
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            found.setdefault(sample.name, {})[sample.labels["gpu"]] = sample.value
    return found


def test_gpu_collector_reports_each_device_in_base_units():
    found = exposed(GpuCollector(two_gpus()))
    assert found["fwbench_gpu_utilization_ratio"] == {"0": 0.87, "1": 0.0}
    assert found["fwbench_gpu_memory_used_bytes"] == {"0": 12 * 2**30, "1": 0}
    assert found["fwbench_gpu_memory_total_bytes"] == {"0": 80 * 2**30, "1": 8 * 2**30}
    assert found["fwbench_gpu_power_watts"] == {"0": 312.5, "1": 24.0}
    assert found["fwbench_gpu_sm_clock_hertz"] == {"0": 1.98e9, "1": 1.114e9}
    assert found["fwbench_gpu_temperature_celsius"] == {"0": 61, "1": 35}
    assert found["fwbench_gpu_info"] == {"0": 1, "1": 1}


def test_gpu_collector_omits_energy_of_a_device_without_the_counter():
    found = exposed(GpuCollector(two_gpus()))
    assert found["fwbench_gpu_energy_joules_total"] == {"0": 5000.0}


def test_gpu_info_names_each_device():
    registry = CollectorRegistry()
    registry.register(GpuCollector(two_gpus()))
    body = generate_latest(registry).decode()
    assert (
        'fwbench_gpu_info{gpu="1",name="Tesla P4",uuid="GPU-66666666-7777-8888-9999-000000000000"}'
        " 1.0" in body
    )


def test_gpu_collector_skips_only_the_field_nvml_refuses():
    class NoTemperature(FakeNvml):
        def nvmlDeviceGetTemperature(self, gpu, sensor):  # noqa: N802
            if gpu.name == "b":
                raise NVMLError("Insufficient Permissions")
            return super().nvmlDeviceGetTemperature(gpu, sensor)

    found = exposed(GpuCollector(NoTemperature([FakeGpu("a", "GPU-a"), FakeGpu("b", "GPU-b")])))
    assert found["fwbench_gpu_temperature_celsius"] == {"0": 40}
    assert set(found["fwbench_gpu_power_watts"]) == {"0", "1"}


def test_gpu_collector_exposes_nothing_and_initialises_once_when_nvml_fails():
    nvml = FakeNvml([FakeGpu("a", "GPU-a")], init_error=NVMLError_LibraryNotFound("not found"))
    collector = GpuCollector(nvml)
    assert exposed(collector) == {}
    assert exposed(collector) == {}
    assert nvml.init_calls == 1


def test_gpu_collector_initialises_nvml_lazily_and_once():
    nvml = two_gpus()
    collector = GpuCollector(nvml)
    assert nvml.init_calls == 0
    exposed(collector)
    exposed(collector)
    assert nvml.init_calls == 1


def test_gpu_collector_exposes_nothing_without_gpus():
    assert exposed(GpuCollector(FakeNvml([]))) == {}


def test_gpu_collector_on_real_pynvml_without_driver_exposes_nothing(caplog):
    """This host has nvidia-ml-py but no NVIDIA driver: no series, no error, no log."""
    collector = GpuCollector()  # the real pynvml
    assert exposed(collector) == {}
    assert exposed(collector) == {}
    assert not caplog.records
