// cpp-httplib's server with the three things a generation server needs and httplib 0.11 does not offer:
//   - a handler can ask whether its client is still there (peer_closed), so a request whose client went away
//     is cancelled at once instead of decoding to the end for nobody;
//   - a drain: stop_accepting() closes the listening socket while in-flight requests, streams included, run to
//     their end (httplib's own stop() cuts streams off mid-chunk); idle keep-alive connections close, and
//     listen() returns once the last request has been answered;
//   - a listen backlog for many clients at once (httplib listens with 5).
// The first two come from owning the per-connection loop: process_and_close_socket (a private virtual of
// httplib::Server) is overridden, with a buffered socket stream of our own, and each request is handed to
// httplib's process_request, which parses it and runs the routing as usual.
#pragma once

#include <atomic>
#include <string>

#include <httplib.h>

namespace kt_server {

class HttpServer : public httplib::Server {
public:
    // Binds host:port (0: any free port) for listen_after_bind() and returns the port, or -1. The socket listens
    // with the system's largest backlog: httplib's is 5, and a burst of more new connections than that overflows
    // the accept queue, whose dropped SYNs each client sends again only after a second (then 3, 7 ...).
    int bind(const std::string &host, int port);

    // Stops accepting connections; in-flight requests finish and listen() then returns. Safe from any thread
    // (not from a signal handler).
    void stop_accepting();
    bool draining() const { return draining_; }

    // True when the client of the request running on this thread has closed its connection. Call from a handler
    // or a content provider (they run on the connection's thread).
    static bool peer_closed();

private:
    bool process_and_close_socket(socket_t sock) override;

    std::atomic<bool> draining_{false};
};

}  // namespace kt_server
