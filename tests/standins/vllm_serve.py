"""``vllm serve <model> --omni --port N`` as a process: the vLLM-Omni stand-in (servers.FakeVllmOmni)
started by a worker's ``serve_command``. Like vLLM, it answers nothing until its model is "loaded"
(``--startup-seconds``), then ``GET /health`` with 200; SIGTERM stops it.

Usage: python tests/standins/vllm_serve.py serve MODEL --omni --port N [--startup-seconds S]
       [--gen-seconds G] [--folder DIR] [--pid-file FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.standins.servers import FakeVllmOmni  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--omni", action="store_true")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--startup-seconds", type=float, default=1.0)
    parser.add_argument("--gen-seconds", type=float, default=0.3)
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--pid-file", type=Path, default=None)
    args, _unknown = parser.parse_known_args()  # vLLM's many engine flags are accepted and ignored
    if not args.omni:
        sys.exit("vllm serve without --omni serves no video API")
    if args.pid_file:
        args.pid_file.write_text(str(os.getpid()))
    print(f"loading {args.model} ...", flush=True)
    time.sleep(args.startup_seconds)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="vllm-serve-"))
    server = FakeVllmOmni(folder, model=args.model, gen_seconds=args.gen_seconds, port=args.port).start()
    print(f"serving {args.model} on {server.url}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    stopped.wait()
    server.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
