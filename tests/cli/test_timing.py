"""gdn.cli.timing: the host's time a call (the GPU's path runs on the GPU machine's bench)."""
import time

from gdn.cli.timing import host_ms, median_ms


def test_host_ms_is_the_time_a_call_takes_on_the_host():
    """Each call counts once: ten calls of a 2 ms sleep take at least 2 ms a call (a sleep never ends
    early), and the calls really run, ten of them."""
    calls = []

    def call():
        calls.append(1)
        time.sleep(0.002)
    assert host_ms(call, "cpu") >= 2.0
    assert len(calls) == 10
    calls.clear()
    host_ms(call, "cpu", calls=3)
    assert len(calls) == 3


def test_median_ms_on_the_cpu_runs_warmup_and_repeats():
    calls = []
    assert median_ms(lambda: calls.append(1), "cpu", repeats=4, warmup=2) >= 0.0
    assert len(calls) == 6
