"""Files and processes the stock collections are checked against, and the checks with verdicts.

``MAKE_FILES`` is a stdlib-only script (``python3 - ROOT``) that creates a SQLite
database, JSON, JSONL, CSV and XML files and a text note under ROOT, and
starts a process (command line ``adare-stock-marker``) listening on a TCP port
it writes to ``ROOT/port``. The same script runs on the host (in-process agent
tests) and inside a real guest (e2e), so both check the same verdicts.
"""

from __future__ import annotations

from typing import Any

MARKER = "adare-stock-marker"

MAKE_FILES = r"""
import json, os, socket, sqlite3, subprocess, sys
root = sys.argv[1]
os.makedirs(root, exist_ok=True)
db = sqlite3.connect(os.path.join(root, "history.db"))
db.execute("CREATE TABLE visits (url TEXT, title TEXT, visit_time INTEGER)")
db.executemany("INSERT INTO visits VALUES (?, ?, ?)", [
    ("https://example.org/", "Example", 1714557600),
    ("https://example.org/secret", "Secret", 1714557603),
    ("https://other.net/", "Other", 1714557700),
])
db.commit(); db.close()
with open(os.path.join(root, "prefs.json"), "w") as f:
    json.dump({"profile": {"name": "alice", "age": 31},
               "accounts": [{"id": 1, "mail": "a@example.org"}, {"id": 2, "mail": "b@example.org"}],
               "tags": ["x", "y"]}, f)
with open(os.path.join(root, "events.jsonl"), "w") as f:
    f.write('{"event": "login", "user": "alice", "ts": "2024-05-01T10:00:00"}\n')
    f.write('{"event": "delete", "user": "alice", "ts": "2024-05-01T10:00:03"}\n')
    f.write('not json\n')
    f.write('{"event": "logout", "user": "bob", "ts": "2024-05-01T10:05:00"}\n')
with open(os.path.join(root, "export.csv"), "w", newline="") as f:
    f.write("name,action,when\nalice,delete,2024-05-01T10:00:03\nbob,login,2024-05-01T10:05:00\n")
with open(os.path.join(root, "recent.xml"), "w") as f:
    f.write('<?xml version="1.0"?><RecentFiles xmlns:x="urn:x">'
            '<File id="1" path="/home/alice/a.txt">a.txt</File>'
            '<File id="2" path="/home/alice/b.pdf">b.pdf</File></RecentFiles>')
with open(os.path.join(root, "note.txt"), "w") as f:
    f.write("DeletionDate=2024-05-01T10:00:03\n")
listener = subprocess.Popen(
    [sys.executable, "-c",
     "import socket, sys, time\n"
     "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
     "open(sys.argv[1], 'w').write(str(s.getsockname()[1])); time.sleep(600)",
     os.path.join(root, "port"), "MARKER"],
    start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL)
print(listener.pid)
""".replace("MARKER", MARKER)

DELETED_AT = {"value": "2024-05-01T10:00:00", "type": "timestamp", "tolerance": 5}


def cases(root: str, port: int) -> list[tuple[str, dict[str, Any], str]]:
    """``(test name, params, expected status)`` over the files ``MAKE_FILES`` made in ``root``."""
    db, js, jl = f"{root}/history.db", f"{root}/prefs.json", f"{root}/events.jsonl"
    csv, xml = f"{root}/export.csv", f"{root}/recent.xml"
    return [
        ("sqlite.table_exists", {"dst": db, "table": "visits"}, "SUCCESS"),
        ("sqlite.table_exists", {"dst": db, "table": "downloads"}, "FAILED"),
        (
            "sqlite.row_exists",
            {"dst": db, "table": "visits", "where": {"title": "Secret"}},
            "SUCCESS",
        ),
        ("sqlite.row_exists", {"dst": db, "table": "visits", "where": {"nope": 1}}, "ERROR"),
        ("sqlite.row_count", {"dst": db, "table": "visits", "expected_count": 3}, "SUCCESS"),
        (
            "sqlite.row_count",
            {
                "dst": db,
                "table": "visits",
                "where": {"url": "https://example.org/"},
                "expected_count": 2,
            },
            "FAILED",
        ),
        (
            "sqlite.query_result",
            {
                "dst": db,
                "query": "SELECT title, visit_time FROM visits WHERE url LIKE '%secret'",
                "expected_result": [{"title": "Secret", "visit_time": 1714557603}],
            },
            "SUCCESS",
        ),
        (
            "sqlite.query_result",
            {"dst": db, "query": "SELECT * FROM visits", "expected_rows": 2},
            "FAILED",
        ),
        ("sqlite.table_exists", {"dst": f"{root}/missing.db", "table": "visits"}, "FAILED"),
        ("json.contains_key", {"dst": js, "key_path": "profile.name"}, "SUCCESS"),
        ("json.contains_key", {"dst": js, "key_path": "profile.email"}, "FAILED"),
        (
            "json.value_matches",
            {"dst": js, "key_path": "profile.age", "expected_value": 31},
            "SUCCESS",
        ),
        (
            "json.value_matches",
            {
                "dst": js,
                "key_path": "accounts[*].mail",
                "expected_value": "@example\\.org$",
                "regex_match": True,
                "wildcard_mode": "all",
            },
            "SUCCESS",
        ),
        (
            "json.value_matches",
            {"dst": js, "key_path": "accounts[1].id", "expected_value": 1},
            "FAILED",
        ),
        (
            "json.array_contains",
            {"dst": js, "array_path": "tags", "expected_element": "y"},
            "SUCCESS",
        ),
        ("json.value_count", {"dst": js, "key_path": "accounts", "expected_count": 2}, "SUCCESS"),
        ("json.contains_key", {"dst": csv, "key_path": "a"}, "FAILED"),
        (
            "jsonl.line_matches",
            {"dst": jl, "conditions": {"event": "delete", "user": "alice"}},
            "SUCCESS",
        ),
        (
            "jsonl.line_matches",
            {"dst": jl, "conditions": {"user": "alice"}, "match_mode": "all"},
            "FAILED",
        ),
        (
            "jsonl.line_count",
            {"dst": jl, "conditions": {"user": "alice"}, "expected_count": 2},
            "SUCCESS",
        ),
        ("jsonl.line_count", {"dst": jl, "skip_malformed": False}, "FAILED"),
        (
            "jsonl.value_in_any_line",
            {"dst": jl, "key_path": "event", "expected_value": "logout"},
            "SUCCESS",
        ),
        (
            "csv.contains_line",
            {"dst": csv, "entry": ["alice", "delete", "2024-05-01T10:00:03"]},
            "SUCCESS",
        ),
        (
            "csv.contains_line",
            {"dst": csv, "entry": ["alice", "login", "2024-05-01T10:00:03"]},
            "FAILED",
        ),
        ("csv.row_count", {"dst": csv, "expected_count": 2, "header": True}, "SUCCESS"),
        ("csv.column_contains", {"dst": csv, "column": "name", "value": "bob"}, "SUCCESS"),
        ("csv.column_contains", {"dst": csv, "column": "nosuch", "value": "bob"}, "ERROR"),
        (
            "csv.compare_rows",
            {
                "dst": csv,
                "reference_rows": [["bob", "login"]],
                "columns": [0, 1],
                "ignore_order": True,
                "allow_extra_rows": True,
            },
            "SUCCESS",
        ),
        ("xml.element_exists", {"dst": xml, "xpath": "/RecentFiles/File[@id='2']"}, "SUCCESS"),
        ("xml.element_exists", {"dst": xml, "xpath": "//Folder"}, "FAILED"),
        ("xml.element_count", {"dst": xml, "xpath": "//File", "expected_count": 2}, "SUCCESS"),
        (
            "xml.element_text_matches",
            {"dst": xml, "xpath": "File", "expected_text": "b.pdf"},
            "SUCCESS",
        ),
        (
            "xml.attribute_matches",
            {
                "dst": xml,
                "xpath": "File",
                "attribute": "path",
                "expected_value": r"\.pdf$",
                "regex_match": True,
            },
            "SUCCESS",
        ),
        ("xml.element_exists", {"dst": xml, "xpath": "count(//File)"}, "ERROR"),
        ("xml.namespace_matches", {"dst": xml, "expected_namespaces": {"x": "urn:x"}}, "SUCCESS"),
        ("linux.process_running", {"process_name": MARKER}, "SUCCESS"),
        ("linux.process_running", {"process_name": MARKER, "min_instances": 2}, "FAILED"),
        ("linux.process_running", {"process_name": "no-such-process-adare"}, "FAILED"),
        ("linux.listening_port", {"port": port}, "SUCCESS"),
        ("linux.listening_port", {"port": port, "address": "0.0.0.0"}, "FAILED"),
        ("linux.user_exists", {"username": "root", "uid": 0}, "SUCCESS"),
        ("linux.user_exists", {"username": "no-such-user-adare"}, "FAILED"),
        ("linux.log_entry_exists", {"log_file": jl, "pattern": "logout"}, "SUCCESS"),
        ("windows.registry_key_exists", {"key_path": "HKLM\\Software"}, "ERROR"),
        (
            "file_content_equals",
            {
                "dst": f"{root}/note.txt",
                "content": "DeletionDate={{ deleted_at }}",
                "variables": {"deleted_at": DELETED_AT},
            },
            "SUCCESS",
        ),
        (
            "file_content_equals",
            {
                "dst": f"{root}/note.txt",
                "content": "DeletionDate={{ deleted_at }}",
                "variables": {"deleted_at": {**DELETED_AT, "tolerance": 1}},
            },
            "FAILED",
        ),
        ("standard.file_exists", {"dst": f"{root}/*.csv"}, "SUCCESS"),
        ("standard.dir_content", {"dst": root, "files": ["history.db", "prefs.json"]}, "SUCCESS"),
        ("standard.file_does_not_exist", {"dst": f"{root}/*.exe"}, "SUCCESS"),
    ]
