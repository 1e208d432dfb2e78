"""Writes a canonical JSON dump of a graph_visualize vis.db (tables tb_nodes, tb_config, tb_stack),
rows sorted by id, so that numprobe's vis.db can be compared with msprobe's without SQLite's page
layout or the run's timestamp. Usage: python canon.py FILE.vis.db > OUT.json"""
import json
import sqlite3
import sys


def canon(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = {}
    for table in ("tb_nodes", "tb_config", "tb_stack"):
        cur = con.execute(f"SELECT * FROM {table} ORDER BY id")
        cols = [d[0] for d in cur.description]
        out[table] = [dict(zip(cols, row)) for row in cur]
    out["schema"] = sorted(
        [name, sql] for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
    )
    return out


if __name__ == "__main__":
    json.dump(canon(sys.argv[1]), sys.stdout, ensure_ascii=False, indent=0, sort_keys=True)
    sys.stdout.write("\n")
