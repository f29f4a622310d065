#!/usr/bin/env python3
"""A fake SAP message server and fake application servers, for tests and
`make run`. Python standard library only; loopback only.

The message server answers GET /msgserver/text/logon[?version=1.2] with the
application server list in the shape of a captured kernel-793 answer (see
docs/discovery.md, "What kwd reads from the message server"): "version 1.2", one
record per instance (instance name line, then TAB-separated service rows
DIAG/RFC/HTTP/HTTPS with "LB=<capacity>" on the DIAG row, the VHOST=0 twins
of the HTTP rows), an empty line after each record, CRLF. Switches make it
answer with LF, spaces, an error status, garbage, binary, a huge body, an
empty list, or nothing at all (timeout).

An instance with "serve": true gets a fake application server of its own on
127.0.0.1 (an ephemeral port unless "http" gives one): it answers
/sap/public/icf_info/icr_groups with the group information (section 5 form),
/sap/public/icf_info/icr_urlprefix with the URL map (section 6 form),
/sap/public/icman/ping with 200, and any other request with 200 and
"X-Instance: <name>" so that tests can count where requests went.

With --tls-cert and --tls-key the message server also answers over HTTPS
on a second port ("tls_port" in the state), and every served instance gets
an HTTPS twin of its application server ("tls_ports"), listed as its HTTPS
row (unless "https" gives a port).

Control (JSON, on the message server's plain port):
  GET  /_fake/state           the current state, with the ports in use
  POST /_fake/state           merge keys into the state (see DEFAULT_STATE);
                              "instances" replaces the whole list
  GET  /_fake/requests        paths served so far (message server only)
  GET  /_fake/app_requests    requests the application servers got:
                              [{"instance", "scheme", "path"}]

Usage: fake_message_server.py [--listen 127.0.0.1:0] [--config FILE.json]
                              [--tls-cert PEM --tls-key PEM]
Prints "listening 127.0.0.1:PORT" once ready.
"""

import argparse
import copy
import http.server
import json
import socketserver
import ssl
import sys
import threading
import time

DEFAULT_STATE = {
    "sid": "FAK",
    "release": "793",
    # {"name", "host" (default 127.0.0.1), "http", "https", "lb", "stack":
    #  "abap"|"java"|"dual", "serve": bool}
    "instances": [],
    "groups": {},  # SMLG group -> instance names (the application servers' icr_groups)
    # ok | status | garbage | binary | huge | timeout | empty | raw
    "mode": "ok",
    "status": 503,  # for mode=status
    "raw": "",  # for mode=raw: served as is
    "delay_seconds": 30,  # for mode=timeout
    "line_ending": "crlf",  # crlf | lf
    "separator": "tab",  # tab | space
    "blank_between": True,  # an empty line after each record
    "vhost_twins": True,  # HTTP/HTTPS rows repeated with VHOST=0, as captured
    "groups_mode": "ok",  # ok | status | garbage (the application servers' icr_groups)
    # The application servers' icr_urlprefix: {"prefix", "group" (SMLG, optional),
    #  "stack": "ABAP"|"J2EE" (optional)}
    "url_prefixes": [],
    "url_map_mode": "ok",  # ok | status | garbage
}

LOCK = threading.RLock()
STATE = copy.deepcopy(DEFAULT_STATE)
REQUESTS = []
APP_SERVERS = {}  # instance name -> (server, port)
TLS_APP_SERVERS = {}  # instance name -> (server, port): the HTTPS twins
APP_REQUESTS = []
TLS_CONTEXT = None  # set by --tls-cert/--tls-key
TLS_PORT = 0


def server_list(state):
    eol = "\r\n" if state["line_ending"] == "crlf" else "\n"
    sep = "\t" if state["separator"] == "tab" else " "
    lines = ["version 1.2"]
    for inst in state["instances"]:
        host = inst.get("host", "127.0.0.1")
        stack = inst.get("stack", "abap")
        lines.append(inst["name"])
        rows = []
        if stack in ("abap", "dual"):
            rows.append(("DIAG", 3200, "LB=%d" % inst["lb"] if inst.get("lb") else ""))
            rows.append(("RFC", 3300, ""))
        if stack in ("java", "dual"):
            rows.append(("P4", 50004, "LB=%d" % inst["lb"] if inst.get("lb") and stack == "java" else ""))
        http_port = port_of(inst)
        https_port = tls_port_of(inst)
        if http_port:
            rows.append(("HTTP", http_port, ""))
        if https_port:
            rows.append(("HTTPS", https_port, ""))
        if state["vhost_twins"]:
            if http_port:
                rows.append(("HTTP", http_port, "VHOST=0"))
            if https_port:
                rows.append(("HTTPS", https_port, "VHOST=0"))
        for kind, port, desc in rows:
            # The capture ends a row with an empty description in a TAB.
            lines.append(sep.join([kind, host, str(port), desc]))
        if state["blank_between"]:
            lines.append("")
    return eol.join(lines) + eol


def group_info(state):
    eol = "\r\n" if state["line_ending"] == "crlf" else "\n"
    names = [inst["name"] for inst in state["instances"]]
    lines = ["version 1.0"] + names + [""]
    for group, members in sorted(state["groups"].items()):
        lines.append("%s:%s" % (group, ",".join(members)))
    lines.append("")
    return eol.join(lines) + eol


def url_map(state):
    """The ICF URL map (icr_urlprefix), in the urlinfo.txt form of section 6."""
    eol = "\r\n" if state["line_ending"] == "crlf" else "\n"
    lines = ["version 1.0"]
    for entry in state["url_prefixes"]:
        line = "PREFIX=" + entry["prefix"]
        if entry.get("group"):
            line += "&GROUP=" + entry["group"]
        line += "&CASE=&VHOST=*.*;"
        if entry.get("stack"):
            line += "&STACK=" + entry["stack"]
        lines.append(line)
    lines.append("")
    return eol.join(lines) + eol


def port_of(inst):
    name = inst["name"]
    if inst.get("serve") and name in APP_SERVERS:
        return APP_SERVERS[name][1]
    return inst.get("http", 0)


def tls_port_of(inst):
    if inst.get("https"):
        return inst["https"]
    name = inst["name"]
    if inst.get("serve") and name in TLS_APP_SERVERS:
        return TLS_APP_SERVERS[name][1]
    return 0


def ports_state(state):
    state["ports"] = {name: port for name, (srv, port) in APP_SERVERS.items()}
    state["tls_ports"] = {name: port for name, (srv, port) in TLS_APP_SERVERS.items()}
    state["tls_port"] = TLS_PORT
    return state


class Threading(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Base(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, content_type="text/plain", headers=()):
        data = body if isinstance(body, bytes) else body.encode("utf-8", "surrogateescape")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class MessageServer(Base):
    def version_string(self):
        with LOCK:
            return "SAP Message Server, release %s (%s)" % (STATE["release"], STATE["sid"])

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/_fake/state":
            with LOCK:
                state = ports_state(copy.deepcopy(STATE))
            return self.reply(200, json.dumps(state), "application/json")
        if path == "/_fake/app_requests":
            with LOCK:
                requests = json.dumps(APP_REQUESTS)
            return self.reply(200, requests, "application/json")
        if path == "/_fake/requests":
            with LOCK:
                requests = json.dumps(REQUESTS)
            return self.reply(200, requests, "application/json")
        with LOCK:
            REQUESTS.append(self.path)
            state = copy.deepcopy(STATE)
        if path != "/msgserver/text/logon":
            return self.reply(404, "not found\n")
        mode = state["mode"]
        if mode == "timeout":
            time.sleep(state["delay_seconds"])
            mode = "ok"
        if mode == "status":
            return self.reply(state["status"], "error\n")
        if mode == "garbage":
            return self.reply(200, "<html><body>Service unavailable</body></html>\n", "text/html")
        if mode == "binary":
            return self.reply(200, bytes(range(256)) * 4, "application/octet-stream")
        if mode == "huge":
            body = "version 1.2\n" + ("x" * 1023 + "\n") * (5 * 1024)
            return self.reply(200, body)
        if mode == "empty":
            return self.reply(200, "version 1.2\r\n\r\n")
        if mode == "raw":
            return self.reply(200, state["raw"])
        return self.reply(200, server_list(state))

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length) if length else b"{}"
        if path != "/_fake/state":
            return self.reply(404, "not found\n")
        try:
            update = json.loads(body)
            if not isinstance(update, dict):
                raise ValueError("an object")
        except ValueError as error:
            return self.reply(400, "bad JSON: %s\n" % error)
        with LOCK:
            for key, value in update.items():
                if key not in DEFAULT_STATE:
                    return self.reply(400, "unknown key %s\n" % key)
                STATE[key] = value
            sync_app_servers()
        return self.do_GET_state()

    def do_GET_state(self):
        with LOCK:
            state = ports_state(copy.deepcopy(STATE))
        return self.reply(200, json.dumps(state), "application/json")


def make_app_handler(name, scheme="http"):
    class AppServer(Base):
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            with LOCK:
                state = copy.deepcopy(STATE)
                APP_REQUESTS.append({"instance": name, "scheme": scheme, "path": path})
            headers = [("X-Instance", name)]
            if path == "/sap/public/icf_info/icr_groups":
                if state["groups_mode"] == "status":
                    return self.reply(500, "error\n", headers=headers)
                if state["groups_mode"] == "garbage":
                    return self.reply(200, "<html>nope</html>\n", "text/html", headers)
                return self.reply(200, group_info(state), headers=headers)
            if path == "/sap/public/icf_info/icr_urlprefix":
                if state["url_map_mode"] == "status":
                    return self.reply(500, "error\n", headers=headers)
                if state["url_map_mode"] == "garbage":
                    return self.reply(200, "<html>login</html>\n", "text/html", headers)
                return self.reply(200, url_map(state), headers=headers)
            if path == "/sap/public/icman/ping":
                return self.reply(200, "", headers=headers)
            return self.reply(200, "served by %s\n" % name, headers=headers)

        do_POST = do_GET

    return AppServer


def sync_app_servers():
    """Starts an application server for each instance with "serve" (LOCK held)."""
    wanted = {inst["name"]: inst for inst in STATE["instances"] if inst.get("serve")}
    for servers in (APP_SERVERS, TLS_APP_SERVERS):
        for name in list(servers):
            if name not in wanted:
                srv, _ = servers.pop(name)
                threading.Thread(target=srv.shutdown, daemon=True).start()
    for name, inst in wanted.items():
        if name not in APP_SERVERS:
            srv = Threading(("127.0.0.1", inst.get("http", 0)), make_app_handler(name))
            APP_SERVERS[name] = (srv, srv.server_address[1])
            threading.Thread(target=srv.serve_forever, daemon=True).start()
        if TLS_CONTEXT is not None and name not in TLS_APP_SERVERS:
            srv = Threading(("127.0.0.1", 0), make_app_handler(name, "https"))
            srv.socket = TLS_CONTEXT.wrap_socket(srv.socket, server_side=True)
            TLS_APP_SERVERS[name] = (srv, srv.server_address[1])
            threading.Thread(target=srv.serve_forever, daemon=True).start()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--config", help="JSON file: initial state keys")
    parser.add_argument("--tls-cert", help="PEM: also serve HTTPS (message and application servers)")
    parser.add_argument("--tls-key", help="PEM: the key of --tls-cert")
    args = parser.parse_args()
    global TLS_CONTEXT, TLS_PORT
    if args.tls_cert:
        TLS_CONTEXT = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        TLS_CONTEXT.load_cert_chain(args.tls_cert, args.tls_key)
    host, _, port = args.listen.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("--listen: loopback only")
    if args.config:
        with open(args.config) as f:
            STATE.update(json.load(f))
    with LOCK:
        sync_app_servers()
    server = Threading((host, int(port)), MessageServer)
    if TLS_CONTEXT is not None:
        tls_server = Threading((host, 0), MessageServer)
        tls_server.socket = TLS_CONTEXT.wrap_socket(tls_server.socket, server_side=True)
        TLS_PORT = tls_server.server_address[1]
        threading.Thread(target=tls_server.serve_forever, daemon=True).start()
    print("listening %s:%d" % (host, server.server_address[1]), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
