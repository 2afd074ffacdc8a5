//===- TcpStore.h - a key-value store for bootstrapping ranks ---*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The ranks of a multi-process run meet through a small TCP store before
// they can use NCCL (which needs one rank's ncclUniqueId at every rank): rank
// 0 serves it on MASTER_ADDR:MASTER_PORT, the others connect, retrying until
// the deadline. Keys map to byte strings; `get` waits until the key is set.
// partita-run also gathers the ranks' output shards through it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_DISTRIBUTED_TCPSTORE_H
#define PARTITA_RUNTIME_DISTRIBUTED_TCPSTORE_H

#include "partita/runtime/Status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace partita::runtime {

class TcpStore {
public:
  /// The server side: listens on every interface at `port` (0: a free
  /// port, see port()). Its own calls do not go through a socket.
  static Status serve(uint16_t port, std::chrono::milliseconds timeout,
                      std::unique_ptr<TcpStore> &store);
  /// A client: connects to `host`:`port`, retrying until `timeout` passes
  /// (the server may start later).
  static Status connect(const std::string &host, uint16_t port,
                        std::chrono::milliseconds timeout,
                        std::unique_ptr<TcpStore> &store);
  ~TcpStore();
  TcpStore(const TcpStore &) = delete;
  TcpStore &operator=(const TcpStore &) = delete;

  /// The port served or connected to.
  uint16_t port() const;

  /// Sets `key` (again: replaces its value) and wakes its waiters.
  Status set(const std::string &key, const std::string &value);
  /// Waits until `key` is set, at most the store's timeout, and reads it.
  Status get(const std::string &key, std::string &value);
  /// Waits until every key is set.
  Status wait(const std::vector<std::string> &keys);

  struct Impl;

private:
  explicit TcpStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_DISTRIBUTED_TCPSTORE_H
