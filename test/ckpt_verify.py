#!/usr/bin/env python3
"""ckpt_verify.py: the checkpoints' checksums, recomputed independently of the trainer.

  ckpt_verify.py DIR            every ckpt_* directory of DIR that has a manifest, against it (llm/ckpt/ckpt_shard.h's
                                format): the first line, the "complete" line, each listed shard's size and checksum.
                                Prints "ok" or what is wrong, then the complete directories. (test_checkpoint.sh,
                                test_faults_precision.sh)
  ckpt_verify.py --file F...    state files (state_<step>.bin) and llm.c model files: the checksum their header holds
                                (llm/ckpt/checkpoint.h: state header[35..37], model header[253..255]) against the bytes.
                                Prints "F: ok", "F: no checksum" or "F: checksum X, header says Y"; exit 1 on a mismatch.
  ckpt_verify.py --seal F       recomputes and writes the checksum of a state file whose header a test changed on
                                purpose (so that the trainer's range checks, not its checksum, must refuse it)

The checksum (llm/core/atomic_file.h's ckpt_sum): FNV-1a's step h = (h ^ w) * P over the little-endian 64-bit words of
the bytes in 4 lanes (word i to lane i mod 4; lane k starts at the FNV offset basis ^ k; the bytes zero-padded to a
multiple of 32), then the 4 lanes and the byte count, as 40 little-endian bytes, folded by FNV-1a of bytes. Manifests
of version 1 hold FNV-1a 64 of the bytes instead."""
import os, struct, sys

P, M, START = 1099511628211, (1 << 64) - 1, 14695981039346656037
MARK = 0x4d555343  # "CSUM"


def ckpt_sum(data):
    pad = data + b"\0" * (-len(data) % 32)
    words = struct.unpack("<%dQ" % (len(pad) // 8), pad)
    lanes = [START ^ k for k in range(4)]
    for k in range(4):
        h = lanes[k]
        for w in words[k::4]: h = ((h ^ w) * P) & M
        lanes[k] = h
    h = START
    for b in struct.pack("<5Q", *lanes, len(data)): h = ((h ^ b) * P) & M
    return h


def fnv1a(data):
    h = START
    for b in data: h = ((h ^ b) * P) & M
    return h


def sum_slot(data):
    """the header slot of the file's checksum: state files (magic 20261122) 35, llm.c model files 253"""
    magic = struct.unpack("<i", data[:4])[0]
    return 35 if magic == 20261122 else 253


def file_sum(data, slot):
    """(the checksum the header holds or None, the checksum of the bytes with the three slots zeroed)"""
    mark, lo, hi = struct.unpack("<3i", data[4 * slot:4 * slot + 12])
    zeroed = data[:4 * slot] + b"\0" * 12 + data[4 * slot + 12:]
    held = ((hi & 0xffffffff) << 32 | (lo & 0xffffffff)) if (mark & 0xffffffff) == MARK else None
    return held, ckpt_sum(zeroed)


def check_dirs(root):
    bad, complete = [], []
    for d in sorted(x for x in os.listdir(root) if x.startswith("ckpt_")):
        m = os.path.join(root, d, "manifest.txt")
        if not os.path.exists(m): continue
        lines = open(m).read().split("\n")
        if lines[0] not in ("llm-ckpt manifest 1", "llm-ckpt manifest 2") or "complete" not in lines:
            bad.append(d + ": manifest incomplete"); continue
        for l in lines:
            if not l.startswith("shard "): continue
            _, r, name, size, h = l.split()
            data = open(os.path.join(root, d, name), "rb").read()
            x = fnv1a(data) if lines[0].endswith(" 1") else ckpt_sum(data)
            if len(data) != int(size) or x != int(h, 16):
                bad.append("%s/%s: %d bytes %016x, manifest %s %s" % (d, name, len(data), x, size, h))
        complete.append(d)
    print("ok" if not bad else "; ".join(bad), " ".join(complete))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--file":
        worst = 0
        for path in sys.argv[2:]:
            data = open(path, "rb").read()
            held, got = file_sum(data, sum_slot(data))
            if held is None: print("%s: no checksum" % path)
            elif held == got: print("%s: ok" % path)
            else: print("%s: checksum %016x, header says %016x" % (path, got, held)); worst = 1
        sys.exit(worst)
    if len(sys.argv) == 3 and sys.argv[1] == "--seal":
        data = bytearray(open(sys.argv[2], "rb").read())
        slot = sum_slot(bytes(data))
        _, got = file_sum(bytes(data), slot)
        data[4 * slot:4 * slot + 12] = struct.pack("<iII", MARK, got & 0xffffffff, got >> 32)
        open(sys.argv[2], "wb").write(bytes(data))
        return
    check_dirs(sys.argv[1])


if __name__ == "__main__":
    main()
