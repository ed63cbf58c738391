"""The smoke shared base trained under ``accelerate launch`` (``lmstudy.base.train_base``): its data preparation
must run once, on the main process, and every process must train on the same streams.

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 tests/prepare_multi.py RUNS_DIR

Every process prints one JSON line: its rank, how many processes accelerate saw (training with it), how many times
it wrote the data streams itself, the sha256 of the train stream it trained on, and the base's final validation loss.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ["LMSTUDY_RUNS"] = sys.argv[1]

import torch  # noqa: E402

torch.set_num_threads(1)

from lmstudy import base  # noqa: E402
from lmstudy.runs import leave_process_group, process_state  # noqa: E402

writes = 0
write_data = base._write_data


def counted_write_data(*args, **kwargs):
    global writes
    writes += 1
    return write_data(*args, **kwargs)


base._write_data = counted_write_data
config = base.final_config("smoke")
metrics = base.train_base(config)
train_bin = base.prepare_data(config.data).path / "train.bin"
line = json.dumps({"rank": int(os.environ.get("RANK", "0")), "processes": process_state().num_processes,
                   "writes": writes, "train_sha": hashlib.sha256(train_bin.read_bytes()).hexdigest(),
                   "val_loss": metrics["val_loss"]})
# One write of the line and its newline (print writes them apart, unbuffered under the launcher): the two processes'
# lines once came out as one line. A write this short to a pipe is atomic.
sys.stdout.flush()
os.write(sys.stdout.fileno(), (line + "\n").encode())
leave_process_group()
sys.stdout.flush()
os._exit(0)  # as tests/train_multi.py: skip the teardown where torch.distributed's threads can abort
