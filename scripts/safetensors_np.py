"""safetensors_np.py: Hugging Face's safetensors format, read and written with numpy only.

The format: 8 bytes, a little-endian uint64 N (the header's size); N bytes of UTF-8 JSON, an object that maps
each tensor's name to {"dtype": "F32" | "BF16" | ..., "shape": [...], "data_offsets": [begin, end]} (byte offsets
into the data that follows the header) and may hold "__metadata__", an object of strings; then the data: every
tensor's raw little-endian bytes, row-major. The writer of the reference implementation pads the header with
spaces to a multiple of 8 (so that every tensor starts aligned); the data is contiguous, with no holes, no overlaps
and nothing after the last tensor. This reader checks all of that and refuses anything else with a BadFile
naming the file, what was expected and what was found, before any tensor is used. BF16 has no numpy type: its
tensors are read and written as uint16 bit patterns (the caller knows they are BF16 from the dtype)."""
import json
import os
import struct

import numpy as np

# safetensors dtype -> numpy dtype (little-endian); BF16 as its bits
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}
MAX_HEADER = 100 << 20  # the reference implementation's limit on the header's size


class BadFile(Exception):
    """a file that is not what it should be; the message names it, what was expected and what was found"""


def read(path):
    """(tensors, metadata): tensors a dict name -> (dtype name, numpy array) in the header's order, metadata the
    __metadata__ dict (empty if none). Raises BadFile on anything malformed."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadFile("%s: cannot read: %s" % (path, e.strerror or e))
    if len(data) < 8:
        raise BadFile("%s: expected a safetensors file (an 8-byte header size first), found %d bytes" % (path, len(data)))
    (n,) = struct.unpack("<Q", data[:8])
    if n < 2 or n > MAX_HEADER or 8 + n > len(data):
        raise BadFile("%s: expected a header size of 2 .. min(%d, the %d bytes after it), found %d"
                      % (path, MAX_HEADER, len(data) - 8, n))
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadFile("%s: expected a JSON header of %d bytes, found one that does not parse (%s)" % (path, n, e))
    if not isinstance(header, dict):
        raise BadFile("%s: expected a JSON object as the header, found %s" % (path, type(header).__name__))
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise BadFile("%s: expected __metadata__ to map strings to strings, found %r" % (path, meta))
    body = memoryview(data)[8 + n:]
    spans, tensors = [], {}
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise BadFile("%s: tensor %s: expected dtype, shape and data_offsets, found %r" % (path, name, info))
        dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in DTYPES:
            raise BadFile("%s: tensor %s: expected a dtype of %s, found %r" % (path, name, " ".join(DTYPES), dt))
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise BadFile("%s: tensor %s: expected a shape of integers >= 0, found %r" % (path, name, shape))
        if (not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
                or not 0 <= offs[0] <= offs[1] <= len(body)):
            raise BadFile("%s: tensor %s: expected data_offsets [begin, end] within the %d data bytes, found %r"
                          % (path, name, len(body), offs))
        item = np.dtype(DTYPES[dt]).itemsize
        want = item * int(np.prod(shape, dtype=np.int64))
        if offs[1] - offs[0] != want:
            raise BadFile("%s: tensor %s: expected %d bytes for %s %s, found data_offsets %r (%d bytes)"
                          % (path, name, want, dt, shape, offs, offs[1] - offs[0]))
        spans.append((offs[0], offs[1], name))
        tensors[name] = (dt, np.frombuffer(body[offs[0]:offs[1]], dtype=DTYPES[dt]).reshape(shape))
    # the data: the tensors back to back, from byte 0 to the file's end
    at = 0
    for b, e, name in sorted(spans):
        if b != at:
            raise BadFile("%s: tensor %s: expected its data to start at byte %d (contiguous data), found %d"
                          % (path, name, at, b))
        at = e
    if at != len(body):
        raise BadFile("%s: expected %d data bytes (the end of the last tensor), found %d" % (path, at, len(body)))
    return tensors, meta


def write(path, tensors, metadata=None):
    """writes tensors (a list of (name, dtype name, numpy array), in that order) and metadata (strings) to path:
    through path + ".tmp", renamed when complete, so that path never holds a partial file"""
    header, at = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    blobs = []
    for name, dt, a in tensors:
        a = np.ascontiguousarray(a, dtype=DTYPES[dt])
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
        blobs.append(a)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # as the reference writer: the data starts 8-byte aligned
    write_atomic(path, [struct.pack("<Q", len(text)), text] + [b.tobytes() for b in blobs])


def write_atomic(path, parts):
    """parts (bytes) to path through path + ".tmp": written, fsynced, renamed; the temporary file removed on failure"""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            for p in parts:
                f.write(p)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise BadFile("%s: cannot write: %s" % (path, e.strerror or e))
