"""A run on the CPU takes the threads the machine has free (machine.use_cpu_threads)."""
import pytest


@pytest.mark.parametrize("cores, load, default, threads", [(2, 13.7, 2, 1), (4, 1.6, 4, 2), (4, 0.3, 4, 4), (16, 0.0, 8, 8)])
def test_a_cpu_run_takes_the_idle_cores_at_most_one_a_physical_core(monkeypatch, cores, load, default, threads):
    """The cores less the 1-minute load average (rounded), never above torch's default of one a physical core."""
    from trainer import machine
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(machine.torch, "get_num_threads", lambda: default)
    chosen = []
    monkeypatch.setattr(machine.torch, "set_num_threads", chosen.append)
    assert machine.use_cpu_threads().startswith(f"CPU: {threads} thread(s) ({cores} cores, load average {load:.1f}")
    assert chosen == [threads]


def test_omp_num_threads_decides_where_set(monkeypatch):
    from trainer import machine
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(machine.torch, "set_num_threads", lambda n: pytest.fail("OMP_NUM_THREADS was overridden"))
    assert machine.use_cpu_threads() == f"CPU: {machine.torch.get_num_threads()} thread(s), as OMP_NUM_THREADS says"
