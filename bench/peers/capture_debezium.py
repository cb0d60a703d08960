#!/usr/bin/env python3
"""Capture reference vectors from the real Debezium MongoDB connector 3.6.3 (issue 21).

Runs Debezium (bench/peers/connect.py) on collections of documents that cover every BSON type
its default serialization handles, as field values and as `_id`s, through a snapshot and a
change stream (insert, $set incl. nested paths and array elements, $unset, $push, $pop,
replace, delete, a multi-document transaction), and saves what it wrote with the BSON it was
shown, so that our writers (src/extjson/debezium*) can be compared with it byte for byte.

Usage (with MONGODB_URI and KAFKA_BOOTSTRAP set, e.g. from `scripts/services up`):
    .cache/venv/bin/python bench/peers/capture_debezium.py OUTDIR [--no-probe]

Writes into OUTDIR (outside the repository; nothing here is committed):
  records-<run>.jsonl  every Kafka record of the run: topic, offset, key_b64, value_b64, key, value
  events-<run>.jsonl   the BSON Debezium was shown, in the order it was shown (our own change
                       stream on the same collection, RawBSONDocument, fullDocument=updateLookup;
                       the snapshot's documents from a natural-order find)
  vectors.jsonl        one line per string Debezium wrote, for the Rust replay test:
                       {"case", "writer", "bson" (base64 of a BSON document), "expected"}
                       writer: "strict" (after/before), "relaxed" (updatedFields), "key" (the
                       whole key record; bson = {"_id": v}), "removed" and "truncated" (the
                       value's removedFields/truncatedArrays as JSON; bson = updateDescription)
  refused.json         what Debezium or the server refused, with the reason seen
  probe-*.txt          with the probe (default): DebeziumJsonProbe.java's tables (escapes,
                       doubles) and probe-vectors.jsonl for inputs the server cannot store,
                       after checking the probe reproduces every connector vector
--rederive rebuilds vectors.jsonl and the probe's files from the records and events of an earlier
run in OUTDIR, without starting anything. The run takes a few minutes (one Connect worker per run, started and stopped in turn).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import random
import struct
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

import bson
import pymongo
from bson import SON, Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.datetime_ms import DatetimeMS
from bson.raw_bson import RawBSONDocument
from confluent_kafka import Consumer, TopicPartition

HERE = Path(__file__).resolve().parent
PY = sys.executable
CONNECT = str(HERE / "connect.py")
PROBE = str(HERE / "DebeziumJsonProbe.java")
URI, BOOT = os.environ["MONGODB_URI"], os.environ["KAFKA_BOOTSTRAP"]
RUN = time.strftime("%H%M%S")
DB = "dbzcap"
RAW = CodecOptions(document_class=RawBSONDocument)

# ------------------------------------------------------------------------------------ inputs
DOUBLES = [0.0, -0.0, 1.0, -1.0, 7.0, 3.25, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, 100.0, 4.35, 2.5, 1e-3, 9.99e-4,
           1e-4, 1e-7, 1.5e-7, 123456789.0, 1234567.0, 9999999.0, 1e7, 1.0000001e7, 12345678.9, 1e15,
           1e16, 1e17, 1e20, 1e21, 1e22, 1e23, 2e23, 8.41e21, 5e-324, 2.2250738585072014e-308,
           2.225073858507201e-308, 1.7976931348623157e308, 9007199254740993.0, 2.0 ** 53, 2.0 ** 63,
           2.0 ** 64, 2.0 ** 62, 2.0 ** 60 + 2.0 ** 8, 1.1e-310, 4.9e-324, 1e-300, 1e300, 3.0e10,
           1.0e-5, 5.0e-5, 0.001, 0.01, 0.5, 9.5, 1e6 + 0.5, 2.0 ** -1074, 1.2345678901234567e-8,
           float("nan"), float("inf"), float("-inf")]
DECIMALS = ["0", "-0", "1.0", "12345.678900", "0.000001", "0.0000001", "1E+3", "1.23E+40", "-1.5E-8",
            "0E-10", "0E+10", "9999999999999999999999999999999999", "1E-6176", "9.999999999999999999999999999999999E+6144",
            "NaN", "-NaN", "Infinity", "-Infinity"]
STRINGS = {
    "plain": "hello", "empty": "", "quote": 'say "hi"', "backslash": "a\\b", "slash": "a/b</c>",
    "html": "<&>'", "controls": "".join(chr(c) for c in range(1, 32)), "del": "x\x7fy", "c1": "\x80\x85\x9f",
    "nul": "a\x00b", "e_acute": "é", "check": "✓", "nbsp": "a\u00a0b", "soft_hyphen": "a\u00adb",
    "line_sep": "a\u2028b", "para_sep": "a\u2029b", "zwj": "👨\u200d👩", "zwsp": "a\u200bb",
    "combining": "e\u0301", "modifier_letter": "ʰˈ", "emoji": "😀", "cjk_ext_b": "\U00020000",
    "max_cp": "\U0010ffff", "bom": "\ufeff", "private": "\ue000", "unassigned_bmp": "\u0378",
    "newer_unicode": "\u0c5d\u1fbf\U0001fae8", "mixed": 'Zoë\t"✓"\n\\😀',
}
DATES_MS = [0, -1, 1, -86400000, 1704164645000, 1714979289000, 1714979289100, 1714979289120,
            1714979289123, 1704067200000, 946684799999, -2208988800000, -62135596800000,
            253402300799999, 60000, 1000]
# SecantusDB refuses datetimes outside years 1..9999 ("year 10000 is out of range"): the probe only.
DATES_MS_PROBE = [253402300800000, -62135596800001, 2 ** 63 - 1, -(2 ** 63)]
BINARIES = [(b"\x01\x02", 0), (b"", 0), (b"\x00\x01\xfe\xff", 0), (b"fn", 1),
            (uuid.UUID("12345678-1234-5678-1234-567812345678").bytes, 3),
            (uuid.UUID("12345678-1234-5678-1234-567812345678").bytes, 4), (b"0123456789abcdef", 5),
            (b"\x01" * 5, 6), (b"\x0a\x0b", 7), (b"\x03\x00\x01\x02", 9), (b"user", 0x80), (b"u", 0x8F),
            (b"\xff", 0xFF)]


def el(t: int, key: str, payload: bytes) -> bytes:
    return bytes([t]) + key.encode() + b"\0" + payload


def raw_doc(*els: bytes) -> bytes:
    body = b"".join(els) + b"\0"
    return struct.pack("<i", len(body) + 4) + body


def bstr(s: bytes) -> bytes:
    return struct.pack("<i", len(s) + 1) + s + b"\0"


def types_doc(_id) -> SON:
    """A document with one field per BSON type and variant (what pymongo can encode)."""
    d = SON([("_id", _id)])
    d["int32"] = [0, 1, -1, 2 ** 31 - 1, -(2 ** 31)]
    d["int64"] = [Int64(0), Int64(7), Int64(-7), Int64(2 ** 53 + 1), Int64(2 ** 63 - 1), Int64(-(2 ** 63))]
    d["doubles"] = DOUBLES
    d["double_field"] = 7.0
    d["nan"], d["inf"], d["ninf"], d["negzero"] = float("nan"), float("inf"), float("-inf"), -0.0
    d["decimals"] = [Decimal128(s) for s in DECIMALS]
    d["strings"] = SON(STRINGS)
    d["dates"] = [DatetimeMS(ms) for ms in DATES_MS]
    d["oid"] = ObjectId("65a000000000000000000001")
    d["binaries"] = [Binary(b, t) for b, t in BINARIES]
    d["regexes"] = [Regex("^ab.*c$", "i"), Regex("a/b\"c\\d", ""), Regex("x", "imsux"), Regex("é✓😀", "m")]
    d["timestamps"] = [Timestamp(1, 2), Timestamp(4294967295, 4294967295), Timestamp(0, 0)]
    d["minkey"], d["maxkey"] = MinKey(), MaxKey()
    d["null"], d["true"], d["false"] = None, True, False
    d["code"] = Code("function() { return \"x\"; }")
    d["code_w_scope"] = Code("function() { return x; }", {"x": Int64(1), "y": [1.5]})
    d["dbref"] = DBRef("coll", ObjectId("65a000000000000000000002"), "db")
    d["nested"] = SON([("a", SON([("b", [1, SON([("c", "d")]), [2, [3, []]]])])), ("e", {}), ("f", []),
                       ("g", SON([("h", SON())]))])
    d["empty_doc"], d["empty_array"] = SON(), []
    return d


KEYS = SON([("é", 1), ('a"b', 2), ("tab\tkey", 3), ("ctl\x01", 4), ("😀", 5), ("zwj\u200d", 6),
        ("line\u2028", 7), ("a.b", 8), ("", 9), ("$x", 10), ("ʰ", 11)])


def raw_types_doc(_id: int) -> bytes:
    """Types pymongo will not write as such, as hand-made BSON (the server may convert them)."""
    return raw_doc(
        el(0x10, "_id", struct.pack("<i", _id)),
        el(0x06, "undefined", b""),
        el(0x0E, "symbol", bstr(b"sym\xc3\xa9")),
        el(0x0C, "dbpointer", bstr(b"db.coll") + bytes.fromhex("65a000000000000000000003")),
        el(0x0B, "regex_unsorted", b"ab\0xmi\0"),
        el(0x05, "bin_old", struct.pack("<i", 7) + b"\x02" + struct.pack("<i", 3) + b"abc"),
        el(0x02, "nul", bstr(b"a\0b")),
    )


def bmp_docs(first_id: int) -> list[SON]:
    """Every BMP code point except the surrogates, 8192 to a document (escaping classes)."""
    cps = [c for c in range(0x0000, 0x10000) if not 0xD800 <= c <= 0xDFFF]
    return [SON([("_id", first_id + i), ("bmp", "".join(chr(c) for c in cps[k:k + 8192])),
                 ("first", cps[k])]) for i, k in enumerate(range(0, len(cps), 8192))]


def random_doubles(seed: int, n: int) -> list[float]:
    r = random.Random(seed)
    out = []
    while len(out) < n:
        kind = r.randrange(5)
        if kind == 0:  # any bit pattern
            v = struct.unpack("<d", struct.pack("<Q", r.getrandbits(64)))[0]
        elif kind == 1:  # short decimals
            v = float(f"{r.randrange(1, 10 ** r.randrange(1, 8))}e{r.randrange(-30, 30)}")
        elif kind == 2:  # 17-digit decimals
            v = float(f"{r.randrange(10 ** 16, 10 ** 17)}e{r.randrange(-330, 300)}")
        elif kind == 3:  # integers
            v = float(r.getrandbits(r.randrange(1, 64)))
        else:  # near powers of ten and two
            v = float(f"1e{r.randrange(-320, 308)}") * r.choice([1, 2, 3, 5, 8.41, 9.999999])
        if v == v and abs(v) != float("inf"):
            out.append(v)
    return out


SAFE_IDS = {  # name -> (snapshot _id, stream _id)
    "int32": (1, 101), "int64_small": (Int64(2), Int64(102)), "int64_big": (Int64(9007199254740993), Int64(-(2 ** 63))),
    "double_frac": (2.5, -0.5), "double_integral": (3.0, 1e20), "double_tiny": (1.5e-7, 2e23),
    "string": ("alpha", 'q"uo\\te é ✓ 😀 \u2028 \x01'), "string_empty": ("", "\u200d"),
    "objectid": (ObjectId("65a000000000000000000001"), ObjectId("65a0000000000000000000ff")),
    "uuid": (Binary(uuid.UUID("00000000-0000-0000-0000-000000000001").bytes, 4),
             Binary(uuid.UUID("12345678-1234-5678-1234-567812345678").bytes, 4)),
    "binary": (Binary(b"\x01\x02", 0), Binary(b"\xff", 0x80)),
    "date": (DatetimeMS(1704067200000), DatetimeMS(1714979289123)),
    "date_before_1970": (DatetimeMS(-86400000), DatetimeMS(-1)),
    "document": (SON([("region", "eu"), ("n", 1)]),
                 SON([("a", Int64(5)), ("d", DatetimeMS(1704067200000)), ("b", Binary(b"\x01", 0)), ("x", [1, 2.0])])),
    "decimal": (Decimal128("1.50"), Decimal128("-1E+3")),
}
RISKY_IDS = {  # types a MongoDB server accepts as _id but that are less usual; SecantusDB-only ones marked
    "true": True, "null": None, "minkey": MinKey(), "maxkey": MaxKey(), "timestamp": Timestamp(5, 6),
    "code": Code("x"), "code_w_scope": Code("y", {"a": 1}), "nan": float("nan"), "inf": float("inf"),
    "date_epoch": DatetimeMS(0), "date_year_9999": DatetimeMS(253402300799999),
    "decimal_nan": Decimal128("NaN"), "doc_nested": SON([("k", SON([("z", [1, SON([("q", None)])])]))]),
    "empty_doc": SON(), "regex (server-specific)": Regex("a", "i"), "array (server-specific)": [1, 2],
}


# ------------------------------------------------------------------------------------ running
def cli(*args: str) -> str:
    out = subprocess.run([PY, CONNECT, *args], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"connect.py {args[0]} failed:\n{out.stderr}")
    return out.stdout


def count(topic: str) -> int:
    c = Consumer({"bootstrap.servers": BOOT, "group.id": "dbz-capture-count"})
    try:
        md = c.list_topics(topic, timeout=10)
        if topic not in md.topics or md.topics[topic].error:
            return 0
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.topics[topic].partitions)
    finally:
        c.close()


def read_all(topic: str) -> list[dict]:
    want = count(topic)
    c = Consumer({"bootstrap.servers": BOOT, "group.id": f"dbz-capture-{RUN}-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.message.max.bytes": 10485760})
    c.assign([TopicPartition(topic, 0, 0)])
    rows, deadline = [], time.time() + 60
    while len(rows) < want and time.time() < deadline:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        k, v = m.key(), m.value()
        rows.append({"topic": m.topic(), "offset": m.offset(),
                     "key_b64": base64.b64encode(k).decode() if k is not None else None,
                     "value_b64": base64.b64encode(v).decode() if v is not None else None,
                     "key": k.decode() if k is not None else None, "value": v.decode() if v is not None else None})
    c.close()
    return rows


def status(info: dict) -> dict:
    return json.loads(cli("status", "--workdir", info["workdir"]))


class Run:
    """One collection, one Debezium worker, our own change stream beside it."""

    def __init__(self, name: str, outdir: Path, extra: list[str] = ()):
        self.name, self.outdir, self.extra = name, outdir, list(extra)
        self.client = pymongo.MongoClient(URI, uuidRepresentation="standard")
        self.coll_name = f"{name}_{RUN}"
        self.coll = self.client[DB][self.coll_name]
        self.coll.drop()
        self.client[DB].create_collection(self.coll_name)
        self.info, self.stream, self.snapshot_docs = None, None, []

    def start(self, expect_snapshot: int) -> None:
        self.snapshot_docs = [bytes(d.raw) for d in self.client[DB].get_collection(self.coll_name, RAW).find()]
        options = {"full_document_before_change": "whenAvailable"} if self.extra else {}
        self.stream = self.client[DB].get_collection(self.coll_name, RAW).watch(
            full_document="updateLookup", **options)
        wd = f"/tmp/dbz-capture/{self.name}-{RUN}"
        self.info = json.loads(cli("start", "debezium", "--mongodb-uri", URI, "--bootstrap", BOOT,
                                   "--collection", f"{DB}.{self.coll_name}", "--topic-prefix", f"dbzcap{RUN}",
                                   "--workdir", wd, *sum((["--extra", e] for e in self.extra), [])))
        self.topic = self.info["topics"][0]
        print(f"{self.name}: RUNNING in {self.info['start_s']} s", flush=True)
        self.wait(expect_snapshot)

    def wait(self, n: int, timeout: float = 90) -> int:
        deadline, got = time.time() + timeout, 0
        while time.time() < deadline:
            got = count(self.topic)
            if got >= n:
                return got
            st = status(self.info)
            if any(t.get("state") == "FAILED" for t in st.get("tasks", [])):
                return -1
            time.sleep(0.5)
        return got

    def task_failure(self) -> str | None:
        st = status(self.info)
        for t in st.get("tasks", []):
            if t.get("state") == "FAILED":
                return t.get("trace", "")
        return None

    def events(self) -> list[bytes]:
        out = []
        while True:
            ev = self.stream.try_next()
            if ev is None:
                break
            out.append(bytes(ev.raw))
        return out

    def finish(self) -> tuple[list[dict], list[bytes]]:
        time.sleep(2)
        events = self.events()
        records = read_all(self.topic)
        self.stream.close()
        print(cli("stop", "--workdir", self.info["workdir"]).strip(), flush=True)
        with open(self.outdir / f"records-{self.name}.jsonl", "w") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        with open(self.outdir / f"events-{self.name}.jsonl", "w") as f:
            for raw in [*(("snapshot", d) for d in self.snapshot_docs), *(("stream", e) for e in events)]:
                f.write(json.dumps({"from": raw[0], "bson": base64.b64encode(raw[1]).decode()}) + "\n")
        return records, events


# ------------------------------------------------------------------------------------ vectors
def b64(doc) -> str:
    return base64.b64encode(bson.encode(doc) if isinstance(doc, dict) else bytes(doc)).decode()


def between(text: str, start: str, end: str) -> str:
    i = text.index(start) + len(start)
    return text[i:text.index(end, i)]


def vectors_of(run: str, records: list[dict], snapshot_docs: list[bytes], events: list[bytes]) -> list[dict]:
    """Pair Debezium's records with the BSON it was shown, and cut them into writer vectors."""
    values = [(r, json.loads(r["value"])) for r in records if r["value"] is not None]
    snaps = [(r, v) for r, v in values if v["op"] == "r"]
    streams = [(r, v) for r, v in values if v["op"] != "r"]
    ops = {"insert": "c", "update": "u", "replace": "u", "delete": "d"}
    events = [e for e in (bson.decode(x, CodecOptions(document_class=RawBSONDocument)) for x in events)
              if e["operationType"] in ops]
    if len(snaps) != len(snapshot_docs) or len(streams) != len(events):
        raise RuntimeError(f"{run}: {len(snaps)} snapshot records for {len(snapshot_docs)} documents, "
                           f"{len(streams)} stream records for {len(events)} events")
    out = []
    for i, ((rec, val), doc) in enumerate(zip(snaps, snapshot_docs)):
        case = f"{run}/snapshot#{i}"
        raw = RawBSONDocument(doc)
        out.append({"case": case, "writer": "strict", "bson": b64(doc), "expected": val["after"]})
        out.append({"case": case, "writer": "key", "bson": b64(SON([("_id", raw["_id"])])), "expected": rec["key"]})
    for i, ((rec, val), ev) in enumerate(zip(streams, events)):
        case = f"{run}/stream#{i} {ev['operationType']}"
        if ops[ev["operationType"]] != val["op"]:
            raise RuntimeError(f"{case}: Debezium op {val['op']}")
        out.append({"case": case, "writer": "key", "bson": b64(ev["documentKey"].raw), "expected": rec["key"]})
        if ev.get("fullDocument") is not None and val["after"] is not None:
            out.append({"case": case, "writer": "strict", "bson": b64(ev["fullDocument"].raw), "expected": val["after"]})
        if ev.get("fullDocumentBeforeChange") is not None and val["before"] is not None:
            out.append({"case": case + " before", "writer": "strict", "bson": b64(ev["fullDocumentBeforeChange"].raw),
                        "expected": val["before"]})
        if ev.get("lsid") is not None and val["source"].get("lsid") is not None:  # the same strict writer
            out.append({"case": case + " lsid", "writer": "strict", "bson": b64(ev["lsid"].raw),
                        "expected": val["source"]["lsid"]})
        ud = val.get("updateDescription")
        if ud is not None:
            raw_ud = ev["updateDescription"].raw
            out.append({"case": case, "writer": "relaxed", "bson": b64(ev["updateDescription"]["updatedFields"].raw),
                        "expected": ud["updatedFields"]})
            # As the record's bytes have them (Jackson's escaping), not re-encoded here.
            removed = between(rec["value"], '"removedFields":', ',"updatedFields":')
            truncated = between(rec["value"], '"truncatedArrays":', '},"source":')
            if json.loads(removed) != ud["removedFields"] or json.loads(truncated) != ud["truncatedArrays"]:
                raise RuntimeError(f"{case}: cannot cut removedFields/truncatedArrays out of the record")
            out.append({"case": case, "writer": "removed", "bson": b64(raw_ud), "expected": removed})
            out.append({"case": case, "writer": "truncated", "bson": b64(raw_ud), "expected": truncated})
    return out


# ------------------------------------------------------------------------------------ the runs
def main_run(outdir: Path, refused: dict) -> list[dict]:
    run = Run("main", outdir)
    c = run.coll
    # Seen by the snapshot.
    for name, (snap_id, _) in SAFE_IDS.items():
        c.insert_one(SON([("_id", snap_id), ("idtype", name)]))
    c.insert_one(types_doc(1000))
    c.insert_one(RawBSONDocument(raw_types_doc(1001)))
    c.insert_one(SON([("_id", 1002), ("doubles", random_doubles(1, 500))]))
    snapshot_n = c.count_documents({})
    run.start(snapshot_n)

    # Streamed: every _id type again, the types, the escapes, random doubles.
    for name, (_, stream_id) in SAFE_IDS.items():
        c.insert_one(SON([("_id", stream_id), ("idtype", name)]))
    c.insert_one(types_doc(2000))
    c.insert_one(RawBSONDocument(raw_types_doc(2001)))
    for d in bmp_docs(3000):
        c.insert_one(d)
    for i in range(4):
        c.insert_one(SON([("_id", 4000 + i), ("doubles", random_doubles(100 + i, 1500))]))
    n_keys = 0
    for i, (k, v) in enumerate(KEYS.items()):  # one key a document: the server may refuse some
        try:
            c.insert_one(SON([("_id", 4100 + i), (k, v), ("nested", SON([(k, v)]))]))
            n_keys += 1
        except pymongo.errors.PyMongoError as e:
            refused[f"key {k!r}: server"] = str(e)[:300]
    # Updates: each document is updated once (the lookup returns the same state to everyone).
    for i in range(10):
        c.insert_one(SON([("_id", 5000 + i), ("a", SON([("b", SON([("c", 1)])), ("arr", [1, 2, 3])])),
                          ("arr", [1, 2, 3, 4]), ("x", 1), ("y", "why"), ("z", 2.5)]))
    t = types_doc(None)
    del t["_id"]
    c.update_one({"_id": 5000}, {"$set": SON([("all", t)])})
    c.update_one({"_id": 5001}, {"$set": SON([(k, v) for k, v in t.items() if k not in ("keys",)])})
    c.update_one({"_id": 5002}, {"$set": SON([("a.b.c", DatetimeMS(-1)), ("a.arr.1", -0.0), ("arr.0", Int64(42)),
                                              ("new", DatetimeMS(1714979289000)), ("big", 1e21),
                                              ("bin", Binary(b"\x01\x02", 0)), ("s", "é\u2028😀")])})
    c.update_one({"_id": 5003}, {"$unset": SON([("x", ""), ("y", ""), ("a.b", "")])})
    c.update_one({"_id": 5004}, {"$push": {"arr": 5}})
    c.update_one({"_id": 5005}, {"$pop": {"arr": 1}})
    c.update_one({"_id": 5006}, [{"$set": {"arr": {"$slice": ["$arr", 2]}, "a.arr": [9]}}])
    c.update_one({"_id": 5007}, {"$set": {"x": 2}, "$unset": {"z": ""}, "$push": {"a.arr": {"$each": [4, 5]}}})
    c.update_one({"_id": 5008}, {"$pull": {"arr": {"$gte": 3}}})
    c.update_one({"_id": 5009}, {"$set": {"nan": float("nan"), "d": 2e23, "n": float("-inf"), "t": Timestamp(7, 8)}})
    # removedFields are written by Kafka's JsonConverter (Jackson), not by the BSON writer.
    odd = SON([("ctl\x01", 1), ('q"uote', 2), ("é", 3), ("tab\t", 4), ("back\\slash", 5), ("del\x7f", 6),
               ("line\u2028", 7), ("😀", 8)])
    c.insert_one(SON([("_id", 5010), *odd.items()]))
    c.update_one({"_id": 5010}, {"$unset": SON([(k, "") for k in odd])})
    c.replace_one({"_id": 101}, SON([("replaced", True), ("v", 1.0E-7)]))
    c.delete_one({"_id": Int64(102)})
    c.delete_one({"_id": "alpha"})  # a snapshot document
    c.insert_one(SON([("_id", 6000), ("n", 0)]))
    with run.client.start_session() as s:
        with s.start_transaction():
            c.insert_one(SON([("_id", 6001), ("txn", "a")]), session=s)
            c.insert_one(SON([("_id", 6002), ("txn", "b")]), session=s)
            c.update_one({"_id": 6000}, {"$inc": {"n": 10}}, session=s)
            c.delete_one({"_id": 2.5}, session=s)
    n_events = len(SAFE_IDS) + 2 + 8 + 4 + 10 + 10 + 2 + 1 + 2 + 1 + 4 + n_keys
    got = run.wait(snapshot_n + n_events + 3)  # + a tombstone per delete
    if got < 0:
        refused["main run"] = run.task_failure()
    records, events = run.finish()
    return vectors_of("main", records, run.snapshot_docs, events)


def id_run(outdir: Path, name: str, ids: dict, refused: dict) -> list[dict]:
    """Each _id in the snapshot and in the stream; a sentinel after each stream insert."""
    run = Run(name, outdir)
    c = run.coll
    inserted = []
    for i, (idname, v) in enumerate(ids.items()):
        try:
            c.insert_one(SON([("_id", v), ("idtype", idname)]))
            inserted.append(idname)
        except pymongo.errors.PyMongoError as e:
            refused[f"_id {idname}: server"] = str(e)[:300]
    run.start(len(inserted))
    c.delete_many({})
    n = 0
    for i, (idname, v) in enumerate(ids.items()):
        try:
            c.insert_one(SON([("_id", v), ("idtype", idname), ("stream", True)]))
            n += 1
        except pymongo.errors.PyMongoError:
            pass
    got = run.wait(2 * len(inserted) + n + len(inserted))  # snapshot + deletes + tombstones + inserts
    failure = run.task_failure() if got < 0 else None
    records, events = run.finish()
    if failure:
        refused[f"{name} run"] = failure
        return []
    return vectors_of(name, records, run.snapshot_docs, events)


def pre_image_run(outdir: Path, refused: dict) -> list[dict]:
    run = Run("preimage", outdir, ["capture.mode=change_streams_update_full_with_pre_image"])
    try:
        run.client[DB].command("collMod", run.coll_name, changeStreamPreAndPostImages={"enabled": True})
    except pymongo.errors.PyMongoError as e:
        refused["pre-images: collMod"] = str(e)[:300]
    run.coll.insert_one(types_doc(1))
    run.start(1)
    run.coll.update_one({"_id": 1}, {"$set": {"double_field": 8.0}})
    run.coll.insert_one(SON([("_id", 2), ("v", 1)]))
    run.coll.replace_one({"_id": 2}, SON([("v", 2)]))
    run.coll.delete_one({"_id": 1})
    got = run.wait(1 + 4 + 1)
    failure = run.task_failure() if got < 0 else None
    records, events = run.finish()
    if failure:
        refused["pre-image run"] = failure
        return []
    return vectors_of("preimage", records, run.snapshot_docs, events)


# ------------------------------------------------------------------------------------ the probe
def probe(outdir: Path, vectors: list[dict]) -> None:
    jar = next(Path(os.environ.get("MKB_CACHE_DIR", HERE.parent.parent / ".cache"))
               .glob("peers/plugins/debezium/*/bson-[0-9]*.jar"))

    def java(mode: str, stdin: str) -> str:
        return subprocess.run(["java", "-cp", str(jar), PROBE, mode], input=stdin, capture_output=True,
                              text=True, check=True).stdout

    (outdir / "probe-escapes.txt").write_text(java("escapes", ""))
    r = random.Random(21)
    bits = {struct.unpack("<Q", struct.pack("<d", v))[0] for v in DOUBLES + random_doubles(7, 300000)}
    bits |= {r.getrandbits(64) for _ in range(300000)}
    bits |= {struct.unpack("<Q", struct.pack("<d", float(f"{m}e{e}")))[0] for m in range(1, 100) for e in range(-325, 309)}
    bits |= {struct.unpack("<Q", struct.pack("<d", float(2 ** e)))[0] for e in range(-1074, 1024)}
    bits |= {struct.unpack("<Q", struct.pack("<d", float(n)))[0] for n in range(0, 100000, 7)}
    (outdir / "probe-doubles.txt").write_text(java("doubles", "".join(f"{b:016x}\n" for b in sorted(bits))))

    # The probe must reproduce every connector string before its own vectors are trusted.
    lines, keys = [], []
    for i, v in enumerate(vectors):
        if v["writer"] in ("strict", "relaxed", "key"):
            lines.append(f"{i}\t{v['bson']}")
    mismatches = 0
    for line in java("docs", "\n".join(lines) + "\n").splitlines():
        i, strict, relaxed, compact, idtext = line.split("\t")
        v = vectors[int(i)]
        got = {"strict": strict, "relaxed": compact, "key": idtext}[v["writer"]]
        got = base64.b64decode(got).decode()
        if v["writer"] == "key":
            got = json.dumps({"id": got}, ensure_ascii=False, separators=(",", ":"))
        if got != v["expected"]:
            mismatches += 1
            print(f"probe differs from the connector: {v['case']} {v['writer']}\n  connector {v['expected'][:200]!r}\n"
                  f"  probe     {got[:200]!r}", flush=True)
    print(f"probe: {len(lines)} connector strings compared, {mismatches} differ", flush=True)
    # Inputs the server cannot store.
    extra = {"raw_types": raw_types_doc(1), "types": bson.encode(types_doc(Int64(5))),
             "dates": bson.encode(SON([("_id", 1), ("dates", [DatetimeMS(ms) for ms in DATES_MS_PROBE])])),
             "keys": bson.encode(SON([("_id", 2), *KEYS.items()]))}
    for name, v in RISKY_IDS.items():
        extra[f"id {name}"] = bson.encode(SON([("_id", v)]))
    for ms in DATES_MS_PROBE:
        extra[f"id date {ms}"] = bson.encode(SON([("_id", DatetimeMS(ms))]))
    extra["id symbol"] = raw_doc(el(0x0E, "_id", bstr(b"sym")))
    extra["id undefined"] = raw_doc(el(0x06, "_id", b""))
    extra["id dbpointer"] = raw_doc(el(0x0C, "_id", bstr(b"db.c") + bytes.fromhex("65a000000000000000000003")))
    names = list(extra)
    out = java("docs", "".join(f"{i}\t{base64.b64encode(extra[n]).decode()}\n" for i, n in enumerate(names)))
    with open(outdir / "probe-vectors.jsonl", "w") as f:
        for line in out.splitlines():
            i, strict, relaxed, compact, idtext = line.split("\t")
            d = lambda s: base64.b64decode(s).decode()
            f.write(json.dumps({"case": f"probe/{names[int(i)]}", "bson": base64.b64encode(extra[names[int(i)]]).decode(),
                                "strict": d(strict), "relaxed": d(compact), "id": d(idtext)}, ensure_ascii=False) + "\n")


def load_saved(outdir: Path, name: str) -> tuple[list[dict], list[bytes], list[bytes]]:
    records = [json.loads(line) for line in open(outdir / f"records-{name}.jsonl")]
    events = [json.loads(line) for line in open(outdir / f"events-{name}.jsonl")]
    docs = [base64.b64decode(e["bson"]) for e in events if e["from"] == "snapshot"]
    stream = [base64.b64decode(e["bson"]) for e in events if e["from"] == "stream"]
    return records, docs, stream


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    outdir = Path(sys.argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    if "--rederive" in sys.argv:  # rebuild vectors.jsonl (and the probe's files) from a saved run
        refused = json.loads((outdir / "refused.json").read_text())
        vectors = []
        for name in ("main", "ids", "preimage"):
            if (outdir / f"events-{name}.jsonl").exists():
                vectors += vectors_of(name, *load_saved(outdir, name))
    else:
        refused = {}
        vectors = main_run(outdir, refused)
        vectors += id_run(outdir, "ids", RISKY_IDS, refused)
        vectors += pre_image_run(outdir, refused)
    with open(outdir / "vectors.jsonl", "w") as f:
        for v in vectors:
            f.write(json.dumps(v, ensure_ascii=False) + "\n")
    (outdir / "refused.json").write_text(json.dumps(refused, indent=2) + "\n")
    print(f"{len(vectors)} vectors -> {outdir / 'vectors.jsonl'}; refused: {list(refused)}", flush=True)
    if "--no-probe" not in sys.argv:
        probe(outdir, vectors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
