"""The culprit host (issue 36, item 6): the far end a line names is blamed, not the host that printed it;
addresses become Slurm node names through the job's NodeAddr (docs/log-ingest.md, "Which host a line
blames"), and the observer reports each node's NodeAddr and the nodes Slurm has given up on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relaunch.actuator.domain.node_facts import facts_from_sinfo
from relaunch.actuator.domain.rest_values import facts_from_rest
from relaunch.common.diagnosis.classifying import classify
from relaunch.common.diagnosis.peers import node_of, nodes_named, pointed_at
from relaunch.common.diagnosis.scanning import scanner_for
from relaunch.common.diagnosis.signatures import builtin_catalogue

REST = Path(__file__).resolve().parents[1] / "fixtures" / "slurmrest"
ADDRS = {"node3": "10.0.0.3", "node4": "10.0.0.4", "node5": "10.0.0.5"}


@pytest.mark.parametrize("line, names, addresses", [
    # NCCL net_ib.cc, 2.18 ("with error N, opcode ...") and 2.19-2.27 ("with status=N opcode=...").
    ("node3:2229:2266 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.4<43210> "
     "with error 12, opcode 0, len 0, vendor err 129", (), ("10.0.0.4",)),
    ("node3:2229:2266 [0] transport/net_ib.cc:2034 NCCL WARN NET/IB : Got completion from peer 10.0.0.4<43210> with "
     "status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.3 remoteGids::ffff:10.0.0.4", (),
     ("10.0.0.4",)),
    # NCCL socket.cc: "Connection closed by remote peer" (2.19+ "socketProgress:", older "Net :"), a resolved
    # name (numericHostForm 0) or a number, IPv4-mapped IPv6.
    ("node3:2229:2270 [1] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
     "node4.cluster<52170>", ("node4.cluster",), ()),
    ("node3:2229:2270 [1] misc/socket.cc:50 NCCL WARN Net : Connection closed by remote peer ::ffff:10.0.0.4<52170>",
     (), ("10.0.0.4",)),
    ("NCCL WARN Net : Call to recv from 10.0.0.4<43210> failed : Connection reset by peer", (), ("10.0.0.4",)),
    ("[Rank 3] NCCL error: remote process exited or there was a network error, NCCL version 2.21.5; last error: "
     "NET/IB : Got completion from peer 10.0.0.4<43210> with status=12", (), ("10.0.0.4",)),
    ("peer fe80::1%ib0<43210> went away", (), ("fe80::1%ib0",)),
    # gloo (torch's CPU backend), "[address]:port".
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.4]:29500", (),
     ("10.0.0.4",)),
    ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.0.4]:29500: "
     "Connection reset by peer", (), ("10.0.0.4",)),
    # Ray's GCS on a node it gave up on.
    ("The node with node id: 4f6c1a and address: 10.0.0.4 and node name: 10.0.0.4 has been marked dead because the "
     "detector has missed too many heartbeats from it.", (), ("10.0.0.4",)),
])
def test_a_line_that_names_its_far_end_points_at_it(line, names, addresses):
    found = pointed_at(line)
    assert (found.peer, found.names, found.addresses) == (True, names, addresses)


@pytest.mark.parametrize("line, address", [
    ("(RayTrainWorker pid=1234, ip=10.0.0.5) RuntimeError: CUDA error: uncorrectable ECC error encountered",
     "10.0.0.5"),
    ("(pid=1234, ip=10.0.0.5) torch.OutOfMemoryError: CUDA out of memory.", "10.0.0.5"),
    ("0: (RayTrainWorker pid=1234, ip=10.0.0.5) [rank0]: RuntimeError: CUDA error: uncorrectable ECC error",
     "10.0.0.5"),
    ("(raylet, ip=10.0.0.5) [2026-12-04 10:00:00] NVRM: Xid 79", "10.0.0.5"),
    ("worker failed: {'node_ip_address': '10.0.0.5', 'pid': 1234}", "10.0.0.5"),
])
def test_without_a_far_end_the_printing_hosts_address_is_taken(line, address):
    found = pointed_at(line)
    assert (found.peer, found.names, found.addresses) == (False, (), (address,))


def test_addresses_become_the_node_with_that_node_addr_and_shared_ones_name_none():
    assert node_of("10.0.0.4", ADDRS) == "node4"
    assert node_of("::ffff:10.0.0.4", ADDRS) == "node4"
    assert node_of("10.9.9.9", ADDRS) is None
    assert node_of("127.0.0.1", {"node1": "127.0.0.1", "node2": "127.0.0.1"}) is None  # shared: names none
    assert node_of("node4", ADDRS) == "node4"  # a node name is itself
    assert node_of("gpu4-ib", {"node4": "gpu4-ib.fabric", "node5": "gpu5-ib.fabric"}) == "node4"
    assert nodes_named(["node5"], ["10.0.0.4", "10.9.9.9"], ADDRS) == ["node5", "node4"]
    assert nodes_named(["node5"], ["10.0.0.4"], {}) == ["node5"]  # offline: no mapping, an address stays one


SCANNER = scanner_for(builtin_catalogue())


def root(*lines: str):
    return classify(SCANNER.scan(list(lines)))


def test_the_classification_blames_the_peer_not_the_host_that_printed_the_line():
    found = root("node3:2229:2266 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.4<43210> with error 12, "
                 "opcode 0, len 0, vendor err 129")
    assert (found.nodes, found.addresses) == ((), ("10.0.0.4",))
    found = root("node3:2229:2266 [0] NCCL WARN NET/IB : Got completion from peer node4<43210> with error 12, "
                 "opcode 0, len 0, vendor err 129")
    assert (found.nodes, found.addresses) == (("node4",), ())
    found = root("(RayTrainWorker pid=1234, ip=10.0.0.5) RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert (found.nodes, found.addresses) == ((), ("10.0.0.5",))
    # Slurm's NODE FAILURE line is printed by a survivor: it blames no node (the down node is Slurm's word).
    found = root("slurmstepd-node3: error: *** STEP 2.0 ON node3 CANCELLED AT 2026-12-04T10:00:00 DUE TO NODE "
                 "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")
    assert found.category == "slurm_node_failure" and (found.nodes, found.addresses) == ((), ())


def test_sinfo_gives_each_nodes_address_and_the_nodes_slurm_gave_up_on():
    # `sinfo -h -N -o '%R|%N|%t|%o'`: the same text on 22.05, 24.11 and 26.05 (docs/slurm-versions.md).
    facts = facts_from_sinfo("debug|node1|idle|10.0.0.1\ndebug|node2|alloc|10.0.0.2\ndebug|node3|down*|10.0.0.3\n"
                             "debug|node4|idle*|10.0.0.4\ndebug|node5|drain|node5\ngpu|node1|idle|10.0.0.1\n"
                             "gpu|node6|fail|10.0.0.6\n")
    assert facts.usable == {"debug": 2, "gpu": 1}
    assert facts.addrs_of(["node1", "node5", "node9"]) == {"node1": "10.0.0.1", "node5": "node5"}
    assert facts.down_of(["node2", "node3", "node4", "node5", "node6"]) == ["node3", "node4", "node6"]


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_slurmrestd_nodes_give_each_nodes_address_and_state(release):
    answer = json.loads((REST / release / "nodes.json").read_text())
    facts = facts_from_rest(answer)
    assert facts.addrs["node1"] == "127.0.0.1" and facts.usable == {"debug": 4} and not facts.down
    answer["nodes"][3]["state"] = ["IDLE", "NOT_RESPONDING"]
    answer["nodes"][2]["state"] = ["DOWN"]
    answer["nodes"][1]["state"] = ["IDLE", "DRAIN"]
    answer["nodes"][1]["address"] = "10.0.0.2"
    facts = facts_from_rest(answer)
    names = [n["name"] for n in answer["nodes"]]
    assert facts.down == {names[2], names[3]} and facts.addrs[names[1]] == "10.0.0.2"


def test_relaunch_classify_says_an_address_stays_an_address_offline():
    from typer.testing import CliRunner

    from relaunch.client.cli import app

    line = ("node3:2229:2266 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.4<43210> with error 12, opcode 0, "
            "len 0, vendor err 129\n")
    result = CliRunner().invoke(app, ["classify", "-"], input=line)
    assert result.exit_code == 0, result.output
    assert "addresses 10.0.0.4 (offline no address is mapped to its Slurm node" in result.stdout
    assert "nodes node3" not in result.stdout  # the host that printed the line is not the culprit
    result = CliRunner().invoke(app, ["classify", "--json", "-"], input=line)
    assert json.loads(result.stdout)["anomaly"]["addresses"] == ["10.0.0.4"]
