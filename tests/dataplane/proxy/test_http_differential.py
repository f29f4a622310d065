#!/usr/bin/env python3
"""Differential check of kwd-proxy's HTTP/1.1 request parsing.

An independent strict request parser, written here from the grammar of
RFC 9112 (HTTP/1.1) and RFC 9110 (semantics) and RFC 3986 (URI), judges each
request case; every case is also sent to a real kwd-proxy on loopback whose
only backend records every byte it receives. Asserted:

  - every case the strict parser rejects reaches the backend with no byte at
    all, and the client gets an error status or a close;
  - a case the strict parser finds incomplete (a body shorter than its
    framing says; kwd streams bodies, so the head may go on) never reaches
    the backend as a complete request;
  - whatever kwd-proxy forwards is itself accepted by the strict parser (in its
    stricter "forwarded" mode: HTTP/1.1, one Content-Length with one value),
    with the method and the body of a request the strict parser accepted;
  - cases the strict parser accepts but kwd-proxy rejects are listed in
    KWD_MAY_REJECT with the reason (kwd is stricter there on purpose).

The cases were written for this test from the RFC text; each also states the
verdict its author expects from the strict parser, which checks the checker.
Needs KWD_PROXY and KWD_CONTROLLER (the built binaries), set by ctest.
"""

import ipaddress
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

PROXY = os.environ.get("KWD_PROXY", "")
CONTROLLER = os.environ.get("KWD_CONTROLLER", "")
HEALTH_PATH = b"/kwd-differential-health"

# ---- the strict reference parser (RFC 9112, RFC 9110, RFC 3986) ----

TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
PCT = rb"%[0-9A-Fa-f]{2}"
PCHAR = rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|" + PCT + rb")"
QUERY = rb"(?:" + PCHAR + rb"|[/?])*"
ABSOLUTE_PATH = rb"(?:/" + PCHAR + rb"*)+"
ORIGIN_FORM = re.compile(ABSOLUTE_PATH + rb"(?:\?" + QUERY + rb")?")
REG_NAME = re.compile(rb"(?:[A-Za-z0-9\-._~!$&'()*+,;=]|" + PCT + rb")*")
PORT = re.compile(rb"[0-9]*")
SCHEME = re.compile(rb"[A-Za-z][A-Za-z0-9+\-.]*")
# field-line = field-name ":" OWS field-value OWS (RFC 9112 5); field-value is
# *field-content with VCHAR / obs-text and inner SP / HTAB (RFC 9110 5.5).
FIELD_VCHAR = rb"[\x21-\x7e\x80-\xff]"
FIELD_LINE = re.compile(
    rb"(" + TOKEN + rb"):[ \t]*((?:" + FIELD_VCHAR + rb"(?:[ \t\x21-\x7e\x80-\xff]*" +
    FIELD_VCHAR + rb")?)?)[ \t]*")
REQUEST_LINE = re.compile(rb"(" + TOKEN + rb") ([^ ]+) HTTP/([0-9])\.([0-9])")
# chunk = chunk-size [ chunk-ext ] CRLF; chunk-ext = *( BWS ";" BWS
# chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ) (RFC 9112 7.1.1).
QUOTED_STRING = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
CHUNK_LINE = re.compile(
    rb"([0-9A-Fa-f]+)((?:[ \t]*;[ \t]*" + TOKEN + rb"(?:[ \t]*=[ \t]*(?:" + TOKEN + rb"|" +
    QUOTED_STRING + rb"))?)*)")


class Reject(Exception):
    pass


class Incomplete(Exception):
    pass


def valid_ipv4(text):
    parts = text.split(b".")
    if len(parts) != 4:
        return False
    for p in parts:
        # dec-octet: no leading zeros, 0-255
        if not re.fullmatch(rb"[0-9]{1,3}", p) or (len(p) > 1 and p[:1] == b"0") or int(p) > 255:
            return False
    return True


def valid_host(text, require_host):
    """uri-host [ ":" port ] (RFC 9110 7.2, RFC 3986 3.2.2)."""
    if text.startswith(b"["):
        end = text.find(b"]")
        if end < 0:
            return False
        literal, rest = text[1:end], text[end + 1:]
        try:
            ipaddress.IPv6Address(literal.decode("ascii"))
        except ValueError:
            return False
        host = literal
    else:
        host, _, port_part = text.partition(b":")
        rest = b":" + port_part if b":" in text else b""
        if not REG_NAME.fullmatch(host) and not valid_ipv4(host):
            return False
    if rest and not (rest[:1] == b":" and PORT.fullmatch(rest[1:])):
        return False
    return bool(host) or not require_host


class Request:
    def __init__(self):
        self.method = b""
        self.target = b""
        self.minor = 1
        self.fields = []  # (lower-case name, value)
        self.body = b""

    def values(self, name):
        return [v for n, v in self.fields if n == name]


def read_chunked(data, at, forwarded):
    body = b""
    for _ in range(100000):
        end = data.find(b"\r\n", at)
        if end < 0:
            if b"\n" in data[at:] or b"\r" in data[at:]:
                raise Reject("chunk-size line not ended by CRLF")
            raise Incomplete()
        if not CHUNK_LINE.fullmatch(data[at:end]):
            raise Reject("malformed chunk-size line %r" % data[at:end])
        size = int(CHUNK_LINE.fullmatch(data[at:end]).group(1), 16)
        at = end + 2
        if size == 0:
            break
        if len(data) < at + size + 2:
            raise Incomplete()
        body += data[at:at + size]
        if data[at + size:at + size + 2] != b"\r\n":
            raise Reject("chunk data not followed by CRLF")
        at += size + 2
    # trailer-section = *( field-line CRLF ) CRLF
    for _ in range(1000):
        end = data.find(b"\r\n", at)
        if end < 0:
            raise Incomplete()
        line = data[at:end]
        at = end + 2
        if line == b"":
            return body, at
        if b"\n" in line or b"\r" in line or not FIELD_LINE.fullmatch(line):
            raise Reject("malformed trailer field %r" % line)
    raise Reject("too many trailer fields")


def parse_request(data, forwarded=False):
    """Parses one request at the start of `data`: (Request, bytes consumed).

    Raises Reject when the request is invalid, Incomplete when more bytes are
    needed. `forwarded`: judge what a proxy sends on (HTTP/1.1 only, no empty
    line before the request, one Content-Length field with one value).
    """
    start = 0
    if not forwarded and data.startswith(b"\r\n"):
        start = 2  # RFC 9112 2.2: a server SHOULD ignore one empty line first
    end = data.find(b"\r\n\r\n", start)
    head = data[start:] if end < 0 else data[start:end + 2]
    # CRLF is the only line terminator: no bare LF, no bare CR (RFC 9112 2.2).
    unfinished = head[:-1] if end < 0 and head.endswith(b"\r") else head
    if re.search(rb"(?<!\r)\n", head) or re.search(rb"\r(?!\n)", unfinished):
        raise Reject("bare CR or LF")
    if end < 0:
        raise Incomplete()
    lines = data[start:end].split(b"\r\n")
    req = Request()
    m = REQUEST_LINE.fullmatch(lines[0])
    if not m:
        raise Reject("malformed request-line")
    req.method, req.target = m.group(1), m.group(2)
    if (m.group(3), m.group(4)) not in ((b"1", b"1"), (b"1", b"0")):
        raise Reject("HTTP version other than 1.0 or 1.1")
    req.minor = int(m.group(4))
    if forwarded and req.minor != 1:
        raise Reject("forwarded as HTTP/1.0")
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise Reject("obs-fold or whitespace before the first field")
        f = FIELD_LINE.fullmatch(line)
        if not f:
            raise Reject("malformed field line %r" % line)
        req.fields.append((f.group(1).lower(), f.group(2)))

    # request-target (RFC 9112 3.2)
    target = req.target
    authority = None
    if target.startswith(b"/"):
        if not ORIGIN_FORM.fullmatch(target):
            raise Reject("malformed origin-form")
    elif target == b"*":
        if req.method != b"OPTIONS":
            raise Reject("asterisk-form without OPTIONS")
    elif req.method == b"CONNECT":
        if not valid_host(target, require_host=True) or not re.search(rb":[0-9]+$", target):
            raise Reject("malformed authority-form")
        authority = target
    else:
        scheme, colon, rest = target.partition(b":")
        if not colon or not SCHEME.fullmatch(scheme) or scheme.lower() not in (b"http", b"https"):
            raise Reject("not an http(s) absolute-form")
        if not rest.startswith(b"//"):
            raise Reject("absolute-form without authority")
        rest = rest[2:]
        cut = min([i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0] + [len(rest)])
        authority, path_query = rest[:cut], rest[cut:]
        if b"@" in authority:
            raise Reject("userinfo in an http URI (RFC 9110 4.2.4)")
        if not valid_host(authority, require_host=True):
            raise Reject("bad authority in absolute-form")
        if path_query.startswith(b"/"):
            if not ORIGIN_FORM.fullmatch(path_query):
                raise Reject("bad path in absolute-form")
        elif path_query and not re.fullmatch(rb"\?" + QUERY, path_query):
            raise Reject("bad query in absolute-form")
    if req.method == b"CONNECT" and authority is None:
        raise Reject("CONNECT without authority-form")

    # Host (RFC 9112 3.2): exactly one in HTTP/1.1, at most one in 1.0.
    hosts = req.values(b"host")
    if len(hosts) > 1 or (req.minor == 1 and not hosts):
        raise Reject("Host missing or repeated")
    if hosts and not valid_host(hosts[0], require_host=False):
        raise Reject("invalid Host")

    # Framing (RFC 9112 6).
    lengths = req.values(b"content-length")
    codings = req.values(b"transfer-encoding")
    at = end + 4
    if codings:
        if req.minor == 0:
            raise Reject("Transfer-Encoding in HTTP/1.0")
        if lengths:
            raise Reject("Content-Length with Transfer-Encoding")
        # A list: empty elements are ignored (RFC 9110 5.6.1.2).
        elements = [e.strip(b" \t") for v in codings for e in v.split(b",")]
        elements = [e for e in elements if e]
        if [e.lower() for e in elements] != [b"chunked"]:
            raise Reject("a transfer coding other than one chunked")
        req.body, at = read_chunked(data, at, forwarded)
    elif lengths:
        if forwarded and (len(lengths) > 1 or not re.fullmatch(rb"[0-9]+", lengths[0])):
            raise Reject("Content-Length forwarded repeated or as a list")
        values = set()
        for v in lengths:
            for e in v.split(b","):
                e = e.strip(b" \t")
                if not re.fullmatch(rb"[0-9]+", e):
                    raise Reject("invalid Content-Length")
                values.add(int(e))
        if len(values) != 1:
            raise Reject("differing Content-Length values")
        n = values.pop()
        if len(data) < at + n:
            raise Incomplete()
        req.body = data[at:at + n]
        at += n
    return req, at


def parse_stream(data, forwarded=False):
    """The requests of a connection's bytes in order, and why the rest is not one."""
    requests = []
    for _ in range(100):
        if not data:
            return requests, None
        try:
            req, used = parse_request(data, forwarded)
        except Reject as e:
            return requests, "reject: %s" % e
        except Incomplete:
            return requests, "incomplete"
        requests.append(req)
        data = data[used:]
    return requests, "too many requests"


# ---- the cases ----

def get(fields=b"Host: h\r\n", target=b"/a", version=b"HTTP/1.1", method=b"GET"):
    return method + b" " + target + b" " + version + b"\r\n" + fields + b"\r\n"


def post(fields, body):
    return b"POST /a HTTP/1.1\r\nHost: h\r\n" + fields + b"\r\n" + body


def chunked(body):
    return post(b"Transfer-Encoding: chunked\r\n", body)


ACCEPT, REJECT, INCOMPLETE = "accept", "reject", "incomplete"

CASES = [
    # request-line (RFC 9112 3)
    ("simple_get", get(), ACCEPT),
    ("http10_without_host", b"GET /a HTTP/1.0\r\n\r\n", ACCEPT),
    ("one_leading_empty_line", b"\r\n" + get(), ACCEPT),
    ("two_leading_empty_lines", b"\r\n\r\n" + get(), REJECT),
    ("leading_bare_lf", b"\n" + get(), REJECT),
    ("lowercase_method_is_a_token", get(method=b"get"), ACCEPT),
    ("method_with_separator", get(method=b"GE(T"), REJECT),
    ("empty_method", b" /a HTTP/1.1\r\nHost: h\r\n\r\n", REJECT),
    ("two_spaces_after_method", b"GET  /a HTTP/1.1\r\nHost: h\r\n\r\n", REJECT),
    ("tab_as_separator", b"GET\t/a HTTP/1.1\r\nHost: h\r\n\r\n", REJECT),
    ("space_in_target", get(target=b"/a b"), REJECT),
    ("trailing_space_after_version", b"GET /a HTTP/1.1 \r\nHost: h\r\n\r\n", REJECT),
    ("missing_version", b"GET /a\r\nHost: h\r\n\r\n", REJECT),
    ("lowercase_version", get(version=b"http/1.1"), REJECT),
    ("version_two_digits", get(version=b"HTTP/1.10"), REJECT),
    ("version_2", get(version=b"HTTP/2.0"), REJECT),
    ("version_0_9", get(version=b"HTTP/0.9"), REJECT),
    ("version_1_2", get(version=b"HTTP/1.2"), REJECT),
    ("nul_in_request_line", get(target=b"/a\x00b"), REJECT),
    ("control_in_target", get(target=b"/a\x01b"), REJECT),
    ("del_in_target", get(target=b"/a\x7fb"), REJECT),
    ("obs_text_in_target", get(target=b"/a\xc3\xa9"), REJECT),
    ("fragment_in_target", get(target=b"/a#frag"), REJECT),
    ("bad_pct_encoding", get(target=b"/a%zz"), REJECT),
    ("truncated_pct_encoding", get(target=b"/a%4"), REJECT),
    ("pct_encoding", get(target=b"/a%41b"), ACCEPT),
    ("backslash_in_target", get(target=b"/a\\b"), REJECT),
    ("quote_in_target", get(target=b'/a"b'), REJECT),
    ("brackets_in_path", get(target=b"/a[b]"), REJECT),
    ("query", get(target=b"/a?x=1&y=/z?"), ACCEPT),
    ("sub_delims_in_path", get(target=b"/a;b=c,d!$&'()*+:@"), ACCEPT),
    ("relative_target", get(target=b"a/b"), REJECT),
    # absolute-form, authority-form, asterisk-form (RFC 9112 3.2)
    ("absolute_form", get(target=b"http://h/a?x=1"), ACCEPT),
    ("absolute_form_https_port", get(target=b"https://h:8443/a"), ACCEPT),
    ("absolute_form_uppercase_scheme", get(target=b"HTTP://h/a"), ACCEPT),
    ("absolute_form_no_path", get(target=b"http://h"), ACCEPT),
    ("absolute_form_userinfo", get(target=b"http://user:pw@h/a"), REJECT),
    ("absolute_form_empty_host", get(target=b"http:///a"), REJECT),
    ("absolute_form_no_slashes", get(target=b"http:h/a"), REJECT),
    ("absolute_form_other_scheme", get(target=b"ftp://h/a"), REJECT),
    ("absolute_form_bad_host", get(target=b"http://h{x}/a"), REJECT),
    # llhttp's vectors: a reg-name holds sub-delims (issue 23 item 13).
    ("host_with_sub_delims", get(b"Host: 0.0.0.0=5000\r\n"), ACCEPT),
    ("host_with_every_sub_delim", get(b"Host: a!$&'()*+,;=b:80\r\n"), ACCEPT),
    ("absolute_form_sub_delims", get(target=b"http://0.0.0.0=5000/a"), ACCEPT),
    ("absolute_form_space_in_host", get(target=b"http://h%20x/a"), ACCEPT),
    ("absolute_form_without_host_field", b"GET http://h/a HTTP/1.1\r\n\r\n", REJECT),
    ("authority_form_without_connect", get(target=b"h:80"), REJECT),
    ("connect_without_authority_form", get(method=b"CONNECT", target=b"/a"), REJECT),
    ("asterisk_with_options", get(method=b"OPTIONS", target=b"*"), ACCEPT),
    ("asterisk_with_get", get(target=b"*"), REJECT),
    # field syntax (RFC 9112 5, RFC 9110 5.5)
    ("space_before_colon", get(b"Host: h\r\nX-A : 1\r\n"), REJECT),
    ("tab_before_colon", get(b"Host: h\r\nX-A\t: 1\r\n"), REJECT),
    ("space_before_colon_host", get(b"Host : h\r\n"), REJECT),
    ("empty_field_name", get(b"Host: h\r\n: 1\r\n"), REJECT),
    ("no_colon", get(b"Host: h\r\nX-A 1\r\n"), REJECT),
    ("separator_in_name", get(b"Host: h\r\nX(A): 1\r\n"), REJECT),
    ("utf8_in_name", get(b"Host: h\r\nX-\xc3\xa9: 1\r\n"), REJECT),
    ("empty_value", get(b"Host: h\r\nX-A:\r\n"), ACCEPT),
    ("ows_around_value", get(b"Host: h\r\nX-A: \t 1 2 \t\r\n"), ACCEPT),
    ("obs_text_in_value", get(b"Host: h\r\nX-A: caf\xc3\xa9\r\n"), ACCEPT),
    ("nul_in_value", get(b"Host: h\r\nX-A: a\x00b\r\n"), REJECT),
    ("control_in_value", get(b"Host: h\r\nX-A: a\x01b\r\n"), REJECT),
    ("del_in_value", get(b"Host: h\r\nX-A: a\x7fb\r\n"), REJECT),
    ("escape_in_value", get(b"Host: h\r\nX-A: a\x1bb\r\n"), REJECT),
    ("obs_fold", get(b"Host: h\r\nX-A: 1\r\n 2\r\n"), REJECT),
    ("obs_fold_tab", get(b"Host: h\r\nX-A: 1\r\n\t2\r\n"), REJECT),
    ("whitespace_before_first_field", b"GET /a HTTP/1.1\r\n Host: h\r\n\r\n", REJECT),
    ("bare_lf_field_line", b"GET /a HTTP/1.1\r\nHost: h\nX-A: 1\r\n\r\n", REJECT),
    ("bare_lf_everywhere", b"GET /a HTTP/1.1\nHost: h\n\n", REJECT),
    ("bare_lf_end_of_head", b"GET /a HTTP/1.1\r\nHost: h\r\n\n", REJECT),
    ("bare_cr_in_value", get(b"Host: h\r\nX-A: a\rb\r\n"), REJECT),
    ("bare_cr_line_end", b"GET /a HTTP/1.1\r\nHost: h\rX-A: 1\r\n\r\n", REJECT),
    ("bare_cr_in_request_line", b"GET /a\r HTTP/1.1\r\nHost: h\r\n\r\n", REJECT),
    ("head_never_ends", b"GET /a HTTP/1.1\r\nHost: h\r\n", INCOMPLETE),
    # Host (RFC 9112 3.2, RFC 9110 7.2)
    ("missing_host", get(b"X-A: 1\r\n"), REJECT),
    ("duplicate_host", get(b"Host: h\r\nHost: h\r\n"), REJECT),
    ("duplicate_host_http10", get(b"Host: h\r\nHost: g\r\n", version=b"HTTP/1.0"), REJECT),
    ("empty_host", get(b"Host:\r\n"), ACCEPT),
    ("host_with_port", get(b"Host: h.example:8080\r\n"), ACCEPT),
    ("host_ipv4", get(b"Host: 192.0.2.1\r\n"), ACCEPT),
    ("host_ipv6", get(b"Host: [2001:db8::1]:80\r\n"), ACCEPT),
    ("host_bad_ipv6", get(b"Host: [2001:db8::g]\r\n"), REJECT),
    ("host_unclosed_bracket", get(b"Host: [2001:db8::1\r\n"), REJECT),
    ("host_userinfo", get(b"Host: u@h\r\n"), REJECT),
    ("host_with_path", get(b"Host: h/a\r\n"), REJECT),
    ("host_with_space", get(b"Host: h x\r\n"), REJECT),
    ("host_bad_port", get(b"Host: h:8x\r\n"), REJECT),
    ("host_two_colons", get(b"Host: h:80:80\r\n"), REJECT),
    ("host_list", get(b"Host: h, g\r\n"), REJECT),
    # Content-Length (RFC 9110 8.6, RFC 9112 6.3)
    ("content_length", post(b"Content-Length: 5\r\n", b"hello"), ACCEPT),
    ("content_length_zero", post(b"Content-Length: 0\r\n", b""), ACCEPT),
    ("content_length_same_twice", post(b"Content-Length: 5\r\nContent-Length: 5\r\n", b"hello"),
     ACCEPT),
    ("content_length_same_list", post(b"Content-Length: 5, 5\r\n", b"hello"), ACCEPT),
    ("content_length_differing", post(b"Content-Length: 5\r\nContent-Length: 6\r\n", b"hello!"),
     REJECT),
    ("content_length_differing_list", post(b"Content-Length: 5, 6\r\n", b"hello!"), REJECT),
    ("content_length_empty_element", post(b"Content-Length: 5,,5\r\n", b"hello"), REJECT),
    ("content_length_trailing_comma", post(b"Content-Length: 5,\r\n", b"hello"), REJECT),
    ("content_length_empty", post(b"Content-Length:\r\n", b""), REJECT),
    ("content_length_plus", post(b"Content-Length: +5\r\n", b"hello"), REJECT),
    ("content_length_negative", post(b"Content-Length: -5\r\n", b"hello"), REJECT),
    ("content_length_hex", post(b"Content-Length: 0x5\r\n", b"hello"), REJECT),
    ("content_length_space_inside", post(b"Content-Length: 5 5\r\n", b"hello"), REJECT),
    ("content_length_decimal_point", post(b"Content-Length: 5.0\r\n", b"hello"), REJECT),
    ("content_length_overflow",
     post(b"Content-Length: 18446744073709551621\r\n", b"hello"), INCOMPLETE),
    ("content_length_body_short", post(b"Content-Length: 10\r\n", b"hello"), INCOMPLETE),
    # Transfer-Encoding (RFC 9112 6.1, 6.3)
    ("chunked", chunked(b"5\r\nhello\r\n0\r\n\r\n"), ACCEPT),
    ("chunked_uppercase_coding", post(b"Transfer-Encoding: Chunked\r\n", b"0\r\n\r\n"), ACCEPT),
    ("chunked_and_content_length",
     post(b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", b"0\r\n\r\n"), REJECT),
    ("content_length_and_chunked",
     post(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"), REJECT),
    ("chunked_on_http10", b"POST /a HTTP/1.0\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", REJECT),
    ("chunked_twice", post(b"Transfer-Encoding: chunked, chunked\r\n", b"0\r\n\r\n"), REJECT),
    ("chunked_twice_fields",
     post(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"), REJECT),
    ("chunked_not_last", post(b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n"), REJECT),
    ("gzip_then_chunked", post(b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"), REJECT),
    ("identity_only", post(b"Transfer-Encoding: identity\r\n", b""), REJECT),
    ("xchunked", post(b"Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n"), REJECT),
    ("chunked_with_parameter", post(b"Transfer-Encoding: chunked;q=1\r\n", b"0\r\n\r\n"), REJECT),
    ("empty_transfer_encoding", post(b"Transfer-Encoding:\r\n", b""), REJECT),
    ("transfer_encoding_empty_elements", post(b"Transfer-Encoding: , chunked,\r\n",
                                              b"5\r\nhello\r\n0\r\n\r\n"), ACCEPT),
    ("vertical_tab_before_chunked", post(b"Transfer-Encoding: \x0bchunked\r\n", b"0\r\n\r\n"),
     REJECT),
    # chunked body (RFC 9112 7.1)
    ("chunk_uppercase_hex", chunked(b"A\r\n0123456789\r\n0\r\n\r\n"), ACCEPT),
    ("chunk_leading_zeros", chunked(b"0005\r\nhello\r\n000\r\n\r\n"), ACCEPT),
    ("chunk_size_0x", chunked(b"0x5\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_size_negative", chunked(b"-5\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_size_plus", chunked(b"+5\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_size_empty", chunked(b"\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_size_space_before", chunked(b" 5\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_size_space_after", chunked(b"5 \r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_size_overflow", chunked(b"10000000000000005\r\nhello\r\n0\r\n\r\n"), INCOMPLETE),
    ("chunk_size_bare_lf", chunked(b"5\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_data_too_long", chunked(b"5\r\nhelloX\r\n0\r\n\r\n"), REJECT),
    ("chunk_data_bare_lf", chunked(b"5\r\nhello\n0\r\n\r\n"), REJECT),
    ("chunk_no_last_chunk", chunked(b"5\r\nhello\r\n"), INCOMPLETE),
    ("chunk_no_final_crlf", chunked(b"5\r\nhello\r\n0\r\n"), INCOMPLETE),
    ("chunk_last_bare_lf", chunked(b"5\r\nhello\r\n0\n\n"), REJECT),
    ("chunk_ext", chunked(b"5;a\r\nhello\r\n0;b=c\r\n\r\n"), ACCEPT),
    ("chunk_ext_bws", chunked(b"5 ; a = b\r\nhello\r\n0\r\n\r\n"), ACCEPT),
    ("chunk_ext_quoted", chunked(b'5;a="b \\" c;d"\r\nhello\r\n0\r\n\r\n'), ACCEPT),
    ("chunk_ext_several", chunked(b"5;a;b=c;d=\"e\"\r\nhello\r\n0\r\n\r\n"), ACCEPT),
    ("chunk_ext_empty", chunked(b"5;\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_ext_no_name", chunked(b"5;=x\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_ext_only_space", chunked(b"5; \r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_ext_trailing_space", chunked(b"5;a \r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_ext_empty_value", chunked(b"5;a=\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_ext_unbalanced_quote", chunked(b'5;a="b\r\nhello\r\n0\r\n\r\n'), REJECT),
    ("chunk_ext_quote_in_token", chunked(b'5;a=b"\r\nhello\r\n0\r\n\r\n'), REJECT),
    ("chunk_ext_separator", chunked(b"5;a/b\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_ext_control", chunked(b"5;a\x01\r\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_ext_bare_lf", chunked(b"5;a\nhello\r\n0\r\n\r\n"), REJECT),
    ("chunk_ext_on_last_chunk_bad", chunked(b"5\r\nhello\r\n0;\r\n\r\n"), REJECT),
    ("trailer", chunked(b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"), ACCEPT),
    ("trailer_space_before_colon", chunked(b"5\r\nhello\r\n0\r\nX-T : 1\r\n\r\n"), REJECT),
    ("trailer_obs_fold", chunked(b"5\r\nhello\r\n0\r\nX-T: 1\r\n 2\r\n\r\n"), REJECT),
    ("trailer_nul", chunked(b"5\r\nhello\r\n0\r\nX-T: \x00\r\n\r\n"), REJECT),
    ("trailer_bare_lf", chunked(b"5\r\nhello\r\n0\r\nX-T: 1\n\r\n"), REJECT),
    # framing fields a client tries to have dropped, forms kwd may refuse
    ("connection_nominates_content_length",
     post(b"Connection: Content-Length\r\nContent-Length: 5\r\n", b"hello"), ACCEPT),
    ("connection_nominates_transfer_encoding",
     post(b"Connection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n",
          b"5\r\nhello\r\n0\r\n\r\n"), ACCEPT),
    ("body_on_get", get(b"Host: h\r\nContent-Length: 3\r\n") + b"abc", ACCEPT),
    ("absolute_form_other_host_field", get(b"Host: other\r\n", target=b"http://h:80/a"), ACCEPT),
    ("absolute_form_ipv6", get(target=b"http://[2001:db8::1]:8080/a"), ACCEPT),
    ("connect_authority_form", get(method=b"CONNECT", target=b"h:443"), ACCEPT),
    ("long_chunk_extension", chunked(b"5;a=" + b"x" * 5000 + b"\r\nhello\r\n0\r\n\r\n"), ACCEPT),
    ("two_pipelined_gets", get() + get(target=b"/b"), ACCEPT),
    # smuggling shapes: the second request must never reach the backend alone
    ("cl_body_holds_request",
     post(b"Content-Length: 30\r\n", b"GET /smuggled HTTP/1.1\r\nX: y\r\n"), ACCEPT),
    ("chunked_then_pipelined", chunked(b"0\r\n\r\n") + get(target=b"/second"), ACCEPT),
    ("chunked_then_invalid", chunked(b"0\r\n\r\n") + get(b"Host : h\r\n", target=b"/second"),
     REJECT),
    ("te_cl_desync", post(b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
                          b"5c\r\nGPOST / HTTP/1.1\r\n\r\n0\r\n\r\n"), REJECT),
    ("te_with_space_in_name", post(b"Transfer-Encoding : chunked\r\nContent-Length: 3\r\n",
                                   b"abc"), REJECT),
]

# Accepted by the strict parser, rejected by kwd-proxy on purpose.
KWD_MAY_REJECT = {
    "connect_authority_form": "kwd is a gateway, not a forward proxy: no tunnels to a host "
                              "the client names",
    "long_chunk_extension": "a chunk-size line is bounded (4 KiB with its extensions)",
    "asterisk_with_options": "OPTIONS * asks about the server as a whole; no path means no "
                             "URL mapping rule or logon group to route it to (400)",
}


def verdict(raw):
    requests, error = parse_stream(raw)
    if error is None and requests:
        return ACCEPT
    return INCOMPLETE if error == "incomplete" else REJECT


# ---- the recording backend and the proxy ----

class Backend:
    """Records every byte; answers each request it can parse with 200 "ok"."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.received = b""  # everything but health checks, in arrival order
        self.requests = []
        self.errors = []
        self.stopping = False
        threading.Thread(target=self.accept, daemon=True).start()

    def counters(self):
        with self.lock:
            return len(self.received), len(self.requests), len(self.errors)

    def accept(self):
        for _ in range(100000):
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        buffer = b""
        conn.settimeout(30)
        with conn:
            for _ in range(100000):
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    if buffer:
                        with self.lock:
                            self.errors.append(("closed mid-request", buffer))
                    return
                buffer += data
                if buffer.startswith(b"GET " + HEALTH_PATH):
                    end = buffer.find(b"\r\n\r\n")
                    if end < 0:
                        continue
                    buffer = buffer[end + 4:]
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    continue
                with self.lock:
                    self.received += data
                while buffer:
                    try:
                        req, used = parse_request(buffer, forwarded=True)
                    except Incomplete:
                        break
                    except Reject as e:
                        with self.lock:
                            self.errors.append((str(e), buffer))
                        return
                    buffer = buffer[used:]
                    with self.lock:
                        self.requests.append(req)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    def close(self):
        self.sock.close()


def read_responses(sock, wanted, timeout):
    """Reads responses until `wanted` final ones, an error status, a close or
    the timeout: (statuses, closed)."""
    buffer = b""
    statuses = []
    deadline = time.monotonic() + timeout
    closed = False
    while time.monotonic() < deadline:
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buffer[:end].decode("latin-1")
            m = re.match(r"HTTP/1\.[01] (\d{3})", head)
            if not m:
                statuses.append(-1)
                return statuses, closed
            length = re.search(r"(?im)^content-length:\s*(\d+)", head)
            n = int(length.group(1)) if length else 0
            if len(buffer) < end + 4 + n:
                break
            buffer = buffer[end + 4 + n:]
            status = int(m.group(1))
            if status >= 200:
                statuses.append(status)
        if statuses and (statuses[-1] >= 400 or len(statuses) >= wanted):
            return statuses, closed
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not data:
            closed = True
            break
        buffer += data
    return statuses, closed


OBJECTS = """\
apiVersion: dispatch.kwd.io/v1alpha1
kind: LogonGroup
metadata: {name: all, namespace: default}
spec:
  kind: java
  healthCheck: {path: %s, intervalSeconds: 3600}
  backend:
    staticServers:
      - {name: recorder, address: 127.0.0.1, port: %d}
---
apiVersion: dispatch.kwd.io/v1alpha1
kind: UrlMapping
metadata: {name: all, namespace: default}
spec:
  hosts: []
  defaultRootHandler: java
  defaultGroups: {java: all}
"""


class DifferentialTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PROXY or not CONTROLLER:
            raise unittest.SkipTest("set KWD_PROXY and KWD_CONTROLLER to the built binaries")
        cls.dir = tempfile.mkdtemp(prefix="kwd-differential-")
        cls.backend = Backend()
        os.makedirs(os.path.join(cls.dir, "objects"))
        with open(os.path.join(cls.dir, "objects", "objects.yaml"), "w") as f:
            f.write(OBJECTS % (HEALTH_PATH.decode(), cls.backend.port))
        compiled = subprocess.run(
            [CONTROLLER, "compile", "--source=dir:" + os.path.join(cls.dir, "objects")],
            capture_output=True, text=True, timeout=60)
        assert compiled.returncode == 0, compiled.stderr
        snapshot = os.path.join(cls.dir, "snapshot.json")
        with open(snapshot, "w") as f:
            f.write(compiled.stdout)
        cls.log = open(os.path.join(cls.dir, "proxy.log"), "w")
        cls.proxy = subprocess.Popen(
            [PROXY, "serve", "--snapshot", snapshot, "--listen", "127.0.0.1:0",
             "--admin-listen", "127.0.0.1:0", "--access-log", "off", "--header-timeout", "1s"],
            stdout=subprocess.PIPE, stderr=cls.log, text=True)
        line = ""
        for _ in range(100):
            line = cls.proxy.stdout.readline()
            if line.startswith("listening ") or not line:
                break
        assert line.startswith("listening "), "kwd-proxy did not start: " + line
        cls.port = int(line.rsplit(":", 1)[1])

    @classmethod
    def tearDownClass(cls):
        cls.proxy.terminate()
        try:
            cls.proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            cls.proxy.kill()
            cls.proxy.wait()
        cls.proxy.stdout.close()
        cls.log.close()
        cls.backend.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def exchange(self, raw, wanted, timeout=3):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(raw)
            return read_responses(s, max(wanted, 1), timeout)

    def wait_settled(self):
        """Waits until the backend has seen no new bytes for a moment."""
        last = self.backend.counters()
        for _ in range(10):
            time.sleep(0.03)
            now = self.backend.counters()
            if now == last:
                break
            last = now
        return last

    def test_strict_parser_agrees_with_the_case_author(self):
        names = [name for name, _, _ in CASES]
        self.assertEqual(len(names), len(set(names)), "duplicate case names")
        for name, raw, expected in CASES:
            with self.subTest(case=name):
                self.assertEqual(verdict(raw), expected, "strict parser: %s" % parse_stream(raw)[1])

    def test_kwd_forwards_nothing_the_strict_parser_rejects(self):
        sanity, _ = self.exchange(get(), 1)
        self.assertEqual(sanity, [200], "the proxy does not reach the backend")
        disagreements = []
        for name, raw, _ in CASES:
            valid, error = parse_stream(raw)
            judged = verdict(raw)
            before = self.wait_settled()
            statuses, closed = self.exchange(raw, len(valid),
                                             timeout=1 if judged == INCOMPLETE else 3)
            after = self.wait_settled()
            got_bytes = after[0] - before[0]
            with self.backend.lock:
                forwarded = self.backend.requests[before[1]:after[1]]
                broken = [e for e in self.backend.errors[before[2]:after[2]]
                          if judged != INCOMPLETE or e[0] != "closed mid-request"]
            with self.subTest(case=name):
                self.assertEqual(broken, [], "the backend got bytes that are no valid request")
                # Every request forwarded is one the strict parser accepted, in
                # order, with its method and body.
                self.assertLessEqual(len(forwarded), len(valid), "forwarded more than accepted")
                for sent, original in zip(forwarded, valid):
                    self.assertEqual(sent.method, original.method)
                    self.assertEqual(sent.body, original.body)
                if not valid:
                    self.assertNotIn(200, statuses)
                if judged == REJECT and not valid:
                    self.assertEqual(got_bytes, 0, "a rejected request reached the backend")
                    self.assertTrue(closed or (statuses and statuses[0] >= 400),
                                    "no error and no close: %r" % statuses)
                if valid and len(forwarded) < len(valid):
                    disagreements.append((name, statuses))
        unexpected = [(n, s) for n, s in disagreements if n not in KWD_MAY_REJECT]
        for name, statuses in disagreements:
            print("kwd rejects, strict parser accepts: %s %r (%s)" %
                  (name, statuses, KWD_MAY_REJECT.get(name) or "unexplained"))
        self.assertEqual(unexpected, [], "kwd rejects requests the strict parser accepts")


if __name__ == "__main__":
    unittest.main(verbosity=2)
