// The first messages on every bootstrap connection (a rank joining the
// rendezvous; two ranks opening a mesh socket) and how they prove the job
// secret without sending it: each side sends a fresh nonce and answers the
// other's with an HMAC-SHA256 keyed by the secret, over a label naming the
// message and every field that says who is talking to whom. A listener that
// only holds the unique id's address, or that recorded an earlier job's
// handshakes, learns nothing it can use and cannot complete one.
//
// Every function here is pure (no sockets), so the fuzz targets reach the
// same checks the real connections run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "bootstrap/peer_info.h"
#include "bootstrap/unique_id.h"

namespace baton {

inline constexpr int kNonceBytes = 16;
inline constexpr int kMacBytes = 32;
inline constexpr int kMaxRendezvousRanks = 1 << 16;

struct Mac {
  uint8_t bytes[kMacBytes];
};

// HMAC-SHA256 of `len` bytes keyed by the job's secret. Every OpenSSL call
// of Baton's goes through here or TableDigest, under a lock that fork()
// waits for (pthread_atfork): a process that forks ranks while its
// rendezvous thread checks a hello would otherwise hand the children
// OpenSSL's internal locks held by a thread they do not have, and their
// first hash would never return.
Mac JobHmac(const UniqueIdData& id, const void* data, size_t len);
// Frees the calling thread's OpenSSL state (its error queue). For Baton's
// long-lived threads after each hash they make: a rank that exits without
// destroying its communicator would otherwise leave that state to the
// leak checker while the thread still runs.
void ReleaseThreadCryptoState();

// ---- Rendezvous: a rank joins, the server answers with the table ----

// A rank's only message to the rendezvous server. The MAC covers every
// field before it, so the communicator id, size, rank and PeerInfo cannot
// be altered, and a hello recorded from another communicator is refused.
struct ClientHello {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  int32_t nranks;
  int32_t rank;
  PeerInfo info;
  uint8_t nonce[kNonceBytes];
  Mac mac;
};

// The server's answer; `nranks` PeerInfo records follow when status == 0.
// The MAC covers the client's nonce, this header and the table's digest, so
// a rank knows the table comes from a holder of the secret and is fresh.
struct ServerReply {
  uint32_t magic;
  int32_t status;
  char message[248];
  Mac mac;
};

// A hello from `rank` of `nranks` with a fresh nonce, sealed.
Status MakeClientHello(const UniqueIdData& id, int nranks, int rank, const PeerInfo& info,
                       ClientHello* out);
// How much of a partly received hello tells a foreign client already.
inline constexpr size_t kClientHelloMagicBytes = 8;
// False once the first kClientHelloMagicBytes bytes are not this version's.
bool ClientHelloStartValid(const ClientHello& hello);
// Ok when the whole hello is this communicator's, well formed and sealed
// by the secret; otherwise a message saying what is wrong (for the log).
Status CheckClientHello(const UniqueIdData& id, const ClientHello& hello);
// Logs why a rendezvous server (the root or a host's leader) refused a
// connection: the first refusal as a warning, since a rank of this job with
// another BATON_SECRET is otherwise only ever said to have "never come";
// later ones at INFO (a scanner must not fill the log).
void LogRefused(const char* server, const Status& why, bool* warned);

// The digest of the table every reply's MAC covers (computed once).
Mac TableDigest(const std::vector<PeerInfo>& table);
// The reply to the client that sent `client_nonce`, sealed.
ServerReply MakeServerReply(const UniqueIdData& id, const uint8_t* client_nonce, int32_t status,
                            const std::string& message, const Mac& table_digest);
// Ok when `reply` (and `table`, when its status is 0) came from the server
// of this id and answers `hello`; a failed rendezvous gives its message.
Status CheckServerReply(const UniqueIdData& id, const ClientHello& hello, ServerReply reply,
                        const std::vector<PeerInfo>* table);

// ---- Host stage: a host's leader registers its ranks, the table comes
// down a tree of leaders (bootstrap/host_stage.h) ----

// A host leader's registration with the root: where it takes the table,
// then `count` ClientHellos exactly as its ranks sent them (the root checks
// each, so a leader cannot add a rank that does not hold the secret).
struct LeaderBatch {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  WireAddr leader;  // the leader's table listener
  int32_t count;
  int32_t reserved;
  Mac mac;
};

Status MakeLeaderBatch(const UniqueIdData& id, const WireAddr& leader, int count, LeaderBatch* out);
// As for hellos: the first bytes tell a foreign client already.
inline constexpr size_t kLeaderBatchMagicBytes = 8;
bool LeaderBatchStartValid(const LeaderBatch& batch);
// Ok when `batch` is this communicator's and sealed by the secret.
Status CheckLeaderBatch(const UniqueIdData& id, const LeaderBatch& batch);

// The root's answer, forwarded unchanged from leader to leader: `nleaders`
// WireAddr (every leader, in the order that makes the tree), then, when
// status == 0, `nranks` PeerInfo. The MAC covers the header and digests of
// both lists, keyed by the secret: TableDigest alone is an unkeyed SHA-256,
// so anybody could make one for a forged table.
struct TableHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  int32_t status;  // 0, or the batonResult_t of the rendezvous's failure
  int32_t nranks;
  int32_t nleaders;
  int32_t reserved;
  char message[248];
  Mac mac;
};

TableHeader MakeTableHeader(const UniqueIdData& id, int32_t status, const std::string& message,
                            const std::vector<WireAddr>& leaders,
                            const std::vector<PeerInfo>& table);
// Before reading the lists: the header is this communicator's and its
// sizes are in range for `nranks` (a leader's own communicator size).
Status CheckTableHeaderStart(const UniqueIdData& id, const TableHeader& header, int nranks);
// Ok when the header's MAC covers these lists.
Status CheckTableHeader(const UniqueIdData& id, const TableHeader& header,
                        const std::vector<WireAddr>& leaders, const std::vector<PeerInfo>& table);

// ---- Mesh: rank `from` connects to lower rank `to` ----

struct PairHello {  // connector -> acceptor
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  int32_t from_rank;
  int32_t to_rank;
  int32_t index;  // which of the pair's sockets
  uint8_t nonce[kNonceBytes];
};

struct PairChallenge {  // acceptor -> connector: its nonce, and its proof
  uint32_t magic;
  uint32_t version;
  uint8_t nonce[kNonceBytes];
  Mac mac;
};

struct PairProof {  // connector -> acceptor
  Mac mac;
};

Status MakePairHello(const UniqueIdData& id, int from_rank, int to_rank, int index, PairHello* out);
// Ok when `hello` is addressed to `rank` of `nranks` from a higher rank of
// this communicator, or any other rank when `any_sender` (connections made
// on first use, where either side may connect); the socket index is the
// caller's to check.
Status CheckPairHello(const UniqueIdData& id, const PairHello& hello, int rank, int nranks,
                      bool any_sender = false);
Status MakePairChallenge(const UniqueIdData& id, const PairHello& hello, PairChallenge* out);
bool PairChallengeValid(const UniqueIdData& id, const PairHello& hello,
                        const PairChallenge& challenge);
PairProof MakePairProof(const UniqueIdData& id, const PairHello& hello,
                        const PairChallenge& challenge);
bool PairProofValid(const UniqueIdData& id, const PairHello& hello, const PairChallenge& challenge,
                    const PairProof& proof);

}  // namespace baton
