#include "http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <vector>

namespace kt_server {

namespace {

// The socket of the connection this thread is serving (-1: none).
thread_local int t_socket = -1;

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

// Waits up to timeout_ms for `events` on fd. 1: ready, 0: timed out, -1: error or hang-up.
int wait_for(int fd, short events, int timeout_ms) {
    pollfd p = {fd, events, 0};
    int n;
    do n = ::poll(&p, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    if (p.revents & events) return 1;
    return -1;  // POLLERR, POLLHUP or POLLNVAL without the event asked for
}

void address_of(int fd, bool peer, std::string &ip, int &port) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr *>(&addr), &len)
                        : ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
    ip.clear();
    port = -1;
    if (rc != 0) return;
    char text[INET6_ADDRSTRLEN] = {0};
    if (addr.ss_family == AF_INET) {
        const auto *a = reinterpret_cast<const sockaddr_in *>(&addr);
        ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
        port = ntohs(a->sin_port);
    } else if (addr.ss_family == AF_INET6) {
        const auto *a = reinterpret_cast<const sockaddr_in6 *>(&addr);
        ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
        port = ntohs(a->sin6_port);
    }
    ip = text;
}

// A blocking socket with httplib's read and write timeouts, a read buffer (httplib reads request lines one byte at
// a time), and the deadline of the request being read (HttpServer::set_request_timeout).
class SocketStream final : public httplib::Stream {
public:
    using Clock = std::chrono::steady_clock;

    SocketStream(int fd, int read_timeout_ms, int write_timeout_ms)
        : fd_(fd), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms), buffer_(4096) {}

    // A request begins (its first byte is readable): its deadline is `seconds` from now (0: none), extended as its
    // bytes arrive.
    void begin_request(int seconds) {
        has_deadline_ = seconds > 0;
        deadline_ = Clock::now() + std::chrono::seconds(seconds);
        timed_out_ = false;
        written_ = 0;
    }
    bool timed_out() const { return timed_out_; }
    size_t written() const { return written_; }

    bool is_readable() const override { return buffered() > 0 || wait_readable(); }
    bool is_writable() const override { return wait_for(fd_, POLLOUT, write_timeout_ms_) == 1; }

    ssize_t read(char *ptr, size_t size) override {
        if (buffered() == 0) {
            if (!wait_readable()) return -1;
            ssize_t n;
            do n = ::recv(fd_, buffer_.data(), buffer_.size(), 0);
            while (n < 0 && errno == EINTR);
            if (n <= 0) return n;
            if (has_deadline_) deadline_ += std::chrono::nanoseconds(n * int64_t{1000000000} / HttpServer::kRequestMinRate);
            begin_ = 0;
            end_ = static_cast<size_t>(n);
        }
        const size_t n = std::min(size, buffered());
        std::copy(buffer_.begin() + static_cast<long>(begin_), buffer_.begin() + static_cast<long>(begin_ + n), ptr);
        begin_ += n;
        return static_cast<ssize_t>(n);
    }

    ssize_t write(const char *ptr, size_t size) override {
        if (!is_writable()) return -1;
        ssize_t n;
        do n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n > 0) written_ += static_cast<size_t>(n);
        return n;
    }

    void get_remote_ip_and_port(std::string &ip, int &port) const override { address_of(fd_, true, ip, port); }
    void get_local_ip_and_port(std::string &ip, int &port) const override { address_of(fd_, false, ip, port); }
    socket_t socket() const override { return fd_; }

    size_t buffered() const { return end_ - begin_; }

private:
    // Waits for bytes for up to the read timeout, and not past the request's deadline; a wait that the deadline
    // cut short marks the request timed out.
    bool wait_readable() const {
        int64_t timeout_ms = read_timeout_ms_;
        bool deadline_bounds = false;
        if (has_deadline_) {
            const int64_t left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
            if (left <= timeout_ms) {
                timeout_ms = std::max<int64_t>(left, 0);
                deadline_bounds = true;
            }
        }
        const int ready = timeout_ms > 0 ? wait_for(fd_, POLLIN, static_cast<int>(timeout_ms)) : 0;
        if (ready == 0 && deadline_bounds) timed_out_ = true;
        return ready == 1;
    }

    int fd_;
    int read_timeout_ms_, write_timeout_ms_;
    std::vector<char> buffer_;
    size_t begin_ = 0, end_ = 0;
    bool has_deadline_ = false;
    Clock::time_point deadline_;
    mutable bool timed_out_ = false;
    size_t written_ = 0;
};

// The stream of the connection this thread is serving (nullptr: none).
thread_local const SocketStream *t_stream = nullptr;

}  // namespace

int HttpServer::bind(const std::string &host, int port) {
    const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
    if (bound < 0) return -1;
    // listen() on a socket that listens already sets its backlog (the kernel caps it at net.core.somaxconn).
    if (::listen(svr_sock_, SOMAXCONN) != 0) return -1;
    return bound;
}

void HttpServer::stop_accepting() {
    if (draining_.exchange(true)) return;
    // Wakes the accept() that httplib's listen loop blocks in; it then waits for the connection threads.
    ::shutdown(svr_sock_, SHUT_RDWR);
}

bool HttpServer::peer_closed() {
    if (t_socket < 0) return false;
    pollfd p = {t_socket, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    // Readable without a hang-up: a pipelined request, or the end of the stream on a kernel without POLLRDHUP.
    char byte;
    return ::recv(t_socket, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

bool HttpServer::request_timed_out() { return t_stream && t_stream->timed_out(); }

std::string HttpServer::request_timeout_message() const {
    return "the request did not arrive within its time: " + std::to_string(request_timeout_sec_) +
           " s from its first byte, plus 1 s for every " + std::to_string(kRequestMinRate >> 10) + " KiB sent";
}

bool HttpServer::process_and_close_socket(socket_t sock) {
    t_socket = sock;
    // Tokens go out as small writes; Nagle's algorithm would hold each one back for the previous one's ACK.
    const int one = 1;
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    SocketStream stream(sock, to_ms(read_timeout_sec_, read_timeout_usec_), to_ms(write_timeout_sec_, write_timeout_usec_));
    t_stream = &stream;

    // Waits for the next request of a keep-alive connection, giving up when the connection idles past the
    // keep-alive timeout or the server drains.
    auto next_request = [&] {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
        while (stream.buffered() == 0) {
            if (draining_ || std::chrono::steady_clock::now() > deadline) return false;
            const int ready = wait_for(sock, POLLIN, 50);
            if (ready < 0) return false;
            if (ready == 1) return true;
        }
        return true;
    };

    bool ok = false;
    bool first = true;
    for (size_t remaining = keep_alive_max_count_; remaining > 0; --remaining) {
        // The first request of a connection is always read (and answered, with 503 while draining).
        if (!first && !next_request()) break;
        if (first && wait_for(sock, POLLIN, to_ms(read_timeout_sec_, read_timeout_usec_)) != 1) break;
        first = false;
        stream.begin_request(request_timeout_sec_);
        bool connection_closed = false;
        try {
            ok = process_request(stream, remaining == 1 || draining_, connection_closed, nullptr);
        } catch (...) {
            // httplib catches what the handlers throw; this is for its own writing of a response (the content
            // providers, the logger), which runs outside that: the connection ends, never the process.
            ok = false;
        }
        if (stream.timed_out()) {
            // httplib answers a request cut short in its headers or body (400, which the error handler can make a
            // 408: request_timed_out()), but not one cut short in its request line.
            if (stream.written() == 0) {
                const std::string body = request_timeout_message() + "\n";
                const std::string response = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                                             "Content-Type: text/plain\r\nContent-Length: " +
                                             std::to_string(body.size()) + "\r\n\r\n" + body;
                stream.write(response.data(), response.size());
            }
            ok = false;
            break;
        }
        if (!ok || connection_closed) break;
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    t_socket = -1;
    t_stream = nullptr;
    return ok;
}

}  // namespace kt_server
