// Bootstrap handshakes; see handshake.h. HMAC-SHA256 comes from OpenSSL's
// libcrypto rather than our own code: a keyed hash is not something to
// write twice.
#include "bootstrap/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <mutex>

#include "base/log.h"
#include "base/socket.h"

namespace baton {
namespace {

constexpr uint32_t kHelloMagic = 0x4f4c4548;  // "HELO"
constexpr uint32_t kPairMagic = 0x52494150;   // "PAIR"
constexpr uint32_t kBatchMagic = 0x48435442;  // "BTCH"
constexpr uint32_t kTableMagic = 0x4c424154;  // "TABL"

// Held around every OpenSSL call here; fork() takes it first (see
// JobHmac). Constant-initialized and registered with pthread_atfork when
// the library loads: a function-local static or a call_once would have a
// guard of its own, and a child forked while another thread was inside its
// first initialization would wait on that guard forever. std::mutex's
// destructor is trivial, so detached threads may still hash at exit.
constinit std::mutex crypto_mutex;
[[maybe_unused]] const int crypto_fork_handlers = pthread_atfork(
    [] { crypto_mutex.lock(); }, [] { crypto_mutex.unlock(); }, [] { crypto_mutex.unlock(); });

std::unique_lock<std::mutex> LockCrypto() {
  return std::unique_lock<std::mutex>(crypto_mutex);
}

// The MAC of `label` (with its terminating NUL, so no label is a prefix of
// another's input) followed by `parts`, keyed by the id's secret.
struct Part {
  const void* data;
  size_t len;
};
Mac Seal(const UniqueIdData& id, const char* label, std::initializer_list<Part> parts) {
  uint8_t buffer[1024];
  size_t used = strlen(label) + 1;
  memcpy(buffer, label, used);
  for (const Part& p : parts) {
    // Every message sealed here is a fixed-size struct well under the
    // buffer; the check keeps a future one from overflowing it.
    if (used + p.len > sizeof(buffer)) __builtin_trap();
    memcpy(buffer + used, p.data, p.len);
    used += p.len;
  }
  return JobHmac(id, buffer, used);
}

bool MacEqual(const Mac& a, const Mac& b) {
  return SecretsEqual(a.bytes, b.bytes, kMacBytes);
}

Status FillNonce(uint8_t* nonce) {
  if (getrandom(nonce, kNonceBytes, 0) != kNonceBytes) return ErrnoError("getrandom", errno);
  return Status::Ok();
}

bool HostnameTerminated(const PeerInfo& info) {
  return memchr(info.hostname, '\0', sizeof(info.hostname)) != nullptr;
}

Mac ListDigest(const void* data, size_t bytes) {
  Mac digest{};
  const auto lock = LockCrypto();
  SHA256(static_cast<const unsigned char*>(data), bytes, digest.bytes);
  return digest;
}

Mac SealClientHello(const UniqueIdData& id, const ClientHello& hello) {
  return Seal(id, "baton rendezvous hello", {{&hello, offsetof(ClientHello, mac)}});
}

Mac SealServerReply(const UniqueIdData& id, const uint8_t* client_nonce, const ServerReply& reply,
                    const Mac& table_digest) {
  return Seal(id, "baton rendezvous reply",
              {{client_nonce, kNonceBytes},
               {&reply, offsetof(ServerReply, mac)},
               {table_digest.bytes, kMacBytes}});
}

}  // namespace

Status MakeClientHello(const UniqueIdData& id, int nranks, int rank, const PeerInfo& info,
                       ClientHello* out) {
  memset(out, 0, sizeof(*out));  // no stack bytes in the padding sent
  out->magic = kHelloMagic;
  out->version = kBootstrapVersion;
  out->comm_id = id.comm_id;
  out->nranks = nranks;
  out->rank = rank;
  out->info = info;
  BATON_RETURN_IF_ERROR(FillNonce(out->nonce));
  out->mac = SealClientHello(id, *out);
  return Status::Ok();
}

bool ClientHelloStartValid(const ClientHello& hello) {
  return hello.magic == kHelloMagic && hello.version == kBootstrapVersion;
}

void LogRefused(const char* server, const Status& why, bool* warned) {
  if (*warned) {
    BATON_INFO(kLogBootstrap, "%s: refused a connection: %s", server, why.message().c_str());
    return;
  }
  *warned = true;
  BATON_WARN(kLogBootstrap,
             "%s: refused a connection: %s (a rank whose BATON_SECRET or unique id differs from "
             "this job's, or not a rank of it); later refusals at INFO",
             server, why.message().c_str());
}

Status CheckClientHello(const UniqueIdData& id, const ClientHello& hello) {
  if (!ClientHelloStartValid(hello)) return InvalidUsage("not a Baton rendezvous hello");
  if (!MacEqual(hello.mac, SealClientHello(id, hello)))
    return InvalidUsage("hello not sealed by this job's secret");
  if (hello.comm_id != id.comm_id) return InvalidUsage("hello for another communicator");
  if (hello.nranks < 1 || hello.nranks > kMaxRendezvousRanks || hello.rank < 0 ||
      hello.rank >= hello.nranks)
    return InvalidUsage("rank " + std::to_string(hello.rank) + " of " +
                        std::to_string(hello.nranks) + " is out of range");
  if (!HostnameTerminated(hello.info)) return InvalidUsage("hostname not terminated");
  return Status::Ok();
}

Mac JobHmac(const UniqueIdData& id, const void* data, size_t len) {
  Mac mac{};
  unsigned int mac_len = 0;
  const auto lock = LockCrypto();
  HMAC(EVP_sha256(), id.secret, kSecretBytes, static_cast<const unsigned char*>(data), len,
       mac.bytes, &mac_len);
  return mac;
}

void ReleaseThreadCryptoState() {
  OPENSSL_thread_stop();
}

Mac TableDigest(const std::vector<PeerInfo>& table) {
  return ListDigest(table.data(), table.size() * sizeof(PeerInfo));
}

ServerReply MakeServerReply(const UniqueIdData& id, const uint8_t* client_nonce, int32_t status,
                            const std::string& message, const Mac& table_digest) {
  ServerReply reply;
  memset(&reply, 0, sizeof(reply));
  reply.magic = kHelloMagic;
  reply.status = status;
  snprintf(reply.message, sizeof(reply.message), "%s", message.c_str());
  reply.mac = SealServerReply(id, client_nonce, reply, table_digest);
  return reply;
}

Status CheckServerReply(const UniqueIdData& id, const ClientHello& hello, ServerReply reply,
                        const std::vector<PeerInfo>* table) {
  const char* kForeign =
      "rendezvous: the reply is not from this job's server (another job's rendezvous at this "
      "address, or a unique id from another run?)";
  if (reply.magic != kHelloMagic) return RemoteError(kForeign);
  static const Mac kNoTable = TableDigest({});
  const bool with_table = reply.status == 0;
  if (with_table && table == nullptr) return InvalidArgument("a table is needed to check a reply");
  if (!MacEqual(reply.mac, SealServerReply(id, hello.nonce, reply,
                                           with_table ? TableDigest(*table) : kNoTable)))
    return RemoteError(kForeign);
  if (!with_table) {
    reply.message[sizeof(reply.message) - 1] = '\0';
    const std::string message = std::string("rendezvous failed: ") + reply.message;
    return reply.status == batonTimeout ? TimeoutError(message) : RemoteError(message);
  }
  if (table->size() != static_cast<size_t>(hello.nranks))
    return InvalidArgument("rendezvous table of the wrong size");
  for (size_t r = 0; r < table->size(); ++r)
    if ((*table)[r].rank != static_cast<int32_t>(r) || !HostnameTerminated((*table)[r]))
      return RemoteError("rendezvous: malformed record for rank " + std::to_string(r));
  return Status::Ok();
}

Status MakeLeaderBatch(const UniqueIdData& id, const WireAddr& leader, int count,
                       LeaderBatch* out) {
  memset(out, 0, sizeof(*out));  // no stack bytes in the padding sent
  out->magic = kBatchMagic;
  out->version = kBootstrapVersion;
  out->comm_id = id.comm_id;
  out->leader = leader;
  out->count = count;
  out->mac = Seal(id, "baton leader batch", {{out, offsetof(LeaderBatch, mac)}});
  return Status::Ok();
}

bool LeaderBatchStartValid(const LeaderBatch& batch) {
  return batch.magic == kBatchMagic && batch.version == kBootstrapVersion;
}

Status CheckLeaderBatch(const UniqueIdData& id, const LeaderBatch& batch) {
  if (!LeaderBatchStartValid(batch))
    return InvalidUsage("not a Baton leader batch of this version");
  if (!MacEqual(batch.mac, Seal(id, "baton leader batch", {{&batch, offsetof(LeaderBatch, mac)}})))
    return InvalidUsage("leader batch not sealed by this job's secret");
  if (batch.comm_id != id.comm_id) return InvalidUsage("leader batch for another communicator");
  if (batch.count < 1 || batch.count > kMaxRendezvousRanks)
    return InvalidUsage("leader batch of " + std::to_string(batch.count) + " hellos");
  return Status::Ok();
}

namespace {

Mac SealTableHeader(const UniqueIdData& id, const TableHeader& header,
                    const std::vector<WireAddr>& leaders, const std::vector<PeerInfo>& table) {
  const Mac leaders_digest = ListDigest(leaders.data(), leaders.size() * sizeof(WireAddr));
  const Mac table_digest = TableDigest(table);
  return Seal(id, "baton rendezvous table",
              {{&header, offsetof(TableHeader, mac)},
               {leaders_digest.bytes, kMacBytes},
               {table_digest.bytes, kMacBytes}});
}

}  // namespace

TableHeader MakeTableHeader(const UniqueIdData& id, int32_t status, const std::string& message,
                            const std::vector<WireAddr>& leaders,
                            const std::vector<PeerInfo>& table) {
  TableHeader header;
  memset(&header, 0, sizeof(header));
  header.magic = kTableMagic;
  header.version = kBootstrapVersion;
  header.comm_id = id.comm_id;
  header.status = status;
  header.nranks = static_cast<int32_t>(table.size());
  header.nleaders = static_cast<int32_t>(leaders.size());
  snprintf(header.message, sizeof(header.message), "%s", message.c_str());
  header.mac = SealTableHeader(id, header, leaders, table);
  return header;
}

Status CheckTableHeaderStart(const UniqueIdData& id, const TableHeader& header, int nranks) {
  if (header.magic != kTableMagic || header.version != kBootstrapVersion)
    return InvalidUsage("not a Baton rendezvous table of this version");
  if (header.comm_id != id.comm_id) return InvalidUsage("table for another communicator");
  if (header.nleaders < 1 || header.nleaders > kMaxRendezvousRanks ||
      header.nranks != (header.status == 0 ? nranks : 0))
    return InvalidUsage("table of " + std::to_string(header.nranks) + " ranks and " +
                        std::to_string(header.nleaders) + " leaders");
  return Status::Ok();
}

Status CheckTableHeader(const UniqueIdData& id, const TableHeader& header,
                        const std::vector<WireAddr>& leaders, const std::vector<PeerInfo>& table) {
  if (!MacEqual(header.mac, SealTableHeader(id, header, leaders, table)))
    return RemoteError(
        "rendezvous: the table is not from this job's server (another job's rendezvous, or a "
        "unique id from another run?)");
  return Status::Ok();
}

Status MakePairHello(const UniqueIdData& id, int from_rank, int to_rank, int index,
                     PairHello* out) {
  memset(out, 0, sizeof(*out));  // no stack bytes in the padding sent
  out->magic = kPairMagic;
  out->version = kBootstrapVersion;
  out->comm_id = id.comm_id;
  out->from_rank = from_rank;
  out->to_rank = to_rank;
  out->index = index;
  return FillNonce(out->nonce);
}

Status CheckPairHello(const UniqueIdData& id, const PairHello& hello, int rank, int nranks,
                      bool any_sender) {
  if (hello.magic != kPairMagic || hello.version != kBootstrapVersion)
    return InvalidUsage("not a Baton mesh hello of this version");
  if (hello.comm_id != id.comm_id) return InvalidUsage("mesh hello for another communicator");
  const bool sender_ok =
      any_sender ? hello.from_rank >= 0 && hello.from_rank != rank : hello.from_rank > rank;
  if (hello.to_rank != rank || !sender_ok || hello.from_rank >= nranks || hello.index < 0)
    return InvalidUsage("mesh hello from rank " + std::to_string(hello.from_rank) + " to " +
                        std::to_string(hello.to_rank) + " is not for rank " + std::to_string(rank));
  return Status::Ok();
}

Status MakePairChallenge(const UniqueIdData& id, const PairHello& hello, PairChallenge* out) {
  memset(out, 0, sizeof(*out));  // no stack bytes in the padding sent
  out->magic = kPairMagic;
  out->version = kBootstrapVersion;
  BATON_RETURN_IF_ERROR(FillNonce(out->nonce));
  out->mac = Seal(id, "baton mesh accept", {{&hello, sizeof(hello)}, {out->nonce, kNonceBytes}});
  return Status::Ok();
}

bool PairChallengeValid(const UniqueIdData& id, const PairHello& hello,
                        const PairChallenge& challenge) {
  return challenge.magic == kPairMagic && challenge.version == kBootstrapVersion &&
         MacEqual(challenge.mac, Seal(id, "baton mesh accept",
                                      {{&hello, sizeof(hello)}, {challenge.nonce, kNonceBytes}}));
}

PairProof MakePairProof(const UniqueIdData& id, const PairHello& hello,
                        const PairChallenge& challenge) {
  return PairProof{
      Seal(id, "baton mesh connect", {{&hello, sizeof(hello)}, {challenge.nonce, kNonceBytes}})};
}

bool PairProofValid(const UniqueIdData& id, const PairHello& hello, const PairChallenge& challenge,
                    const PairProof& proof) {
  return MacEqual(proof.mac, MakePairProof(id, hello, challenge).mac);
}

}  // namespace baton
