//===- TcpStoreTest.cpp - the bootstrap store on localhost ----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/distributed/TcpStore.h"

#include <gtest/gtest.h>

#include <thread>

using namespace partita::runtime;
using namespace std::chrono_literals;

namespace {

TEST(TcpStoreTest, ClientsSetAndGetThroughTheServer) {
  std::unique_ptr<TcpStore> server;
  ASSERT_TRUE(TcpStore::serve(0, 5s, server).isOk());
  ASSERT_NE(server->port(), 0);
  ASSERT_TRUE(server->set("id", std::string("\0abc", 4)).isOk());

  std::vector<std::thread> ranks;
  std::vector<std::string> seen(3);
  std::vector<Status> statuses(3);
  for (int rank = 0; rank < 3; ++rank)
    ranks.emplace_back([&, rank] {
      std::unique_ptr<TcpStore> client;
      statuses[size_t(rank)] =
          TcpStore::connect("127.0.0.1", server->port(), 5s, client);
      if (!statuses[size_t(rank)])
        return;
      statuses[size_t(rank)] = client->get("id", seen[size_t(rank)]);
      if (statuses[size_t(rank)])
        statuses[size_t(rank)] =
            client->set("done/" + std::to_string(rank), "ok");
    });
  for (std::thread &rank : ranks)
    rank.join();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(statuses[size_t(rank)].isOk())
        << statuses[size_t(rank)].message();
    EXPECT_EQ(seen[size_t(rank)], std::string("\0abc", 4));
  }
  EXPECT_TRUE(server->wait({"done/0", "done/1", "done/2"}).isOk());
}

TEST(TcpStoreTest, GetWaitsForALaterSet) {
  std::unique_ptr<TcpStore> server;
  ASSERT_TRUE(TcpStore::serve(0, 5s, server).isOk());
  std::unique_ptr<TcpStore> client;
  ASSERT_TRUE(TcpStore::connect("localhost", server->port(), 5s, client));
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    std::unique_ptr<TcpStore> other;
    ASSERT_TRUE(TcpStore::connect("127.0.0.1", server->port(), 5s, other));
    ASSERT_TRUE(other->set("late", std::string(100000, 'x')).isOk());
  });
  std::string value;
  Status got = client->get("late", value);
  setter.join();
  ASSERT_TRUE(got.isOk()) << got.message();
  EXPECT_EQ(value, std::string(100000, 'x'));
}

TEST(TcpStoreTest, ClientsStartBeforeTheServer) {
  uint16_t port = 0;
  {
    std::unique_ptr<TcpStore> probe;
    ASSERT_TRUE(TcpStore::serve(0, 1s, probe).isOk());
    port = probe->port();
  }
  std::unique_ptr<TcpStore> client;
  Status connected = Status::ok();
  std::thread early(
      [&] { connected = TcpStore::connect("127.0.0.1", port, 5s, client); });
  std::this_thread::sleep_for(300ms);
  std::unique_ptr<TcpStore> server;
  ASSERT_TRUE(TcpStore::serve(port, 5s, server).isOk());
  ASSERT_TRUE(server->set("key", "value").isOk());
  early.join();
  ASSERT_TRUE(connected.isOk()) << connected.message();
  std::string value;
  ASSERT_TRUE(client->get("key", value).isOk());
  EXPECT_EQ(value, "value");
}

TEST(TcpStoreTest, AMissingKeyFailsAtTheDeadline) {
  std::unique_ptr<TcpStore> server;
  ASSERT_TRUE(TcpStore::serve(0, 200ms, server).isOk());
  std::unique_ptr<TcpStore> client;
  ASSERT_TRUE(TcpStore::connect("127.0.0.1", server->port(), 200ms, client));
  std::string value;
  auto start = std::chrono::steady_clock::now();
  Status got = client->get("never", value);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_FALSE(got.isOk());
  EXPECT_NE(got.message().find("store: get 'never': not set within 200 ms"),
            std::string::npos)
      << got.message();
  // The server's own lookups have the same deadline.
  got = server->get("never", value);
  ASSERT_FALSE(got.isOk());
  EXPECT_NE(got.message().find("not set within"), std::string::npos);
}

TEST(TcpStoreTest, NoServerFailsAtTheDeadline) {
  uint16_t port = 0;
  {
    std::unique_ptr<TcpStore> probe;
    ASSERT_TRUE(TcpStore::serve(0, 1s, probe).isOk());
    port = probe->port();
  }
  std::unique_ptr<TcpStore> client;
  Status connected = TcpStore::connect("127.0.0.1", port, 300ms, client);
  ASSERT_FALSE(connected.isOk());
  EXPECT_NE(connected.message().find("no server within 300 ms"),
            std::string::npos)
      << connected.message();
}

} // namespace
