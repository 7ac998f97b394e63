// The bootstrap handshakes: what a holder of the secret sends is accepted,
// and a wrong secret, another communicator's id, a replayed or altered
// message, or a server that cannot prove the secret is refused. The MACs are
// checked against OpenSSL's HMAC computed here, so the wire format is pinned.
#include "bootstrap/handshake.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace baton {
namespace {

UniqueIdData MakeId(uint8_t fill, uint64_t comm_id) {
  UniqueIdData id{};
  id.magic = kUniqueIdMagic;
  id.version = kBootstrapVersion;
  memset(id.secret, fill, sizeof(id.secret));
  id.comm_id = comm_id;
  return id;
}

PeerInfo MakeInfo(int rank) {
  PeerInfo info{};
  info.rank = rank;
  info.pid = 1000 + rank;
  snprintf(info.hostname, sizeof(info.hostname), "host%d", rank);
  return info;
}

TEST(HandshakeTest, ClientHelloIsSealedWithHmacSha256OfTheSecret) {
  const UniqueIdData id = MakeId(7, 42);
  ClientHello hello;
  ASSERT_TRUE(MakeClientHello(id, 4, 2, MakeInfo(2), &hello).ok());
  // The MAC is HMAC-SHA256(secret, label NUL || every byte before the MAC).
  std::vector<uint8_t> input;
  const char label[] = "baton rendezvous hello";
  input.insert(input.end(), label, label + sizeof(label));
  const auto* bytes = reinterpret_cast<const uint8_t*>(&hello);
  input.insert(input.end(), bytes, bytes + offsetof(ClientHello, mac));
  uint8_t expected[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), id.secret, kSecretBytes, input.data(), input.size(), expected, &len);
  ASSERT_EQ(len, 32u);
  EXPECT_EQ(memcmp(expected, hello.mac.bytes, 32), 0);
  // And nothing of the secret travels in the hello.
  for (size_t i = 0; i + kSecretBytes <= sizeof(hello); ++i)
    EXPECT_NE(memcmp(bytes + i, id.secret, kSecretBytes), 0);
  EXPECT_TRUE(CheckClientHello(id, hello).ok());
}

TEST(HandshakeTest, ClientHelloRefusedWhenAnythingIsWrong) {
  const UniqueIdData id = MakeId(7, 42);
  ClientHello good;
  ASSERT_TRUE(MakeClientHello(id, 4, 2, MakeInfo(2), &good).ok());
  // Another secret, another communicator.
  EXPECT_FALSE(CheckClientHello(MakeId(8, 42), good).ok());
  EXPECT_FALSE(CheckClientHello(MakeId(7, 43), good).ok());
  // Every single byte altered (each bit flip of each byte would do too).
  for (size_t i = 0; i < sizeof(ClientHello); ++i) {
    ClientHello bad = good;
    reinterpret_cast<uint8_t*>(&bad)[i] ^= 0x01;
    EXPECT_FALSE(CheckClientHello(id, bad).ok()) << "byte " << i;
  }
  // Well sealed but out of range, or with an unterminated hostname.
  ClientHello out_of_range;
  ASSERT_TRUE(MakeClientHello(id, 4, 4, MakeInfo(4), &out_of_range).ok());
  EXPECT_FALSE(CheckClientHello(id, out_of_range).ok());
  PeerInfo long_name = MakeInfo(1);
  memset(long_name.hostname, 'x', sizeof(long_name.hostname));
  ClientHello unterminated;
  ASSERT_TRUE(MakeClientHello(id, 4, 1, long_name, &unterminated).ok());
  EXPECT_FALSE(CheckClientHello(id, unterminated).ok());
}

TEST(HandshakeTest, ServerReplyProvesTheSecretAndCoversTheTable) {
  const UniqueIdData id = MakeId(7, 42);
  ClientHello hello;
  ASSERT_TRUE(MakeClientHello(id, 3, 1, MakeInfo(1), &hello).ok());
  std::vector<PeerInfo> table = {MakeInfo(0), MakeInfo(1), MakeInfo(2)};
  const ServerReply reply = MakeServerReply(id, hello.nonce, 0, "", TableDigest(table));
  EXPECT_TRUE(CheckServerReply(id, hello, reply, &table).ok());
  // A server without the secret, or a reply to another client's nonce.
  const ServerReply forged = MakeServerReply(MakeId(9, 42), hello.nonce, 0, "", TableDigest(table));
  EXPECT_FALSE(CheckServerReply(id, hello, forged, &table).ok());
  ClientHello other;
  ASSERT_TRUE(MakeClientHello(id, 3, 1, MakeInfo(1), &other).ok());
  EXPECT_FALSE(CheckServerReply(id, other, reply, &table).ok());
  // A table altered on the way, or with a record that is not its rank's.
  std::vector<PeerInfo> altered = table;
  altered[2].pid = 1;
  EXPECT_FALSE(CheckServerReply(id, hello, reply, &altered).ok());
  std::vector<PeerInfo> shuffled = {MakeInfo(0), MakeInfo(2), MakeInfo(1)};
  const ServerReply for_shuffled = MakeServerReply(id, hello.nonce, 0, "", TableDigest(shuffled));
  EXPECT_FALSE(CheckServerReply(id, hello, for_shuffled, &shuffled).ok());
  // A failure reply carries its message once authenticated.
  const ServerReply failed = MakeServerReply(id, hello.nonce, batonRemoteError,
                                             "rank 1 joined twice", TableDigest({}));
  const Status st = CheckServerReply(id, hello, failed, nullptr);
  EXPECT_EQ(st.code(), batonRemoteError);
  EXPECT_NE(st.message().find("rank 1 joined twice"), std::string::npos) << st.message();
  const ServerReply failed_forged = MakeServerReply(MakeId(9, 42), hello.nonce, batonRemoteError,
                                                    "rank 1 joined twice", TableDigest({}));
  EXPECT_NE(CheckServerReply(id, hello, failed_forged, nullptr).message().find("not from this"),
            std::string::npos);
}

TEST(HandshakeTest, MeshPairProvesTheSecretBothWays) {
  const UniqueIdData id = MakeId(7, 42);
  PairHello hello;
  ASSERT_TRUE(MakePairHello(id, 3, 1, 0, &hello).ok());
  ASSERT_TRUE(CheckPairHello(id, hello, 1, 4).ok());
  PairChallenge challenge;
  ASSERT_TRUE(MakePairChallenge(id, hello, &challenge).ok());
  EXPECT_TRUE(PairChallengeValid(id, hello, challenge));
  const PairProof proof = MakePairProof(id, hello, challenge);
  EXPECT_TRUE(PairProofValid(id, hello, challenge, proof));

  // The acceptor proves the secret to the connector...
  PairChallenge impostor;
  ASSERT_TRUE(MakePairChallenge(MakeId(9, 42), hello, &impostor).ok());
  EXPECT_FALSE(PairChallengeValid(id, hello, impostor));
  // ...and the connector to the acceptor, for this challenge only: a proof
  // recorded from an earlier handshake answers no new challenge.
  EXPECT_FALSE(PairProofValid(id, hello, challenge, MakePairProof(MakeId(9, 42), hello, challenge)));
  PairChallenge fresh;
  ASSERT_TRUE(MakePairChallenge(id, hello, &fresh).ok());
  EXPECT_FALSE(PairProofValid(id, hello, fresh, proof));
  // A hello for another rank, from a lower rank, or another communicator.
  EXPECT_FALSE(CheckPairHello(id, hello, 2, 4).ok());
  EXPECT_FALSE(CheckPairHello(id, hello, 1, 3).ok());
  EXPECT_FALSE(CheckPairHello(MakeId(7, 43), hello, 1, 4).ok());
  PairHello downward;
  ASSERT_TRUE(MakePairHello(id, 0, 1, 0, &downward).ok());
  EXPECT_FALSE(CheckPairHello(id, downward, 1, 4).ok());
  // The challenge covers the hello: altering any byte of it breaks both MACs.
  for (size_t i = 0; i < sizeof(PairHello); ++i) {
    PairHello altered = hello;
    reinterpret_cast<uint8_t*>(&altered)[i] ^= 0x80;
    EXPECT_FALSE(PairChallengeValid(id, altered, challenge)) << "byte " << i;
    EXPECT_FALSE(PairProofValid(id, altered, challenge, proof)) << "byte " << i;
  }
}

// A process that forks while another of its threads hashes (a rendezvous
// server checking hellos while its process forks the ranks) hands its
// children a usable OpenSSL: every child hashes and exits at once. Each
// child has 10 s; a child stuck on a lock its parent's hashing thread held
// is killed and counted.
TEST(HandshakeTest, ForkWhileAnotherThreadHashes) {
  const UniqueIdData id = MakeId(7, 99);
  std::atomic<bool> stop{false}, started{false};
  Mac want{};
  // Only the other thread hashes, as in that process: this one has never
  // called OpenSSL when it forks.
  std::thread hasher([&] {
    want = JobHmac(id, "x", 1);
    started = true;
    uint8_t data[512] = {};
    while (!stop.load(std::memory_order_relaxed)) (void)JobHmac(id, data, sizeof(data));
  });
  while (!started) std::this_thread::yield();
  int stuck = 0, wrong = 0;
  for (int i = 0; i < 100; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(10);
      const Mac got = JobHmac(id, "x", 1);
      _exit(memcmp(got.bytes, want.bytes, kMacBytes) == 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    stuck += WIFSIGNALED(status);
    wrong += WIFEXITED(status) && WEXITSTATUS(status) != 0;
  }
  stop = true;
  hasher.join();
  EXPECT_EQ(stuck, 0) << "children that never finished their first hash";
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace baton
