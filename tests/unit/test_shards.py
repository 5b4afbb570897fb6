"""A run sent by several client processes, merged into one (`arms.workloads.shards`):
the split of requests and clients, and the merge -- no processes started here."""

from __future__ import annotations

import pickle

import pytest

from arms.measures import RequestRecord
from arms.workloads import profiles, shards
from arms.workloads.dispatch import Part, RunResult


def test_parts_split_requests_and_clients_without_overlap_or_loss() -> None:
    parts = [Part(k, 3) for k in range(3)]
    assert sum(p.clients(8) for p in parts) == 8 and [p.clients(8) for p in parts] == [3, 3, 2]
    owned = sorted(i for p in parts for i in range(p.shard, 20, p.procs))
    assert owned == list(range(20))


def _record(send: int, end: int) -> RequestRecord:
    return RequestRecord(send_ns=send, end_ns=end)


def test_the_merge_orders_requests_counts_the_true_peak_and_keeps_the_busiest_cpu() -> None:
    """Two processes' parts: request order restored; in flight counted over both (1 at a
    time here although each process alone also peaked at 1 -- a sum would say 2); CPU
    summed, the busiest process's share kept for the validity rule."""
    profile = profiles.constant(10.0)
    a = RunResult(profile, [_record(0, 10), _record(40, 50)], 0, 50, 0.4, 2, 1, 0, cpu_s=0.3, indices=[0, 2])
    b = RunResult(profile, [_record(20, 30), _record(60, 70)], 0, 70, 0.4, 2, 1, 1, cpu_s=0.5, indices=[1, 3])
    merged = shards.merge(profile, [a, b], 0, 4)
    assert merged.indices == [0, 1, 2, 3]
    assert [r.send_ns for r in merged.records] == [0, 20, 40, 60]
    assert merged.peak_in_flight == 1 and merged.cap_waits == 1 and merged.end_ns == 70
    assert merged.procs == 2 and merged.cpu_s == pytest.approx(0.8) and merged.client_cpu_s == pytest.approx(0.5)
    overlapping = [_record(0, 100), _record(10, 20), _record(15, 90)]
    assert shards.peak_in_flight(overlapping) == 3


def test_a_closed_loop_merge_takes_its_window_from_the_span() -> None:
    profile = profiles.concurrent(4)
    a = RunResult(profile, [_record(5, 1_000_000_005)], 5, 1_000_000_005, 0.0, 4, 1, 0, indices=[0])
    merged = shards.merge(profile, [a], 5, 4)
    assert merged.window_s == pytest.approx(1.0)


def test_auto_keeps_a_core_and_gives_a_process_per_128_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert [shards.auto_procs(n) for n in (1, 128, 129, 256, 4096)] == [1, 1, 2, 2, 7]
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert shards.auto_procs(1024) == 1


def test_what_a_worker_needs_crosses_by_pickle() -> None:
    """A worker is a fresh interpreter: the load probe's requester must pickle, and its
    workload (with unpicklable caches) is rebuilt there rather than copied."""
    from arms.probes.base import ProbeTarget
    from arms.probes.load_params import LoadParams
    from arms.probes.load_workload import LoadRequests
    from arms.runtimes import catalog
    from campaign.core.states import Mode

    target = ProbeTarget.speaking(catalog.get("llamacpp"), base_url="http://127.0.0.1:1", model="m")
    requests = LoadRequests(target, LoadParams(profile="constant", rate=2.0), Mode.CANONICAL, "s", "t")
    assert requests.prepare(3)[1] == {"index": 3}  # builds (and caches) its workload
    copy = pickle.loads(pickle.dumps(shards.Job(requests, profiles.constant(2.0), Part(1, 2), 1.0, None, 8, 1)))
    assert copy.requester.prepare(3) == requests.prepare(3)
