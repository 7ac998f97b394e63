// Fuzz target: the bootstrap handshakes as a foreign client, an impostor
// server or a confused peer may send them: a rendezvous hello, a server's
// reply with its table, the three messages that open a mesh socket, a host
// leader's batch and the table that comes down the tree of leaders.
// Without the secret nothing may be accepted; with it (the first byte asks
// the target to seal the input with the real secret, so the checks behind
// the MAC are reached too) only well-formed messages may be. No input may
// crash, read out of bounds or make a check accept what it should not.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bootstrap/handshake.h"

namespace {

baton::UniqueIdData TheId() {
  baton::UniqueIdData id{};
  id.magic = baton::kUniqueIdMagic;
  id.version = baton::kBootstrapVersion;
  memset(id.secret, 0x5c, sizeof(id.secret));
  id.comm_id = 0x1234;
  return id;
}

// Copies up to sizeof(T) bytes of input into a zeroed T.
template <typename T>
T Take(const uint8_t*& data, size_t& size) {
  T value;
  memset(&value, 0, sizeof(value));
  const size_t n = size < sizeof(T) ? size : sizeof(T);
  memcpy(&value, data, n);
  data += n;
  size -= n;
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const baton::UniqueIdData id = TheId();
  const uint8_t mode = data[0];
  const bool seal = data[1] & 1;
  data += 2;
  size -= 2;
  switch (mode % 5) {
    case 0: {  // a rendezvous hello, as the server receives it
      baton::ClientHello hello = Take<baton::ClientHello>(data, size);
      (void)baton::ClientHelloStartValid(hello);
      if (seal) {
        baton::ClientHello sealed;
        if (!baton::MakeClientHello(id, hello.nranks, hello.rank, hello.info, &sealed).ok())
          return 0;
        hello = sealed;
      }
      const bool accepted = baton::CheckClientHello(id, hello).ok();
      if (accepted && (!seal || hello.rank < 0 || hello.rank >= hello.nranks ||
                       memchr(hello.info.hostname, 0, sizeof(hello.info.hostname)) == nullptr))
        __builtin_trap();
      break;
    }
    case 1: {  // a server's reply and table, as a rank receives them
      baton::ClientHello hello;
      baton::PeerInfo info{};
      if (!baton::MakeClientHello(id, 1 + (mode >> 2) % 8, 0, info, &hello).ok()) return 0;
      baton::ServerReply reply = Take<baton::ServerReply>(data, size);
      std::vector<baton::PeerInfo> table(hello.nranks);
      memset(table.data(), 0, table.size() * sizeof(baton::PeerInfo));
      memcpy(table.data(), data, std::min(size, table.size() * sizeof(baton::PeerInfo)));
      if (seal) {
        const baton::Mac digest =
            baton::TableDigest(reply.status == 0 ? table : std::vector<baton::PeerInfo>{});
        reply.message[sizeof(reply.message) - 1] = '\0';
        reply = baton::MakeServerReply(id, hello.nonce, reply.status, reply.message, digest);
      }
      const bool accepted =
          baton::CheckServerReply(id, hello, reply, reply.status == 0 ? &table : nullptr).ok();
      if (accepted && (!seal || reply.status != 0)) __builtin_trap();
      break;
    }
    case 2: {  // the mesh: hello, challenge and proof, as each end receives them
      baton::PairHello hello = Take<baton::PairHello>(data, size);
      const baton::PairChallenge challenge = Take<baton::PairChallenge>(data, size);
      const baton::PairProof proof = Take<baton::PairProof>(data, size);
      const int rank = hello.to_rank, nranks = 1 + (hello.index & 0xff);
      if (baton::CheckPairHello(id, hello, rank, nranks).ok() &&
          (hello.from_rank <= rank || hello.from_rank >= nranks))
        __builtin_trap();
      // Without the secret, no challenge or proof made of input bytes can
      // check (a forged 256-bit MAC is not something a fuzzer finds).
      if (baton::PairChallengeValid(id, hello, challenge) ||
          baton::PairProofValid(id, hello, challenge, proof))
        __builtin_trap();
      break;
    }
    case 3: {  // a leader's batch header, as the root receives it
      baton::LeaderBatch batch = Take<baton::LeaderBatch>(data, size);
      (void)baton::LeaderBatchStartValid(batch);
      if (seal && !baton::MakeLeaderBatch(id, batch.leader, batch.count, &batch).ok()) return 0;
      const bool accepted = baton::CheckLeaderBatch(id, batch).ok();
      if (accepted && (!seal || batch.count < 1 || batch.count > baton::kMaxRendezvousRanks))
        __builtin_trap();
      break;
    }
    case 4: {  // the table message, as a leader receives it
      const int nranks = 1 + (mode >> 3) % 8;
      baton::TableHeader header = Take<baton::TableHeader>(data, size);
      if (!baton::CheckTableHeaderStart(id, header, nranks).ok()) return 0;
      if (header.nleaders > 64) return 0;  // in range, but slow to fill
      std::vector<baton::WireAddr> leaders(header.nleaders);
      std::vector<baton::PeerInfo> table(header.nranks);
      memset(leaders.data(), 0, leaders.size() * sizeof(baton::WireAddr));
      memset(table.data(), 0, table.size() * sizeof(baton::PeerInfo));
      const size_t n = std::min(size, leaders.size() * sizeof(baton::WireAddr));
      memcpy(leaders.data(), data, n);
      memcpy(table.data(), data + n, std::min(size - n, table.size() * sizeof(baton::PeerInfo)));
      if (seal) {
        header.message[sizeof(header.message) - 1] = '\0';
        header = baton::MakeTableHeader(id, header.status, header.message, leaders, table);
      }
      const bool accepted = baton::CheckTableHeader(id, header, leaders, table).ok();
      if (accepted && !seal) __builtin_trap();
      break;
    }
  }
  return 0;
}
