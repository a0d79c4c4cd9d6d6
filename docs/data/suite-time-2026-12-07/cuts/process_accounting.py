"""How process_accounting.txt was made (2026-12-07, AMD EPYC family 25 model 1): Linux process
accounting (Debian's acct: `accton FILE`) on while pytest ran six main-suite modules on three
workers, then this script over FILE: each exited process's CPU time by its command name (the
name of the thread that exited last: collectors, which import pyarrow, end as jemalloc_bg_thd).
Records are struct acct_v3 (linux/acct.h), 64 bytes, times in comp_t ticks of 1/100 s."""

from __future__ import annotations

import collections
import statistics
import struct
import sys

RECORD = struct.Struct("<BBHIIIIIIf8H16s")


def comp(value: int) -> int:
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (((value >> 13) & 7) * 3)


def main(path: str) -> None:
    data = open(path, "rb").read()  # noqa: SIM115
    by_name: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        seconds = (comp(fields[10]) + comp(fields[11])) / 100
        name = fields[18].split(b"\0")[0].decode(errors="replace")
        by_name[name].append((seconds, fields[9] / 100))
    total = sum(s for runs in by_name.values() for s, _ in runs)
    print(f"all processes: {sum(map(len, by_name.values()))}, {total:.0f} CPU-s")
    for name, runs in sorted(by_name.items(), key=lambda kv: -sum(s for s, _ in kv[1])):
        cpu = sum(s for s, _ in runs)
        if cpu >= 1:
            median = statistics.median(s for s, _ in runs)
            print(f"{name:18s} n={len(runs):4d} cpu={cpu:7.1f} s  median={median:5.2f} s")
    short = [s for s, elapsed in by_name["jemalloc_bg_thd"] if elapsed <= 200]
    print(
        f"collector runs (jemalloc_bg_thd, under 200 s): n={len(short)} cpu={sum(short):.0f} s "
        f"median={statistics.median(short):.2f} s"
    )


if __name__ == "__main__":
    main(sys.argv[1])
