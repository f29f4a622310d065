#!/usr/bin/python3
"""Holds many idle keep-alive connections to one proxy (bench/memory_bench.sh).

usage: memory_client.py SHAPE PORT COUNT READY_FILE [REQUESTS]
  SHAPE: plain (HTTP/1.1), tls (HTTP/1.1 over TLS 1.3, ALPN http/1.1) or
         h2 (HTTP/2 over TLS 1.3, ALPN h2; needs python3-h2)
  REQUESTS: h2 only, GET / requests one after the other on each connection
         (default 1)

Opens COUNT connections, at most 100 being set up at a time, sends one
GET / on each (h2: REQUESTS) and reads its answer (a 200), keeps every answered connection
open and idle, then writes "<held> <failed>" to READY_FILE and sleeps until
it is killed. One process, one asyncio loop: the descriptor limit is raised
to the hard limit.
"""
import asyncio
import resource
import ssl
import sys

REQUEST = b"GET / HTTP/1.1\r\nHost: bench.kwd.test\r\n\r\n"
SERVER_NAME = "bench.kwd.test"


def tls_context(alpn):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols([alpn])
    return ctx


async def http1(port, ctx):
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname=SERVER_NAME if ctx else None)
    writer.write(REQUEST)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    if not head.startswith(b"HTTP/1.1 200"):
        writer.close()
        raise OSError("status " + head.split(b"\r\n", 1)[0].decode(errors="replace"))
    return writer


async def http2(port, ctx, requests=1):
    import h2.config
    import h2.connection
    import h2.events
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname=SERVER_NAME)
    alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
    if alpn != "h2":
        writer.close()
        raise OSError("ALPN %r, not h2" % alpn)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    for _ in range(requests):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [(":method", "GET"), (":scheme", "https"),
                                   (":authority", SERVER_NAME), (":path", "/")], end_stream=True)
        writer.write(conn.data_to_send())
        status, done = None, False
        for _ in range(1000):  # frames of one small answer: bounded
            data = await reader.read(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    status = dict(event.headers).get(b":status")
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    done = True
            out = conn.data_to_send()
            if out:
                writer.write(out)
            if done:
                break
        await writer.drain()
        if not done or status != b"200":
            writer.close()
            raise OSError("h2 stream: status %r, ended %s" % (status, done))
    # The connection stays open: the peer's reader is left alone, pings
    # (HAProxy does not send any) would be answered by nobody.
    return writer


async def main():
    shape, port, count, ready = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    requests = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ctx = None
    if shape in ("tls", "h2"):
        ctx = tls_context("h2" if shape == "h2" else "http/1.1")
    opener = http2 if shape == "h2" else http1
    kept, failed = [], 0
    gate = asyncio.Semaphore(100)

    async def one():
        nonlocal failed
        async with gate:
            try:
                if shape == "h2":
                    kept.append(await asyncio.wait_for(http2(port, ctx, requests), 30 + requests))
                else:
                    kept.append(await asyncio.wait_for(opener(port, ctx), 30))
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as e:
                failed += 1
                if failed <= 3:
                    print("memory_client: %s: %r" % (shape, e), file=sys.stderr)

    await asyncio.gather(*(one() for _ in range(count)))
    with open(ready, "w") as f:
        f.write("%d %d\n" % (len(kept), failed))
    await asyncio.sleep(3600)


asyncio.run(main())
