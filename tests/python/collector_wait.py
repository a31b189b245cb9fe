"""Waiting for the device collector thread, which collects off the training thread."""

import time


def wait_collected(hook, events):
    """Waits until hook.stats() counts `events` device events collected or dropped.

    A hang guard (60 s), not a timing check: tests that count per-collect caps or drops
    step, then wait for the collect that step triggers (device_collect_interval_s 0).
    Returns at once when no tracer is running fine (unavailable, failed, a malformed
    collect): those make no events to wait for.
    """
    deadline = time.monotonic() + 60
    while True:
        stats = hook.stats()
        if stats["device_events"] + stats["device_events_dropped"] >= events:
            return
        if all(t["state"] != "ok" for t in stats["device_tracers"]):
            return
        assert time.monotonic() < deadline, f"the collector did not reach {events} events: {stats}"
        time.sleep(0.001)
