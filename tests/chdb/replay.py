"""Replays what the product issued to ClickHouse 18.16 on chDB (current
ClickHouse, in-process) and prints the answers as JSON.

Input (a JSON file, written by tests/chdb_compat_test.go):
  {"database": "...",
   "settings": {"name": value, ...},      session settings of the product
   "ddl": ["CREATE ...", ...],             in order
   "data": [{"table": "...", "values": "(..),(..)"}, ...],
   "views": ["CREATE MATERIALIZED VIEW ...", ...],
   "reads": ["SELECT ...", ...],
   "optimize": ["OPTIMIZE TABLE ...", ...]}

The tables are created, filled with the rows 18.16 held (Values format),
then the views are created (so that they do not count those rows twice),
the reads run, the OPTIMIZE statements run, and the reads run again.

Output (stdout): {"engine": "<version>", "ddl": [error or null, ...],
  "data": [...], "views": [...], "optimize": [...],
  "before": [{"out": "<TSV>"} | {"error": "..."}, ...], "after": [...]}

usage: python3 replay.py INPUT.json
"""

import json
import sys
import tempfile

import chdb
from chdb import session


def run(sess, sql, fmt="TabSeparated"):
    try:
        res = sess.query(sql, fmt)
        return {"out": res.bytes().decode("utf-8", "replace") if res is not None else ""}
    except Exception as e:  # chdb raises one type for every server error
        return {"error": str(e).strip()}


def statuses(sess, stmts):
    return [run(sess, s).get("error") for s in stmts]


def main():
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    with tempfile.TemporaryDirectory() as d:
        sess = session.Session(d)
        for name, value in plan.get("settings", {}).items():
            sess.query(f"SET {name} = {value}")
        out = {"engine": run(sess, "SELECT version()").get("out", "").strip()}
        sess.query(f"CREATE DATABASE IF NOT EXISTS `{plan['database']}`")
        out["ddl"] = statuses(sess, plan.get("ddl") or [])
        out["data"] = statuses(sess, [
            f"INSERT INTO `{plan['database']}`.`{t['table']}` VALUES {t['values']}" for t in plan.get("data") or [] if t["values"]
        ])
        out["views"] = statuses(sess, plan.get("views") or [])
        out["before"] = [run(sess, q) for q in plan.get("reads") or []]
        out["optimize"] = statuses(sess, plan.get("optimize") or [])
        out["after"] = [run(sess, q) for q in plan.get("reads") or []]
        sess.close()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
