//===- TcpStore.cpp - a key-value store for bootstrapping ranks -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Protocol, one request and one reply at a time per connection, integers
// little-endian:
//   set: 'S' u32 keyLength key u64 valueLength value  ->  'K'
//   get: 'G' u32 keyLength key u64 timeoutMs          ->  'V' u64 length value
//                                                      |  'T' (not set in time)
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/distributed/TcpStore.h"

#include <arpa/inet.h>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace partita::runtime;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kMaxValueBytes = uint64_t(1) << 34;

std::string durationString(std::chrono::milliseconds timeout) {
  if (timeout.count() % 1000 == 0)
    return std::to_string(timeout.count() / 1000) + " s";
  return std::to_string(timeout.count()) + " ms";
}

/// Waits until `fd` is ready for `events`, at most until `deadline`.
Status waitReady(int fd, short events, Clock::time_point deadline,
                 const std::string &what) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0)
      return Status::error(what + ": timed out");
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (ready > 0)
      return Status::ok();
    if (ready < 0 && errno != EINTR)
      return Status::error(what + ": " + std::strerror(errno));
  }
}

Status sendAll(int fd, const void *data, size_t bytes,
               Clock::time_point deadline, const std::string &what) {
  const char *at = static_cast<const char *>(data);
  while (bytes > 0) {
    PARTITA_RETURN_IF_ERROR(waitReady(fd, POLLOUT, deadline, what));
    ssize_t sent = ::send(fd, at, bytes, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return Status::error(what + ": " + std::strerror(errno));
    }
    at += sent;
    bytes -= size_t(sent);
  }
  return Status::ok();
}

Status receiveAll(int fd, void *data, size_t bytes, Clock::time_point deadline,
                  const std::string &what) {
  char *at = static_cast<char *>(data);
  while (bytes > 0) {
    PARTITA_RETURN_IF_ERROR(waitReady(fd, POLLIN, deadline, what));
    ssize_t received = ::recv(fd, at, bytes, 0);
    if (received == 0)
      return Status::error(what + ": the connection closed");
    if (received < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return Status::error(what + ": " + std::strerror(errno));
    }
    at += received;
    bytes -= size_t(received);
  }
  return Status::ok();
}

template <typename T>
Status sendValue(int fd, T value, Clock::time_point deadline,
                 const std::string &what) {
  return sendAll(fd, &value, sizeof(value), deadline, what);
}
template <typename T>
Status receiveValue(int fd, T &value, Clock::time_point deadline,
                    const std::string &what) {
  return receiveAll(fd, &value, sizeof(value), deadline, what);
}

} // namespace

struct TcpStore::Impl {
  std::chrono::milliseconds timeout;
  uint16_t port = 0;
  std::string host;
  bool server = false;

  // Server: the table, the listening socket and one thread per client.
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::string> table;
  bool stopping = false;
  int listener = -1;
  std::thread acceptor;
  std::vector<std::thread> clients;
  std::vector<int> clientSockets;

  // Client: the connection, one request at a time.
  int socket = -1;
  std::mutex requestMutex;

  ~Impl() {
    if (server) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        stopping = true;
        for (int fd : clientSockets)
          ::shutdown(fd, SHUT_RDWR);
      }
      changed.notify_all();
      if (listener >= 0)
        ::shutdown(listener, SHUT_RDWR);
      if (acceptor.joinable())
        acceptor.join();
      for (std::thread &client : clients)
        client.join();
      for (int fd : clientSockets)
        ::close(fd);
      if (listener >= 0)
        ::close(listener);
    }
    if (socket >= 0)
      ::close(socket);
  }

  /// Waits for `key` until `deadline`; false if it is not set by then.
  bool lookUp(const std::string &key, std::string &value,
              Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      auto found = table.find(key);
      if (found != table.end()) {
        value = found->second;
        return true;
      }
      if (stopping ||
          changed.wait_until(lock, deadline) == std::cv_status::timeout) {
        found = table.find(key);
        if (found == table.end())
          return false;
      }
    }
  }

  void store(const std::string &key, std::string value) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      table[key] = std::move(value);
    }
    changed.notify_all();
  }

  void acceptLoop() {
    while (true) {
      int fd = ::accept(listener, nullptr, nullptr);
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping) {
        if (fd >= 0)
          ::close(fd);
        return;
      }
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED)
          continue;
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      clientSockets.push_back(fd);
      clients.emplace_back([this, fd] { serveClient(fd); });
    }
  }

  /// Answers one client's requests until it disconnects or the store stops.
  void serveClient(int fd) {
    // A request's parts follow each other closely; the wait for the next
    // request has no deadline (the client may be idle for a whole run).
    auto forever = Clock::now() + std::chrono::hours(24 * 365);
    while (true) {
      char op = 0;
      if (!receiveValue(fd, op, forever, "store"))
        return;
      auto deadline = Clock::now() + timeout;
      uint32_t keyLength = 0;
      if (!receiveValue(fd, keyLength, deadline, "store") || keyLength > 4096)
        return;
      std::string key(keyLength, '\0');
      if (!receiveAll(fd, key.data(), keyLength, deadline, "store"))
        return;
      if (op == 'S') {
        uint64_t length = 0;
        if (!receiveValue(fd, length, deadline, "store") ||
            length > kMaxValueBytes)
          return;
        std::string value(length, '\0');
        if (!receiveAll(fd, value.data(), length, deadline, "store"))
          return;
        store(key, std::move(value));
        if (!sendValue(fd, 'K', deadline, "store"))
          return;
      } else if (op == 'G') {
        uint64_t waitMs = 0;
        if (!receiveValue(fd, waitMs, deadline, "store"))
          return;
        std::string value;
        bool found = lookUp(key, value,
                            Clock::now() + std::chrono::milliseconds(waitMs));
        auto replyBy = Clock::now() + timeout;
        if (!found) {
          if (!sendValue(fd, 'T', replyBy, "store"))
            return;
          continue;
        }
        if (!sendValue(fd, 'V', replyBy, "store") ||
            !sendValue(fd, uint64_t(value.size()), replyBy, "store") ||
            !sendAll(fd, value.data(), value.size(), replyBy, "store"))
          return;
      } else {
        return;
      }
    }
  }
};

TcpStore::TcpStore(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
TcpStore::~TcpStore() = default;

uint16_t TcpStore::port() const { return impl->port; }

Status TcpStore::serve(uint16_t port, std::chrono::milliseconds timeout,
                       std::unique_ptr<TcpStore> &store) {
  auto impl = std::make_unique<Impl>();
  impl->timeout = timeout;
  impl->server = true;
  std::string what = "store: listening on port " + std::to_string(port);
  impl->listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (impl->listener < 0)
    return Status::error(what + ": " + std::strerror(errno));
  int one = 1;
  ::setsockopt(impl->listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(port);
  if (::bind(impl->listener, reinterpret_cast<sockaddr *>(&address),
             sizeof(address)) != 0 ||
      ::listen(impl->listener, 128) != 0)
    return Status::error(what + ": " + std::strerror(errno));
  socklen_t length = sizeof(address);
  ::getsockname(impl->listener, reinterpret_cast<sockaddr *>(&address),
                &length);
  impl->port = ntohs(address.sin_port);
  Impl *raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->acceptLoop(); });
  store.reset(new TcpStore(std::move(impl)));
  return Status::ok();
}

Status TcpStore::connect(const std::string &host, uint16_t port,
                         std::chrono::milliseconds timeout,
                         std::unique_ptr<TcpStore> &store) {
  auto impl = std::make_unique<Impl>();
  impl->timeout = timeout;
  impl->host = host;
  impl->port = port;
  std::string what =
      "store: connecting to " + host + ":" + std::to_string(port);
  auto deadline = Clock::now() + timeout;
  std::string lastError = "no address";
  while (true) {
    addrinfo hints{}, *addresses = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int resolved = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(),
                                 &hints, &addresses);
    if (resolved != 0) {
      lastError = ::gai_strerror(resolved);
    } else {
      for (addrinfo *at = addresses; at; at = at->ai_next) {
        int fd = ::socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC,
                          at->ai_protocol);
        if (fd < 0)
          continue;
        if (::connect(fd, at->ai_addr, at->ai_addrlen) == 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          impl->socket = fd;
          break;
        }
        lastError = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(addresses);
    }
    if (impl->socket >= 0)
      break;
    if (Clock::now() + std::chrono::milliseconds(100) > deadline)
      return Status::error(what + ": no server within " +
                           durationString(timeout) + " (" + lastError + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  store.reset(new TcpStore(std::move(impl)));
  return Status::ok();
}

Status TcpStore::set(const std::string &key, const std::string &value) {
  if (impl->server) {
    impl->store(key, value);
    return Status::ok();
  }
  std::lock_guard<std::mutex> lock(impl->requestMutex);
  std::string what = "store: set '" + key + "'";
  auto deadline = Clock::now() + impl->timeout;
  int fd = impl->socket;
  PARTITA_RETURN_IF_ERROR(sendValue(fd, 'S', deadline, what));
  PARTITA_RETURN_IF_ERROR(sendValue(fd, uint32_t(key.size()), deadline, what));
  PARTITA_RETURN_IF_ERROR(sendAll(fd, key.data(), key.size(), deadline, what));
  PARTITA_RETURN_IF_ERROR(
      sendValue(fd, uint64_t(value.size()), deadline, what));
  PARTITA_RETURN_IF_ERROR(
      sendAll(fd, value.data(), value.size(), deadline, what));
  char reply = 0;
  PARTITA_RETURN_IF_ERROR(receiveValue(fd, reply, deadline, what));
  if (reply != 'K')
    return Status::error(what + ": unexpected reply");
  return Status::ok();
}

Status TcpStore::get(const std::string &key, std::string &value) {
  std::string what = "store: get '" + key + "'";
  std::string notSet = what + ": not set within " +
                       durationString(impl->timeout) +
                       " (did a rank fail or not start?)";
  if (impl->server) {
    if (!impl->lookUp(key, value, Clock::now() + impl->timeout))
      return Status::error(notSet);
    return Status::ok();
  }
  std::lock_guard<std::mutex> lock(impl->requestMutex);
  // The server answers within the timeout; allow the reply some slack.
  auto deadline = Clock::now() + impl->timeout + std::chrono::seconds(10);
  int fd = impl->socket;
  PARTITA_RETURN_IF_ERROR(sendValue(fd, 'G', deadline, what));
  PARTITA_RETURN_IF_ERROR(sendValue(fd, uint32_t(key.size()), deadline, what));
  PARTITA_RETURN_IF_ERROR(sendAll(fd, key.data(), key.size(), deadline, what));
  PARTITA_RETURN_IF_ERROR(
      sendValue(fd, uint64_t(impl->timeout.count()), deadline, what));
  char reply = 0;
  PARTITA_RETURN_IF_ERROR(receiveValue(fd, reply, deadline, what));
  if (reply == 'T')
    return Status::error(notSet);
  if (reply != 'V')
    return Status::error(what + ": unexpected reply");
  uint64_t length = 0;
  PARTITA_RETURN_IF_ERROR(receiveValue(fd, length, deadline, what));
  if (length > kMaxValueBytes)
    return Status::error(what + ": the value is too large");
  value.assign(length, '\0');
  return receiveAll(fd, value.data(), length, deadline, what);
}

Status TcpStore::wait(const std::vector<std::string> &keys) {
  std::string ignored;
  for (const std::string &key : keys)
    PARTITA_RETURN_IF_ERROR(get(key, ignored));
  return Status::ok();
}
