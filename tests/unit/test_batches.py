from miner2provider.core.inventory import Host
from miner2provider.fleet.pipeline import batches


def hosts(n):
    return [Host(f"rig{i}", f"10.0.0.{i}", 22, None, None, None, None, ("all",), {}) for i in range(n)]


def test_batches_by_count_and_percentage():
    assert [len(b) for b in batches(hosts(5), "2")] == [2, 2, 1]
    assert [len(b) for b in batches(hosts(10), "30%")] == [3, 3, 3, 1]
    assert [len(b) for b in batches(hosts(3), "10%")] == [1, 1, 1]  # at least one rig
    assert [len(b) for b in batches(hosts(4), None)] == [4]
    assert batches([], None) == []
