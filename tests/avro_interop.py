#!/usr/bin/env python3
"""Cross-check tidegate's Avro bytes with an independent implementation (fastavro).

usage:
  avro_interop.py decode SCHEMA.avsc IN OUT   IN: one hex datum per line -> OUT: one JSON value per line
  avro_interop.py encode SCHEMA.avsc IN OUT   IN: one JSON value per line -> OUT: one hex datum per line

Datums are raw Avro (no container, no Confluent prefix): fastavro's schemaless reader and writer.
"""
import io
import json
import sys

import fastavro


def main() -> int:
    mode, schema_path, src, dst = sys.argv[1:5]
    with open(schema_path) as f:
        schema = fastavro.parse_schema(json.load(f))
    with open(src) as fin, open(dst, "w") as fout:
        for line in fin:
            line = line.strip()
            if not line:
                continue
            if mode == "decode":
                value = fastavro.schemaless_reader(io.BytesIO(bytes.fromhex(line)), schema)
                fout.write(json.dumps(value, sort_keys=True) + "\n")
            elif mode == "encode":
                buf = io.BytesIO()
                fastavro.schemaless_writer(buf, schema, json.loads(line))
                fout.write(buf.getvalue().hex() + "\n")
            else:
                print(f"unknown mode {mode}", file=sys.stderr)
                return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
