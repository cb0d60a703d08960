#!/usr/bin/env python3
"""Seeds the fuzz corpora (fuzz/corpus/<target>/) from the shared test data, read at run time.

Usage: fuzz/seed.py <data dir> <corpus dir>

- extjson: the BSON corpus's valid, degenerate and decode-error documents
  (<data>/bson-corpus/*.json), and sample documents (<data>/sample/*.json, canonical Extended
  JSON, one per line), each behind the target's two selector bytes;
- split: sample documents as change events, split into fragments as the server splits them;
- offsets: offsets documents and progress records of the shapes the bridge writes;
- config: the repository's example and refused configuration files, with a few environment
  overrides.

Nothing of <data> is copied into the repository: the corpus directory is ignored by git.
Standard library only (no pymongo): the sample documents use $oid, $numberInt and
$numberDouble, which are encoded here.
"""

import json
import os
import random
import struct
import sys
from pathlib import Path

SAMPLES_PER_FILE = 150


def cstring(s):
    b = s.encode()
    return b + b"\0"


def element(key, value):
    """One BSON element of a Python value (from canonical Extended JSON)."""
    k = cstring(key)
    if isinstance(value, dict):
        if "$oid" in value:
            return b"\x07" + k + bytes.fromhex(value["$oid"])
        if "$numberInt" in value:
            return b"\x10" + k + struct.pack("<i", int(value["$numberInt"]))
        if "$numberLong" in value:
            return b"\x12" + k + struct.pack("<q", int(value["$numberLong"]))
        if "$numberDouble" in value:
            return b"\x01" + k + struct.pack("<d", float(value["$numberDouble"]))
        if "$timestamp" in value:
            t = value["$timestamp"]
            return b"\x11" + k + struct.pack("<II", t["i"], t["t"])
        if "$date" in value:
            return b"\x09" + k + struct.pack("<q", int(value["$date"]["$numberLong"]))
        return b"\x03" + k + document(value)
    if isinstance(value, list):
        return b"\x04" + k + document({str(i): v for i, v in enumerate(value)})
    if isinstance(value, bool):
        return b"\x08" + k + (b"\x01" if value else b"\x00")
    if value is None:
        return b"\x0a" + k
    if isinstance(value, int):
        return b"\x12" + k + struct.pack("<q", value)
    if isinstance(value, float):
        return b"\x01" + k + struct.pack("<d", value)
    s = value.encode()
    return b"\x02" + k + struct.pack("<i", len(s) + 1) + s + b"\0"


def document(d):
    body = b"".join(element(k, v) for k, v in d.items())
    return struct.pack("<i", len(body) + 5) + body + b"\0"


def write(directory, name, data):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)


def bson_corpus(data):
    """Documents of the BSON corpus: valid, degenerate and decode errors."""
    for path in sorted((data / "bson-corpus").glob("*.json")):
        spec = json.loads(path.read_text())
        for case in spec.get("valid", []):
            for field in ("canonical_bson", "degenerate_bson", "converted_bson"):
                if field in case:
                    yield path.stem, bytes.fromhex(case[field])
        for case in spec.get("decodeErrors", []):
            yield path.stem, bytes.fromhex(case["bson"])


def samples(data):
    for path in sorted((data / "sample").glob("*.json")):
        with path.open() as f:
            for i, line in enumerate(f):
                if i >= SAMPLES_PER_FILE:
                    break
                yield path.stem, json.loads(line)


def seed_extjson(data, out, rng):
    for i, (stem, raw) in enumerate(bson_corpus(data)):
        write(out, f"corpus-{stem}-{i}", bytes([rng.randrange(256), rng.randrange(128)]) + raw)
    for i, (stem, doc) in enumerate(samples(data)):
        write(out, f"sample-{stem}-{i}", bytes([rng.randrange(256), rng.randrange(128)]) + document(doc))


def token(n):
    return {"_data": f"8265941F25{n:08X}"}


def seed_split(data, out, rng):
    for i, (stem, doc) in enumerate(samples(data)):
        if i % 5:
            continue
        of = rng.randrange(1, 4)
        fields = [("fullDocument", doc), ("fullDocumentBeforeChange", doc), ("updateDescription",
                  {"updatedFields": doc, "removedFields": [], "truncatedArrays": []})][:of]
        stream = b""
        for n, (field, value) in enumerate(fields, start=1):
            fragment = {"_id": token(n), "operationType": "update",
                        "clusterTime": {"$timestamp": {"t": 1704164645, "i": n}},
                        "ns": {"db": "shop", "coll": stem},
                        "documentKey": {"_id": doc["_id"]},
                        "splitEvent": {"fragment": {"$numberInt": str(n)}, "of": {"$numberInt": str(of)}},
                        field: value}
            stream += document(fragment)
        # An unsplit event before and after.
        plain = document({"_id": token(0), "operationType": "insert", "fullDocument": doc})
        write(out, f"sample-{stem}-{i}", plain + stream + plain)


def seed_offsets(data, out, rng):
    ts = {"$timestamp": {"t": 1704164645, "i": 3}}
    date = {"$date": {"$numberLong": "1704164645123"}}
    base = {"_id": "orders-feed", "schemaVersion": {"$numberLong": "3"},
            "resumeToken": token(7), "clusterTime": ts, "positionTime": ts, "wallTime": date,
            "updatedAt": date, "eventsCommitted": {"$numberLong": "42"},
            "epoch": {"$numberLong": "5"}, "owner": "host:1:uuid", "leaseUntil": date,
            "bridgeVersion": "0.1.0", "fingerprint": "ab" * 32,
            "stream": {"database": "shop", "collection": "orders", "pipeline": []},
            "keyFormat": "json", "commitSequence": {"$numberLong": "9"},
            "resetSequence": {"$numberLong": "1"}, "delivery": "exactly_once",
            "progressOffset": {"$numberLong": "17"}, "streamUid": "65a0" * 6}
    snapshot = {"id": "s1", "reason": "initial", "startedAt": date,
                "namespaces": [{"db": "shop", "coll": "orders", "started": True,
                                "lastId": {"$oid": "65a0" * 6}, "copied": {"$numberLong": "3"},
                                "done": False}], "requestedAt": date, "filter": "{}"}
    variants = [base, {**base, "snapshot": snapshot},
                {**base, "snapshotRequest": {"reason": "requested", "namespace": "shop.orders",
                                             "requestedAt": date, "by": "operator@h"}},
                {"_id": "p", "startAtOperationTime": ts, "epoch": {"$numberInt": "1"}},
                {"_id": "p", "resumeToken": None, "schemaVersion": {"$numberInt": "0"}}]
    for i, v in enumerate(variants):
        write(out, f"doc-{i}", b"\x00" + document(v))
    # Progress records: canonical Extended JSON of the key ("p", "cdc.", "uid") decode_progress uses.
    record = {"_id": "p", "topicPrefix": "cdc.", "streamUid": "uid",
              "epoch": {"$numberLong": "5"}, "commitSequence": {"$numberLong": "9"},
              "resetSequence": {"$numberLong": "1"}, "resumeToken": token(7),
              "clusterTime": ts, "positionTime": ts, "wallTime": date, "updatedAt": date}
    for i, v in enumerate([record, {**record, "lastSnapshot": {"id": "s1"}},
                           {**record, "snapshot": snapshot}]):
        write(out, f"progress-{i}", b"\x01" + json.dumps(v, separators=(",", ":")).encode())


ENV = [
    "MONGO_KAFKA_BRIDGE__MONGODB__URI=mongodb://other:27017/",
    "MONGO_KAFKA_BRIDGE__KAFKA__BOOTSTRAP_SERVERS=k:9092",
    "MONGO_KAFKA_BRIDGE__KAFKA__TOPIC_PREFIX=2024",
    "MONGO_KAFKA_BRIDGE__BRIDGE__COMMIT_INTERVAL_MS=250",
    "MONGO_KAFKA_BRIDGE__METRICS__LISTEN=127.0.0.1:9100",
    "MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__SASL_PASSWORD=secret",
    "MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__LINGER_MS=20",
]


def seed_config(repo, out, rng):
    paths = sorted((repo / "deploy").glob("*.toml")) + sorted(
        (repo / "tests" / "faults" / "bad_configs").glob("*.toml"))
    for path in paths:
        text = path.read_bytes()
        write(out, path.stem, text)
        env = "\n".join(rng.sample(ENV, rng.randrange(1, 4)))
        write(out, path.stem + "-env", text + b"\0" + env.encode())


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data, corpus = Path(sys.argv[1]), Path(sys.argv[2])
    repo = Path(__file__).resolve().parent.parent
    rng = random.Random(24)
    seed_config(repo, corpus / "config", rng)
    seed_offsets(data, corpus / "offsets", rng)
    if not (data / "bson-corpus").is_dir() or not (data / "sample").is_dir():
        print(f"seed: {data} has no bson-corpus/ and sample/: extjson and split start from "
              "the seeds above only (libFuzzer generates the rest)", file=sys.stderr)
        return
    seed_extjson(data, corpus / "extjson", rng)
    seed_split(data, corpus / "split", rng)
    for target in ("extjson", "split", "offsets", "config"):
        count = len(os.listdir(corpus / target))
        print(f"seed: {target}: {count} inputs")


if __name__ == "__main__":
    main()
