"""labctl: start, stop and inspect the lab (see tests/lab/lab.py).

    python -m tests.lab.labctl build|up|down|status|kubeconfig|restart-apiserver|restart-operator
    python -m tests.lab.labctl up [--nodes N]   a generated fleet of N nodes (inventory: <workdir>/hosts.yml)
    python -m tests.lab.labctl hold-down NODE [OPERAND...] | release NODE | reboot NODE
    python -m tests.lab.labctl cuda-fail NODE | cuda-pass NODE
    python -m tests.lab.labctl add-node NAME [--workload-config C] [--gpus N]
    python -m tests.lab.labctl rke2-binary   the real rke2's path (exit 3 and why: there is none; 1 under
                                             LAB_REQUIRE_UPSTREAM=1); builds nothing, make lab-build does
"""

import argparse
import sys

from tests.lab import upstream
from tests.lab.lab import Lab, LabError, rke2_binary

# labctl rke2-binary: no binary and none required (molecule/rke2 skips its real-binary checks).
EXIT_NO_RKE2 = 3


def main(argv=None):
    parser = argparse.ArgumentParser(prog="labctl", description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--workdir", help="lab work directory (default .lab in the repo)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the lab and roll the GPU Operator out on its fleet")
    up.add_argument("--bare", action="store_true", help="no GPU Operator HelmChart (the integration suite's start)")
    up.add_argument("--nodes", type=int, default=0, metavar="N",
                    help="a generated fleet of N nodes in the lab fleet's proportions, its inventory written to "
                         "<workdir>/hosts.yml (default: inventories/lab/hosts.yml)")
    build = sub.add_parser("build", help="build (or find cached) every lab binary and the real rke2")
    # make test builds rke2 (molecule/rke2's, nothing else needs it) while the lab suites run.
    build.add_argument("--part", choices=("all", "lab", "rke2", "operators"), default="all",
                       help="lab: what the lab runs (control plane, operator, helm tools); rke2: the real rke2 only; "
                            "operators: the real operator of every other line the lab knows (the suites of make "
                            "test ask them)")
    for name in ("down", "status", "kubeconfig", "restart-apiserver", "restart-operator", "env", "rke2-binary"):
        sub.add_parser(name)
    sub.add_parser("reboot", help="a node reboots: /run/nvidia/validations is empty again").add_argument("node")
    hold = sub.add_parser("hold-down", help="hold operand pods on a node not Ready (default container-toolkit)")
    hold.add_argument("node")
    hold.add_argument("operands", nargs="*")
    release = sub.add_parser("release", help="undo hold-down on a node")
    release.add_argument("node")
    for name in ("cuda-fail", "cuda-pass"):
        sub.add_parser(name, help="make CUDA sample pods on a node fail / pass").add_argument("node")
    add = sub.add_parser("add-node", help="a GPU node joins after start")
    add.add_argument("name")
    add.add_argument("--workload-config", default="container")
    add.add_argument("--gpus", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command == "rke2-binary":
        return _rke2_binary()

    if args.command == "up" and args.nodes < 0:
        parser.error("--nodes: %d must be 0 (the lab inventory) or more" % args.nodes)
    # up --nodes N generates the fleet; every other command reads the fleet the lab was started with.
    lab = Lab(workdir=args.workdir, nodes=args.nodes if args.command == "up" else None)
    try:
        if args.command == "build" and args.part == "operators":
            lab.build_other_operators()
        elif args.command == "build":
            lab.build(lab_binaries=args.part in ("all", "lab"), rke2=args.part in ("all", "rke2"))
        elif args.command == "env":
            for key, value in sorted(lab.env().items()):
                print("%s=%s" % (key, value))
        elif args.command == "restart-operator":
            lab.restart_operator()
        elif args.command == "reboot":
            lab.reboot(args.node)
        elif args.command == "up":
            lab.up()
            if not args.bare:
                lab.roll_out_operator()
            print(lab.status())
        elif args.command == "down":
            lab.down()
        elif args.command == "status":
            print(lab.status())
        elif args.command == "kubeconfig":
            print(lab.kubeconfig)
        elif args.command == "restart-apiserver":
            lab.restart_apiserver()
        elif args.command == "hold-down":
            lab.hold_down(args.node, *args.operands)
        elif args.command == "release":
            lab.release(args.node)
        elif args.command in ("cuda-fail", "cuda-pass"):
            lab.fail_cuda_sample(args.node, args.command == "cuda-fail")
        elif args.command == "add-node":
            lab.add_node(args.name, workload_config=args.workload_config, gpus=args.gpus)
    except (LabError, upstream.UpstreamMissing) as exc:
        print("labctl: %s" % exc, file=sys.stderr)
        return 1
    return 0


def _rke2_binary():
    try:
        print(rke2_binary(build_missing=False))
    except upstream.UpstreamMissing as exc:
        if upstream.upstream_required():
            print("labctl: %s=1 and %s" % (upstream.REQUIRE_ENV, exc), file=sys.stderr)
            return 1
        print("labctl: %s" % exc, file=sys.stderr)
        return EXIT_NO_RKE2
    return 0


if __name__ == "__main__":
    sys.exit(main())
