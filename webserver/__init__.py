"""The project's own HTTP/1.1 server (uvloop + httptools), free of Django and of the apps: it is handed an
application factory and speaks to what it returns through webserver.interface only. `webserver.main(argv,
application_factory)` serves it (config/server.py is the project's entry point, `python -m config.server --port
8000`).

HTTP/1.1 on uvloop, requests parsed by httptools (llhttp, Node.js's parser), in worker processes that each
listen on the port (SO_REUSEPORT: the kernel spreads connections over them), under a master process that
starts them, starts a worker again when one dies, and stops them gracefully on SIGTERM / SIGINT.

The server knows nothing of what it serves: each worker calls the application factory after the fork and
hands every request to the application it returns (webserver.interface: a Request in, a Response or an
awaitable of one out), one request of a connection at a time, in order, from one task per busy connection.
Files under the static mount are the server's own. Answers are whole (Content-Length), or, when the
application gives a body in parts (webserver.interface.Parts: a CSV export), chunked, each part sent once the
client has taken the one before. (Writing an answer the application gives at once in the parser's callback,
without the task, was measured and not kept: the same sold-out claims/s within noise, 1.02x over 4 interleaved
rounds, docs/benchmarks.md.)

Limits (webserver.options): a request line of at most 64 KiB (414) and headers of at most 64 KiB and 100 fields
(431), a body of at most its route's limit (the application's body_limit_for(path), else its body_limit: 413, by
Content-Length before anything is read; a chunked body is cut at the limit + 1), a whole
request within 30 s of its first byte (408; not counting while reading is paused), an idle connection closed
after 60 s, at most 32 pipelined requests waiting before reading pauses. A malformed request (CONNECT too) is a
400 in the contract's JSON form, then the connection closes. An Upgrade request is answered as a plain one, then
the connection closes. A connection closed after an answer is half-closed first, and what the client still
sends is read and dropped (2 s at most): closing with input unread would reset the connection, and the reset can
destroy the answer before the client reads it.

A port another process listens on (even another server of this kind, SO_REUSEPORT or not) is exit code 2.

    interface.py  what the server hands an application and takes back
    options.py    the limits, the command line, the default number of workers
    protocol.py   one connection: parsing, the limits, answering in order, closing softly
    static.py     files under the static mount
    worker.py     a worker process: its event loop, the application, the answer to a request
    master.py     the master process: sockets, forking and restarting workers, stopping; main()
"""
from .interface import JSON_HEADERS, Application, Request, Response, error_response, wsgi_path
from .master import main

__all__ = ["JSON_HEADERS", "Application", "Request", "Response", "error_response", "main", "wsgi_path"]
