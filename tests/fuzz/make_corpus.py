#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: tests/fuzz/corpus/<target>/.

The seeds are small valid and invalid inputs in each target's input layout
(see the comment at the top of tests/fuzz/<target>.cc). The files are kept
in the repository; run this again after changing a layout:
    python3 tests/fuzz/make_corpus.py
"""
import hashlib
import hmac
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x53504547
SUBSCRIBE, UPDATE, PUSH = 1, 2, 3


def header(type_, row_count=0, row_width=0, sender=0, table=0, clock=0, aux=0,
           flags=0, offset=0, magic=MAGIC, version=1):
    return struct.pack("<IHHIIqqQIIQ", magic, version, type_, sender, table, clock, aux,
                       row_count, row_width, flags, offset)


def rows(*r):
    return b"".join(struct.pack("<Q", x) for x in r)


def floats(*f):
    return b"".join(struct.pack("<f", x) for x in f)


def wire(*frames):
    """fuzz_wire's layout: count byte, two 16-bit sizes, the frames."""
    n = len(frames)
    sizes = [len(f) for f in frames[:-1]] + [0] * (3 - n)
    return bytes([n - 1]) + struct.pack("<HH", sizes[0], sizes[1]) + b"".join(frames)


WIRE = {
    "subscribe_2rows": wire(header(SUBSCRIBE, 2, 3), rows(10, 20)),
    "update_2rows": wire(header(UPDATE, 2, 3, clock=4), rows(10, 20), floats(1, 2, 3, 4, 5, 6)),
    "update_clock_only": wire(header(UPDATE, 0, 3, clock=7)),
    "update_part_more": wire(header(UPDATE, 1, 2, flags=1, offset=5), rows(100), floats(1, 2)),
    "push_0rows": wire(header(PUSH, 0, 3, clock=1, aux=1)),
    "bad_magic": wire(header(UPDATE, 0, 3, magic=0x12345678)),
    "bad_version": wire(header(UPDATE, 0, 3, version=2)),
    "short_header": wire(header(UPDATE, 0, 3)[:40]),
    "negative_clock": wire(header(UPDATE, 0, 3, clock=-1)),
    "reserved_flags": wire(header(UPDATE, 0, 3, flags=6)),
    "unknown_type": wire(header(9, 0, 3)),
    "rows_not_increasing": wire(header(UPDATE, 2, 1), rows(20, 10), floats(1, 2)),
    "rows_out_of_range": wire(header(SUBSCRIBE, 2, 1), rows(1, 5000)),
    "row_count_overflow": wire(header(UPDATE, 1 << 62, 1 << 20), rows(1), floats(1)),
    "zero_width": wire(header(UPDATE, 1, 0), rows(10), b""),
    "truncated_payload": wire(header(UPDATE, 1, 3), rows(10), floats(1, 2)[:7]),
    "routing_id": wire(b"w12", header(UPDATE, 0, 3)),
    "update_packed": wire(header(UPDATE, 2, 3, clock=4, flags=64) + rows(10, 20)
                          + floats(1, 2, 3, 4, 5, 6)),
    "push_packed": wire(header(PUSH, 1, 2, clock=1, aux=1, flags=64) + floats(7, 8)),
    "subscribe_packed": wire(header(SUBSCRIBE, 1, 3, flags=64) + rows(30)),
    "packed_short": wire(header(UPDATE, 1, 2, flags=64) + rows(10) + floats(1)),
    "empty": b"",
}

# fuzz_config: four lines of an extra table (name, num_rows, row_width,
# local; the name line UNSET: no extra table), then one line per variable,
# in this order.
CONFIG_VARS = ["GEEPS_NUM_WORKERS", "GEEPS_NUM_SHARDS", "GEEPS_NUM_CHANNELS",
               "GEEPS_READ_MY_WRITES", "GEEPS_DEFAULT_SLACK", "GEEPS_DEVICE",
               "GEEPS_DEVICE_MEMORY_BUDGET", "GEEPS_TIMEOUT_MS",
               "GEEPS_HEARTBEAT_TIMEOUT_MS", "GEEPS_MAX_MESSAGE_BYTES",
               "GEEPS_MEMORY_GUARANTEE", "GEEPS_EMULATED_COPY_BANDWIDTH",
               "GEEPS_STATS_FILE", "GEEPS_PREFETCH_DEPTH",
               "GEEPS_DETERMINISTIC_BSP"]
UNSET = b"\xff"


def lines(*values):
    return b"\n".join(v if isinstance(v, bytes) else v.encode() for v in values)


NO_TABLE = [UNSET, UNSET, UNSET, UNSET]

CONFIG = {
    "all_valid": lines(*NO_TABLE, "2", "2", "3", "1", "0", "host", "1048576", "30000",
                       "10000", "65536", "double", "1000000000", "/tmp/stats.json", "4"),
    "all_unset": lines(*NO_TABLE, *[UNSET] * len(CONFIG_VARS)),
    "empty": b"",
    "workers_only": lines(*NO_TABLE, "4"),
    "bad_integer": lines(*NO_TABLE, "three", UNSET, UNSET),
    "out_of_range": lines(*NO_TABLE, "1", "4096", "64", "2", "-1", "gpu", "-5", "0", "9", "63",
                          "all", "-1", "", "65"),
    "overflow": lines(*NO_TABLE, "99999999999999999999", "+1", " 2", "1 "),
    "extra_table": lines("t", "100", "4", "0", "1", "1", "1", "0", "0", "auto", "0", "1", "10",
                         "64", "none", "0", UNSET, "0"),
    "local_table": lines("l", "5", "2", "1", *[UNSET] * 10, "cache"),
    "bad_table": lines("fixed", "0", "16777217", "1"),
    "huge_table": lines("h", "4294967296", "16777216", "0"),
    "nul_in_value": lines(*NO_TABLE, "2\x003"),
}

# fuzz_process_env: one line per variable, then the host list file.
ENV_VARS = ["GEEPS_RANK", "GEEPS_WORLD_SIZE", "GEEPS_LOCAL_RANK",
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
            "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
            "GEEPS_COORDINATOR", "GEEPS_COORDINATOR_PORT", "GEEPS_HOSTFILE"]
U9 = [UNSET] * 9

PROCESS_ENV = {
    "geeps": lines("1", "4", "1", *[UNSET] * 6, "127.0.0.1:29500", UNSET, UNSET),
    "openmpi": lines(UNSET, UNSET, UNSET, "3", "8", "1", UNSET, UNSET, UNSET,
                     "[::1]:29500", UNSET, UNSET),
    "slurm": lines(*[UNSET] * 6, "0", "1", "0", "node-1.cluster:80", UNSET, UNSET),
    "nothing": lines(*[UNSET] * 12),
    "empty": b"",
    "rank_out_of_range": lines("4", "4", UNSET, *[UNSET] * 6, "host:0", UNSET, UNSET),
    "bad_integers": lines("-0", "2147483648", "x", "1", "", "1", *[UNSET] * 6),
    "ipv6_unbracketed": lines(*U9, "fe80::1:29500", UNSET, UNSET),
    "ipv6_zone": lines(*U9, "[fe80::1%eth0]:65535", UNSET, UNSET),
    "hostfile": lines(*U9, UNSET, "29501", "x",
                      "# hosts\nnode1 slots=2 max_slots=4\nnode2\n\n10.0.0.3 slots=1"),
    "hostfile_bad": lines(*U9, UNSET, "0", "x", "node1:80\nnode2 slots=0\nnode3 foo=1"),
    "hostfile_missing": lines(*U9, UNSET, UNSET, "missing"),
    "hostfile_empty": lines(*U9, UNSET, UNSET, "x", "# nothing\n\n"),
}


# fuzz_checkpoint's MAC key: CheckpointKeyFromSecret of this secret.
FUZZ_SECRET = b"fuzz-key-fuzz-key-fuzz-key-fuzz-key-0000"


def checkpoint(tables, fingerprint=0x1234, partition=0, partitions=1, clock=4, mac=False):
    """A checkpoint file (src/server/checkpoint.h): header, entries, [MAC,] CRC-32."""
    body = b"".join(struct.pack("<IIQQ", t, w, first, count) + floats(*values)
                    for t, w, first, count, values in tables)
    size = 64 + len(body) + (32 if mac else 0) + 4
    head = (b"GEEPSCKP" + struct.pack("<IIQQIIqIIQ", 1, 64, size, fingerprint, partition,
                                      partitions, clock, len(tables), 1 if mac else 0, 0))
    data = head + body
    if mac:
        key = hashlib.blake2b(b"libgeeps checkpoint MAC key v1\0" + FUZZ_SECRET,
                              digest_size=32).digest()
        data += hmac.new(key, data, hashlib.sha256).digest()
    return data + struct.pack("<I", zlib.crc32(data) & 0xFFFFFFFF)


CHECKPOINT = {
    "one_table": checkpoint([(0, 2, 0, 2, [1, 2, 3, 4])]),
    "two_tables": checkpoint([(0, 1, 4, 3, [1, 2, 3]), (2, 3, 0, 1, [5, 6, 7])],
                             partition=1, partitions=2, clock=9),
    "no_tables": checkpoint([]),
    "keyed_one_table": checkpoint([(0, 2, 0, 2, [1, 2, 3, 4])], mac=True),
    "bad_crc": checkpoint([(0, 2, 0, 1, [1, 2])])[:-1] + b"\x00",
    "truncated": checkpoint([(0, 2, 0, 2, [1, 2, 3, 4])])[:70],
    "empty": b"",
}

# fuzz_control: byte 0 picks the decoder, byte 1 its parameter (fuzz_control.cc).
CONTROL = {
    "hello_worker": b"\x00\x02HELLO 3 4660 2 1 0",
    "hello_shard": b"\x00\x01HELLO 2 4660 1 0 1 tcp://127.0.0.1:5001",
    "hello_ckpt": b"\x00\x01HELLO 2 4660 1 0 1 tcp://h:1 CKPT 2 0 4 1 8",
    "welcome_two": b"\x01\x09WELCOME 2\n0 0 1 tcp://a:1\n1 1 0",
    "welcome_resume": b"\x01\x09WELCOME 2\n0 0 1 tcp://a:1\n1 2 1 tcp://b:2\nRESUME 8",
    "peer_id": b"\x02\x00r12.0123abcd4567ef89",
    "lost": b"\x03\x07LOST 3",
}


def write(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    assert len(header(UPDATE)) == 56
    write("fuzz_wire", WIRE)
    write("fuzz_config", CONFIG)
    write("fuzz_process_env", PROCESS_ENV)
    write("fuzz_checkpoint", CHECKPOINT)
    write("fuzz_control", CONTROL)
