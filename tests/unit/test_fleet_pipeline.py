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


def farm(servers, agents):
    made = [Host(f"srv{i}", f"10.0.1.{i}", 22, None, None, None, None, ("all", "k3s_server"), {}) for i in range(servers)]
    return made + [Host(f"agt{i}", f"10.0.2.{i}", 22, None, None, None, None, ("all", "k3s_agent"), {})
                   for i in range(agents)]


def runs_of(monkeypatch, rigs, batch):
    """The rigs of each ansible-playbook run that run_batches starts (the runner replaced: no rig is reached)."""
    from miner2provider.detect.ssh import SshOptions
    from miner2provider.fleet import pipeline
    from miner2provider.fleet.runner import HostStats, RunReport

    runs = []

    def run_playbook(playbook, fleet, extravars, *, limit, **kwargs):
        runs.append(list(limit))
        return RunReport("successful", 0, {name: HostStats(ok=1) for name in limit})

    monkeypatch.setattr(pipeline, "run_playbook", run_playbook)
    triage = {h.name: pipeline.Triage() for h in rigs}
    outcomes = pipeline.run_batches("convert", rigs, rigs, {h.name: {} for h in rigs}, triage, SshOptions(),
                                    pipeline.RunOptions(batch=batch))
    assert set(outcomes) == {h.name for h in rigs}
    return runs


def test_a_farm_without_batches_is_one_run_and_rolling_batches_take_servers_first(monkeypatch):
    """One run: the playbook's play order keeps servers' k3s before agents' (convert.yml), and the mining OS and
    GPU stack run on both side by side; --batch: servers in runs of their own first (k3s's upgrade order)."""
    rigs = farm(2, 3)
    agents_first = rigs[2:] + rigs[:2]  # the inventory's order is not what decides
    assert runs_of(monkeypatch, agents_first, None) == [[h.name for h in agents_first]]
    assert runs_of(monkeypatch, agents_first, "2") == [["srv0", "srv1"], ["agt0", "agt1"], ["agt2"]]
    assert runs_of(monkeypatch, agents_first, "50%") == [["srv0"], ["srv1"], ["agt0", "agt1"], ["agt2"]]


def test_the_convert_playbook_runs_the_servers_k3s_play_before_the_agents_play():
    """What one run relies on: in convert.yml the play that installs k3s on servers comes before the agents'."""
    import yaml

    from miner2provider.core import collection

    plays = yaml.safe_load(collection.playbook("convert").read_text())
    k3s_plays = [p["hosts"] for p in plays if "m2p.rigs.k3s" in p.get("roles", [])]
    assert k3s_plays == ["all:!k3s_agent", "k3s_agent"], k3s_plays
