#!/usr/bin/env python3
"""Rewrites a container's own compute-board slot file to look like a busy high-priority
container (docs/security.md, "Task priority"): priority_forger.py SLOT_FILE SECONDS.

Every 200 us it claims process slot 0 with a made-up owner, a fresh heartbeat and work
pending since now, clears the file's low_mask (the bits that lower a process's priority)
and sets idle_at (when a high process last drained) to now. The layout is struct
vgc_slot_file in src/libvgpu/compute.h: magic, turn_held, low_mask, idle_at, 4 spare
words, then 16 process slots of 64 bytes (owner, container, heartbeat, flips, pending
u32, claim u32, share, pend_ns, pend_since). It uses no GPU."""
import mmap
import os
import struct
import sys
import time


def main():
    if len(sys.argv) != 3:
        print("usage: priority_forger.py SLOT_FILE SECONDS", file=sys.stderr)
        return 2
    path, seconds = sys.argv[1], float(sys.argv[2])
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, 64 + 16 * 64)
    os.close(fd)
    owner = (os.getpid() << 32) | 0x5eed | 1
    flips = 0
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        flips += 1
        struct.pack_into("<QQ", m, 16, 0, now)  # low_mask, idle_at
        struct.pack_into("<QQqQIIqqq", m, 64, owner, 7, now, flips, 1, 0, 0, 0, now - 1000)
        time.sleep(0.0002)
    m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
