"""Stand-in for torchrun: ``torchrun --nproc-per-node N [--master-port P] script args...``.

Records its own argv and environment, then runs N copies of the script with RANK, LOCAL_RANK,
WORLD_SIZE and MASTER_PORT set, as torchrun does, and exits with the first failing rank's status.
Terminating it (SIGTERM to the group) ends the ranks too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from tests.standins.common import record


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc", type=int, required=True)
    parser.add_argument("--master-port", "--master_port", dest="port", type=int, default=29500)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    record("torchrun", nproc=ns.nproc, master_port=ns.port, script=ns.script)
    ranks = []
    for rank in range(ns.nproc):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(ns.nproc),
            MASTER_PORT=str(ns.port),
        )
        ranks.append(subprocess.Popen([sys.executable, ns.script, *ns.args], env=env))
    # Like torchrun: when a rank fails, stop the others and exit with the failure.
    while True:
        codes = [p.poll() for p in ranks]
        failed = next((c for c in codes if c not in (None, 0)), None)
        if failed is not None:
            for p in ranks:
                if p.poll() is None:
                    p.terminate()
            for p in ranks:
                p.wait()
            return failed
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
