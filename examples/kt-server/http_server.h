// cpp-httplib's server with the three things a generation server needs and httplib 0.11 does not offer:
//   - a handler can ask whether its client is still there (peer_closed), so a request whose client went away
//     is cancelled at once instead of decoding to the end for nobody;
//   - a drain: stop_accepting() closes the listening socket while in-flight requests, streams included, run to
//     their end (httplib's own stop() cuts streams off mid-chunk); idle keep-alive connections close, and
//     listen() returns once the last request has been answered;
//   - a listen backlog for many clients at once (httplib listens with 5);
//   - a deadline for reading each request (httplib only bounds each read): a client that drips its headers a byte
//     at a time would otherwise hold a connection thread for ever, and as many such clients as there are threads
//     would leave every other client waiting.
// All but the backlog come from owning the per-connection loop: process_and_close_socket (a private virtual of
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

    // A client has `seconds` from the first byte of a request to send all of it (request line, headers and body),
    // plus one second for every kRequestMinRate bytes it sends, so that a large body on a slow link still arrives
    // while a connection that trickles bytes ends. 0: no deadline. Past it the client gets 408 and the connection
    // closes. Call before listening.
    static constexpr int64_t kRequestMinRate = 16 << 10;  // bytes per second
    void set_request_timeout(int seconds) { request_timeout_sec_ = seconds; }
    // True on a connection's thread when the request being read passed its deadline (for the error handler: httplib
    // answers a request cut short in its headers or body with 400).
    static bool request_timed_out();
    std::string request_timeout_message() const;

    // True when the client of the request running on this thread has closed its connection. Call from a handler
    // or a content provider (they run on the connection's thread).
    static bool peer_closed();

private:
    bool process_and_close_socket(socket_t sock) override;

    std::atomic<bool> draining_{false};
    int request_timeout_sec_ = 0;
};

}  // namespace kt_server
